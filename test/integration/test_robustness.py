# -------------------------------------------------------------------------
#
# test_robustness.py
#     What one tenant or one odd task must not be able to do to the worker:
#     stall it with a row lock, break its writes with an edge-case value,
#     or leave a task in the wheel at a time it no longer has.
#
# The suite's cluster runs with jobflow.reconcile_interval = 1s, so the
# notify window is 3 s and the rolling rescan looks 2 s ahead.
#
# -------------------------------------------------------------------------

import time

import pytest

from conftest import epoch, schedule, task_log, task_row, wait_final

PROMPT = 1.0


@pytest.mark.timing
def test_moved_earlier_without_notification_fires_at_new_time(db, receiver, server):
    """A task loaded into the wheel at start, then moved earlier but still
    beyond the notify window (no NOTIFY), fires at its new time: the rescan
    sees its entry is stale."""
    url, tag = receiver.unique_url("/ok")
    task_id = schedule(db, url, run_at_sql="now() + interval '60 s'")
    old_pid = server.worker_pid(db)
    with db.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (old_pid,))
    server.wait_worker(old_pid)          # the new worker loads it at start
    with db.cursor() as cur:
        cur.execute("SELECT jobflow.reschedule(%s, now() + interval '5 s')", (task_id,))
        assert cur.fetchone()[0] is True
    new_due = epoch(db, task_id)
    req = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=15)[0]
    assert req["time"] >= new_due, "fired %.3f s early" % (new_due - req["time"])
    assert req["time"] - new_due < PROMPT, \
        "fired %.3f s after its new time" % (req["time"] - new_due)
    assert wait_final(db, task_id) == "succeeded"


@pytest.mark.timing
def test_row_lock_of_one_tenant_does_not_stall_others(db, connect, receiver, app_role):
    """A role holding FOR UPDATE on its own due task delays that task only;
    it cannot lock a running task at all."""
    holder = connect(autocommit=False)
    with holder.cursor() as cur:
        cur.execute("SET ROLE %s" % app_role)
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '1 s')",
                    (receiver.unique_url("/ok")[0],))
        locked_id = cur.fetchone()[0]
    holder.commit()
    other_url, other_tag = receiver.unique_url("/ok")
    other_id = schedule(db, other_url, run_at_sql="now() + interval '1.2 s'")
    other_due = epoch(db, other_id)

    with holder.cursor() as cur:
        cur.execute("SELECT id FROM jobflow.tasks WHERE id = %s FOR UPDATE", (locked_id,))
        assert cur.fetchone()[0] == locked_id
    try:
        req = receiver.wait_for(lambda r: ("t=" + other_tag) in r["query"], timeout=10)[0]
        assert req["time"] - other_due < PROMPT, \
            "another task waited %.3f s behind a tenant's row lock" % (req["time"] - other_due)
        assert wait_final(db, other_id) == "succeeded"
        time.sleep(0.5)
        assert task_row(db, locked_id)["state"] == "pending", "a locked task was claimed"
    finally:
        holder.rollback()
    assert wait_final(db, locked_id, timeout=15) == "succeeded"


def test_running_task_cannot_be_locked_by_its_owner(db, connect, receiver, app_role):
    app = connect(autocommit=False)
    with app.cursor() as cur:
        cur.execute("SET ROLE %s" % app_role)
        cur.execute("SELECT jobflow.schedule(%s)", (receiver.url("/delay/1500"),))
        task_id = cur.fetchone()[0]
    app.commit()
    deadline = time.time() + 5
    while task_row(db, task_id)["state"] != "running" and time.time() < deadline:
        time.sleep(0.02)
    assert task_row(db, task_id)["state"] == "running"
    with app.cursor() as cur:
        cur.execute("SELECT count(*) FROM jobflow.tasks WHERE id = %s", (task_id,))
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT id FROM jobflow.tasks WHERE id = %s FOR UPDATE", (task_id,))
        assert cur.fetchall() == []
    app.rollback()
    assert wait_final(db, task_id) == "succeeded"


