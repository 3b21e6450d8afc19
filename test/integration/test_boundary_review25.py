# -------------------------------------------------------------------------
#
# test_boundary_review25.py
#     A review of issue 25 items 3 to 7 (cron overlap, run_cron_now and
#     cron_preview, circuits per (owner, origin), quiet logging, mutual
#     TLS) as merged, tried as a hostile tenant and a careless operator
#     would.  What the review found, each test failing on the code
#     reviewed (main at ecfa333):
#       - quiet logging lost a request that left the machine: with
#         log_attempts = failures, a first-attempt success writes no log
#         row because the task's row records it; a task deleted (or
#         otherwise no longer running) while its request was in flight
#         has no row to record it, and its success vanished without a
#         trace, where "all" logs it (log_writer.c).
#
# -------------------------------------------------------------------------

import time
import uuid

import pytest

from conftest import call, query, schedule, task_log


def wait_running(conn, task_id, timeout=10.0):
    deadline = time.time() + timeout
    while call(conn, "SELECT state::text FROM jobflow.tasks WHERE id = %s",
               (task_id,)) != "running":
        assert time.time() < deadline, "task %d never ran" % task_id
        time.sleep(0.02)


@pytest.mark.parametrize("mode", ["all", "failures"])
def test_quiet_logging_keeps_a_success_whose_task_row_is_gone(db, receiver, mode):
    """A task deleted by an operator while its request is in flight: the
    request went out and was answered 200; with either log_attempts the
    attempt is in jobflow.task_log, since no task row can say it."""
    queue = "rv25-" + uuid.uuid4().hex[:10]
    call(db, "SELECT jobflow.set_queue(%s, log_attempts => %s)", (queue, mode))
    try:
        url, tag = receiver.unique_url("/delay/1500")
        task_id = schedule(db, url, queue=queue)
        wait_running(db, task_id)
        call(db, "DELETE FROM jobflow.tasks WHERE id = %s", (task_id,))
        deadline = time.time() + 10
        while not task_log(db, task_id) and time.time() < deadline:
            time.sleep(0.1)
        rows = task_log(db, task_id)
        assert [(r["attempt"], r["outcome"], r["http_status"]) for r in rows] == \
            [(1, "succeeded", 200)], rows
        assert len(receiver.tagged(tag)) == 1
    finally:
        call(db, "SELECT jobflow.drop_queue(%s)", (queue,))
