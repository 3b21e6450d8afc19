# -------------------------------------------------------------------------
#
# test_integrity.py
#     Issue 9, Data 2 to 5: the dispatch switch; outcomes applied only to
#     the incarnation and attempt that produced them across DROP and
#     CREATE EXTENSION; DROP EXTENSION refused with pending tasks and a
#     worker that then goes quietly; dropped roles never fire, and DROP
#     ROLE, DROP OWNED and REASSIGN OWNED behave as documented.
#
# -------------------------------------------------------------------------

import os
import time
import uuid

import psycopg2
import pytest

from conftest import as_role, query, schedule, wait_final


def scalar(db, sql, args=None):
    with db.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def log_since(server, offset):
    with open(server.logfile, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def log_size(server):
    return os.path.getsize(server.logfile)


# -------------------------------------------------------------------------
# 2. jobflow.dispatch
# -------------------------------------------------------------------------

def test_dispatch_switch(db, receiver, server):
    server.set_guc(db, "jobflow.dispatch", "off")
    try:
        time.sleep(1.5)
        url, tag = receiver.unique_url("/ok")
        task = schedule(db, url)
        skip_url, skip_tag = receiver.unique_url("/ok")
        once_url, once_tag = receiver.unique_url("/ok")
        suffix = uuid.uuid4().hex[:8]
        scalar(db, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s, missed => 'skip')",
               ("sw-skip-" + suffix, skip_url))
        scalar(db, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s, missed => 'once')",
               ("sw-once-" + suffix, once_url))
        time.sleep(9)
        # nothing sent, scheduling went on, and the worker wrote nothing of
        # its own: no cron occurrence was materialised
        assert receiver.tagged(tag) == [] and receiver.tagged(skip_tag) == [] \
            and receiver.tagged(once_tag) == []
        assert scalar(db, "SELECT state::text FROM jobflow.tasks WHERE id = %s", (task,)) == "pending"
        assert scalar(db, "SELECT count(*) FROM jobflow.tasks t JOIN jobflow.cron_timers c"
                      " ON c.id = t.cron_id WHERE c.name LIKE %s",
                      ("sw-%-" + suffix,)) == 0
        assert scalar(db, "SELECT held FROM jobflow.worker_status()") == "dispatch off"
    finally:
        server.set_guc(db, "jobflow.dispatch", None)
    on_at = time.time()
    assert wait_final(db, task, timeout=10) == "succeeded"
    receiver.wait_for(lambda r: ("t=" + skip_tag) in r["query"], n=2, timeout=10)
    receiver.wait_for(lambda r: ("t=" + once_tag) in r["query"], n=2, timeout=10)

    def missed_calls(tag):
        ids = [int(r["headers"]["x-jobflow-task-id"]) for r in receiver.tagged(tag)]
        return scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)"
                      " AND extract(epoch FROM cron_at) < %s", (ids, on_at - 6))

    # occurrences due while it was off follow the missed policy
    assert missed_calls(skip_tag) == 0
    assert missed_calls(once_tag) == 1
    scalar(db, "DELETE FROM jobflow.cron_timers WHERE name LIKE %s RETURNING 1",
           ("sw-%-" + suffix,))


# -------------------------------------------------------------------------
# 3 and 4. DROP EXTENSION
# -------------------------------------------------------------------------

def test_drop_extension_refused_with_pending_tasks(db, receiver):
    url, _ = receiver.unique_url("/ok")
    task = schedule(db, url, run_at_sql="now() + interval '1 day'")
    with pytest.raises(psycopg2.Error) as e:
        scalar(db, "DROP EXTENSION jobflow")
    assert e.value.pgcode == "2BP01"
    assert "pending or running task(s)" in e.value.diag.message_detail
    assert "CASCADE" in e.value.diag.message_hint
    assert scalar(db, "SELECT state::text FROM jobflow.tasks WHERE id = %s", (task,)) == "pending"
    assert scalar(db, "SELECT jobflow.cancel(%s)", (task,)) is True


def recreate(db):
    with db.cursor() as cur:
        cur.execute("DROP EXTENSION jobflow CASCADE")
        cur.execute("CREATE EXTENSION jobflow")


def test_outcomes_never_land_on_a_new_incarnation(db, receiver, server):
    old_url, old_tag = receiver.unique_url("/delay/3000")
    old = [schedule(db, old_url, timeout_ms=20000) for _ in range(50)]
    receiver.wait_for(lambda r: ("t=" + old_tag) in r["query"], n=50, timeout=15)
    first = min(old)
    recreate(db)
    # the new tasks get the ids of the old ones, in flight
    scalar(db, "SELECT setval('jobflow.tasks_id_seq', %s, false)", (first,))
    new_url, new_tag = receiver.unique_url("/hang")
    new = [schedule(db, new_url, timeout_ms=8000, max_attempts=1) for _ in range(50)]
    assert sorted(new) == sorted(old)
    receiver.wait_for(lambda r: ("t=" + new_tag) in r["query"], n=50, timeout=15)
    # the old requests have answered 200 by now; their outcomes must be dropped
    time.sleep(4)
    rows = query(db, "SELECT state::text AS state, last_status FROM jobflow.tasks"
                 " WHERE id = ANY(%s)", (new,))
    assert all(r["state"] == "running" and r["last_status"] is None for r in rows), rows
    assert scalar(db, "SELECT count(*) FROM jobflow.task_log WHERE task_id = ANY(%s)", (new,)) == 0
    states = wait_final(db, new, timeout=30)
    assert set(states.values()) == {"failed"}
    logs = query(db, "SELECT task_id, attempt, http_status, error FROM jobflow.task_log"
                 " WHERE task_id = ANY(%s)", (new,))
    assert len(logs) == 50 and all(r["http_status"] is None for r in logs)


