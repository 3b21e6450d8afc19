# -------------------------------------------------------------------------
#
# test_quiet_logging.py
#     Quiet logging: jobflow.log_attempts = failures, or a queue's
#     log_attempts (set_queue), leaves a success at a task's first attempt
#     out of jobflow.task_log (its task row says succeeded, with the
#     status); every other attempt is logged: retries, failures, the
#     success that ends a task with earlier attempts, and attempts cut
#     short by a crash, which may have been delivered.
#
# The global setting is changed with ALTER SYSTEM and a reload, which the
# worker applies on its next turn: quiet() waits until a probe task shows
# the mode in effect, and the fixture puts the setting back the same way.
#
# -------------------------------------------------------------------------

import time
import uuid

import psycopg2
import pytest

from conftest import call, query, schedule, task_log, task_row, wait_final


def outcomes(conn, task_id):
    return [(r["attempt"], r["outcome"]) for r in task_log(conn, task_id)]


def first_success_logged(conn, receiver):
    """Whether a success at the first attempt of a task in the default
    queue is logged now."""
    url, _ = receiver.unique_url("/ok")
    task_id = schedule(conn, url)
    assert wait_final(conn, task_id) == "succeeded"
    return len(task_log(conn, task_id)) > 0


def wait_mode(conn, receiver, logged, timeout=10.0):
    deadline = time.time() + timeout
    while first_success_logged(conn, receiver) != logged:
        assert time.time() < deadline, "jobflow.log_attempts not applied"
        time.sleep(0.1)


@pytest.fixture
def quiet(connect, server, receiver):
    """quiet(mode): set jobflow.log_attempts for one test (reset after, on
    a connection of its own: the test may have crashed the server)."""
    def apply(mode):
        conn = connect()
        server.set_guc(conn, "jobflow.log_attempts", mode)
        wait_mode(conn, receiver, logged=(mode != "failures"))
    try:
        yield apply
    finally:
        conn = connect()
        server.set_guc(conn, "jobflow.log_attempts", None)
        wait_mode(conn, receiver, logged=True)


@pytest.fixture
def queue_name(db):
    """A fresh queue name of the test's role; its configuration is dropped
    at the end."""
    names = []

    def make():
        names.append("quiet-" + uuid.uuid4().hex[:10])
        return names[-1]
    yield make
    for name in names:
        call(db, "SELECT jobflow.drop_queue(%s)", (name,))


def test_global_failures(db, receiver, quiet):
    """With jobflow.log_attempts = failures: a first-attempt success writes
    no log row (the task row says it all), a task that failed then
    succeeded logs each attempt, a failed task logs everything, and dead
    letters, redrive and pruning work as before."""
    quiet("failures")
    ok_url, _ = receiver.unique_url("/ok")
    flaky_url, _ = receiver.unique_url("/flaky/2")
    bad_url, _ = receiver.unique_url("/status/500")
    ok = [schedule(db, ok_url + "&n=%d" % i) for i in range(5)]
    retried = schedule(db, flaky_url, max_attempts=5)
    failed = schedule(db, bad_url, max_attempts=2)
    redriven = schedule(db, flaky_url + "&redrive", max_attempts=2)
    states = wait_final(db, ok + [retried, failed, redriven], timeout=20)
    assert [states[i] for i in ok] == ["succeeded"] * 5
    assert (states[retried], states[failed], states[redriven]) == \
        ("succeeded", "failed", "failed")

    for task_id in ok:
        assert task_log(db, task_id) == []
        row = task_row(db, task_id)
        assert (row["state"], row["attempts"], row["last_status"], row["last_error"]) == \
            ("succeeded", 1, 200, None), row
    assert outcomes(db, retried) == [(1, "retry"), (2, "retry"), (3, "succeeded")]
    assert task_row(db, retried)["last_status"] == 200
    assert outcomes(db, failed) == [(1, "retry"), (2, "failed")]
    assert [r["http_status"] for r in task_log(db, failed)] == [500, 500]

    # dead letters and redrive: the redriven task's success (attempt 3)
    # ends a task with failures, so it is logged
    dead = {r["id"] for r in query(db, "SELECT id FROM jobflow.failed_tasks"
                                       " WHERE id = ANY(%s)", ([failed, redriven],))}
    assert dead == {failed, redriven}
    assert call(db, "SELECT jobflow.retry(%s)", (redriven,)) is True
    assert wait_final(db, redriven) == "succeeded"
    assert outcomes(db, redriven) == [(1, "retry"), (2, "failed"), (3, "succeeded")]

    # pruning takes tasks with and without log rows, and the rows with them
    mine = ok + [retried, failed, redriven]
    call(db, "SELECT jobflow.prune(interval '0')")
    assert query(db, "SELECT id FROM jobflow.tasks WHERE id = ANY(%s)", (mine,)) == []
    assert query(db, "SELECT task_id FROM jobflow.task_log WHERE task_id = ANY(%s)",
                 (mine,)) == []


