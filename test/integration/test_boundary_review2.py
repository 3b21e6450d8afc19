# -------------------------------------------------------------------------
#
# test_boundary_review2.py
#     A second review of the fixes of issue 20 (the tenant boundary), as a
#     role without grants, a tenant, a receiver and a database owner would
#     try them.  Each test fails on the code reviewed (main at adf7675):
#       - ALTER FUNCTION <own function> DEPENDS ON EXTENSION jobflow, which
#         PostgreSQL allows to the function's owner (a pg_temp function:
#         any role that may connect), holds an AccessExclusiveLock on the
#         extension until its transaction ends: every worker transaction
#         locks the extension first (guard.c, jf_guard_check_incarnation)
#         and times out, so nothing of the database fires (items 2, 10)
#       - a worker that starts while that lock is held retries its start
#         for ever and never looks at SIGTERM (worker.c, start_serving /
#         recover_from_error): pg_terminate_backend, and pg_ctl stop -m
#         fast with the lock held by a prepared transaction, hang (item 10)
#       - a queue resumed by a prepared transaction whose wake-up was not
#         kept (a server restart between PREPARE and COMMIT PREPARED; all
#         JF_PREPARED_MAX entries taken) is never read again: the worker
#         has no periodic read of jobflow.queues, and its tasks never fire
#         (prepared.c, queues.c; item 6)
#       - COMMIT PREPARED of a transaction that changed one queue has the
#         worker read every queue of every tenant (prepared.c keeps no
#         keys; item 6)
#       - a response excerpt cut at jobflow.max_response_size keeps a
#         header secret's prefix: masking matches whole values only
#         (dispatch.c, mask_secrets; item 5)
#       - DROP EXTENSION jobflow by a role without any grant tells it how
#         many tasks and timers every tenant has: the hook counts before
#         PostgreSQL checks ownership (guard.c, check_drop_extension)
#       - default privileges granted to jobflow_user (or another jobflow
#         role) survive CREATE EXTENSION: every tenant may TRUNCATE the
#         tasks, setval() the sequences (the worker then pauses) and grant
#         all that further (privileges section of jobflow--0.2.0--0.3.0.sql)
#       - exit_on_error = on, set by the database's owner, turns every
#         error the worker recovers from into its exit (compat.c,
#         jf_pin_session_settings; item 10)
#
# -------------------------------------------------------------------------

import time
import uuid

import psycopg2
import pytest

from conftest import call, query, schedule, settle, stat, wait_final


def worker_pids(conn):
    """The pids of the jobflow workers of conn's database (pg_stat_activity:
    a worker that cannot start has no horizon in worker_status())."""
    return [r["pid"] for r in query(conn, "SELECT pid FROM pg_stat_activity"
                                          " WHERE backend_type = 'jobflow worker'"
                                          "   AND datname = current_database()")]


