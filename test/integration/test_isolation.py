# -------------------------------------------------------------------------
#
# test_isolation.py
#     No endpoint, tenant or backlog delays anyone else's callbacks
#     (issue 8): slow host:ports of another tenant and of the same one,
#     one slow host with 20,000 due tasks, a 200,000-task overdue backlog,
#     a tenant's locks on every jobflow relation it can lock, and wake-ups
#     forged by a role with no grants.
#
# Slow endpoints are "black holes": sockets on 127.0.0.1 that listen and
# never accept, so every request sent there waits for its timeout.  The
# victim is another role (or the same one) sending to the fast receiver;
# its callbacks must arrive within LATE_S of their run_at (generous: the
# exact figures are in bench/isolation.sh).
#
# -------------------------------------------------------------------------

import contextlib
import socket
import threading
import time
import uuid

import pytest

from conftest import query, wait_final

LATE_S = 2.0

# every test here measures lateness (see starved.py)
pytestmark = pytest.mark.timing


class BlackHoles:
    """n listening sockets on 127.0.0.1 that never accept."""

    def __init__(self, n):
        self.socks = []
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.listen(4096)
            self.socks.append(s)

    def urls(self):
        return ["http://127.0.0.1:%d/slow" % s.getsockname()[1] for s in self.socks]

    def close(self):
        for s in self.socks:
            s.close()


@pytest.fixture
def roles(new_role):
    """Two fresh application roles: (tenant, victim)."""
    return [new_role(), new_role()]


def flood(conn, role, urls, per_url, timeout_ms=60000, due="now()"):
    """As role, schedule per_url tasks to each url, all due at once."""
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        cur.execute("INSERT INTO jobflow.tasks (url, run_at, timeout_ms, max_attempts)"
                    " SELECT u, " + due + ", %s, 1"
                    "   FROM unnest(%s::text[]) u, generate_series(1, %s)",
                    (timeout_ms, urls, per_url))
        cur.execute("RESET ROLE")


def victim_lateness(conn, receiver, role, n=15, gap=0.2):
    """As role, schedule n callbacks to the fast receiver, gap s apart and
    starting 0.5 s from now, one transaction each; wait for them; return
    how late each arrived (s)."""
    url, tag = receiver.unique_url("/ok")
    due = []
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        start = time.time() + 0.5
        for i in range(n):
            cur.execute("SELECT jobflow.schedule(%s, run_at => to_timestamp(%s)) AS id",
                        (url + "&i=%d" % i, start + i * gap))
            due.append(start + i * gap)
        cur.execute("RESET ROLE")
    got = receiver.wait_for(lambda r: ("t=" + tag) in r["query"], n=n,
                            timeout=start + n * gap + 30 - time.time())
    late = []
    for r in got:
        i = int(r["query"].split("i=")[1].split("&")[0])
        late.append(r["time"] - due[i])
    assert min(late) >= -0.001, "fired early: %s" % late
    return late


def assert_on_time(late, what):
    assert max(late) <= LATE_S, "%s: victim callbacks up to %.2f s late: %s" % (
        what, max(late), ["%.3f" % x for x in sorted(late)])


@pytest.mark.parametrize("same_tenant", [False, True], ids=["other-tenant", "same-tenant"])
def test_slow_host_ports_leave_room(connect, receiver, roles, same_tenant):
    """(a), (b): 10 black-hole host:ports, 1,000 tasks, timeout 60 s."""
    tenant, victim = roles
    holes = BlackHoles(10)
    conn = connect()
    try:
        flood(conn, tenant, holes.urls(), 100)
        time.sleep(1.0)     # let them take every place they can
        late = victim_lateness(conn, receiver, tenant if same_tenant else victim)
        assert_on_time(late, "10 slow host:ports")
    finally:
        holes.close()


def test_slow_paths_of_a_shared_origin(connect, second_receiver, roles):
    """Two tenants call the same receiver (one origin); one tenant's
    requests there take 20 s each and would fill the origin's 64 places:
    the other tenant's callbacks to that receiver still go out on time."""
    tenant, victim = roles
    conn = connect()
    flood(conn, tenant, [second_receiver.url("/delay/20000")], 200, timeout_ms=30000)
    time.sleep(1.0)
    late = victim_lateness(conn, second_receiver, victim)
    assert_on_time(late, "a shared origin")
    with conn.cursor() as cur:
        cur.execute("UPDATE jobflow.tasks SET state = 'cancelled' WHERE state = 'pending'"
                    " AND owner::text = %s", (tenant,))


