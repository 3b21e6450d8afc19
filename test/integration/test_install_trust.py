# -------------------------------------------------------------------------
#
# test_install_trust.py
#     CREATE EXTENSION and ALTER EXTENSION UPDATE refuse a jobflow schema or
#     jobflow roles that someone other than a superuser made or shaped
#     (issue 20, item 3): a schema owned by a database owner, shared with
#     others or holding objects already; a jobflow role with LOGIN, with a
#     non-superuser holding ADMIN OPTION on it, or with members of
#     jobflow_admin granted by a non-superuser.  Before 0.3.0 each of these
#     was adopted as it was.
#
# Roles are cluster-wide: each test changes jobflow's roles only inside a
# try/finally that puts them back.
#
# -------------------------------------------------------------------------

import uuid

import psycopg2
import pytest

from conftest import query, skip_unless_older_versions_install


def sqlstate_of(conn, sql):
    """The SQLSTATE and message of the error sql raises (None if none)."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    except psycopg2.Error as e:
        return e.pgcode, e.pgerror
    return None, None


def installed(conn):
    return query(conn, "SELECT count(*) AS n FROM pg_extension WHERE extname = 'jobflow'")[0]["n"] == 1


@pytest.fixture
def outsider(db):
    """A LOGIN role that is not a superuser; CREATEROLE and CREATEDB, as a
    provisioning role or a database owner has."""
    name = "outsider_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN CREATEROLE CREATEDB" % name)
    yield name
    with db.cursor() as cur:
        for role in ("jobflow_admin", "jobflow_user", "jobflow_monitor"):
            cur.execute("REVOKE %s FROM %s CASCADE" % (role, name))
        cur.execute("REASSIGN OWNED BY %s TO postgres" % name)
        cur.execute("DROP OWNED BY %s" % name)
        cur.execute("DROP ROLE %s" % name)


def test_schema_made_by_a_database_owner_is_refused(databases, connect, outsider):
    name, conn = databases(extension=False)
    with conn.cursor() as cur:
        cur.execute("ALTER DATABASE %s OWNER TO %s" % (name, outsider))
    owner = connect(dbname=name, user=outsider)
    with owner.cursor() as cur:
        cur.execute("CREATE SCHEMA jobflow")
    code, msg = sqlstate_of(conn, "CREATE EXTENSION jobflow")
    assert code == "42501", msg
    assert 'schema "jobflow" belongs to role "%s"' % outsider in msg
    assert not installed(conn)
    # given to a superuser, but still letting its maker create in it
    with conn.cursor() as cur:
        cur.execute("ALTER SCHEMA jobflow OWNER TO postgres")
        cur.execute("GRANT CREATE ON SCHEMA jobflow TO %s" % outsider)
    code, msg = sqlstate_of(conn, "CREATE EXTENSION jobflow")
    assert code == "42501", msg
    assert "grants privileges to other roles" in msg
    with conn.cursor() as cur:
        cur.execute("REVOKE CREATE ON SCHEMA jobflow FROM %s" % outsider)
    # empty, and a superuser's alone: that one is used
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow")
    assert installed(conn)


def test_schema_with_objects_planted_in_it_is_refused(databases):
    name, conn = databases(extension=False)
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA jobflow")
        # an operator the install's own unqualified expressions could pick
        cur.execute("CREATE FUNCTION jobflow.f(name, text) RETURNS boolean"
                    " LANGUAGE sql AS 'SELECT true'")
        cur.execute("CREATE OPERATOR jobflow.= (LEFTARG = name, RIGHTARG = text, FUNCTION = jobflow.f)")
    code, msg = sqlstate_of(conn, "CREATE EXTENSION jobflow")
    assert code == "42P06", msg
    assert 'schema "jobflow" already contains objects' in msg
    assert not installed(conn)


def test_role_another_role_administers_is_refused(databases, db, outsider):
    name, conn = databases(extension=False)
    with db.cursor() as cur:
        # what a CREATEROLE user keeps when it made the role itself (16+)
        cur.execute("GRANT jobflow_admin TO %s WITH ADMIN OPTION" % outsider)
    try:
        code, msg = sqlstate_of(conn, "CREATE EXTENSION jobflow")
        assert code == "42501", msg
        assert 'role "jobflow_admin" can be granted by roles that are not superusers' in msg
        assert outsider in msg
        assert not installed(conn)
        # an update refuses it as well: a database of 0.2.0 stays at 0.2.0
        skip_unless_older_versions_install(conn)
        with conn.cursor() as cur:
            cur.execute("CREATE EXTENSION jobflow VERSION '0.2.0'")
        code, msg = sqlstate_of(conn, "ALTER EXTENSION jobflow UPDATE")
        assert code == "42501", msg
        assert query(conn, "SELECT extversion FROM pg_extension"
                           " WHERE extname = 'jobflow'")[0]["extversion"] == "0.2.0"
    finally:
        with db.cursor() as cur:
            cur.execute("REVOKE jobflow_admin FROM %s CASCADE" % outsider)
    with conn.cursor() as cur:
        cur.execute("ALTER EXTENSION jobflow UPDATE")
    assert query(conn, "SELECT extversion FROM pg_extension"
                       " WHERE extname = 'jobflow'")[0]["extversion"] == "0.3.0"


def test_admin_members_granted_by_a_non_superuser_are_refused(databases, db, connect, outsider):
    name, conn = databases(extension=False)
    accomplice = "accomplice_" + uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN" % accomplice)
        cur.execute("GRANT jobflow_admin TO %s WITH ADMIN OPTION" % outsider)
    try:
        maker = connect(user=outsider)
        with maker.cursor() as cur:
            cur.execute("GRANT jobflow_admin TO %s" % accomplice)
        if int(query(db, "SHOW server_version_num")[0]["server_version_num"]) >= 160000:
            # 16 and later: the grant depends on its grantor's ADMIN OPTION,
            # which cannot go without it; the grantor is what is refused
            code, msg = sqlstate_of(conn, "CREATE EXTENSION jobflow")
            assert code == "42501", msg
            assert outsider in msg
            assert not installed(conn)
            return
        with db.cursor() as cur:
            cur.execute("REVOKE ADMIN OPTION FOR jobflow_admin FROM %s" % outsider)
            cur.execute("REVOKE jobflow_admin FROM %s" % outsider)
        code, msg = sqlstate_of(conn, "CREATE EXTENSION jobflow")
        assert code == "42501", msg
        assert "was granted by roles that are not superusers" in msg
        assert accomplice in msg
        assert not installed(conn)
    finally:
        with db.cursor() as cur:
            cur.execute("DROP ROLE %s" % accomplice)


def test_role_with_login_is_refused(databases, db):
    name, conn = databases(extension=False)
    with db.cursor() as cur:
        cur.execute("ALTER ROLE jobflow_monitor LOGIN")
    try:
        code, msg = sqlstate_of(conn, "CREATE EXTENSION jobflow")
        assert code == "42501", msg
        assert 'role "jobflow_monitor" has attributes' in msg
        assert not installed(conn)
    finally:
        with db.cursor() as cur:
            cur.execute("ALTER ROLE jobflow_monitor NOLOGIN")
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow")
    assert installed(conn)


def test_update_takes_back_what_jobflow_never_grants(databases):
    """A 0.2.0 database whose tables were given more than jobflow grants:
    to a reporting role, and to jobflow_user with GRANT OPTION and
    TRUNCATE. The update leaves jobflow's own grants, without the rest."""
    name, conn = databases(extension=False)
    reader = "reader_" + uuid.uuid4().hex[:8]
    skip_unless_older_versions_install(conn)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow VERSION '0.2.0'")
        cur.execute("CREATE ROLE %s" % reader)
        cur.execute("GRANT SELECT ON jobflow.secrets, jobflow.tasks TO %s" % reader)
        cur.execute("GRANT ALL ON jobflow.tasks TO jobflow_user WITH GRANT OPTION")
        cur.execute("GRANT EXECUTE ON FUNCTION jobflow._materialize_cron(timestamptz, boolean) TO PUBLIC")
    try:
        with conn.cursor() as cur:
            cur.execute("ALTER EXTENSION jobflow UPDATE")
        extra = query(conn, """
            SELECT c.relname, a.grantee::regrole::text AS grantee, a.privilege_type, a.is_grantable
              FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.relnamespace = 'jobflow'::regnamespace AND a.grantee <> c.relowner
               AND (a.grantee = %s::regrole OR a.is_grantable
                    OR a.privilege_type IN ('TRUNCATE', 'TRIGGER', 'REFERENCES'))""", (reader,))
        assert extra == []
        assert not query(conn, "SELECT has_function_privilege('public',"
                               " 'jobflow._materialize_cron(timestamptz, boolean)', 'EXECUTE') AS p")[0]["p"]
        # what jobflow grants stays
        assert query(conn, "SELECT has_table_privilege('jobflow_user', 'jobflow.tasks', 'SELECT') AS p")[0]["p"]
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP EXTENSION jobflow CASCADE")
            cur.execute("DROP ROLE %s" % reader)
