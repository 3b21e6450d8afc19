# -------------------------------------------------------------------------
#
# test_cron_overlap.py
#     What a cron timer does when an occurrence falls due while an earlier
#     one is still pending or running (issue 25, item 3), and the cron
#     conveniences run_cron_now() and cron_preview() (item 4).
#
# Three per-second timers call a receiver that takes 2.2 s to answer, at
# the same time, for about 8 s: with overlap 'skip' no two of its calls
# are ever in flight, the occurrences in between are cancelled and
# counted (on the timer, in jobflow.cron and in jobflow_cron_skipped_total),
# and explain_cron() names the occurrence in flight;
# with 'queue' its calls run one after the other, an occurrence waits for
# the previous one, and one falling due while another waits is cancelled
# and counted; with 'allow' (the default) calls overlap.  Whether two
# calls overlapped is read from the log (started_at, finished_at of each
# attempt).  run_cron_now() sends the timer's request as it is (method,
# headers with a secret, body) as a task of the timer, follows the
# overlap policy, and knows only the caller's timers; cron_preview() lists
# what the worker will do, DST included, and refuses bad input with its
# SQLSTATE.
#
# -------------------------------------------------------------------------

import time

import psycopg2
import pytest

from conftest import _connect, as_role, call, query, stat, wait_final

DELAY_MS = 2200
RUN_FOR = 8.0
PROMPT = 1.0


def runs_and_skips(conn, timer_id):
    """(runs, skipped) of a timer: runs are its tasks that were sent, with
    the first attempt's start and the last one's end (Unix seconds), in
    cron_at order; skipped are those its overlap policy cancelled."""
    runs = query(conn, """
        SELECT t.id, extract(epoch FROM t.cron_at)::float8 AS cron_at,
               extract(epoch FROM min(l.started_at))::float8 AS started,
               extract(epoch FROM max(l.finished_at))::float8 AS finished
          FROM jobflow.tasks t JOIN jobflow.task_log l ON l.task_id = t.id
         WHERE t.cron_id = %s
         GROUP BY t.id ORDER BY t.cron_at""", (timer_id,))
    skipped = query(conn, """
        SELECT t.id, t.last_error FROM jobflow.tasks t
         WHERE t.cron_id = %s AND t.state = 'cancelled' AND t.attempts = 0
           AND t.last_error LIKE 'skipped:%%'""", (timer_id,))
    return runs, skipped


def overlaps(runs):
    """Pairs of runs in cron_at order where one started before the one
    before it had finished."""
    return [(a["id"], b["id"]) for a, b in zip(runs, runs[1:])
            if b["started"] < a["finished"]]