def test_run_at_at_the_postgres_epoch_is_logged(db, receiver):
    """2000-01-01 00:00:00+00 is TimestampTz 0: still a time, not 'none'."""
    url, tag = receiver.unique_url("/ok")
    task_id = schedule(db, url, run_at_sql="'2000-01-01 00:00:00+00'::timestamptz")
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=10)
    assert wait_final(db, task_id) == "succeeded"
    log = task_log(db, task_id)
    assert [r["outcome"] for r in log] == ["succeeded"]
    assert log[0]["scheduled_at"] is not None


@pytest.mark.timing
def test_long_transaction_committing_near_due_time_notifies(db, connect, receiver):
    """The notify decision is taken at commit: a task inserted beyond the
    notify window by a transaction that commits shortly before it is due
    still wakes the worker at once."""
    url, tag = receiver.unique_url("/ok")
    txn = connect(autocommit=False)
    with txn.cursor() as cur:
        cur.execute("SELECT jobflow.schedule(%s, run_at => clock_timestamp() + interval '4 s')",
                    (url,))
        task_id = cur.fetchone()[0]
        # the task's own due time (a second clock reading would be later)
        cur.execute("SELECT extract(epoch FROM run_at) FROM jobflow.tasks WHERE id = %s",
                    (task_id,))
        due = cur.fetchone()[0]
    time.sleep(3.7)
    txn.commit()
    req = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=10)[0]
    assert req["time"] >= float(due) - 0.002
    assert req["time"] - float(due) < 0.5, \
        "fired %.3f s late after a late commit" % (req["time"] - float(due))
    assert wait_final(db, task_id) == "succeeded"


@pytest.mark.timing
def test_spoofed_notifications_are_cheap(db, connect, receiver):
    """Anyone may NOTIFY jobflow: a huge id range must not make the worker
    load the table, and real tasks keep firing on time."""
    outsider = connect()
    with outsider.cursor() as cur:
        for _ in range(50):
            cur.execute("NOTIFY jobflow, '1 9223372036854775807'")
        # a width that wraps around in signed arithmetic
        cur.execute("NOTIFY jobflow, '-9223372036854775808 9223372036854775807'")
        # many narrow ranges, overlapping: merged, and capped per drain
        cur.execute("DO $$ BEGIN FOR i IN 1..2000 LOOP"
                    " PERFORM pg_notify('jobflow', i || ' ' || (i + 9998)); END LOOP; END $$")
        cur.execute("NOTIFY jobflow, 'garbage'")
    url, tag = receiver.unique_url("/ok")
    task_id = schedule(db, url, run_at_sql="now() + interval '0.5 s'")
    due = epoch(db, task_id)
    req = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=10)[0]
    assert req["time"] - due < PROMPT
    assert wait_final(db, task_id) == "succeeded"


def test_stop_hands_back_unsent_requests(connect, receiver, server):
    """At a fast shutdown, requests still queued behind the caps were never
    sent: their claim is undone (no attempt counted, nothing logged); the
    one in flight is logged as interrupted.  All fire after the restart."""
    db = connect()
    server.set_guc(db, "jobflow.max_concurrent_requests", 1)
    server.set_guc(db, "jobflow.shutdown_grace", "200ms")
    try:
        time.sleep(0.5)
        url, tag = receiver.unique_url("/delay/1000")
        ids = [schedule(db, url, max_attempts=1) for _ in range(4)]
        receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=1, timeout=10)
        old_pid = server.worker_pid(db)
        db.close()
        server.restart()
        server.wait_worker(old_pid)
        db = connect()
        states = wait_final(db, ids, timeout=30)
        assert set(states.values()) == {"succeeded"}, states
        interrupted = [i for i in ids
                       if any(r["outcome"] == "interrupted" for r in task_log(db, i))]
        assert len(interrupted) == 1, "exactly the request in flight was interrupted"
        for i in ids:
            if i in interrupted:
                continue
            assert [r["outcome"] for r in task_log(db, i)] == ["succeeded"]
            assert task_row(db, i)["attempts"] == 1
    finally:
        db = connect()
        server.set_guc(db, "jobflow.max_concurrent_requests", None)
        server.set_guc(db, "jobflow.shutdown_grace", None)