def worker_backend(db):
    """pid of this database's worker, None when there is none."""
    with db.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobflow worker'"
                    " AND datname = current_database()")
        row = cur.fetchone()
    return row[0] if row else None


def test_worker_goes_quietly_after_drop_extension(db, receiver, server):
    url, _ = receiver.unique_url("/ok")
    schedule(db, url, run_at_sql="now() + interval '1 hour'")
    pid = worker_backend(db)
    offset = log_size(server)
    try:
        with db.cursor() as cur:
            cur.execute("DROP EXTENSION jobflow CASCADE")
        assert any("dropping 1 pending or running task(s)" in n for n in db.notices)
        # the worker is woken at the commit and exits; no other starts
        time.sleep(4)       # four reconcile intervals
        text = log_since(server, offset)
        assert "ERROR" not in text, text
        assert text.count("lost extension jobflow") == 1, text
        assert worker_backend(db) is None, "a worker stays or came back"
        assert scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)) == 0
    finally:
        with db.cursor() as cur:
            cur.execute("CREATE EXTENSION IF NOT EXISTS jobflow")
    # CREATE EXTENSION starts a new one, which fires at once
    url, tag = receiver.unique_url("/ok")
    task = schedule(db, url)
    assert wait_final(db, task, timeout=10) == "succeeded"
    assert worker_backend(db) not in (None, pid)
    assert "ERROR" not in log_since(server, offset)


# -------------------------------------------------------------------------
# 5. Roles
# -------------------------------------------------------------------------

def test_drop_role_refused_then_drop_owned(db, receiver, role):
    r = role()
    url, _ = receiver.unique_url("/ok")
    task = as_role(db, r, "SELECT jobflow.schedule(%s, now() + interval '1 day')", (url,))
    timer = as_role(db, r, "SELECT jobflow.schedule_cron('t', '0 3 * * *', %s)", (url,))
    with pytest.raises(psycopg2.Error) as e:
        scalar(db, "DROP ROLE %s" % r)
    assert e.value.pgcode == "2BP01"
    assert "1 pending or running task(s) and 1 active cron timer(s)" in e.value.diag.message_detail
    assert "REASSIGN OWNED" in e.value.diag.message_hint
    with db.cursor() as cur:
        cur.execute("DROP OWNED BY %s" % r)
    row = query(db, "SELECT state::text AS state, last_error FROM jobflow.tasks WHERE id = %s",
                (task,))[0]
    assert row == {"state": "cancelled", "last_error": "cancelled: DROP OWNED BY its role"}
    assert scalar(db, "SELECT count(*) FROM jobflow.cron_timers WHERE id = %s", (timer,)) == 0
    with db.cursor() as cur:
        cur.execute("DROP ROLE %s" % r)


def test_reassign_owned_moves_tasks_log_and_timers(db, receiver, role):
    a, b = role(), role()
    url, _ = receiver.unique_url("/ok")
    done = as_role(db, a, "SELECT jobflow.schedule(%s)", (url,))
    assert wait_final(db, done) == "succeeded"
    later = as_role(db, a, "SELECT jobflow.schedule(%s, now() + interval '1 day')", (url,))
    timer = as_role(db, a, "SELECT jobflow.schedule_cron('t', '0 3 * * *', %s)", (url,))
    with db.cursor() as cur:
        cur.execute("REASSIGN OWNED BY %s TO %s" % (a, b))
    owners = query(db, "SELECT owner::text AS owner, state::text AS state FROM jobflow.tasks"
                   " WHERE id = ANY(%s) ORDER BY id", ([done, later],))
    assert owners == [{"owner": b, "state": "succeeded"}, {"owner": b, "state": "pending"}]
    assert scalar(db, "SELECT owner::text FROM jobflow.task_log WHERE task_id = %s", (done,)) == b
    assert scalar(db, "SELECT owner::text FROM jobflow.cron_timers WHERE id = %s", (timer,)) == b
    with db.cursor() as cur:
        cur.execute("DROP ROLE %s" % a)


def test_role_dropped_elsewhere_never_fires(db, connect, receiver, role):
    r = role()
    url, tag = receiver.unique_url("/ok")
    cron_url, cron_tag = receiver.unique_url("/ok")
    timer = as_role(db, r, "SELECT jobflow.schedule_cron('t', '*/1 * * * * *', %s)", (cron_url,))
    receiver.wait_for(lambda q: ("t=" + cron_tag) in q["query"], n=1, timeout=10)
    # scheduled once the timer has fired, so that it is 3 s ahead at the
    # DROP however long the timer took to fire
    task = as_role(db, r, "SELECT jobflow.schedule(%s, now() + interval '3 seconds')", (url,))
    other = psycopg2.connect(dbname="postgres")
    other.autocommit = True
    try:
        with other.cursor() as cur:
            cur.execute("DROP ROLE %s" % r)     # jobflow's hook cannot see the tasks from here
    finally:
        other.close()
    dropped = time.time()
    time.sleep(5)
    assert receiver.tagged(tag) == []
    assert [q for q in receiver.tagged(cron_tag) if q["time"] > dropped + 0.5] == []
    row = query(db, "SELECT state::text AS state, last_error FROM jobflow.tasks WHERE id = %s",
                (task,))[0]
    assert row == {"state": "cancelled",
                   "last_error": "cancelled: the role that owns this task no longer exists"}
    assert scalar(db, "SELECT active FROM jobflow.cron_timers WHERE id = %s", (timer,)) is False
    assert scalar(db, "SELECT count(*) FROM jobflow.tasks WHERE cron_id = %s"
                  " AND state = 'pending'", (timer,)) == 0