@pytest.fixture(scope="module")
def three_timers(receiver):
    """Run a 'skip', a 'queue' and an 'allow' timer side by side against a
    slow receiver; return what each did, and the most occurrences of the
    queue timer seen waiting at once."""
    conn = _connect()
    names = {p: "overlap_%s_%d" % (p, int(time.time() * 1000)) for p in ("skip", "queue", "allow")}
    ids = {}
    before = stat(conn, "cron_skipped_total") or 0
    try:
        with conn.cursor() as cur:
            for policy, name in names.items():
                url, _ = receiver.unique_url("/delay/%d" % DELAY_MS)
                if policy == "allow":
                    # the default: what every timer did before 0.3.0
                    cur.execute("SELECT jobflow.schedule_cron(%s, '* * * * * *', %s)", (name, url))
                else:
                    cur.execute("SELECT jobflow.schedule_cron(%s, '* * * * * *', %s, overlap => %s)",
                                (name, url, policy))
                ids[policy] = cur.fetchone()[0]
        waiting = running = 0
        explained = set()
        deadline = time.time() + RUN_FOR
        while time.time() < deadline:
            explained |= {r["explanation"] for r in query(
                conn, "SELECT explanation FROM jobflow.explain_cron(%s) WHERE reason = 'overlap'",
                (names["skip"],))}
            waiting = max(waiting, call(conn, """
                SELECT count(*) FROM jobflow.tasks
                 WHERE cron_id = %s AND state = 'pending' AND attempts = 0
                   AND run_at < now() - interval '300 ms'""", (ids["queue"],)))
            running = max(running, call(conn, """
                SELECT count(*) FROM jobflow.tasks
                 WHERE cron_id = %s AND state = 'running'""", (ids["skip"],)))
            time.sleep(0.1)
        with conn.cursor() as cur:
            for name in names.values():
                cur.execute("SELECT jobflow.set_cron_active(%s, false)", (name,))
        # the calls in flight finish
        deadline = time.time() + 15
        while call(conn, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = ANY(%s)"
                   "   AND state IN ('pending', 'running')", (list(ids.values()),)) > 0:
            assert time.time() < deadline, "calls still unfinished"
            time.sleep(0.1)
        time.sleep(0.3)
        result = {p: runs_and_skips(conn, ids[p]) for p in ids}
        counted = {r["name"]: r for r in query(
            conn, "SELECT name, overlap, skipped, last_skipped_at FROM jobflow.cron"
                  " WHERE name = ANY(%s)", (list(names.values()),))}
        after = stat(conn, "cron_skipped_total") or 0
        for policy, (runs, skipped) in result.items():
            gaps = ["%.2f" % (b["started"] - a["finished"]) for a, b in zip(runs, runs[1:])]
            print("overlap %s: %d runs, %d skipped, start after previous end: %s"
                  % (policy, len(runs), len(skipped), " ".join(gaps)))
        yield {"ids": ids, "names": names, "result": result, "counted": counted,
               "metric": after - before, "waiting": waiting, "running": running,
               "explained": explained}
    finally:
        with conn.cursor() as cur:
            for name in names.values():
                cur.execute("SELECT jobflow.unschedule_cron(%s)", (name,))
        conn.close()


def test_skip_never_two_in_flight(three_timers):
    runs, skipped = three_timers["result"]["skip"]
    counted = three_timers["counted"][three_timers["names"]["skip"]]
    assert len(runs) >= 2, runs
    assert overlaps(runs) == []
    assert three_timers["running"] == 1
    # skipping delays nothing: every run is on its own second
    assert all(r["started"] - r["cron_at"] < PROMPT for r in runs), runs
    # the occurrences in between were skipped, each counted once
    assert len(skipped) >= 2, skipped
    assert all("overlap skip" in s["last_error"] for s in skipped)
    assert counted["overlap"] == "skip"
    assert counted["skipped"] == len(skipped)
    assert counted["last_skipped_at"] is not None
    # explain_cron() says which occurrence holds the next ones
    assert any("is still running: with overlap 'skip' the occurrences falling due until it"
               " has finished are skipped" in e for e in three_timers["explained"]), \
        three_timers["explained"]


def test_queue_runs_back_to_back(three_timers):
    runs, skipped = three_timers["result"]["queue"]
    counted = three_timers["counted"][three_timers["names"]["queue"]]
    assert len(runs) >= 3, runs
    assert overlaps(runs) == []
    # occurrences waited for the one before instead of being skipped
    waited = [r for r in runs if r["started"] - r["cron_at"] > PROMPT]
    assert len(waited) >= 2, runs
    # one waits at most: the others falling due meanwhile were coalesced
    assert three_timers["waiting"] <= 1
    assert len(skipped) >= 1, skipped
    assert all("overlap queue" in s["last_error"] for s in skipped)
    assert counted["skipped"] == len(skipped)


def test_allow_overlaps(three_timers):
    runs, skipped = three_timers["result"]["allow"]
    counted = three_timers["counted"][three_timers["names"]["allow"]]
    assert counted["overlap"] == "allow"
    assert len(overlaps(runs)) >= 2, runs
    assert skipped == [] and counted["skipped"] == 0


def test_skipped_metric(three_timers):
    total = sum(len(three_timers["result"][p][1]) for p in ("skip", "queue"))
    assert three_timers["metric"] >= total > 0


def test_overlap_values(db):
    with pytest.raises(psycopg2.Error) as err:
        call(db, "SELECT jobflow.schedule_cron('bad_overlap', '* * * * *', 'http://127.0.0.1:9/',"
                 " overlap => 'sometimes')")
    assert err.value.pgcode == "22023"
    assert 'overlap must be "allow", "skip" or "queue"' in err.value.pgerror


