# -------------------------------------------------------------------------
#
# test_retention.py
#     Retention (issue 10, item 1): the worker prunes succeeded, failed
#     and cancelled tasks older than jobflow.retention with their log
#     rows, in batches of jobflow.prune_batch_size, and leaves pending and
#     recent ones; jobflow.prune() does it now for jobflow_admin; a task
#     and its log rows go together whoever deletes (no orphan log rows).
#
# -------------------------------------------------------------------------

import time
import uuid

import psycopg2
import pytest

from conftest import query, schedule, task_row, wait_final


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def log_rows(conn, ids):
    return one(conn, "SELECT count(*) FROM jobflow.task_log WHERE task_id = ANY(%s)", (ids,))


def finished_tasks(conn, receiver, n):
    """n succeeded, one failed and one cancelled task; returns their ids."""
    url, _ = receiver.unique_url("/ok")
    ids = [schedule(conn, url) for _ in range(n)]
    bad, _ = receiver.unique_url("/status/404")
    ids.append(schedule(conn, bad, max_attempts=1))
    wait_final(conn, ids)
    later = schedule(conn, url, run_at_sql="now() + interval '1 hour'")
    assert one(conn, "SELECT jobflow.cancel(%s)", (later,)) is True
    ids.append(later)
    return ids


def wait_pruned(conn, ids, timeout):
    """Wait until none of the tasks ids is left; fail saying how many are."""
    deadline = time.time() + timeout
    while True:
        left = one(conn, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
        if left == 0 or time.time() >= deadline:
            break
        time.sleep(0.1)
    assert left == 0, "%d of %d old tasks left after %d s" % (left, len(ids), timeout)


@pytest.fixture
def retention(server, db):
    """Sets retention settings for one test, and resets them after it."""
    names = []

    def set_(name, value):
        names.append(name)
        server.set_guc(db, name, value)
    yield set_
    for name in names:
        server.set_guc(db, name, None)


def test_worker_prunes_in_batches(db, receiver, retention):
    """With retention 2 s and batches of 3, every finished task older
    than 2 s goes with its log rows (four batches), counted in
    jobflow.stats; a pending task stays.  Earlier tests' finished tasks
    are pruned first, so that batches of 3 only have these to prune."""
    one(db, "SELECT jobflow.prune(interval '0')")
    old = finished_tasks(db, receiver, 10)
    assert log_rows(db, old) == 11      # the cancelled task has no log row
    url, _ = receiver.unique_url("/ok")
    pending = schedule(db, url, run_at_sql="now() + interval '1 hour'")
    retention("jobflow.prune_batch_size", 3)
    retention("jobflow.reconcile_interval", "500ms")
    time.sleep(2)
    pruned = "SELECT value FROM jobflow.stats WHERE metric = %s"
    before = (one(db, pruned, ("pruned_tasks_total",)), one(db, pruned, ("pruned_log_rows_total",)))
    retention("jobflow.retention", "2s")

    wait_pruned(db, old, 20)
    assert log_rows(db, old) == 0
    assert task_row(db, pending)["state"] == "pending"
    assert one(db, pruned, ("pruned_tasks_total",)) - before[0] >= len(old)
    assert one(db, pruned, ("pruned_log_rows_total",)) - before[1] >= 11
    one(db, "SELECT jobflow.cancel(%s)", (pending,))


def test_recent_finished_tasks_stay(db, receiver, retention):
    """A finished task younger than jobflow.retention is not pruned."""
    retention("jobflow.reconcile_interval", "500ms")
    retention("jobflow.retention", "30s")
    ids = finished_tasks(db, receiver, 2)
    time.sleep(2)
    assert one(db, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)", (ids,)) == len(ids)


def test_retention_zero_keeps_everything(db, receiver, retention):
    retention("jobflow.reconcile_interval", "500ms")
    retention("jobflow.retention", 0)
    ids = finished_tasks(db, receiver, 2)
    time.sleep(2)
    assert one(db, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)", (ids,)) == len(ids)
    assert log_rows(db, ids) == 3


def test_prune_now(connect, receiver):
    """jobflow.prune(age) removes finished tasks older than age, of every
    owner, with their log rows, and returns how many; only for
    jobflow_admin; bad ages are refused."""
    db = connect()
    ids = finished_tasks(db, receiver, 3)
    url, _ = receiver.unique_url("/ok")
    pending = schedule(db, url, run_at_sql="now() + interval '1 hour'")
    admin, user = ["jf_pr_%s" % uuid.uuid4().hex[:8] for _ in range(2)]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s IN ROLE jobflow_admin" % admin)
        cur.execute("CREATE ROLE %s IN ROLE jobflow_user" % user)

    one(db, "SELECT jobflow.prune(interval '1 hour')")
    assert one(db, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)", (ids,)) == len(ids)

    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % user)
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("SELECT jobflow.prune(interval '0')")
        cur.execute("RESET ROLE")
        cur.execute("SET ROLE %s" % admin)
        with pytest.raises(psycopg2.errors.InvalidParameterValue):
            cur.execute("SELECT jobflow.prune(interval '-1 s')")
        with pytest.raises(psycopg2.errors.NullValueNotAllowed):
            cur.execute("SELECT jobflow.prune(NULL)")
        cur.execute("SELECT jobflow.prune(interval '0')")
        n = cur.fetchone()[0]
        cur.execute("RESET ROLE")
    assert n >= len(ids)
    assert one(db, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)", (ids,)) == 0
    assert log_rows(db, ids) == 0
    assert task_row(db, pending)["state"] == "pending"
    one(db, "SELECT jobflow.cancel(%s)", (pending,))


