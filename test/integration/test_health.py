# -------------------------------------------------------------------------
#
# test_health.py
#     Lag and health figures (issue 24, item 2): per queue the backlog
#     (pending, overdue, age of the oldest overdue task), dead letters and
#     whether it is paused; per worker its last turn and a wait for ALTER
#     EXTENSION UPDATE; how long pruning has been behind.  The queues'
#     figures are read through partial indexes only, whatever the table
#     holds: auto_explain shows the plan of the very statement a scrape
#     runs.  Tenants choose queue names, so their series are capped and
#     escaped.
#
# -------------------------------------------------------------------------

import time
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import as_role, query, skip_unless_older_versions_install, wait_final


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def series(conn, family):
    """{labels tuple: value} of one family of jobflow.metrics()."""
    out = {}
    for fam in text_string_to_metric_families(one(conn, "SELECT jobflow.metrics()")):
        if fam.name == family:
            for s in fam.samples:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def queue_series(conn, family, owner):
    return {dict(k)["queue"]: v for k, v in series(conn, family).items()
            if dict(k)["owner"] == owner}


@pytest.fixture
def fresh(databases):
    """A database of its own: the queue figures see only this test's tasks."""
    name, conn = databases()
    return conn


@pytest.fixture
def tenant(fresh):
    name = "jf_health_%s" % uuid.uuid4().hex[:8]
    with fresh.cursor() as cur:
        cur.execute("CREATE ROLE %s IN ROLE jobflow_user" % name)
    yield name
    with fresh.cursor() as cur:
        cur.execute("DELETE FROM jobflow.task_log WHERE owner = %s::regrole", (name,))
        cur.execute("DELETE FROM jobflow.tasks WHERE owner = %s::regrole", (name,))
        cur.execute("DELETE FROM jobflow.queues WHERE owner = %s::regrole", (name,))
        cur.execute("DROP ROLE %s" % name)


def test_queue_figures(fresh, tenant, monitor, receiver):
    """A paused queue with three tasks ten minutes overdue, a queue with
    two tasks due in an hour, one with a dead letter: the monitor sees
    each queue's pending, overdue, oldest overdue age, dead letters and
    paused state, labelled by owner and queue, in metrics() and in
    jobflow.stats with label_set."""
    ok, _ = receiver.unique_url("/ok")
    bad, _ = receiver.unique_url("/status/404")
    as_role(fresh, tenant, "SELECT jobflow.pause_queue('held')")
    for _ in range(3):
        as_role(fresh, tenant, "SELECT jobflow.schedule(%s, run_at => now() - interval '10 min',"
                               " queue => 'held')", (ok,))
    for _ in range(2):
        as_role(fresh, tenant, "SELECT jobflow.schedule(%s, run_at => now() + interval '1 hour',"
                               " queue => 'later')", (ok,))
    dead = as_role(fresh, tenant, "SELECT jobflow.schedule(%s, max_attempts => 1, queue => 'dlq')",
                   (bad,))
    wait_final(fresh, [dead])

    with fresh.cursor() as cur:
        cur.execute("SET ROLE %s" % monitor)
        try:
            got = {f: queue_series(fresh, f, tenant) for f in (
                "jobflow_queue_pending", "jobflow_queue_overdue",
                "jobflow_queue_oldest_overdue_seconds", "jobflow_queue_dead_letters",
                "jobflow_queue_paused")}
            rows = query(fresh, "SELECT metric, label_set, value FROM jobflow.stats"
                                " WHERE metric LIKE 'queue\\_%%'")
        finally:
            cur.execute("RESET ROLE")
    assert got["jobflow_queue_pending"] == {"held": 3, "later": 2, "dlq": 0}, got
    assert got["jobflow_queue_overdue"] == {"held": 3, "later": 0, "dlq": 0}, got
    held_age = got["jobflow_queue_oldest_overdue_seconds"]["held"]
    assert 595 <= held_age <= 660, got
    assert got["jobflow_queue_oldest_overdue_seconds"]["later"] == 0
    assert got["jobflow_queue_dead_letters"] == {"held": 0, "later": 0, "dlq": 1}, got
    assert got["jobflow_queue_paused"] == {"held": 1, "later": 0, "dlq": 0}, got
    stats = {(r["metric"], r["label_set"]["queue"]): r["value"] for r in rows
             if r["label_set"].get("owner") == tenant}
    assert stats[("queue_pending", "held")] == 3
    assert stats[("queue_dead_letters", "dlq")] == 1
    assert stats[("queue_paused", "held")] == 1

    # resumed, the backlog drains and the figures follow
    as_role(fresh, tenant, "SELECT jobflow.resume_queue('held')")
    deadline = time.time() + 10
    while time.time() < deadline:
        if queue_series(fresh, "jobflow_queue_overdue", tenant).get("held") == 0:
            break
        time.sleep(0.1)
    assert queue_series(fresh, "jobflow_queue_overdue", tenant)["held"] == 0
    assert queue_series(fresh, "jobflow_queue_oldest_overdue_seconds", tenant)["held"] == 0
    assert queue_series(fresh, "jobflow_queue_paused", tenant)["held"] == 0