# -------------------------------------------------------------------------
# run_cron_now()
# -------------------------------------------------------------------------

def test_run_cron_now_sends_the_definition(db, receiver, new_role):
    a, b = new_role(), new_role()
    url, tag = receiver.unique_url("/ok")
    as_role(db, a, "SELECT jobflow.set_secret('token', 'tok-' || %s, ARRAY[%s])",
            (tag, receiver.base))
    timer = as_role(db, a, """
        SELECT jobflow.schedule_cron('now_timer', '0 0 1 1 *', %s, method => 'PUT',
                                     headers => '{"Authorization": {"secret": "token"}, "X-Test": "manual"}',
                                     body_text => 'hello', content_type => 'text/plain',
                                     active => false)""", (url,))
    task = as_role(db, a, "SELECT jobflow.run_cron_now('now_timer')")
    wait_final(db, [task])
    row = query(db, "SELECT cron_id, owner::text, state FROM jobflow.tasks WHERE id = %s", (task,))[0]
    assert row == {"cron_id": timer, "owner": a, "state": "succeeded"}
    req = receiver.tagged(tag)
    assert len(req) == 1
    assert req[0]["method"] == "PUT"
    assert req[0]["headers"]["authorization"] == "tok-" + tag
    assert req[0]["headers"]["x-test"] == "manual"
    assert req[0]["body"] == "hello"

    # another tenant's timer is a timer that does not exist
    errors = {}
    for name in ("now_timer", "no_such_timer"):
        with pytest.raises(psycopg2.Error) as err:
            as_role(db, b, "SELECT jobflow.run_cron_now(%s)", (name,))
        errors[name] = (err.value.pgcode, err.value.pgerror.replace(name, "NAME"))
    assert errors["now_timer"] == errors["no_such_timer"]
    assert errors["now_timer"][0] == "42704"
    assert call(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s", (timer,)) == 1


def test_run_cron_now_follows_overlap(db, receiver, app_role):
    url, tag = receiver.unique_url("/delay/1500")
    timer = as_role(db, app_role, "SELECT jobflow.schedule_cron('now_skip', '0 0 1 1 *', %s,"
                                  " overlap => 'skip', active => false)", (url,))
    first = as_role(db, app_role, "SELECT jobflow.run_cron_now('now_skip')")
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"])
    second = as_role(db, app_role, "SELECT jobflow.run_cron_now('now_skip')")
    wait_final(db, [first, second])
    states = {r["id"]: r for r in query(db, "SELECT id, state, last_error FROM jobflow.tasks"
                                            " WHERE id = ANY(%s)", ([first, second],))}
    assert states[first]["state"] == "succeeded"
    assert states[second]["state"] == "cancelled"
    assert "overlap skip" in states[second]["last_error"]
    assert call(db, "SELECT skipped FROM jobflow.cron_timers WHERE id = %s", (timer,)) == 1
    assert len(receiver.tagged(tag)) == 1


def test_a_retry_counts_as_in_flight(db, receiver):
    """An occurrence waiting for its retry holds the next ones (retries
    included), and its own retry goes on."""
    url, tag = receiver.unique_url("/status/503?retry_after=2")
    timer = call(db, "SELECT jobflow.schedule_cron('retry_skip', '0 0 1 1 *', %s, max_attempts => 2,"
                     " overlap => 'skip', active => false)", (url,))
    try:
        first = call(db, "SELECT jobflow.run_cron_now('retry_skip')")
        deadline = time.time() + 10
        while call(db, "SELECT attempts FROM jobflow.tasks WHERE id = %s AND state = 'pending'",
                   (first,)) != 1:
            assert time.time() < deadline, query(db, "SELECT * FROM jobflow.tasks WHERE id = %s",
                                                 (first,))
            time.sleep(0.05)
        second = call(db, "SELECT jobflow.run_cron_now('retry_skip')")
        states = wait_final(db, [first, second])
        assert states == {first: "failed", second: "cancelled"}
        assert "overlap skip" in call(db, "SELECT last_error FROM jobflow.tasks WHERE id = %s",
                                      (second,))
        assert call(db, "SELECT attempts FROM jobflow.tasks WHERE id = %s", (first,)) == 2
        assert len(receiver.tagged(tag)) == 2
        assert call(db, "SELECT skipped FROM jobflow.cron_timers WHERE id = %s", (timer,)) == 1
    finally:
        call(db, "SELECT jobflow.unschedule_cron('retry_skip')")


# -------------------------------------------------------------------------
# cron_preview()
# -------------------------------------------------------------------------

def test_cron_preview_dst(db, app_role):
    # spring forward in Berlin (02:00 CET -> 03:00 CEST): 02:30 happens at 03:30
    rows = query(db, "SET timezone = 'UTC'; SELECT run_at::text, local_time FROM"
                     " jobflow.cron_preview('30 2 * * *', 'Europe/Berlin', 3, '2027-03-27 00:00+01')")
    assert rows == [
        {"run_at": "2027-03-27 01:30:00+00", "local_time": "2027-03-27 02:30:00+01:00 CET"},
        {"run_at": "2027-03-28 01:30:00+00", "local_time": "2027-03-28 03:30:00+02:00 CEST"},
        {"run_at": "2027-03-29 00:30:00+00", "local_time": "2027-03-29 02:30:00+02:00 CEST"},
    ]
    # fall back: an elapsed-time schedule fires in both passes of 02:00-03:00
    rows = query(db, "SELECT local_time FROM jobflow.cron_preview('*/30 * * * *', 'Europe/Berlin', 4,"
                     " '2026-10-25 00:00+00')")
    assert [r["local_time"] for r in rows] == [
        "2026-10-25 02:30:00+02:00 CEST", "2026-10-25 02:00:00+01:00 CET",
        "2026-10-25 02:30:00+01:00 CET", "2026-10-25 03:00:00+01:00 CET"]
    # the worker's own computation, one after the other; a tenant may call it
    chained = query(db, """
        WITH RECURSIVE c(n, t) AS (
            SELECT 1, jobflow.cron_next('0 9 * * mon-fri', 'America/New_York', now())
            UNION ALL
            SELECT n + 1, jobflow.cron_next('0 9 * * mon-fri', 'America/New_York', t) FROM c WHERE n < 20)
        SELECT t FROM c ORDER BY n""")
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % app_role)
        try:
            cur.execute("SELECT run_at FROM jobflow.cron_preview('0 9 * * mon-fri', 'America/New_York', 20)")
            preview = [r[0] for r in cur.fetchall()]
        finally:
            cur.execute("RESET ROLE")
    assert preview == [r["t"] for r in chained]
    # default: 10 occurrences; a schedule that ends gives fewer
    assert call(db, "SELECT count(*) FROM jobflow.cron_preview('every 10 minutes')") == 10
    assert call(db, "SELECT count(*) FROM jobflow.cron_preview('0 0 1 1 *', 'UTC', 5,"
                    " '9997-06-01')") < 5
    assert call(db, "SELECT count(*) FROM jobflow.cron_preview('* * * * * *', 'UTC', 1000)") == 1000


@pytest.mark.parametrize("args, code, message", [
    ("'* * * * *', 'UTC', 0", "22023", "n must be between 1 and 1000"),
    ("'* * * * *', 'UTC', 1001", "22023", "n must be between 1 and 1000"),
    ("'61 * * * *'", "22023", "invalid cron schedule"),
    ("'* * * * *', 'Mars/Olympus'", "22023", 'time zone "Mars/Olympus" not recognized'),
    ("NULL, 'UTC'", "22004", "schedule must not be null"),
    ("'* * * * *', NULL", "22004", "timezone must not be null"),
    ("'* * * * *', 'UTC', NULL", "22004", "n must not be null"),
    ("'* * * * *', 'UTC', 3, 'infinity'", "22008", "after must be a finite timestamp"),
])
def test_cron_preview_refuses(db, args, code, message):
    with pytest.raises(psycopg2.Error) as err:
        call(db, "SELECT count(*) FROM jobflow.cron_preview(%s)" % args)
    assert err.value.pgcode == code
    assert message in err.value.pgerror