def test_no_orphan_log_rows(db, receiver):
    """A superuser's DELETE of tasks removes their log rows; TRUNCATE of
    tasks truncates the log (rolled back here)."""
    ids = finished_tasks(db, receiver, 3)
    assert log_rows(db, ids) == 4
    with db.cursor() as cur:
        cur.execute("DELETE FROM jobflow.tasks WHERE id = ANY(%s)", (ids[:2],))
    assert log_rows(db, ids[:2]) == 0
    assert log_rows(db, ids[2:]) == 2
    assert one(db, "SELECT count(*) FROM jobflow.task_log l WHERE NOT EXISTS"
               " (SELECT 1 FROM jobflow.tasks t WHERE t.id = l.task_id)"
               " AND l.task_id = ANY(%s)", (ids,)) == 0

    db.autocommit = False
    try:
        with db.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '2s'")
            cur.execute("TRUNCATE jobflow.tasks")
            cur.execute("SELECT count(*) FROM jobflow.task_log")
            assert cur.fetchone()[0] == 0
            # both named: the log is in use by the statement itself
            cur.execute("ROLLBACK")
            cur.execute("BEGIN")
            cur.execute("TRUNCATE jobflow.tasks, jobflow.task_log")
            cur.execute("SELECT (SELECT count(*) FROM jobflow.tasks) + (SELECT count(*) FROM jobflow.task_log)")
            assert cur.fetchone()[0] == 0
    finally:
        db.rollback()
        db.autocommit = True
    assert log_rows(db, ids[2:]) == 2


