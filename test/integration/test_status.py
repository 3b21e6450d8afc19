# -------------------------------------------------------------------------
#
# test_status.py
#     jobflow.worker_status() reports the running worker and counters that
#     move with its work; a configuration reload does not stop the worker.
#
# -------------------------------------------------------------------------

import time

import pytest

from conftest import query, schedule, wait_final, worker_status


@pytest.mark.smoke
def test_worker_status_is_sane(db, receiver):
    st = worker_status(db)
    assert st["pid"] is not None
    backends = query(db, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobflow worker'"
                     " AND datname = current_database()")
    assert [b["pid"] for b in backends] == [st["pid"]]
    now = query(db, "SELECT now() AS now")[0]["now"]
    assert st["started_at"] <= now
    assert st["horizon_end"] > now
    for name in ("wheel_tasks", "wheel_bytes", "in_flight", "queued", "buffered_rows",
                 "fired", "succeeded", "failed", "retried", "flushes",
                 "flushed_rows", "statements"):
        assert st[name] is not None and st[name] >= 0, (name, st)
    assert st["wheel_bytes"] > 0

    # a task due in a few seconds (a time for which commits notify the
    # worker) sits in the wheel until cancelled
    url, tag = receiver.unique_url("/ok")
    later = schedule(db, url, run_at_sql="now() + interval '2 s'")
    deadline = time.time() + 5
    while worker_status(db)["wheel_tasks"] < st["wheel_tasks"] + 1 and time.time() < deadline:
        time.sleep(0.05)
    assert worker_status(db)["wheel_tasks"] >= st["wheel_tasks"] + 1

    # three tasks now: one succeeds, one fails, one retries then fails
    ok_url, _ = receiver.unique_url("/ok")
    bad_url, _ = receiver.unique_url("/status/404")
    retry_url, _ = receiver.unique_url("/status/500")
    ids = [schedule(db, ok_url), schedule(db, bad_url), schedule(db, retry_url, max_attempts=2)]
    wait_final(db, ids)
    # the counters are published on the worker's next loop turn
    time.sleep(0.3)
    after = worker_status(db)
    assert after["pid"] == st["pid"]
    assert after["fired"] >= st["fired"] + 4
    assert after["succeeded"] >= st["succeeded"] + 1
    assert after["failed"] >= st["failed"] + 2
    assert after["retried"] >= st["retried"] + 1
    assert after["flushes"] >= st["flushes"] + 1
    assert after["flushed_rows"] >= st["flushed_rows"] + 4
    assert after["statements"] > st["statements"]
    assert after["last_flush"] is not None
    assert after["last_flush"] <= query(db, "SELECT now() AS now")[0]["now"]

    with db.cursor() as cur:
        cur.execute("SELECT jobflow.cancel(%s)", (later,))
        assert cur.fetchone()[0] is True


@pytest.mark.smoke
def test_reload_keeps_worker(db, receiver):
    pid = worker_status(db)["pid"]
    assert pid is not None
    with db.cursor() as cur:
        cur.execute("SELECT pg_reload_conf()")
    time.sleep(1.0)
    assert worker_status(db)["pid"] == pid
    # and it still works
    url, tag = receiver.unique_url("/ok")
    task_id = schedule(db, url)
    assert wait_final(db, task_id) == "succeeded"
    assert len(receiver.tagged(tag)) == 1
    assert worker_status(db)["pid"] == pid