def test_many_slow_ports_one_tenant_capped(connect, receiver, roles):
    """30 black-hole ports of one tenant, 64 requests each would take 1,920
    places; the tenant is held to jobflow.max_requests_per_owner and the
    other tenant's callbacks go through."""
    tenant, victim = roles
    holes = BlackHoles(30)
    conn = connect()
    try:
        flood(conn, tenant, holes.urls(), 80)
        time.sleep(1.5)
        late = victim_lateness(conn, receiver, victim)
        assert_on_time(late, "30 slow ports")
        st = query(conn, "SELECT in_flight FROM jobflow.worker_status()")[0]
        owner_cap = int(query(conn, "SHOW jobflow.max_requests_per_owner")[0]
                        ["jobflow.max_requests_per_owner"])
        assert st["in_flight"] <= owner_cap + 64, st
    finally:
        holes.close()


def test_one_slow_host_many_due(connect, receiver, roles):
    """(c): one black-hole host with 20,000 due tasks: they wait parked,
    unclaimed (still pending), and cost the victim nothing."""
    tenant, victim = roles
    holes = BlackHoles(1)
    conn = connect()
    try:
        flood(conn, tenant, holes.urls(), 20000, timeout_ms=30000)
        time.sleep(1.0)
        late = victim_lateness(conn, receiver, victim)
        assert_on_time(late, "one slow host, 20,000 due")
        running = query(conn, "SELECT count(*) AS n FROM jobflow.tasks"
                              " WHERE state = 'running' AND owner::text = %s", (tenant,))[0]["n"]
        per_host = int(query(conn, "SHOW jobflow.max_requests_per_host")[0]
                       ["jobflow.max_requests_per_host"])
        assert running <= per_host, "claimed %d tasks for a host that answers none" % running
    finally:
        holes.close()


def test_overdue_backlog_other_hosts_on_time(connect, receiver, second_receiver, roles):
    """(d): 200,000 overdue tasks to one (answering, 200 ms a request) host
    drain while the victim's callbacks to another host arrive on time."""
    tenant, victim = roles
    conn = connect()
    backlog_url = second_receiver.url("/delay/200")
    flood(conn, tenant, [backlog_url], 200000, timeout_ms=30000,
          due="now() - interval '1 hour'")
    try:
        late = victim_lateness(conn, receiver, victim, n=20)
        assert_on_time(late, "200,000-task backlog")
        left = query(conn, "SELECT count(*) AS n FROM jobflow.tasks WHERE state = 'pending'"
                           " AND owner::text = %s", (tenant,))[0]["n"]
        assert left > 0, "the backlog drained before the victim was measured"
    finally:
        with conn.cursor() as cur:
            cur.execute("UPDATE jobflow.tasks SET state = 'cancelled' WHERE state = 'pending'"
                        " AND owner::text = %s", (tenant,))


def lockable_relations(conn):
    return [r["rel"] for r in query(conn,
            "SELECT format('%I.%I', n.nspname, c.relname) AS rel"
            "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'jobflow' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
            " ORDER BY 1")]


MODES = ["ACCESS EXCLUSIVE", "EXCLUSIVE", "SHARE ROW EXCLUSIVE", "SHARE",
         "SHARE UPDATE EXCLUSIVE", "ROW EXCLUSIVE", "ROW SHARE", "ACCESS SHARE"]


