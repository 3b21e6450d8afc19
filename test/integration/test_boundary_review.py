# -------------------------------------------------------------------------
#
# test_boundary_review.py
#     A review of the fixes of issue 20 (the tenant boundary), as a hostile
#     tenant, a monitoring role and a CREATEROLE user would try them.  Each
#     test fails on the code reviewed (main at f85bae7):
#       - REASSIGN OWNED BY <tenant> TO jobflow_user makes jobflow_user own
#         the tenant's tasks and timers (guard.c, reassign_owned), and the
#         worker goes on materialising the timer as jobflow_user (item 4)
#       - what the update to 0.3.0 stopped of a shared role's (a cancelled
#         task, a paused timer) any tenant starts again: retry(), UPDATE
#         of the timer (item 4)
#       - a jobflow role made beforehand by a CREATEROLE user may own a
#         SECURITY DEFINER function of its maker's: CREATE EXTENSION takes
#         the role once its maker's ADMIN OPTION is revoked, and the maker
#         acts as jobflow_admin through the function (item 3)
#       - a member of pg_monitor (so of jobflow_monitor) reads a tenant's
#         outcome channel in pg_stat_activity, hears its outcomes and sends
#         notifications on it (item 9)
#       - ALTER DEFAULT PRIVILEGES of the role that installs gives a
#         reporting role SELECT on jobflow.secrets, signing_secrets and
#         outcome_key, none of which has row-level security (item 3)
#
# -------------------------------------------------------------------------

import uuid

import psycopg2
import pytest

from conftest import notifications, query, skip_unless_older_versions_install


def shared_rows(conn):
    """Unfinished tasks and active timers owned by jobflow_user."""
    return query(conn, "SELECT 'task' AS what, id FROM jobflow.tasks"
                       " WHERE owner = 'jobflow_user'::regrole AND state IN ('pending', 'running')"
                       " UNION ALL SELECT 'timer', id FROM jobflow.cron_timers"
                       " WHERE owner = 'jobflow_user'::regrole AND active")


# ---- item 4: REASSIGN OWNED -------------------------------------------------

def test_reassign_owned_to_jobflow_user_gives_it_nothing(connect, db, app_role):
    """A tenant has jobflow_user's privileges, which is all REASSIGN OWNED
    asks of the new owner: it moves the tenant's tasks and timers to the
    role every tenant holds, and the check that refuses such an owner at
    INSERT is never made."""
    assert shared_rows(db) == []
    tenant = connect(user=app_role)
    with tenant.cursor() as cur:
        cur.execute("SELECT jobflow.schedule('http://127.0.0.1:9/x', run_at => now() + interval '1 day')")
        task = cur.fetchone()[0]
        cur.execute("SELECT jobflow.schedule_cron('t', '0 0 * * *', 'http://127.0.0.1:9/x')")
        timer = cur.fetchone()[0]
    try:
        try:
            with tenant.cursor() as cur:
                cur.execute("REASSIGN OWNED BY %s TO jobflow_user" % app_role)
        except psycopg2.Error:
            pass            # refused is fine; jobflow_user owning them is not
        assert shared_rows(db) == []
    finally:
        with db.cursor() as cur:
            cur.execute("DELETE FROM jobflow.cron_timers WHERE id = %s", (timer,))
            cur.execute("DELETE FROM jobflow.task_log WHERE task_id = %s OR task_id IN"
                        " (SELECT id FROM jobflow.tasks WHERE cron_id = %s)", (task, timer))
            cur.execute("DELETE FROM jobflow.tasks WHERE id = %s OR cron_id = %s", (task, timer))


# ---- item 4: what the update stopped stays stopped --------------------------

