# -------------------------------------------------------------------------
#
# test_tenant_boundary.py
#     Regression tests of issue 20 (the tenant boundary), one or more per
#     item, each of which failed on 0.2.0:
#       item 1  an operator a tenant plants runs as superuser from the row
#               check of a task with a header secret (the four
#               statements; test_hostile.py plants every kind of object)
#       item 4  a role every tenant holds (jobflow_user, roles it is a member
#               of, predefined roles) owns nothing; a group role made on
#               purpose still may
#       item 9  outcomes are announced on a channel per role that no
#               other role can compute: none listens to another tenant's
#               outcomes or forges one on its channel
#       item 5  a header secret is sent only to the origins given with its
#               value: neither its owner nor jobflow_admin reads it back by
#               pointing a task at a receiver of their own
#
# -------------------------------------------------------------------------

import json
import uuid

import psycopg2
import pytest

from conftest import as_role, notifications, query, skip_unless_older_versions_install, wait_final

AUTH = json.dumps({"Authorization": {"secret": "api"}})


def origin_of(url):
    return "/".join(url.split("/")[:3])


def error_of(conn, role, sql, args=None):
    """The psycopg2 error sql raises as role (fails the test if none)."""
    with pytest.raises(psycopg2.Error) as e:
        as_role(conn, role, sql, args)
    return e.value


@pytest.fixture
def admin(new_role, db):
    name = new_role()
    with db.cursor() as cur:
        cur.execute("GRANT jobflow_admin TO %s" % name)
    yield name
    with db.cursor() as cur:
        cur.execute("REVOKE jobflow_admin FROM %s" % name)


@pytest.fixture
def cleanup_secrets(db):
    owners = []
    yield owners
    with db.cursor() as cur:
        cur.execute("RESET ROLE")
        cur.execute("DELETE FROM jobflow.secrets WHERE owner::text = ANY(%s)", (owners,))


# ---- item 1 -----------------------------------------------------------------

def test_planted_operator_does_not_run_as_superuser(connect, db, new_role):
    tenant = new_role()
    schema = "plant_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE SCHEMA %s AUTHORIZATION %s" % (schema, tenant))
    conn = connect(user=tenant)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT jobflow.set_secret('s', 'v', ARRAY['http://x.invalid'])")
            cur.execute("CREATE FUNCTION %s.f(regrole, oid) RETURNS bool LANGUAGE plpgsql AS"
                        " $$ BEGIN EXECUTE format('ALTER ROLE %%I SUPERUSER', session_user);"
                        " RETURN true; END $$" % schema)
            cur.execute("CREATE OPERATOR %s.= (LEFTARG = regrole, RIGHTARG = oid,"
                        " FUNCTION = %s.f)" % (schema, schema))
            for path in (schema, "%s, pg_catalog" % schema):
                cur.execute("SET search_path = " + path)
                try:
                    cur.execute("INSERT INTO jobflow.tasks (url, headers, run_at)"
                                " VALUES ('http://x.invalid/', '{\"X\": {\"secret\": \"s\"}}',"
                                " pg_catalog.now() OPERATOR(pg_catalog.+) interval '1 day')")
                except psycopg2.Error:
                    pass        # refused is fine; escalated is not
        assert not query(db, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (tenant,))[0]["rolsuper"]
    finally:
        with db.cursor() as cur:
            cur.execute("ALTER ROLE %s NOSUPERUSER" % tenant)
            cur.execute("UPDATE jobflow.tasks SET state = 'cancelled' WHERE owner::text = %s"
                        " AND state = 'pending'", (tenant,))
            cur.execute("DELETE FROM jobflow.secrets WHERE owner::text = %s", (tenant,))
            cur.execute("DROP SCHEMA %s CASCADE" % schema)


# ---- item 4 -----------------------------------------------------------------

SHARED_OWNER_PATHS = [
    ("schedule", "SELECT jobflow.schedule('http://127.0.0.1:9/x', run_at => now() + interval '1 day')"),
    ("insert", "INSERT INTO jobflow.tasks (url, run_at) VALUES ('http://127.0.0.1:9/x', now() + interval '1 day')"),
    ("import", "INSERT INTO jobflow.task_import (url, run_at) VALUES ('http://127.0.0.1:9/x', now() + interval '1 day')"),
    ("cron", "SELECT jobflow.schedule_cron('t', '0 0 * * *', 'http://127.0.0.1:9/x')"),
    ("secret", "SELECT jobflow.set_secret('s', 'v', ARRAY['http://127.0.0.1:9'])"),
    ("signing", "SELECT jobflow.create_signing_secret()"),
    ("pause", "SELECT jobflow.pause_queue('q')"),
    ("set_queue", "SELECT jobflow.set_queue('q', max_concurrent => 1)"),
]