def test_tenant_locks_stall_nobody(connect, receiver, roles):
    """(e): a tenant holds the strongest lock it can get on every jobflow
    relation, plus row locks on its own pending task and timer, in an open
    transaction; another tenant's callbacks and cron timer go on."""
    tenant, victim = roles
    admin = connect()
    rels = lockable_relations(admin)
    assert "jobflow.cron_timers" in rels and "jobflow.tasks" in rels
    with admin.cursor() as cur:
        cur.execute("SET ROLE %s" % tenant)
        cur.execute("SELECT jobflow.schedule_cron('mine', 'every 1 seconds', %s)",
                    (receiver.url("/ok"),))
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '1 hour')",
                    (receiver.url("/ok"),))
        cur.execute("RESET ROLE")
    url, tag = receiver.unique_url("/ok")
    with admin.cursor() as cur:
        cur.execute("SET ROLE %s" % victim)
        cur.execute("SELECT jobflow.schedule_cron('victim', 'every 1 seconds', %s)", (url,))
        cur.execute("RESET ROLE")

    locker = connect(autocommit=False)
    held = {}
    with locker.cursor() as cur:
        cur.execute("SET ROLE %s" % tenant)
        for rel in rels:
            for mode in MODES:
                cur.execute("SAVEPOINT s")
                try:
                    cur.execute("LOCK TABLE %s IN %s MODE" % (rel, mode))
                    held[rel] = mode
                    cur.execute("RELEASE SAVEPOINT s")
                    break
                except Exception:
                    cur.execute("ROLLBACK TO SAVEPOINT s")
        cur.execute("SELECT id FROM jobflow.tasks FOR UPDATE")
        cur.execute("SELECT id FROM jobflow.cron_timers FOR UPDATE")
    try:
        # no grant lets it take a lock that conflicts with the worker's
        # writes (ROW EXCLUSIVE): INSERT into jobflow.task_import gives
        # ROW EXCLUSIVE at most, which conflicts with none of them
        weak = ("ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE")
        assert all(m in weak for m in held.values()), held
        assert held["jobflow.cron_timers"] == "ACCESS SHARE", held
        late = victim_lateness(admin, receiver, victim, n=15)
        assert_on_time(late, "tenant locks on %s" % held)
        # the victim's timer fires every second meanwhile
        since = time.time()
        time.sleep(4)
        fired = receiver.requests(lambda r: ("t=" + tag) in r["query"] and r["time"] >= since)
        assert len(fired) >= 3, "victim's cron timer fired %d times in 4 s" % len(fired)
    finally:
        locker.rollback()
        locker.close()


@contextlib.contextmanager
def running_tasks_locked_by(connect, admin, tenant, receiver, url, n=8):
    """No grant lets a tenant lock a running task, but an UPDATE that met
    the row while it was pending locks it anyway: PostgreSQL locks the new
    version, a running task, to recheck it, and the lock stays until the
    tenant's transaction ends.  Schedules n tasks of tenant to url, due in
    2 s, makes an open transaction of the tenant lock each once it is
    running, and yields their ids while the locks are held."""
    with admin.cursor() as cur:
        cur.execute("SET ROLE %s" % tenant)
        # first by id and by run_at, whichever way the UPDATE goes
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '1 s') AS id",
                    (receiver.url("/ok"),))
        first = cur.fetchone()[0]
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '2 s')"
                    "  FROM generate_series(1, %s)", (url, n))
        ids = [r[0] for r in cur.fetchall()]
        cur.execute("RESET ROLE")
    # the tenant's UPDATE of them all waits behind a lock on the first ...
    blocker = connect(autocommit=False)
    updater = connect(autocommit=False)
    with blocker.cursor() as cur:
        cur.execute("SET ROLE %s" % tenant)
        cur.execute("SELECT id FROM jobflow.tasks WHERE id = %s FOR UPDATE", (first,))
    done = threading.Event()

    def update():
        with updater.cursor() as cur:
            cur.execute("SET ROLE %s" % tenant)
            cur.execute("UPDATE jobflow.tasks SET run_at = run_at WHERE id = ANY(%s)",
                        ([first] + ids,))
        done.set()
    thread = threading.Thread(target=update, daemon=True)
    thread.start()
    try:
        # ... while the others are claimed and sent
        deadline = time.time() + 10
        while query(admin, "SELECT count(*) AS n FROM jobflow.tasks"
                    " WHERE id = ANY(%s) AND state = 'running'", (ids,))[0]["n"] < n:
            assert time.time() < deadline, "the tenant's tasks never all ran"
            time.sleep(0.05)
        blocker.commit()
        assert done.wait(10), "the tenant's UPDATE never went on"
        unlocked = query(admin, "SELECT count(*) AS n FROM jobflow.tasks t,"
                         " LATERAL (SELECT 1 FROM jobflow.tasks x WHERE x.id = t.id"
                         "          FOR UPDATE SKIP LOCKED) l"
                         " WHERE t.id = ANY(%s)", (ids,))
        assert unlocked[0]["n"] == 0, "the tenant holds a lock on each running task"
        yield ids
    finally:
        blocker.rollback()
        thread.join(10)
        updater.rollback()
        updater.close()
        blocker.close()