@pytest.mark.timing
def test_pruning_keeps_up_without_gaps(db, receiver, retention):
    """Under sustained load no gap comes (a task is due every
    millisecond); a backlog is pruned at the pace of the share of the
    loop, not at one batch per PRUNE_MAX_DEFER_MS (100 ms).  4,000 cancelled
    tasks in batches of 20 are 200 batches: at one per 100 ms they took 20 s
    at least; paced by the share they take well under a second on a quiet
    machine, and the test allows 10 s."""
    one(db, "SELECT jobflow.prune(interval '0')")
    url, _ = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                    " SELECT %s, now() + interval '1 hour' FROM generate_series(1, 4000)"
                    " RETURNING id", (url,))
        old = [r[0] for r in cur.fetchall()]
        cur.execute("ANALYZE jobflow.tasks")     # see test_pruning_goes_on_from_where_it_stopped
        cur.execute("SELECT count(*) FROM unnest(%s::bigint[]) i WHERE jobflow.cancel(i)", (old,))
        assert cur.fetchone()[0] == len(old)
    retention("jobflow.prune_batch_size", 20)
    retention("jobflow.reconcile_interval", "500ms")
    stream, _ = receiver.unique_url("/ok")
    with db.cursor() as cur:
        # 1,000 callbacks/s for 15 s: never a gap of PRUNE_SLACK_MS (2 ms)
        cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                    " SELECT %s, now() + interval '1 s' + i * interval '1 ms'"
                    "   FROM generate_series(0, 14999) i", (stream,))
    try:
        time.sleep(2)       # the stream flows, the backlog is older than 1 s
        started = time.time()
        retention("jobflow.retention", "1s")
        while time.time() < started + 10:
            left = one(db, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)", (old,))
            if left == 0:
                break
            time.sleep(0.1)
        took = time.time() - started
        assert left == 0, "%d of %d old tasks left after %.1f s" % (left, len(old), took)
    finally:
        retention("jobflow.retention", 0)
        one(db, "SELECT count(*) FROM jobflow.tasks WHERE url = %s AND state = 'pending'"
                " AND jobflow.cancel(id)", (stream,))


def finished_at_pages(conn):
    """Pages of tasks_finished_at read so far, by every backend."""
    return one(conn, "SELECT idx_blks_hit + idx_blks_read FROM pg_catalog.pg_statio_all_indexes"
                     " WHERE indexrelid = 'jobflow.tasks_finished_at'::pg_catalog.regclass")


def test_pruning_goes_on_from_where_it_stopped(db, receiver, retention):
    """The entries of deleted tasks lead tasks_finished_at until VACUUM
    removes them.  The pruner reads on from where its last batch stopped,
    so its idle looks read a page or two, not the 40,000 dead entries
    (some 140 pages) in front each time: before, every batch started from
    the oldest, and at 10,000 callbacks/s pruning slowed down until
    autovacuum ran, and fell behind.  Autovacuum is off for the table
    meanwhile, so that the dead entries stay."""
    one(db, "SELECT jobflow.prune(interval '0')")
    with db.cursor() as cur:
        cur.execute("ALTER TABLE jobflow.tasks SET (autovacuum_enabled = off)")
    try:
        url, _ = receiver.unique_url("/ok")
        with db.cursor() as cur:
            cur.execute("WITH i AS (INSERT INTO jobflow.tasks (url, run_at)"
                        " SELECT %s, now() + interval '1 hour' FROM generate_series(1, 40000)"
                        " RETURNING id) SELECT array_agg(id) FROM i", (url,))
            old = cur.fetchone()[0]
            # autovacuum is off: the statistics are the test's to keep.
            # Planned with a tasks_pending_run_at that its last VACUUM found
            # empty, cancel(id) scans the whole index for its id (every
            # pending task, and those cancelled before it in this
            # statement): 40,000 cancels read 800 million entries, which
            # took over 10 minutes on a build at -O0
            cur.execute("ANALYZE jobflow.tasks")
            cur.execute("SELECT count(*) FROM unnest(%s::bigint[]) i WHERE jobflow.cancel(i)", (old,))
            assert cur.fetchone()[0] == len(old)
        retention("jobflow.prune_batch_size", 500)
        retention("jobflow.reconcile_interval", "500ms")
        time.sleep(1.1)
        retention("jobflow.retention", "1s")
        wait_pruned(db, old, 60)
        # idle looks, every 500 ms, once the statistics of the last batch are in
        time.sleep(2)
        before = finished_at_pages(db)
        time.sleep(3)
        read = finished_at_pages(db) - before
        assert read < 60, "the pruner's idle looks read %d pages of tasks_finished_at in 3 s" % read
        # and a task finished since is still pruned, from the mark on
        later = schedule(db, url, run_at_sql="now() + interval '1 hour'")
        assert one(db, "SELECT jobflow.cancel(%s)", (later,)) is True
        wait_pruned(db, [later], 20)
    finally:
        retention("jobflow.retention", 0)
        with db.cursor() as cur:
            cur.execute("ALTER TABLE jobflow.tasks RESET (autovacuum_enabled)")