def scrape(conn):
    """One metrics() in a transaction of its own: the scans of jobflow.tasks
    and of its indexes it made (pg_stat_xact_*), and the plans auto_explain
    logged for its statements where the module is installed (else None)."""
    conn.notices.clear()
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            explain = True
            try:
                cur.execute("SAVEPOINT s")
                cur.execute("LOAD 'auto_explain'")
                cur.execute("SET LOCAL auto_explain.log_min_duration = 0")
                cur.execute("SET LOCAL auto_explain.log_nested_statements = on")
                cur.execute("SET LOCAL client_min_messages = log")
            except Exception:
                cur.execute("ROLLBACK TO SAVEPOINT s")
                explain = False
            # counts not yet flushed include earlier transactions': a difference
            counts = """SELECT c.relname, pg_catalog.pg_stat_get_xact_numscans(c.oid)
                          FROM pg_catalog.pg_class c
                         WHERE c.oid = 'jobflow.tasks'::pg_catalog.regclass
                            OR c.oid IN (SELECT i.indexrelid FROM pg_catalog.pg_index i
                                          WHERE i.indrelid = 'jobflow.tasks'::pg_catalog.regclass)"""
            cur.execute(counts)
            before = dict(cur.fetchall())
            cur.execute("SELECT jobflow.metrics()")
            cur.execute(counts)
            after = dict(cur.fetchall())
            # on a table, numscans counts sequential scans; on an index, its scans
            seq = after["tasks"] - before["tasks"]
            indexes = {k for k in after if k != "tasks" and after[k] > before[k]}
    finally:
        conn.rollback()
        conn.autocommit = True
    plans = [n for n in conn.notices if "plan:" in n and "tasks" in n] if explain else None
    return seq, indexes, plans


def test_queue_figures_never_scan_the_table(fresh, receiver):
    """The figures a scrape computes from jobflow.tasks go through the
    partial indexes of pending and failed tasks, on a small table (where
    the planner would rather read it all) as on one with 100,000 finished
    tasks: metrics() makes no sequential scan of jobflow.tasks (its
    transaction's statistics), and auto_explain shows the plan of the
    statement it runs, where the module is installed."""
    url, _ = receiver.unique_url("/ok")
    with fresh.cursor() as cur:
        cur.execute("INSERT INTO jobflow.tasks (url, run_at, queue)"
                    " SELECT %s, now() + interval '1 day', 'q' || (g %% 5)"
                    "   FROM generate_series(1, 20) g", (url,))
        cur.execute("ANALYZE jobflow.tasks")
    for size in ("small", "large"):
        if size == "large":
            with fresh.cursor() as cur:
                cur.execute("SET session_replication_role = replica")     # no row checks: fast
                cur.execute("INSERT INTO jobflow.tasks (url, state, owner, queue, updated_at)"
                            " SELECT %s, 'succeeded', 'postgres', 'q' || (g %% 5),"
                            "        now() - interval '1 hour'"
                            "   FROM generate_series(1, 100000) g", (url,))
                cur.execute("RESET session_replication_role")
                cur.execute("ANALYZE jobflow.tasks")
        time.sleep(1.1)     # figures read less than a second ago are shown again
        seq, indexes, plans = scrape(fresh)
        assert seq == 0, "%s table: metrics() read jobflow.tasks sequentially" % size
        assert {"tasks_pending_run_at", "tasks_failed_queue"} <= indexes, (size, indexes)
        if plans is not None:
            text = "\n".join(plans)
            print("plan of the queues' figures (%s table):\n%s" % (size, text))
            assert "Seq Scan on tasks" not in text, text
            assert "tasks_pending_run_at" in text and "tasks_failed_queue" in text, text
    # and the figures are right: 20 pending, none failed
    assert sum(series(fresh, "jobflow_queue_pending").values()) == 20


