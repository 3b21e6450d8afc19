# -------------------------------------------------------------------------
#
# test_cron.py
#     Cron timers end to end, with the real worker and receiver: a
#     per-second timer fires once a second, on its second and never
#     before it; pausing stops it, replacing it moves its calls to the new
#     definition, unscheduling removes it and keeps its history; a role
#     sees and changes only its own timers.
#
# Times are Unix seconds on the same machine clock: the receiver's arrival
# time.time() and extract(epoch FROM cron_at).  The lateness bound is
# generous (bench/cron_lateness.sh measures it); earliness is not allowed.
#
# -------------------------------------------------------------------------

import time
import uuid

import pytest

from conftest import query

# a call counts as on time if it arrives within this many seconds of its
# occurrence
PROMPT = 1.0
# a timer change is acted on (NOTIFY 'cron' to the worker) within this
SETTLE = 2.0


def calls(receiver, tag):
    """Requests carrying tag, with the occurrence each stands for."""
    return receiver.tagged(tag)


def occurrences(db, reqs):
    """{task id: cron_at as Unix seconds} of the tasks behind reqs."""
    ids = [int(r["headers"]["x-jobflow-task-id"]) for r in reqs]
    rows = query(db, "SELECT id, extract(epoch FROM cron_at)::float8 AS at"
                 "  FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
    return {r["id"]: r["at"] for r in rows}


def scalar(db, sql, args=None):
    with db.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


@pytest.mark.smoke
@pytest.mark.timing
def test_per_second_timer_pause_replace_unschedule(db, receiver):
    name = "per-second-" + uuid.uuid4().hex[:8]
    url, tag = receiver.unique_url("/ok")
    timer_id = scalar(db, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s)",
                      (name, url))

    # the first occurrence arrives within a second or two (NOTIFY 'cron')
    first = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=5)[0]
    start = first["time"]
    time.sleep(31.5 - (time.time() - start))

    reqs = calls(receiver, tag)
    at = occurrences(db, reqs)
    assert len(at) == len(reqs), "a task was called twice"
    assert len(set(at.values())) == len(at), "an occurrence became two tasks"
    # one call for each second: counted by the seconds they were due at
    # (arrivals a few ms apart may come in any order)
    first_due = min(at.values())
    window = [r for r in reqs
              if first_due <= at[int(r["headers"]["x-jobflow-task-id"])] < first_due + 30]
    assert len(window) == 30, "%d calls for 30 s" % len(window)
    for r in reqs:
        due = at[int(r["headers"]["x-jobflow-task-id"])]
        assert due == int(due), "occurrence not on a whole second: %r" % due
        lateness = r["time"] - due
        assert lateness >= 0, "fired %.3f s before its second" % -lateness
        assert lateness < PROMPT, "fired %.3f s after its second" % lateness
    # one call per second, none skipped in between
    seconds = sorted(at.values())
    assert seconds[-1] - seconds[0] == len(seconds) - 1

    # pause: nothing more after what was already in flight
    assert scalar(db, "SELECT jobflow.set_cron_active(%s, false)", (name,)) is True
    paused_at = time.time()
    time.sleep(SETTLE)
    settled = len(calls(receiver, tag))
    time.sleep(3)
    assert len(calls(receiver, tag)) == settled, "calls went on while paused"
    assert all(r["time"] < paused_at + 1.0 for r in calls(receiver, tag))
    row = query(db, "SELECT active, next_at FROM jobflow.cron WHERE name = %s", (name,))[0]
    assert row == {"active": False, "next_at": None}
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'pending'", (timer_id,)) == 0

    # resume, then replace: the new URL gets the calls, the old one stops
    assert scalar(db, "SELECT jobflow.set_cron_active(%s, true)", (name,)) is True
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=settled + 2, timeout=5)
    new_url, new_tag = receiver.unique_url("/ok")
    assert scalar(db, "SELECT jobflow.schedule_cron(%s, '*/2 * * * * *', %s)",
                  (name, new_url)) == timer_id
    replaced_at = time.time()
    receiver.wait_for(lambda r: ("t=" + new_tag) in r["query"], n=3, timeout=10)
    old_after = [r for r in calls(receiver, tag) if r["time"] > replaced_at + 1.0]
    assert old_after == [], "old URL still called after replace"
    new_at = occurrences(db, calls(receiver, new_tag))
    assert all(int(s) % 2 == 0 for s in new_at.values()), "new schedule not used"

    # unschedule: no more calls; tasks and log stay
    history = scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                     " AND state = 'succeeded'", (timer_id,))
    logged = scalar(db, "SELECT count(*) FROM jobflow.task_log l JOIN jobflow.tasks t"
                    " ON t.id = l.task_id WHERE t.cron_id = %s", (timer_id,))
    assert history >= 30 and logged >= history
    assert scalar(db, "SELECT jobflow.unschedule_cron(%s)", (name,)) is True
    time.sleep(SETTLE)
    n_new = len(calls(receiver, new_tag))
    time.sleep(3)
    assert len(calls(receiver, new_tag)) == n_new, "calls went on after unschedule"
    assert query(db, "SELECT 1 FROM jobflow.cron WHERE name = %s", (name,)) == []
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'succeeded'", (timer_id,)) >= history
    assert scalar(db, "SELECT count(*) FROM jobflow.task_log l JOIN jobflow.tasks t"
                  " ON t.id = l.task_id WHERE t.cron_id = %s", (timer_id,)) >= logged
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'pending'", (timer_id,)) == 0


