# -------------------------------------------------------------------------
#
# test_wakeup_costs.py
#     Issue 20, item 6 (b): what a tenant's cheap commit costs the worker
#     is proportional to what it changed.  A statement that changes no row
#     of jobflow.queues or jobflow.cron_timers wakes nothing; a changed
#     queue is read again by its key, not with the whole table; a changed
#     timer is materialised by its id.
#
# The counters are the worker's (jobflow.stats, jobflow.wakeups()); the
# tests run one at a time, so a delta around a statement is its own.
#
# -------------------------------------------------------------------------

import time

import pytest

from conftest import call, stat, settle


@pytest.fixture
def tenant(connect, new_role):
    role = new_role()
    conn = connect()
    call(conn, "SET ROLE %s" % role)
    return role, conn


def test_statements_that_change_no_row_wake_nothing(db, tenant, receiver):
    role, conn = tenant
    url, _ = receiver.unique_url("/ok")
    call(conn, "SELECT jobflow.schedule_cron('quiet', '0 3 * * *', %s)", (url,))
    call(conn, "SELECT jobflow.pause_queue('paused')")
    reads = settle(db, "queue_reads_total")
    timers = call(db, "SELECT timers FROM jobflow.wakeups()")
    for _ in range(20):
        call(conn, "UPDATE jobflow.cron_timers SET url = url WHERE false")
        assert call(conn, "SELECT jobflow.resume_queue('never-paused')") is False
        assert call(conn, "SELECT jobflow.pause_queue('paused')") is False
        assert call(conn, "SELECT jobflow.drop_queue('never-configured')") is False
    time.sleep(1.5)
    assert call(db, "SELECT timers FROM jobflow.wakeups()") == timers
    assert stat(db, "queue_reads_total") == reads


def test_a_changed_queue_is_read_by_its_key(db, tenant):
    """A role with 40 configured queues changes one: the worker reads that
    one row, not the table."""
    role, conn = tenant
    for i in range(40):
        call(conn, "SELECT jobflow.set_queue(%s, max_concurrent => 10)", ("q%d" % i,))
    settle(db, "queue_reads_total")
    reads, rows = stat(db, "queue_reads_total"), stat(db, "queue_rows_read_total")
    call(conn, "SELECT jobflow.set_queue('q7', max_concurrent => 3)")
    deadline = time.time() + 10
    while stat(db, "queue_reads_total") == reads and time.time() < deadline:
        time.sleep(0.05)
    assert stat(db, "queue_reads_total") - reads >= 1, "the change was not read"
    time.sleep(0.5)
    assert stat(db, "queue_rows_read_total") - rows <= 2


def test_a_changed_timer_still_fires(db, tenant, receiver):
    """The worker materialises the timers changed, by id: a timer moved to
    fire every second does so at once."""
    role, conn = tenant
    url, tag = receiver.unique_url("/ok")
    call(conn, "SELECT jobflow.schedule_cron('soon', '0 3 1 1 *', %s)", (url,))
    before = call(db, "SELECT timers FROM jobflow.wakeups()")
    call(conn, "UPDATE jobflow.cron_timers SET schedule = '* * * * * *' WHERE name = 'soon'")
    assert call(db, "SELECT timers FROM jobflow.wakeups()") == before + 1
    receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=2, timeout=15)