def test_what_the_update_stopped_stays_stopped(databases, connect, app_role):
    """0.2.0 let a tenant SET ROLE jobflow_user and schedule; the update
    cancels such tasks and pauses such timers.  Every tenant may see and
    change them (they are jobflow_user's), so any tenant redrives the task
    with retry() and resumes, or rewrites, the timer: the worker then sends
    both as jobflow_user."""
    name, conn = databases(extension=False)
    skip_unless_older_versions_install(conn)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow VERSION '0.2.0'")
        # written as 0.2.0 wrote them (this library refuses them already)
        cur.execute("SET session_replication_role = replica")
        cur.execute("INSERT INTO jobflow.tasks (url, run_at, owner) VALUES"
                    " ('http://127.0.0.1:9/x', now() + interval '1 day', 'jobflow_user') RETURNING id")
        task = cur.fetchone()[0]
        cur.execute("INSERT INTO jobflow.cron_timers (name, owner, schedule, url, next_at) VALUES"
                    " ('t', 'jobflow_user', '0 0 * * *', 'http://127.0.0.1:9/x', now() + interval '1 day')")
        cur.execute("RESET session_replication_role")
        cur.execute("ALTER EXTENSION jobflow UPDATE")
    assert shared_rows(conn) == []
    tenant = connect(dbname=name, user=app_role)
    for sql in ("SELECT jobflow.retry(%d)" % task,
                "UPDATE jobflow.cron_timers SET active = true",
                "UPDATE jobflow.cron_timers SET url = 'http://127.0.0.1:9/mine', active = true"):
        try:
            with tenant.cursor() as cur:
                cur.execute(sql)
        except psycopg2.Error:
            pass            # refused is fine
    try:
        assert shared_rows(conn) == []
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM jobflow.cron_timers")
            cur.execute("DELETE FROM jobflow.tasks")


# ---- item 3: a role made beforehand owns what its maker made -----------------

@pytest.fixture
def outsider(db):
    """A CREATEROLE LOGIN role, as a provisioning role has."""
    name = "outsider_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN CREATEROLE" % name)
    yield name
    with db.cursor() as cur:
        cur.execute("REVOKE jobflow_admin FROM %s CASCADE" % name)
        cur.execute("DROP OWNED BY %s" % name)
        cur.execute("DROP ROLE %s" % name)


def test_role_owning_a_function_of_its_makers_is_not_taken(databases, connect, db, outsider):
    """The role checks of install and update look at a jobflow role's
    attributes and memberships, not at what it owns.  A CREATEROLE user
    that made jobflow_admin before the install (which leaves it ADMIN
    OPTION, simulated here as in test_install_trust.py) makes it own a
    SECURITY DEFINER function; the DBA does what the refusal's hint says
    (revoke the ADMIN OPTION) and installs.  Through the function its maker
    is jobflow_admin: it reads every tenant's tasks."""
    name, conn = databases(extension=False)
    with db.cursor() as cur:
        cur.execute("GRANT jobflow_admin TO %s WITH ADMIN OPTION" % outsider)
    with conn.cursor() as cur:
        cur.execute("GRANT CREATE ON DATABASE %s TO %s" % (name, outsider))
    maker = connect(dbname=name, user=outsider)
    try:
        with maker.cursor() as cur:
            cur.execute("CREATE SCHEMA tools")
            cur.execute("GRANT USAGE ON SCHEMA tools TO PUBLIC")
            cur.execute("GRANT CREATE ON SCHEMA tools TO jobflow_admin")
            cur.execute("SET ROLE jobflow_admin")
            cur.execute("CREATE FUNCTION tools.as_admin(q text) RETURNS SETOF text"
                        " LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN RETURN QUERY EXECUTE q; END $$")
            cur.execute("RESET ROLE")
        with db.cursor() as cur:
            # the DBA, as the hint of the refusal says
            cur.execute("REVOKE jobflow_admin FROM %s CASCADE" % outsider)
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE EXTENSION jobflow")
        except psycopg2.Error as e:
            assert e.pgcode == "42501", e     # refused: fine
            return
        # installed: the maker must not be jobflow_admin through its function
        with conn.cursor() as cur:
            cur.execute("INSERT INTO jobflow.tasks (url, run_at) VALUES"
                        " ('http://127.0.0.1:9/someone-elses', now() + interval '1 day')")
        seen = []
        try:
            seen = query(maker, "SELECT * FROM tools.as_admin('SELECT url FROM jobflow.tasks')")
        except psycopg2.Error:
            pass
        assert seen == []
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP SCHEMA IF EXISTS tools CASCADE")
            cur.execute("DROP EXTENSION IF EXISTS jobflow CASCADE")
            cur.execute("REVOKE CREATE ON DATABASE %s FROM %s" % (name, outsider))