@pytest.fixture
def two_roles(db):
    suffix = uuid.uuid4().hex[:8]
    names = ("cron_alice_" + suffix, "cron_bob_" + suffix)
    with db.cursor() as cur:
        for n in names:
            cur.execute("CREATE ROLE %s" % n)
            cur.execute("GRANT jobflow_user TO %s" % n)
    yield names
    with db.cursor() as cur:
        cur.execute("RESET ROLE")
        cur.execute("DELETE FROM jobflow.cron_timers WHERE owner::text = ANY(%s)",
                    (list(names),))
        cur.execute("UPDATE jobflow.tasks SET state = 'cancelled'"
                    " WHERE owner::text = ANY(%s) AND state = 'pending'", (list(names),))


def test_timers_are_per_owner(db, receiver, two_roles):
    alice, bob = two_roles
    url_a, tag_a = receiver.unique_url("/ok")
    url_b, tag_b = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % alice)
        cur.execute("SELECT jobflow.schedule_cron('job', '*/1 * * * * *', %s)", (url_a,))
        cur.execute("SET ROLE %s" % bob)
        # the same name is bob's own timer, not a replacement of alice's
        cur.execute("SELECT jobflow.schedule_cron('job', '*/1 * * * * *', %s)", (url_b,))

    receiver.wait_for(lambda r: ("t=" + tag_a) in r["query"], n=2, timeout=5)
    receiver.wait_for(lambda r: ("t=" + tag_b) in r["query"], n=2, timeout=5)

    # bob sees only his timer and his tasks
    rows = query(db, "SELECT name, owner::text AS owner, url FROM jobflow.cron")
    assert rows == [{"name": "job", "owner": bob, "url": url_b}]
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE owner::text = %s", (alice,)) == 0
    assert scalar(db, "SELECT bool_and(owner::text = %s) FROM jobflow.tasks"
                  " WHERE cron_id IS NOT NULL", (bob,)) is True
    # pausing "job" as bob pauses bob's timer only
    assert scalar(db, "SELECT jobflow.set_cron_active('job', false)") is True
    with db.cursor() as cur:
        cur.execute("UPDATE jobflow.cron_timers SET url = %s", (url_b,))
        cur.execute("SET ROLE %s" % alice)
    rows = query(db, "SELECT name, owner::text AS owner, url, active FROM jobflow.cron")
    assert rows == [{"name": "job", "owner": alice, "url": url_a, "active": True}]
    n_a = len(receiver.tagged(tag_a))
    receiver.wait_for(lambda r: ("t=" + tag_a) in r["query"], n=n_a + 2, timeout=5)
    assert scalar(db, "SELECT jobflow.unschedule_cron('job')") is True
    with db.cursor() as cur:
        cur.execute("RESET ROLE")
    owners = query(db, "SELECT owner::text AS owner, active FROM jobflow.cron_timers"
                   " WHERE name = 'job' AND owner::text = ANY(%s)", ([alice, bob],))
    assert owners == [{"owner": bob, "active": False}]


@pytest.mark.timing
def test_missed_occurrences_follow_the_policy(db, connect, receiver, server):
    """Occurrences missed while the server is down: 'skip' drops them,
    'once' fires one task for them at restart; both then carry on."""
    url_s, tag_s = receiver.unique_url("/ok")
    url_o, tag_o = receiver.unique_url("/ok")
    names = ["skip-" + uuid.uuid4().hex[:8], "once-" + uuid.uuid4().hex[:8]]
    scalar(db, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s, missed => 'skip')",
           (names[0], url_s))
    scalar(db, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s, missed => 'once')",
           (names[1], url_o))
    receiver.wait_for(lambda r: ("t=" + tag_s) in r["query"], n=2, timeout=5)
    receiver.wait_for(lambda r: ("t=" + tag_o) in r["query"], n=2, timeout=5)

    old_pid = server.worker_pid(db)
    db.close()
    server.pg_ctl("stop", "-m", "fast", "-w", "-t", "60")
    time.sleep(9)
    server.pg_ctl("start", "-w", "-t", "60", "-l", server.logfile)
    server.wait_worker(old_pid)
    conn = connect()
    receiver.wait_for(lambda r: ("t=" + tag_s) in r["query"], n=len(receiver.tagged(tag_s)) + 3,
                      timeout=10)
    time.sleep(1)

    def lateness(tag):
        reqs = receiver.tagged(tag)
        at = occurrences(conn, reqs)
        return [r["time"] - at[int(r["headers"]["x-jobflow-task-id"])] for r in reqs]

    # within the 5 s grace an occurrence still fires (late); beyond, per policy
    assert max(lateness(tag_s)) < 5.5, "skip fired a missed occurrence"
    assert len([x for x in lateness(tag_o) if x >= 5.5]) == 1, "once did not fire exactly once"
    missed = scalar(conn, "SELECT count(*) FROM jobflow.tasks t JOIN jobflow.cron_timers c"
                    " ON c.id = t.cron_id WHERE c.name = ANY(%s) AND t.state = 'cancelled'"
                    " AND t.last_error LIKE 'missed%%'", (names,))
    assert missed >= 2
    for n in names:
        assert scalar(conn, "SELECT jobflow.unschedule_cron(%s)", (n,)) is True