def test_queue_series_are_capped_and_escaped(fresh, receiver, tenant):
    """Queue names are the tenants' to choose: 150 queues make 100 series
    per family (the worst first) and jobflow_queues says 150; a name with
    quotes and a backslash comes out escaped, so the scrape
    still parses."""
    url, _ = receiver.unique_url("/ok")
    weird = 'we"ird\\q'
    as_role(fresh, tenant, "SELECT jobflow.pause_queue(%s)", (weird,))
    as_role(fresh, tenant, "SELECT jobflow.schedule(%s, run_at => now() - interval '1 minute',"
                           " queue => %s)", (url, weird))
    as_role(fresh, tenant, "SELECT count(jobflow.schedule(%s, run_at => now() + interval '1 day',"
                           " queue => 'q' || g)) FROM generate_series(1, 149) g", (url,))
    pending = queue_series(fresh, "jobflow_queue_pending", tenant)
    assert len(pending) == 100, len(pending)
    # the overdue one is the worst: it is shown, with its name intact
    assert pending.get(weird) == 1, sorted(pending)[:5]
    assert series(fresh, "jobflow_queues") == {(): 150}


def test_worker_turns_and_prune_figure(db, server):
    """Each running worker publishes when its loop last turned: recent,
    and moving even with nothing to do and jobflow.dispatch = off (a stuck
    worker is one whose figure stops); pruning that keeps up is 0 behind."""
    def turns():
        return {dict(k)["worker"]: v for k, v in
                series(db, "jobflow_worker_last_turn_timestamp_seconds").items()}

    first = turns()
    assert set(first) == {"0"}, first
    assert abs(first["0"] - time.time()) < 10, first
    server.set_guc(db, "jobflow.dispatch", "off")
    try:
        deadline = time.time() + 12
        while time.time() < deadline and turns().get("0", 0) <= first["0"]:
            time.sleep(0.2)
        assert turns().get("0", 0) > first["0"], "the worker's last turn did not move"
    finally:
        server.set_guc(db, "jobflow.dispatch", None)
    assert series(db, "jobflow_prune_behind_seconds") == {(): 0}


def test_prune_behind_while_a_backlog_lasts(db, receiver, server):
    """With batches of 2 and 3,000 cancelled tasks past a 1 s retention,
    pruning has a backlog for a while: jobflow_prune_behind_seconds grows
    while it lasts; retention turned off meanwhile, nothing is behind (0 at
    once, not the age of a backlog nobody prunes); turned on again (batches
    of 100), it is 0 once the backlog is gone."""
    url, _ = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("SET session_replication_role = replica")
        # finished now, not long ago: the pruner goes on from where its last
        # batch stopped (an earlier test's), and would pass older ones over
        cur.execute("INSERT INTO jobflow.tasks (url, state, owner, updated_at)"
                    " SELECT %s, 'cancelled', 'postgres', now()"
                    "   FROM generate_series(1, 3000) RETURNING id", (url,))
        old = [r[0] for r in cur.fetchall()]
        cur.execute("RESET session_replication_role")
        cur.execute("ANALYZE jobflow.tasks")
    server.set_guc(db, "jobflow.prune_batch_size", 2)
    server.set_guc(db, "jobflow.reconcile_interval", "500ms")

    def behind():
        return series(db, "jobflow_prune_behind_seconds")[()]

    def left():
        return one(db, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)", (old,))

    seen, off, after = [], [], []
    drained = False
    try:
        server.set_guc(db, "jobflow.retention", "1s")
        deadline = time.time() + 30
        while time.time() < deadline and (not seen or seen[-1] <= 0.5) and left() > 0:
            seen.append(behind())
            time.sleep(0.1)
        server.set_guc(db, "jobflow.retention", 0)       # off: nothing is pruned
        deadline = time.time() + 5
        while time.time() < deadline and (not off or off[-1] != 0):
            off.append(behind())
            time.sleep(0.1)
        # back on, in batches of the default size: everything the suite
        # finished before (thousands of tasks) goes too, in well under 60 s
        server.set_guc(db, "jobflow.prune_batch_size", None)
        server.set_guc(db, "jobflow.retention", "1s")
        deadline = time.time() + 60
        while time.time() < deadline:
            after.append(behind())
            drained = left() == 0
            if drained and after[-1] == 0:
                break
            time.sleep(0.2)
    finally:
        server.set_guc(db, "jobflow.retention", None)
        server.set_guc(db, "jobflow.prune_batch_size", None)
        server.set_guc(db, "jobflow.reconcile_interval", None)
        with db.cursor() as cur:
            cur.execute("DELETE FROM jobflow.tasks WHERE id = ANY(%s)", (old,))
    assert max(seen) > 0.5, seen
    assert off[-1] == 0, off
    assert drained and after[-1] == 0, after[-10:]