@pytest.mark.parametrize("what,sql", SHARED_OWNER_PATHS, ids=[p[0] for p in SHARED_OWNER_PATHS])
def test_jobflow_user_owns_nothing(db, app_role, what, sql):
    """A tenant SET ROLE jobflow_user: what it made would be every tenant's."""
    with db.cursor() as cur:
        cur.execute("SET ROLE %s" % app_role)
        with pytest.raises(psycopg2.errors.InsufficientPrivilege) as e:
            cur.execute("SET ROLE jobflow_user")
            cur.execute(sql)
        cur.execute("RESET ROLE")
    assert 'role "jobflow_user" cannot own jobflow tasks' in str(e.value)
    assert not query(db, "SELECT 1 FROM jobflow.tasks WHERE owner = 'jobflow_user'::regrole"
                         " UNION ALL SELECT 1 FROM jobflow.cron_timers WHERE owner = 'jobflow_user'::regrole"
                         " UNION ALL SELECT 1 FROM jobflow.secrets WHERE owner = 'jobflow_user'::regrole"
                         " UNION ALL SELECT 1 FROM jobflow.signing_secrets WHERE owner = 'jobflow_user'::regrole"
                         " UNION ALL SELECT 1 FROM jobflow.queues WHERE owner = 'jobflow_user'::regrole")


def test_role_every_tenant_holds_owns_nothing(db, app_role):
    """A role granted to jobflow_user is every tenant's too; so is
    jobflow_admin's and a predefined role's."""
    group = "everyone_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s" % group)
        cur.execute("GRANT jobflow_user TO %s" % group)
        # every monitoring role, every exporter, holds it
        cur.execute("GRANT %s TO jobflow_monitor" % group)
    try:
        e = error_of(db, group, "SELECT jobflow.schedule('http://127.0.0.1:9/x',"
                                " run_at => now() + interval '1 day')")
        assert isinstance(e, psycopg2.errors.InsufficientPrivilege)
        assert 'Role "jobflow_monitor" is a member of it' in (e.diag.message_detail or ""), e
        for role in ("jobflow_admin", "jobflow_monitor", "pg_monitor"):
            e = error_of(db, "postgres", "SELECT jobflow.set_secret('s', 'v', ARRAY['http://127.0.0.1:9'],"
                                         " for_role => %s::regrole)", (role,))
            assert isinstance(e, psycopg2.errors.InsufficientPrivilege), role
    finally:
        with db.cursor() as cur:
            cur.execute("DROP ROLE %s" % group)


def test_owner_check_sees_a_membership_granted_meanwhile(connect, db, new_role):
    """The check remembers the last owner it passed (a bulk insert asks
    for the same one per row), and forgets it when roles change: a role
    granted to jobflow_monitor afterwards is refused in the same session."""
    tenant = new_role()
    conn = connect(user=tenant)
    query(conn, "SELECT jobflow.schedule('http://127.0.0.1:9/x', run_at => now() + interval '1 day')")
    with db.cursor() as cur:
        cur.execute("GRANT %s TO jobflow_monitor" % tenant)
    try:
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            query(conn, "SELECT jobflow.schedule('http://127.0.0.1:9/x', run_at => now() + interval '1 day')")
    finally:
        with db.cursor() as cur:
            cur.execute("REVOKE %s FROM jobflow_monitor" % tenant)


def test_group_role_made_on_purpose_may_own_tasks(db, new_role):
    """A group an administrator made shares its tasks with its members, as
    it shares its tables: that is not refused."""
    member = new_role()
    group = "team_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s" % group)
        cur.execute("GRANT jobflow_user TO %s" % group)
        cur.execute("GRANT %s TO %s" % (group, member))
    try:
        task = as_role(db, group, "SELECT jobflow.schedule('http://127.0.0.1:9/x',"
                                 " run_at => now() + interval '1 day')")
        assert as_role(db, member, "SELECT count(*) FROM jobflow.tasks WHERE id = %s", (task,)) == 1
    finally:
        with db.cursor() as cur:
            cur.execute("DELETE FROM jobflow.tasks WHERE owner::text = %s", (group,))
            cur.execute("DROP ROLE %s" % group)


