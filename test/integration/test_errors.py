# -------------------------------------------------------------------------
#
# test_errors.py
#     An ERROR at any step of the worker's loop loses, repeats and strands
#     nothing, and never restarts the worker (issue 9, item 11).  Errors
#     are injected with jobflow.inject_error (superuser only), once per
#     change of the setting, at: turn, claim, after_claim, flush,
#     after_flush, housekeeping, load; at startup, the worker retries
#     instead of exiting; and a worker restarted by repeated errors fires
#     the cron occurrences it missed instead of cancelling them.
#
# -------------------------------------------------------------------------

import time

import pytest

from conftest import query, wait_final


def server_log(server):
    with open(server.logfile, errors="replace") as f:
        return f.read()


def wait_injected(server, point, since, timeout=15):
    deadline = time.time() + timeout
    needle = 'jobflow: error injected at "%s"' % point
    while time.time() < deadline:
        if server_log(server)[since:].count(needle) >= 1:
            return
        time.sleep(0.1)
    pytest.fail("no error was injected at %s" % point)


@pytest.fixture
def inject(connect, server):
    """Set jobflow.inject_error (on a fresh connection: a test may restart
    the server); reset at the end."""
    def apply(point):
        server.set_guc(connect(), "jobflow.inject_error", point)
    try:
        yield apply
    finally:
        server.wait_ready()
        server.set_guc(connect(), "jobflow.inject_error", None)


def burst(db, url, n=20):
    with db.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, max_attempts)"
                    " SELECT %s || '&n=' || g, 5 FROM generate_series(1, %s) g"
                    " RETURNING id", (url, n))
        return sorted(r[0] for r in cur.fetchall())


def check_nothing_lost_or_repeated(db, receiver, tag, ids):
    states = wait_final(db, ids, timeout=30)
    assert set(states.values()) == {"succeeded"}, states
    log = query(db, "SELECT task_id, attempt, outcome FROM jobflow.task_log"
                    " WHERE task_id = ANY(%s) ORDER BY task_id, attempt", (ids,))
    seen = [(r["task_id"], r["attempt"]) for r in log]
    assert len(seen) == len(set(seen)), "an attempt logged twice: %s" % seen
    tasks = {r["id"]: r["attempts"] for r in query(
        db, "SELECT id, attempts FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))}
    for task_id, attempts in tasks.items():
        mine = [a for (t, a) in seen if t == task_id]
        assert mine == list(range(1, attempts + 1)), (task_id, attempts, mine)
    got = {}
    for r in receiver.tagged(tag):
        key = (int(r["headers"]["x-jobflow-task-id"]), int(r["headers"]["x-jobflow-attempt"]))
        got[key] = got.get(key, 0) + 1
    assert all(v == 1 for v in got.values()), "an attempt sent twice: %s" % got
    # every attempt that reached the receiver is logged
    assert not [k for k in got if k not in set(seen)], (got, seen)


@pytest.mark.parametrize("point", ["turn", "before_claim", "claim", "after_claim", "flush",
                                   "after_flush", "housekeeping", "load"])
def test_error_at_each_step(db, receiver, server, inject, point):
    pid = server.worker_pid(db)
    since = len(server_log(server))
    inject(point)
    time.sleep(0.5)
    url, tag = receiver.unique_url("/ok")
    ids = burst(db, url)
    wait_injected(server, point, since)
    check_nothing_lost_or_repeated(db, receiver, tag, ids)
    assert query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE state = 'running'"
                     " AND id = ANY(%s)", (ids,))[0]["n"] == 0
    # recovered in place: the same process, its memory intact
    assert server.worker_pid(db) == pid


def test_error_after_claim_sends_nothing_and_counts_nothing(db, receiver, server, inject):
    """The claim committed, the requests never went out: the claim is
    undone, no attempt counted or logged, and the tasks fire as attempt 1."""
    inject("after_claim")
    time.sleep(0.5)
    url, tag = receiver.unique_url("/ok")
    ids = burst(db, url, n=5)
    states = wait_final(db, ids, timeout=30)
    assert set(states.values()) == {"succeeded"}
    rows = query(db, "SELECT id, attempts FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
    assert all(r["attempts"] == 1 for r in rows), rows


def test_error_during_startup_is_retried(server, inject):
    """An error while starting never makes the worker exit."""
    inject("startup")
    since = len(server_log(server))
    server.restart()
    server.wait_ready()
    deadline = time.time() + 30
    while "jobflow worker started" not in server_log(server)[since:] and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    log = server_log(server)[since:]
    # what the new server logged (the old one's shutdown reports its worker)
    log = log[log.rindex("database system is ready to accept connections"):]
    assert 'jobflow: error injected at "startup"' in log
    assert log.count("jobflow worker started") == 1, log[-2000:]
    assert "exited with exit code" not in log, log[-2000:]


def test_restart_by_errors_fires_missed_occurrences(connect, receiver, server, inject):
    """Repeated errors make the worker exit and restart; the per-second
    occurrences that fell due meanwhile fire late, they are not cancelled
    as missed (the server was up)."""
    db = connect()
    url, tag = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("SELECT jobflow.schedule_cron('errors-restart', 'every 1 seconds', %s,"
                    " method => 'GET')", (url,))
    try:
        receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=2, timeout=15)
        pid = server.worker_pid(db)
        since = len(server_log(server))
        inject("turn*")
        deadline = time.time() + 60
        while server.worker_pid(db) == pid and time.time() < deadline:
            time.sleep(0.2)
        assert server.worker_pid(db) != pid, "the worker never gave up"
        time.sleep(2)
        inject("")
        server.wait_worker(None, timeout=60)
        time.sleep(3)
        missed = query(db, "SELECT count(*) AS n FROM jobflow.tasks t"
                           "  JOIN jobflow.cron_timers c ON c.id = t.cron_id"
                           " WHERE c.name = 'errors-restart' AND t.last_error LIKE 'missed%%'"
                       )[0]["n"]
        assert missed == 0, "%d occurrences cancelled as missed" % missed
        assert "exited with exit code" in server_log(server)[since:]
    finally:
        with db.cursor() as cur:
            cur.execute("SELECT jobflow.unschedule_cron('errors-restart')")