def test_worker_waiting_for_an_update_is_shown(databases):
    """A database still at 0.2.0 under this library: its worker waits for
    ALTER EXTENSION UPDATE, and says so in jobflow_worker_held{reason=
    "update"} (0.2.0's metrics() is the library's); after the update it
    is 0 and the worker serves.  The update keeps a site's grant on
    jobflow.stats and its view over it."""
    name, conn = databases(extension=False)
    skip_unless_older_versions_install(conn)
    reader = "jf_reader_%s" % uuid.uuid4().hex[:8]
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow VERSION '0.2.0'")
        # a site's own grant on the view, and its own view over it
        cur.execute("CREATE ROLE %s IN ROLE jobflow_monitor" % reader)
        cur.execute("CREATE VIEW public.my_figures AS SELECT metric, value FROM jobflow.stats")
        cur.execute("GRANT SELECT ON jobflow.stats TO %s" % reader)

    def update_held():
        return series(conn, "jobflow_worker_held").get((("reason", "update"),))

    deadline = time.time() + 15
    while time.time() < deadline and update_held() != 1:
        time.sleep(0.2)
    assert update_held() == 1
    # 0.2.0's stats view (four columns) still reads
    assert one(conn, "SELECT count(*) FROM jobflow.stats WHERE metric = 'worker_held'") > 0
    # and explain() (0.3.0's, made here by hand from the library) says so
    with conn.cursor() as cur:
        cur.execute("CREATE FUNCTION jobflow.explain(id bigint)"
                    " RETURNS TABLE (reason text, explanation text)"
                    " AS '$libdir/jobflow', 'jobflow_explain' LANGUAGE C")
        try:
            cur.execute("SELECT jobflow.schedule('http://127.0.0.1:9/x')")
            task = cur.fetchone()[0]
            cur.execute("SELECT reason, explanation FROM jobflow.explain(%s)", (task,))
            reasons = dict(cur.fetchall())
        finally:
            cur.execute("DROP FUNCTION jobflow.explain(bigint)")
    assert "ALTER EXTENSION jobflow UPDATE" in reasons.get("update", ""), reasons
    with conn.cursor() as cur:
        cur.execute("ALTER EXTENSION jobflow UPDATE")
    deadline = time.time() + 15
    while time.time() < deadline and update_held() != 0:
        time.sleep(0.2)
    assert update_held() == 0
    assert one(conn, "SELECT held FROM jobflow.worker_status()") is None
    # the update kept them, and the view has its new column
    try:
        assert one(conn, "SELECT count(*) FROM public.my_figures WHERE metric = 'fired_total'") == 1
        assert one(conn, "SELECT has_table_privilege(%s, 'jobflow.stats', 'SELECT')", (reader,))
        assert one(conn, "SELECT label_set FROM jobflow.stats WHERE metric = 'outcomes_total'"
                         " AND labels = 'class=\"5xx\"'") == {"class": "5xx"}
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP VIEW public.my_figures")
            cur.execute("REVOKE ALL ON jobflow.stats FROM %s" % reader)
            cur.execute("DROP ROLE %s" % reader)