def wait_new_worker(conn, other_than=None, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = [p for p in worker_pids(conn) if p != other_than]
        if pids:
            return pids[0]
        time.sleep(0.1)
    pytest.fail("no jobflow worker (other than %s) after %d s" % (other_than, timeout))


@pytest.fixture
def grantless(databases):
    """A LOGIN role without any grant: it may connect (CONNECT and TEMP are
    PUBLIC's) and nothing else."""
    name = "nogrant_" + uuid.uuid4().hex[:8]
    with databases.admin.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN" % name)
    yield name
    with databases.admin.cursor() as cur:
        cur.execute("DROP ROLE IF EXISTS %s" % name)


def hold_extension_lock(connect, dbname, role):
    """A session of role that holds an AccessExclusiveLock on extension
    jobflow, with no privilege on it: the transaction stays open."""
    holder = connect(autocommit=False, dbname=dbname, user=role)
    with holder.cursor() as cur:
        cur.execute("CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        cur.execute("ALTER FUNCTION pg_temp.f() DEPENDS ON EXTENSION jobflow")
    return holder


# ---- the extension's lock --------------------------------------------------

def test_a_role_without_grants_cannot_stall_the_worker(databases, connect, grantless,
                                                       receiver):
    name, conn = databases()
    wait_new_worker(conn)
    holder = hold_extension_lock(connect, name, grantless)
    try:
        url, _ = receiver.unique_url("/ok")
        task = schedule(conn, url)
        assert wait_final(conn, task, timeout=20) == "succeeded"
    finally:
        holder.rollback()


def test_sigterm_ends_a_worker_that_cannot_start(databases, connect, grantless):
    name, conn = databases()
    first = wait_new_worker(conn)
    holder = hold_extension_lock(connect, name, grantless)
    try:
        call(conn, "SELECT pg_terminate_backend(%s)", (first,))
        starting = wait_new_worker(conn, other_than=first)
        time.sleep(3)       # it meets the lock, times out, tries again
        call(conn, "SELECT pg_terminate_backend(%s)", (starting,))
        deadline = time.time() + 15
        while starting in worker_pids(conn) and time.time() < deadline:
            time.sleep(0.2)
        assert starting not in worker_pids(conn), \
            "the worker ignored SIGTERM for 15 s while it could not start"
    finally:
        holder.rollback()


# ---- prepared transactions and the queues ----------------------------------

def test_queue_resumed_by_a_prepared_transaction_after_a_restart(server, connect,
                                                                 receiver):
    """A transaction manager commits what it prepared once the server is back
    (the very case two-phase commit is for): the queue the transaction
    resumed must fire its tasks."""
    role = "app_" + uuid.uuid4().hex[:10]
    gid = "review2-" + role
    admin = connect()
    call(admin, "CREATE ROLE %s LOGIN" % role)
    call(admin, "GRANT jobflow_user TO %s" % role)
    task = None
    try:
        tenant = connect(user=role)
        call(tenant, "SELECT jobflow.pause_queue('held')")
        url, _ = receiver.unique_url("/ok")
        task = schedule(tenant, url, queue="held")
        time.sleep(1.5)
        assert call(admin, "SELECT state::text FROM jobflow.tasks WHERE id = %s",
                    (task,)) == "pending"
        tx = connect(autocommit=False, user=role)
        call(tx, "SELECT jobflow.resume_queue('held')")
        call(tx, "PREPARE TRANSACTION %s", (gid,))
        tx.commit()
        old = server.worker_pid(admin)
        server.restart()
        server.wait_worker(old_pid=old)
        admin = connect()
        call(admin, "COMMIT PREPARED %s", (gid,))
        assert wait_final(admin, task, timeout=30) == "succeeded"
    finally:
        admin = connect()
        if call(admin, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = %s", (gid,)):
            call(admin, "ROLLBACK PREPARED %s", (gid,))
        if task is not None:
            call(admin, "DELETE FROM jobflow.task_log WHERE task_id = %s", (task,))
            call(admin, "DELETE FROM jobflow.tasks WHERE id = %s", (task,))
        call(admin, "DROP ROLE %s" % role)


def test_commit_prepared_reads_only_the_queue_it_changed(db, connect, new_role):
    """Other tenants have 200 configured queues; one prepared transaction
    that pauses one queue costs a read of that row, as its plain commit
    would."""
    other = connect()
    call(other, "SET ROLE %s" % new_role())
    call(other, "SELECT count(jobflow.set_queue('q' || g, priority => 1))"
                "  FROM generate_series(1, 200) g")
    role = new_role()
    settle(db, "queue_rows_read_total")
    rows = stat(db, "queue_rows_read_total")
    gid = "review2-" + role
    tx = connect(autocommit=False, user=role)
    call(tx, "SELECT jobflow.pause_queue('one')")
    call(tx, "PREPARE TRANSACTION %s", (gid,))
    tx.commit()
    call(db, "COMMIT PREPARED %s", (gid,))
    read = settle(db, "queue_rows_read_total") - rows
    assert 1 <= read <= 10, "COMMIT PREPARED of one queue read %d rows" % read


# ---- secrets in the log ----------------------------------------------------

def test_a_cut_excerpt_keeps_no_prefix_of_a_secret(db, connect, app_role, receiver):
    """A receiver that echoes the request's headers: the owner (or
    jobflow_admin) pads the request with a header of its own so that the
    excerpt ends inside the secret's value."""
    secret = "S3cr3tV4lue-" + uuid.uuid4().hex
    tenant = connect(user=app_role)
    origin = receiver.url("")
    call(tenant, "SELECT jobflow.set_secret('tok', %s, origins => ARRAY[%s])",
         (secret, origin))
    limit = call(db, "SELECT pg_size_bytes(current_setting('jobflow.max_response_size'))")
    url, _ = receiver.unique_url("/echo_headers")

    def excerpt(pad):
        task = schedule(tenant, url, headers={"X-Tok": {"secret": "tok"}, "X-A": "p" * pad})
        assert wait_final(tenant, task, timeout=20) == "succeeded"
        return call(tenant, "SELECT response FROM jobflow.task_log WHERE task_id = %s",
                    (task,))

    probe = excerpt(100)
    start = probe.index("X-Tok: ") + len("X-Tok: ")
    assert secret not in probe
    # the cut falls right before the value's last character
    cut = excerpt(100 + limit - (len(secret) - 1) - start)
    assert len(cut) == limit
    assert secret[:16] not in cut, "the log shows the secret's first %d characters" \
        % (len(cut) - cut.rindex("X-Tok: ") - len("X-Tok: "))


# ---- what a role without grants learns -------------------------------------

def test_drop_extension_tells_a_role_without_grants_nothing(connect, app_role, grantless):
    tenant = connect(user=app_role)
    task = call(tenant, "SELECT jobflow.schedule('http://127.0.0.1:9/x',"
                        " run_at => now() + interval '1 day')")
    try:
        stranger = connect(user=grantless)
        for sql in ("DROP EXTENSION jobflow", "DROP EXTENSION jobflow CASCADE"):
            stranger.notices.clear()
            with pytest.raises(psycopg2.Error) as e:
                call(stranger, sql)
            said = str(e.value) + " ".join(stranger.notices)
            assert e.value.pgcode == "42501", said
            assert "task" not in said, said
    finally:
        call(tenant, "SELECT jobflow.cancel(%s)", (task,))


# ---- privileges ------------------------------------------------------------

def test_default_privileges_of_jobflow_roles_are_not_taken(databases):
    name, conn = databases(extension=False)
    call(conn, "ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO jobflow_user"
               " WITH GRANT OPTION")
    call(conn, "ALTER DEFAULT PRIVILEGES GRANT ALL ON SEQUENCES TO jobflow_user")
    call(conn, "ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO jobflow_monitor")
    try:
        call(conn, "CREATE EXTENSION jobflow")
    except psycopg2.Error as e:
        # refused, naming what to revoke: fine
        assert e.pgcode == "42501" and "default privileges" in str(e), e
        return
    extra = query(conn, """
        SELECT c.relname, a.privilege_type, a.is_grantable, a.grantee::regrole::text AS grantee
          FROM pg_class c, aclexplode(c.relacl) a
         WHERE c.relnamespace = 'jobflow'::regnamespace
           AND a.grantee IN ('jobflow_user'::regrole, 'jobflow_monitor'::regrole)
           AND (a.is_grantable
                OR a.privilege_type IN ('TRUNCATE', 'DELETE', 'TRIGGER', 'REFERENCES', 'MAINTAIN')
                OR (c.relkind = 'S' AND a.privilege_type = 'UPDATE')
                OR c.relname IN ('secrets', 'signing_secrets', 'outcome_key'))
         ORDER BY 1, 2""")
    assert extra == []


# ---- the worker's own session ----------------------------------------------

def test_exit_on_error_of_the_database_does_not_end_the_worker(databases, connect):
    """The database's owner sets exit_on_error; an administrator's DDL
    holds jobflow.tasks for a few seconds, which the worker waits out (its
    lock_timeout, then the turn again) instead of exiting."""
    name, conn = databases()
    owner = "dbowner_" + uuid.uuid4().hex[:8]
    call(databases.admin, "CREATE ROLE %s LOGIN" % owner)
    try:
        call(databases.admin, "ALTER DATABASE %s OWNER TO %s" % (name, owner))
        as_owner = connect(dbname=name, user=owner)
        call(as_owner, "ALTER DATABASE %s SET exit_on_error = on" % name)
        as_owner.close()
        first = wait_new_worker(conn)
        call(conn, "SELECT pg_terminate_backend(%s)", (first,))
        worker = wait_new_worker(conn, other_than=first)
        time.sleep(2)
        ddl = connect(autocommit=False, dbname=name)
        call(ddl, "LOCK TABLE jobflow.tasks IN ACCESS EXCLUSIVE MODE")
        time.sleep(4)
        ddl.rollback()
        time.sleep(1)
        assert worker_pids(conn) == [worker], "the worker exited (exit_on_error)"
    finally:
        call(databases.admin, "ALTER DATABASE %s OWNER TO postgres" % name)
        call(databases.admin, "ALTER DATABASE %s RESET exit_on_error" % name)
        call(databases.admin, "DROP ROLE %s" % owner)