def test_tenant_row_locks_on_running_tasks_stall_nobody(connect, receiver, roles):
    """The worker's write of outcomes of tasks a tenant holds locked (see
    running_tasks_locked_by) used to wait for the locks until lock_timeout
    (1 s for the batch, 1 s more for each locked row, one by one) while
    nothing fired for anyone, and those outcomes were then lost and the
    tasks sent again.  Now they wait in the buffer and are written once the
    locks go."""
    tenant, victim = roles
    admin = connect()
    url, tag = receiver.unique_url("/delay/1500")
    with running_tasks_locked_by(connect, admin, tenant, receiver, url) as ids:
        # their replies come 1.5 s after they were sent, within this
        late = victim_lateness(admin, receiver, victim, n=15)
        assert_on_time(late, "a tenant's row locks on its running tasks")
        assert len(receiver.tagged(tag)) == 8
        # still running: their outcomes wait for the locks
        rows = query(admin, "SELECT state::text AS state FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
        assert {r["state"] for r in rows} == {"running"}
    states = wait_final(admin, ids, timeout=20)
    assert set(states.values()) == {"succeeded"}, states
    # each was sent once: no outcome was lost to the locks
    time.sleep(1)
    assert len(receiver.tagged(tag)) == 8
    logged = query(admin, "SELECT count(*) AS n FROM jobflow.task_log"
                   " WHERE task_id = ANY(%s) AND outcome = 'succeeded'", (ids,))
    assert logged[0]["n"] == 8


def test_tenant_row_locks_on_running_tasks_stall_no_restart(connect, receiver, roles, server):
    """A worker starting puts back the running tasks the last one left.
    It used to wait for a tenant's lock on one of them until lock_timeout,
    fail, and start over, serving nobody for as long as the lock stayed.
    Locked tasks are skipped, and put back once the lock is gone."""
    tenant, victim = roles
    admin = connect()
    url, tag = receiver.unique_url("/delay/1500")
    with running_tasks_locked_by(connect, admin, tenant, receiver, url) as ids:
        old_pid = server.worker_pid(admin)
        with admin.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", (old_pid,))
        server.wait_worker(old_pid)
        late = victim_lateness(admin, receiver, victim, n=15)
        assert_on_time(late, "a tenant's row locks on running tasks at start")
        # the new worker could not put them back yet
        rows = query(admin, "SELECT state::text AS state FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
        assert {r["state"] for r in rows} == {"running"}
    # once the locks are gone: interrupted, sent again, succeeded
    states = wait_final(admin, ids, timeout=20)
    assert set(states.values()) == {"succeeded"}, states
    logged = query(admin, "SELECT outcome::text AS outcome, count(*) AS n FROM jobflow.task_log"
                   " WHERE task_id = ANY(%s) GROUP BY 1", (ids,))
    assert {r["outcome"]: r["n"] for r in logged} == {"interrupted": 8, "succeeded": 8}


def test_unschedule_without_delete_grant(connect, receiver, roles):
    """Tenants delete timers through unschedule_cron(), never the table."""
    tenant, victim = roles
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % tenant)
        cur.execute("SELECT jobflow.schedule_cron('gone', '0 0 * * *', %s)", (receiver.url("/ok"),))
        with pytest.raises(Exception) as exc:
            cur.execute("DELETE FROM jobflow.cron_timers WHERE name = 'gone'")
        assert exc.value.pgcode == "42501"
        cur.execute("SET ROLE %s" % victim)
        cur.execute("SELECT jobflow._delete_cron_timer(id) AS ok FROM jobflow.cron_timers")
        assert cur.fetchall() == []        # row-level security: sees none of them
        cur.execute("SET ROLE %s" % tenant)
        cur.execute("SELECT jobflow.unschedule_cron('gone') AS ok")
        assert cur.fetchone()[0] is True
        cur.execute("SELECT count(*) FROM jobflow.cron_timers WHERE name = 'gone'")
        assert cur.fetchone()[0] == 0
        cur.execute("RESET ROLE")


def test_forged_wakeups_cost_no_statements(connect, db):
    """Item 5: a role with no jobflow grant sends thousands of NOTIFY
    jobflow with payloads that look like id ranges and timer changes: the
    worker runs no statement for them."""
    stranger = "jf_stranger_%s" % uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s" % stranger)
    conn = connect()
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % stranger)

    def statements():
        return query(db, "SELECT statements FROM jobflow.worker_status()")[0]["statements"]

    # what the worker does anyway meanwhile (housekeeping), over a quiet
    # stretch first, once earlier tests' requests and parked tasks are gone
    deadline = time.time() + 180
    while True:
        st = query(db, "SELECT in_flight, queued, buffered_rows FROM jobflow.worker_status()")[0]
        if st["in_flight"] == 0 and st["queued"] == 0 and st["buffered_rows"] == 0:
            break
        assert time.time() < deadline, "the worker never went idle: %s" % st
        time.sleep(0.5)
    base = statements()
    time.sleep(1.5)
    quiet = (statements() - base) / 1.5
    base = statements()
    start = time.time()
    with conn.cursor() as cur:
        for i in range(3000):
            cur.execute("SELECT pg_notify('jobflow', %s)",
                        ("cron" if i % 3 == 0 else "%d %d" % (i, i + 5),))
    time.sleep(1.0)
    spent = statements() - base
    elapsed = time.time() - start
    # 0.1.0 ran one or more statements per notification
    assert spent <= 2 * quiet * elapsed + 20, "%d statements in %.1f s (%.1f/s when quiet)" % (
        spent, elapsed, quiet)