def test_update_stops_what_shared_roles_owned(databases, db, app_role):
    """A database of 0.2.0 where a tenant planted a task, a secret and a
    queue setting for jobflow_user: the update to 0.3.0 stops them."""
    name, conn = databases(extension=False)
    skip_unless_older_versions_install(conn)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow VERSION '0.2.0'")
        # what 0.2.0 let a tenant do with SET ROLE jobflow_user (this
        # library refuses it already: the rows are written as they were)
        cur.execute("SET session_replication_role = replica")
        cur.execute("INSERT INTO jobflow.tasks (url, run_at, owner) VALUES"
                    " ('http://127.0.0.1:9/x', now() + interval '1 day', 'jobflow_user') RETURNING id")
        task = cur.fetchone()[0]
        cur.execute("INSERT INTO jobflow.secrets (owner, name, value) VALUES ('jobflow_user', 's', 'v')")
        cur.execute("INSERT INTO jobflow.queues (owner, name, paused) VALUES ('jobflow_user', 'q', true)")
        cur.execute("RESET session_replication_role")
        cur.execute("ALTER EXTENSION jobflow UPDATE")
    row = query(conn, "SELECT state, last_error FROM jobflow.tasks WHERE id = %s", (task,))[0]
    assert row["state"] == "cancelled"
    assert "every tenant holds" in row["last_error"]
    assert query(conn, "SELECT count(*) AS n FROM jobflow.secrets")[0]["n"] == 0
    assert query(conn, "SELECT count(*) AS n FROM jobflow.queues")[0]["n"] == 0


# ---- item 5 -----------------------------------------------------------------

def test_owner_cannot_point_its_secret_elsewhere(db, receiver, second_receiver, app_role,
                                                 cleanup_secrets):
    cleanup_secrets.append(app_role)
    url, _ = receiver.unique_url()
    as_role(db, app_role, "SELECT jobflow.set_secret('api', 'Bearer v', ARRAY[%s])", (origin_of(url),))
    evil, _ = second_receiver.unique_url()
    e = error_of(db, app_role, "SELECT jobflow.schedule(%s, headers => %s::jsonb)", (evil, AUTH))
    assert isinstance(e, psycopg2.errors.InsufficientPrivilege)
    assert 'secret "api" may not be sent to the origin of this URL' in str(e)
    assert evil not in str(e) and origin_of(evil) not in str(e)
    # the same host and port over another scheme is another origin
    e = error_of(db, app_role, "SELECT jobflow.schedule(%s, headers => %s::jsonb)",
                 (url.replace("http://", "https://"), AUTH))
    assert isinstance(e, psycopg2.errors.InsufficientPrivilege)
    # a timer, and a task moved later, are checked the same way
    as_role(db, app_role, "SELECT jobflow.schedule_cron('c', '0 0 * * *', %s, headers => %s::jsonb)", (url, AUTH))
    e = error_of(db, app_role, "UPDATE jobflow.cron_timers SET url = %s WHERE name = 'c'", (evil,))
    assert isinstance(e, psycopg2.errors.InsufficientPrivilege), e
    as_role(db, app_role, "SELECT jobflow.unschedule_cron('c')")


def test_admin_cannot_redirect_a_tenants_secret(db, receiver, second_receiver, app_role, admin,
                                                cleanup_secrets):
    cleanup_secrets.append(app_role)
    url, _ = receiver.unique_url()
    as_role(db, app_role, "SELECT jobflow.set_secret('api', 'Bearer v', ARRAY[%s])", (origin_of(url),))
    task = as_role(db, app_role, "SELECT jobflow.schedule(%s, run_at => now() + interval '1 day',"
                                " headers => %s::jsonb, key => 'k1')", (url, AUTH))
    evil, _ = second_receiver.unique_url()
    # through the replace of a keyed task, as the API does it
    e = error_of(db, admin, "SELECT jobflow._replace_task(%s, %s, now(), NULL, NULL, %s::jsonb,"
                            " 'POST', 30000, 5, 'default', NULL)", (task, evil, AUTH))
    assert isinstance(e, psycopg2.errors.InsufficientPrivilege), e
    # and through an UPDATE of a timer, which jobflow_admin may do
    as_role(db, app_role, "SELECT jobflow.schedule_cron('c', '0 0 * * *', %s, headers => %s::jsonb)", (url, AUTH))
    e = error_of(db, admin, "UPDATE jobflow.cron_timers SET url = %s WHERE name = 'c' AND owner = %s::regrole",
                 (evil, app_role))
    assert isinstance(e, psycopg2.errors.InsufficientPrivilege), e
    # admins set a tenant's secret only by giving its value
    e = error_of(db, admin, "SELECT jobflow.set_secret('api', NULL, ARRAY[%s], %s::regrole)",
                 (origin_of(evil), app_role))
    assert isinstance(e, psycopg2.errors.NullValueNotAllowed)
    assert query(db, "SELECT url FROM jobflow.tasks WHERE id = %s", (task,))[0]["url"] == url
    as_role(db, app_role, "SELECT jobflow.unschedule_cron('c')")
    as_role(db, app_role, "SELECT jobflow.cancel(%s)", (task,))