# ---- item 9: the outcome channel is not secret from monitoring roles ---------

def test_monitoring_role_cannot_hear_or_forge_a_tenants_outcomes(connect, db, receiver, new_role):
    """Had the application LISTEN on what outcome_channel() returned, the
    channel would stand in pg_stat_activity.query of its session, which
    every member of pg_read_all_stats reads: pg_monitor, so every metrics
    exporter.  With it, a monitoring role would hear the tenant's task ids
    and outcomes and notify on the tenant's channel."""
    tenant = new_role()
    monitor = "mon_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN IN ROLE pg_monitor" % monitor)
    try:
        app = connect(user=tenant)
        # as docs/user-guide.md says: listen_outcomes() listens without
        # naming the channel in a statement (a LISTEN statement would show it)
        channel = query(app, "SELECT jobflow.listen_outcomes() AS c")[0]["c"]
        mon = connect(user=monitor)
        seen = [r["query"] for r in query(mon, "SELECT query FROM pg_stat_activity"
                                               " WHERE query LIKE '%%jobflow_outcome_%%'"
                                               "   AND pid <> pg_backend_pid()")]
        learned = {q.split('"')[1] for q in seen if q.count('"') >= 2}
        for c in learned:
            mon.cursor().execute('LISTEN "%s"' % c)
        url, _ = receiver.unique_url("/ok")
        task = query(app, "SELECT jobflow.schedule(%s, notify => true) AS id", (url,))[0]["id"]
        heard = notifications(mon, 5.0)
        mine = "%d:" % task
        assert [n.payload for n in heard if any(p.startswith(mine) for p in n.payload.split(" "))] == []
        assert channel not in learned
    finally:
        with db.cursor() as cur:
            cur.execute("DROP ROLE %s" % monitor)


# ---- item 3: default privileges of the role that installs --------------------

def test_default_privileges_do_not_open_the_secrets(databases, connect, new_role):
    """A common DBA setup, ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES
    TO a reporting role, applies to the tables CREATE EXTENSION (or ALTER
    EXTENSION UPDATE) makes as that DBA: jobflow revokes only PUBLIC's
    privileges, and jobflow.secrets, signing_secrets and outcome_key have
    no row-level security.  A reporting role that also reaches the schema
    (here through pg_monitor, so jobflow_monitor) reads every secret value
    and the key of the outcome channels."""
    name, conn = databases(extension=False)
    reader = "reader_" + uuid.uuid4().hex[:8]
    tenant = new_role()
    with conn.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN IN ROLE pg_monitor" % reader)
        cur.execute("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO %s" % reader)
    try:
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE EXTENSION jobflow")
        except psycopg2.Error as e:
            assert e.pgcode == "42501", e     # refused: fine
            return
        app = connect(dbname=name, user=tenant)
        with app.cursor() as cur:
            cur.execute("SELECT jobflow.set_secret('api', 'the-value', ARRAY['http://127.0.0.1:9'])")
            cur.execute("SELECT jobflow.create_signing_secret()")
        spy = connect(dbname=name, user=reader)
        for table in ("secrets", "signing_secrets", "outcome_key"):
            rows = []
            try:
                rows = query(spy, "SELECT * FROM jobflow.%s" % table)
            except psycopg2.Error:
                pass
            assert rows == [], table
    finally:
        with conn.cursor() as cur:
            cur.execute("ALTER DEFAULT PRIVILEGES REVOKE SELECT ON TABLES FROM %s" % reader)
            cur.execute("DROP EXTENSION IF EXISTS jobflow CASCADE")
            cur.execute("DROP OWNED BY %s" % reader)
            cur.execute("DROP ROLE %s" % reader)
