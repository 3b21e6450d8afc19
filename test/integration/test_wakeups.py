# -------------------------------------------------------------------------
#
# test_wakeups.py
#     Committed tasks wake the worker at commit only, once per statement,
#     through shared memory (jobflow.wakeups() counts what was published),
#     and are fired at once: a task due now fires within a fraction of a
#     second, long before the rescan (every jobflow.reconcile_interval)
#     would have found it.
#
# The counters are cluster-wide, and only transactions that write tasks or
# timers publish; the tests run one at a time, so a delta measured around
# a statement of a test is that statement's.
#
# -------------------------------------------------------------------------

import io
import time

import pytest

from conftest import _connect, query, schedule


@pytest.fixture(scope="module", autouse=True)
def worker_ready(receiver, server):
    """A test before may have restarted the server: these tests time the
    way from commit to callback, so wait until a first callback has gone
    through the running worker."""
    server.wait_worker(None, timeout=60)
    conn = _connect()
    try:
        url, tag = receiver.unique_url("/ok")
        schedule(conn, url)
        receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=30)
    finally:
        conn.close()


def ranges(db):
    return query(db, "SELECT ranges FROM jobflow.wakeups()")[0]["ranges"]


@pytest.mark.timing
def test_wakeup_only_at_commit(connect, receiver, db):
    tx = connect(autocommit=False)
    url, tag = receiver.unique_url("/ok")
    before = ranges(db)
    schedule(tx, url)
    time.sleep(0.3)
    assert ranges(db) == before, "published before commit"
    committed = time.time()
    tx.commit()
    assert ranges(db) == before + 1
    got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=10)
    assert got[0]["time"] - committed < 0.5, "fired %.3f s after commit" % (
        got[0]["time"] - committed)


def test_no_wakeup_after_rollback(connect, receiver, db):
    tx = connect(autocommit=False)
    url, tag = receiver.unique_url("/ok")
    before = ranges(db)
    schedule(tx, url)
    tx.rollback()
    time.sleep(0.5)
    assert ranges(db) == before
    assert receiver.tagged(tag) == []


def test_insert_select_wakes_once(connect, receiver, db):
    url, tag = receiver.unique_url("/ok")
    before = ranges(db)
    with db.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                    " SELECT %s || '&n=' || g, now() FROM generate_series(1, 25) g", (url,))
    assert ranges(db) == before + 1
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=25, timeout=10)


def test_copy_wakes_once(connect, receiver, db):
    url, tag = receiver.unique_url("/ok")
    before = ranges(db)
    data = "".join("%s&n=%d\n" % (url, i) for i in range(30))
    with db.cursor() as cur:
        cur.copy_expert("COPY jobflow.tasks (url) FROM STDIN", io.StringIO(data))
    assert ranges(db) == before + 1
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=30, timeout=10)


def test_two_statements_wake_at_commit(connect, receiver, db):
    tx = connect(autocommit=False)
    url, tag = receiver.unique_url("/ok")
    before = ranges(db)
    schedule(tx, url)
    with tx.cursor() as cur:
        # ids that touch merge into one range: keep these two apart
        cur.execute("SELECT nextval('jobflow.tasks_id_seq')")
    schedule(tx, url)
    assert ranges(db) == before
    tx.commit()
    assert ranges(db) == before + 2
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=2, timeout=10)


def test_far_future_task_publishes_nothing(db, receiver):
    """Tasks due beyond the notify window cost the transaction nothing: the
    rolling rescan loads them in time."""
    url, _ = receiver.unique_url("/ok")
    before = ranges(db)
    schedule(db, url, run_at_sql="now() + interval '1 hour'")
    assert ranges(db) == before


@pytest.fixture
def slow_rescan(db, server):
    """The rolling rescan every 30 s (the test cluster's is 1 s): a task it
    would have to find fires that late, so a test sees the wake-up alone."""
    server.set_guc(db, "jobflow.reconcile_interval", "30s")
    time.sleep(0.5)
    yield
    server.set_guc(db, "jobflow.reconcile_interval", None)


def prepare(connect, url, gid, due_in):
    """A transaction that schedules a task to url due in due_in s, then
    PREPARE TRANSACTION gid; returns the task's due time (Unix s)."""
    tx = connect(autocommit=False)
    with tx.cursor() as cur:
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + make_interval(secs => %s)),"
                    "       extract(epoch FROM now() + make_interval(secs => %s))::float8",
                    (url, due_in, due_in))
        due = cur.fetchone()[1]
        cur.execute("PREPARE TRANSACTION %s", (gid,))
    tx.commit()  # ends the session's side; the prepared transaction stays
    return due


@pytest.mark.timing
def test_commit_prepared_wakes_the_worker(connect, receiver, db, slow_rescan):
    """Two-phase commit: a task scheduled in a prepared transaction fires on
    time once COMMIT PREPARED (from another session) makes it visible; it
    used to wait for the rolling rescan, up to jobflow.reconcile_interval
    late.  ROLLBACK PREPARED fires nothing."""
    url, tag = receiver.unique_url("/ok")
    gid = "jobflow-2pc-%s" % tag
    due = prepare(connect, url + "&i=commit", gid, 1.5)
    rolled_back = prepare(connect, url + "&i=rollback", gid + "-r", 1.5)
    time.sleep(0.5)
    before = ranges(db)
    db.cursor().execute("COMMIT PREPARED %s", (gid,))
    db.cursor().execute("ROLLBACK PREPARED %s", (gid + "-r",))
    assert ranges(db) == before + 1, "COMMIT PREPARED published nothing"
    got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=40)
    late = got[0]["time"] - due
    assert "i=commit" in got[0]["query"]
    assert -0.001 <= late < 0.5, "fired %.3f s after its due time" % late
    time.sleep(max(0, rolled_back + 1.0 - time.time()))
    assert len(receiver.tagged(tag)) == 1, "a rolled back task fired"