def test_secret_rebound_elsewhere_is_left_out(db, receiver, app_role, cleanup_secrets):
    """Bound to other origins after a task was scheduled: the worker sends
    the task without that header."""
    cleanup_secrets.append(app_role)
    url, tag = receiver.unique_url()
    as_role(db, app_role, "SELECT jobflow.set_secret('api', 'Bearer v', ARRAY[%s])", (origin_of(url),))
    task = as_role(db, app_role, "SELECT jobflow.schedule(%s, run_at => now() + interval '2 seconds',"
                                " headers => %s::jsonb)", (url, AUTH))
    as_role(db, app_role, "SELECT jobflow.set_secret('api', 'Bearer v', ARRAY['https://api.example.com'])")
    wait_final(db, [task])
    req = receiver.wait_for(lambda r: ("t=" + tag) in r["query"])[-1]
    assert "authorization" not in req["headers"]


def test_reflected_secret_is_masked_in_the_log(db, receiver, app_role, admin, cleanup_secrets):
    """A receiver on the secret's origin that echoes request headers: the
    log, which the owner and jobflow_admin read, holds the value masked."""
    cleanup_secrets.append(app_role)
    value = "Bearer sk_%s" % uuid.uuid4().hex
    url, tag = receiver.unique_url("/echo_headers")
    as_role(db, app_role, "SELECT jobflow.set_secret('api', %s, ARRAY[%s])", (value, origin_of(url)))
    task = as_role(db, app_role, "SELECT jobflow.schedule(%s, headers => %s::jsonb)", (url, AUTH))
    wait_final(db, [task])
    assert receiver.wait_for(lambda r: ("t=" + tag) in r["query"])[-1]["headers"]["authorization"] == value
    log = as_role(db, admin, "SELECT string_agg(response, '') FROM jobflow.task_log WHERE task_id = %s", (task,))
    assert "Authorization: " + "*" * len(value) in log, log
    assert value not in log


def test_secret_origins_are_checked(db, app_role, cleanup_secrets):
    cleanup_secrets.append(app_role)
    e = error_of(db, app_role, "SELECT jobflow.set_secret('api', 'v')")
    assert isinstance(e, psycopg2.errors.NullValueNotAllowed)
    assert "origins =>" in e.diag.message_hint
    for bad in ("{}", "{https://api.example.com/v1}", "{https://api.example.com?x=1}",
                "{ftp://api.example.com}", "{https://u:p@api.example.com}", "{NULL}"):
        e = error_of(db, app_role, "SELECT jobflow.set_secret('api', 'v', %s::text[])", (bad,))
        assert e.pgcode in ("22023", "22004"), (bad, e.pgcode, e)
    as_role(db, app_role, "SELECT jobflow.set_secret('api', 'v',"
                         " ARRAY['HTTPS://API.Example.com/', 'http://api.example.com:8080',"
                         "       'https://api.example.com:443'])")
    assert as_role(db, app_role, "SELECT origins::text FROM jobflow.secret_names WHERE name = 'api'") == \
        "{http://api.example.com:8080,https://api.example.com:443}"


def test_update_binds_secrets_to_where_they_go(databases, new_role):
    """0.2.0's secrets had no origins: the update binds each to the origins
    of the unfinished tasks and timers of its role that use it."""
    tenant = new_role()
    name, conn = databases(extension=False)
    skip_unless_older_versions_install(conn)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow VERSION '0.2.0'")
        cur.execute("SET ROLE %s" % tenant)
        cur.execute("SELECT jobflow.set_secret('used', 'v')")
        cur.execute("SELECT jobflow.set_secret('unused', 'v')")
        cur.execute("SELECT jobflow.schedule('https://API.example.com/a', run_at => now() + interval '1 day',"
                    " headers => '{\"A\": {\"secret\": \"used\"}}')")
        cur.execute("SELECT jobflow.schedule_cron('c', '0 0 * * *', 'http://hooks.example.com:8080/b',"
                    " headers => '{\"A\": {\"secret\": \"used\"}}')")
        cur.execute("RESET ROLE")
        cur.execute("ALTER EXTENSION jobflow UPDATE")
    got = {r["name"]: r["origins"] for r in query(conn, "SELECT name, origins FROM jobflow.secrets")}
    assert got == {"used": ["http://hooks.example.com:8080", "https://api.example.com:443"],
                   "unused": []}
    with conn.cursor() as cur:
        cur.execute("DELETE FROM jobflow.cron_timers")
        cur.execute("DELETE FROM jobflow.tasks")