def test_queue_overrides_global(db, receiver, quiet, queue_name):
    """A queue's log_attempts overrides jobflow.log_attempts both ways, and
    set_queue() without it goes back to the global setting."""
    loud, hushed = queue_name(), queue_name()
    call(db, "SELECT jobflow.set_queue(%s, log_attempts => 'failures')", (hushed,))
    assert call(db, "SELECT log_attempts FROM jobflow.queues WHERE name = %s",
                (hushed,)) == "failures"
    url, _ = receiver.unique_url("/ok")
    flaky_url, _ = receiver.unique_url("/flaky/1")
    # global all: the quiet queue alone leaves its successes out
    a = schedule(db, url + "&a", queue=hushed)
    b = schedule(db, url + "&b")
    c = schedule(db, flaky_url, queue=hushed)
    wait_final(db, [a, b, c])
    assert outcomes(db, a) == []
    assert outcomes(db, b) == [(1, "succeeded")]
    assert outcomes(db, c) == [(1, "retry"), (2, "succeeded")]

    # global failures: a queue set to all logs every attempt
    quiet("failures")
    call(db, "SELECT jobflow.set_queue(%s, max_concurrent => 10, log_attempts => 'all')",
         (loud,))
    d = schedule(db, url + "&d", queue=loud)
    e = schedule(db, url + "&e")
    wait_final(db, [d, e])
    assert outcomes(db, d) == [(1, "succeeded")]
    assert outcomes(db, e) == []

    # set_queue() without log_attempts: back to NULL, the global setting
    call(db, "SELECT jobflow.set_queue(%s, max_concurrent => 10)", (loud,))
    assert call(db, "SELECT log_attempts FROM jobflow.queues WHERE name = %s",
                (loud,)) is None
    f = schedule(db, url + "&f", queue=loud)
    wait_final(db, f)
    assert outcomes(db, f) == []

    with pytest.raises(psycopg2.errors.InvalidParameterValue):
        call(db, "SELECT jobflow.set_queue(%s, log_attempts => 'none')", (loud,))


def test_kill9_keeps_uncertain_attempts(connect, receiver, server, quiet):
    """Quiet logging leaves out successes only: attempts a crash cut short
    (they may have been delivered) are logged as interrupted, and so is
    the success that follows them."""
    db = connect()
    quiet("failures")
    url, tag = receiver.unique_url("/delay/3000")
    with db.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, max_attempts)"
                    " SELECT %s || '&n=' || g, 5 FROM generate_series(1, 3) g"
                    " RETURNING id", (url,))
        ids = sorted(r[0] for r in cur.fetchall())
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=len(ids), timeout=10)
    # the claims, committed asynchronously, are on disk (as test_recovery)
    target = query(db, "SELECT pg_current_wal_insert_lsn()::text AS lsn")[0]["lsn"]
    deadline = time.time() + 2.0
    while not query(db, "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn AS ok",
                    (target,))[0]["ok"]:
        assert time.time() < deadline, "WAL not flushed to %s" % target
        time.sleep(0.02)
    old_pid = server.worker_pid(db)
    server.kill9(old_pid)
    server.wait_worker(old_pid, timeout=60)
    with pytest.raises(psycopg2.Error):
        query(db, "SELECT 1")

    db = connect()
    states = wait_final(db, ids, timeout=30)
    assert set(states.values()) == {"succeeded"}, states
    for task_id in ids:
        log = task_log(db, task_id)
        assert [(e["attempt"], e["outcome"]) for e in log] == \
            [(1, "interrupted"), (2, "succeeded")], log
        assert "may have been delivered" in log[0]["error"], log
    # the new worker still leaves first-attempt successes out
    assert not first_success_logged(db, receiver)