def test_owner_functions_resolve_nothing_in_the_callers_schemas(connect, receiver, roles, db):
    """_delete_cron_timer, retry and retry_failed work as the table's owner
    after checking the caller: an operator the caller puts first in its
    search_path must never run with the owner's rights (nor widen what is
    deleted)."""
    tenant, victim = roles
    schema = "evil_" + tenant
    with db.cursor() as cur:
        cur.execute("CREATE SCHEMA %s AUTHORIZATION %s" % (schema, tenant))
    try:
        with db.cursor() as cur:
            cur.execute("SET ROLE %s" % victim)
            cur.execute("SELECT jobflow.schedule_cron('keep', '0 9 * * *', %s)", (receiver.url("/ok"),))
            cur.execute("SET ROLE %s" % tenant)
            cur.execute("""CREATE FUNCTION %s.eq(a bigint, b bigint) RETURNS boolean
                           LANGUAGE plpgsql AS $$
                           BEGIN
                             IF current_user <> '%s' THEN
                               EXECUTE 'ALTER ROLE %s SUPERUSER';
                             END IF;
                             RETURN true;
                           END $$""" % (schema, tenant, tenant))
            cur.execute("CREATE OPERATOR %s.= (LEFTARG = bigint, RIGHTARG = bigint,"
                        " FUNCTION = %s.eq)" % (schema, schema))
            cur.execute("SELECT jobflow.schedule_cron('mine', '0 9 * * *', %s)", (receiver.url("/ok"),))
            cur.execute("SET search_path = %s, pg_catalog" % schema)
            cur.execute("SELECT jobflow._delete_cron_timer(id) FROM jobflow.cron_timers"
                        " WHERE name = 'mine'")
            assert cur.fetchone()[0] is True
            # the other functions that act as the table's owner likewise
            cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '1 day')",
                        (receiver.url("/ok"),))
            task = cur.fetchone()[0]
            cur.execute("SELECT jobflow.cancel(%s)", (task,))
            cur.execute("SELECT jobflow.retry(%s, now() + interval '1 day')", (task,))
            assert cur.fetchone()[0] is True
            cur.execute("SELECT jobflow.retry_failed()")
            cur.execute("RESET search_path")
            cur.execute("RESET ROLE")
        assert query(db, "SELECT rolsuper FROM pg_roles WHERE rolname = %s",
                     (tenant,))[0]["rolsuper"] is False
        assert query(db, "SELECT count(*) AS n FROM jobflow.cron_timers WHERE name = 'keep'"
                         " AND owner::text = %s", (victim,))[0]["n"] == 1
    finally:
        with db.cursor() as cur:
            cur.execute("RESET ROLE")
            cur.execute("RESET search_path")
            cur.execute("DROP SCHEMA %s CASCADE" % schema)