def test_error_in_the_worker_keeps_its_state(db, receiver, server):
    """An ERROR in the worker (here pg_cancel_backend) aborts its current
    transaction, not the process: the request in flight completes as one
    attempt, with no interrupted attempt and no restart."""
    url, tag = receiver.unique_url("/delay/1500")
    task_id = schedule(db, url)
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], timeout=10)
    pid = server.worker_pid(db)
    with db.cursor() as cur:
        cur.execute("SELECT pg_cancel_backend(%s)", (pid,))
        assert cur.fetchone()[0] is True
    assert wait_final(db, task_id, timeout=15) == "succeeded"
    assert [r["outcome"] for r in task_log(db, task_id)] == ["succeeded"]
    assert task_row(db, task_id)["attempts"] == 1
    assert server.worker_pid(db) == pid, "the worker restarted"
    # and it keeps working
    url2, tag2 = receiver.unique_url("/ok")
    task2 = schedule(db, url2)
    assert wait_final(db, task2) == "succeeded"


def test_denied_networks_are_never_called(connect, receiver, server):
    """jobflow.deny_networks refuses a connection by address, whatever the
    URL says; such a task fails at once (retrying cannot help).  The default
    list covers the cloud metadata addresses."""
    import psycopg2

    db = connect()
    with db.cursor() as cur:
        cur.execute("SHOW jobflow.deny_networks")
        assert "169.254.0.0/16" in cur.fetchone()[0]
        with pytest.raises(psycopg2.Error) as err:
            cur.execute("ALTER SYSTEM SET jobflow.deny_networks = '10.0.0.0/8, nonsense'")
        assert err.value.pgcode == "22023"
    server.set_guc(db, "jobflow.deny_networks", "127.0.0.2/32")
    # the test cluster allows loopback (jobflow.allow_networks)
    server.set_guc(db, "jobflow.allow_networks", "")
    try:
        time.sleep(0.5)
        denied = schedule(db, "http://127.0.0.2:%d/ok" % receiver.port, max_attempts=3)
        url, tag = receiver.unique_url("/ok")
        allowed = schedule(db, url)
        assert wait_final(db, allowed) == "succeeded"
        assert wait_final(db, denied) == "failed"
        log = task_log(db, denied)
        assert [r["outcome"] for r in log] == ["failed"]
        assert "deny_networks" in log[0]["error"]
    finally:
        server.set_guc(db, "jobflow.deny_networks", None)
        server.set_guc(db, "jobflow.allow_networks", None)


def test_outcome_that_cannot_be_written_is_rescued(db, receiver):
    """If one outcome row cannot be written, the rest of its batch still
    is (row by row), and its task does not stay running: the next
    housekeeping puts it back to pending, and its attempts run out."""
    with db.cursor() as cur:
        cur.execute("ALTER TABLE jobflow.task_log ADD CONSTRAINT test_poison"
                    " CHECK (response IS DISTINCT FROM 'poison')")
    try:
        url, tag = receiver.unique_url("/echo")
        poisoned = schedule(db, url, body_text="poison", content_type="text/plain",
                            max_attempts=2)
        fine = schedule(db, url, body_text="fine", content_type="text/plain")
        assert wait_final(db, fine) == "succeeded"
        assert wait_final(db, poisoned, timeout=20) == "failed"
        log = task_log(db, poisoned)
        assert [r["outcome"] for r in log] == ["interrupted"] * 3
        assert all("could not record" in r["error"] for r in log)
        assert len(receiver.tagged(tag)) == 4      # 3 attempts + the fine one
    finally:
        with db.cursor() as cur:
            cur.execute("ALTER TABLE jobflow.task_log DROP CONSTRAINT test_poison")
