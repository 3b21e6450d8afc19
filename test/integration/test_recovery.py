# -------------------------------------------------------------------------
#
# test_recovery.py
#     No task is lost when the worker dies with requests in flight (kill -9:
#     the postmaster runs crash recovery and starts a new worker) or when
#     the server restarts with thousands of tasks pending.
#
# Delivery is at least once: an attempt cut short is delivered again, and
# logged as interrupted when its claim reached the disk before the crash
# (claims commit asynchronously; the kill test waits until their WAL has
# been written).
#
# These tests end every connection open at the time; they open new ones.
#
# -------------------------------------------------------------------------

import time

import psycopg2
import pytest

from conftest import query, task_log, task_row, wait_final


def test_kill9_worker_with_requests_in_flight(connect, receiver, server):
    db = connect()
    url, tag = receiver.unique_url("/delay/3000")
    with db.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, max_attempts)"
                    " SELECT %s || '&n=' || g, 5 FROM generate_series(1, 10) g"
                    " RETURNING id", (url,))
        ids = sorted(r[0] for r in cur.fetchall())
    # all ten are in flight (the receiver holds each for 3 s) ...
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=len(ids), timeout=10)
    # ... and their claims, committed asynchronously before the requests
    # went out, are written: wait for the WAL writer to pass this point
    target = query(db, "SELECT pg_current_wal_insert_lsn()::text AS lsn")[0]["lsn"]
    deadline = time.time() + 2.0
    while not query(db, "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn AS ok",
                    (target,))[0]["ok"]:
        assert time.time() < deadline, "WAL not flushed to %s" % target
        time.sleep(0.02)
    old_pid = server.worker_pid(db)
    assert old_pid is not None
    running = query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE id = ANY(%s)"
                    " AND state = 'running'", (ids,))[0]["n"]
    assert running == len(ids)

    server.kill9(old_pid)
    new_pid = server.wait_worker(old_pid, timeout=60)
    assert new_pid != old_pid
    # crash recovery ended every session, ours included
    with pytest.raises(psycopg2.Error):
        query(db, "SELECT 1")

    db = connect()
    states = wait_final(db, ids, timeout=30)
    assert set(states.values()) == {"succeeded"}, states

    reqs = receiver.tagged(tag)
    for task_id in ids:
        row = task_row(db, task_id)
        log = task_log(db, task_id)
        mine = [r for r in reqs if r["headers"]["x-jobflow-task-id"] == str(task_id)]
        attempts = [r["headers"]["x-jobflow-attempt"] for r in mine]
        # the attempt cut short is logged as interrupted, the next succeeded
        assert [(e["attempt"], e["outcome"]) for e in log] == \
            [(1, "interrupted"), (2, "succeeded")], log
        assert "may have been delivered" in log[0]["error"], log
        assert row["attempts"] == 2, row
        # and the receiver saw both deliveries
        assert sorted(attempts) == ["1", "2"], (task_id, attempts)


def test_restart_with_thousands_pending(connect, receiver, server):
    n = 3000
    db = connect()
    receiver.reset()    # keep /_requests small while polling below
    url, tag = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                    " SELECT %s || '&n=' || g, now() + (g %% 40) * interval '100 ms'"
                    "   FROM generate_series(1, %s) g RETURNING id", (url, n))
        ids = sorted(r[0] for r in cur.fetchall())
    old_pid = server.worker_pid(db)
    db.close()

    server.restart()
    server.wait_worker(old_pid, timeout=60)

    db = connect()
    deadline = time.time() + 90
    while True:
        left = query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE id = ANY(%s)"
                     " AND state NOT IN ('succeeded', 'failed', 'cancelled')", (ids,))[0]["n"]
        if left == 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    states = query(db, "SELECT state::text, count(*) AS n FROM jobflow.tasks"
                   " WHERE id = ANY(%s) GROUP BY 1", (ids,))
    assert {s["state"]: s["n"] for s in states} == {"succeeded": n}, states

    seen = {int(r["headers"]["x-jobflow-task-id"]) for r in receiver.tagged(tag)}
    missing = sorted(set(ids) - seen)
    assert not missing, "%d task(s) never reached the receiver, e.g. %s" % (len(missing), missing[:10])
    # each succeeded attempt is logged
    logged = query(db, "SELECT count(DISTINCT task_id) AS n FROM jobflow.task_log"
                   " WHERE task_id = ANY(%s) AND outcome = 'succeeded'", (ids,))[0]["n"]
    assert logged == n