# ---- item 9 -----------------------------------------------------------------

def test_outcomes_reach_their_owner_alone(connect, db, receiver, new_role):
    alice, bob = new_role(), new_role()
    a = connect(user=alice)
    b = connect(user=bob)
    a_channel = query(a, "SELECT jobflow.outcome_channel() AS c")[0]["c"]
    b_channel = query(b, "SELECT jobflow.outcome_channel() AS c")[0]["c"]
    assert a_channel != b_channel and a_channel.startswith("jobflow_outcome_")
    # bob can neither ask for alice's channel nor compute it
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        query(b, "SELECT jobflow.outcome_channel(%s::regrole)", (alice,))
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        query(b, "SELECT key FROM jobflow.outcome_key")
    with pytest.raises(psycopg2.errors.InsufficientPrivilege):
        query(b, "SELECT jobflow._outcome_channel(%s::regrole)", (alice,))
    assert query(a, "SELECT jobflow.listen_outcomes() AS c")[0]["c"] == a_channel
    assert query(b, "SELECT jobflow.listen_outcomes() AS c")[0]["c"] == b_channel
    b.cursor().execute("LISTEN jobflow_outcome")     # 0.2.0's channel, open to all
    url, _ = receiver.unique_url("/ok")
    task = query(a, "SELECT jobflow.schedule(%s, notify => true) AS id", (url,))[0]["id"]
    wait_final(db, [task])
    heard = notifications(a, 3.0)
    assert [n.payload for n in heard if n.channel == a_channel] == ["%d:succeeded" % task]
    # what an application checks as well: a jobflow worker sent it
    workers = {r["pid"] for r in query(db, "SELECT pid FROM jobflow.worker_status()")}
    assert {n.pid for n in heard} <= workers
    assert notifications(b, 1.0) == []


def test_read_all_data_reads_no_secret(connect, db, app_role, cleanup_secrets):
    """pg_read_all_data has SELECT on every table; the tables of secrets
    have row-level security with no policy, so it reads no row of them."""
    cleanup_secrets.append(app_role)
    as_role(db, app_role, "SELECT jobflow.set_secret('api', 'v', ARRAY['http://127.0.0.1:9'])")
    as_role(db, app_role, "SELECT jobflow.create_signing_secret()")
    reader = "reader_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN IN ROLE pg_read_all_data" % reader)
    try:
        spy = connect(user=reader)
        for table in ("secrets", "signing_secrets", "outcome_key"):
            assert query(spy, "SELECT count(*) AS n FROM jobflow.%s" % table)[0]["n"] == 0, table
        assert query(db, "SELECT count(*) AS n FROM jobflow.secrets")[0]["n"] >= 1
    finally:
        with db.cursor() as cur:
            cur.execute("DELETE FROM jobflow.signing_secrets WHERE owner = %s::regrole", (app_role,))
            cur.execute("DROP ROLE %s" % reader)


def test_secret_names_and_values_are_checked(db, app_role, cleanup_secrets):
    cleanup_secrets.append(app_role)
    for name in ("", "x" * 64, "a b", "a/b", "é"):
        e = error_of(db, app_role, "SELECT jobflow.set_secret(%s, 'v', ARRAY['http://127.0.0.1:9'])", (name,))
        assert e.pgcode == "22023", (name, e)
    for value in ("", "x" * 8193, "a\nb", "a\rb", "a\x01b"):
        e = error_of(db, app_role, "SELECT jobflow.set_secret('ok', %s, ARRAY['http://127.0.0.1:9'])", (value,))
        assert e.pgcode == "22023", (repr(value), e)
        assert value == "" or value[:3] not in str(e) or value == "x" * 8193
    as_role(db, app_role, "SELECT jobflow.set_secret('a-b_c.9', %s, ARRAY['http://127.0.0.1:9'])", ("x" * 8192,))
