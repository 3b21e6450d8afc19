# -------------------------------------------------------------------------
#
# tenancy.py
#     Databases and roles for the tests of the tenant boundary (issue 20):
#     test_hostile.py and test_privileges.py.
#
# Each of those tests runs on three databases (KINDS): the test database
# "jobflow" (a fresh install of the default version), and two databases
# made for the module, with jobflow installed at an older version and then
# updated: CREATE EXTENSION jobflow VERSION '0.2.0' (or '0.1.0'), then
# ALTER EXTENSION jobflow UPDATE.  Each also gets extension jobflow_net
# (schema net, pg_net's interface), dropped again from "jobflow".  A database updated from a shipped
# version must be as safe as a fresh install.  The launcher serves a new
# database at CREATE EXTENSION; its worker waits for the update, then runs.
#
# Roles are cluster-wide: each Target makes its own (unique names, LOGIN,
# trust authentication of the test cluster) and drops them when it closes,
# after removing what they own in the database (a made database is
# dropped; in "jobflow", their rows of jobflow's tables and their schemas).
#
# -------------------------------------------------------------------------

import os
import time
import uuid

import psycopg2
import psycopg2.extras
import pytest

from conftest import skip_unless_older_versions_install

KINDS = ("fresh", "from 0.2.0", "from 0.1.0")
KIND_IDS = [k.replace(" ", "-") for k in KINDS]

# jobflow's tables that hold rows of an owner (a regrole column "owner")
OWNED_TABLES = ("cron_timers", "tasks", "task_log", "queues", "secrets", "signing_secrets",
                "client_certificates")


def set_secret_sql(name, value, for_role=None):
    """The SQL these tests store a header secret with, taking the named
    parameters name and value (and for_role), and origins: the list of
    origins the secret may go to (the receiver's, origin_of()).  The one
    place to change when jobflow.set_secret() changes again."""
    sql = "SELECT jobflow.set_secret(%%(%s)s, %%(%s)s, origins => %%(origins)s" % (name, value)
    if for_role is not None:
        sql += ", for_role => %%(%s)s::regrole" % for_role
    return sql + ")"


def origin_of(url):
    """scheme://host:port of a URL (a secret's origin)."""
    return "/".join(url.split("/")[:3])


def connect(dbname, user=None, autocommit=True):
    """A connection to dbname (as user, else as the PGUSER superuser)."""
    kwargs = {"dbname": dbname}
    if user is not None:
        kwargs["user"] = user
    conn = psycopg2.connect(**kwargs)
    conn.autocommit = autocommit
    return conn


def rows(conn, sql, args=None):
    with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(sql, args)
        return [dict(r) for r in cur.fetchall()]


def value(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()[0]


def wait_worker(conn, timeout=60.0):
    """Wait until a worker serves the database of conn (it has loaded its
    horizon); return its pid."""
    deadline = time.time() + timeout
    while True:
        got = rows(conn, "SELECT pid FROM jobflow.worker_status() WHERE horizon_end IS NOT NULL")
        if got and got[0]["pid"] is not None:
            return got[0]["pid"]
        if time.time() >= deadline:
            pytest.fail("no jobflow worker in database %s after %.0f s"
                        % (conn.info.dbname, timeout))
        time.sleep(0.1)


class Target:
    """One database under test and the roles made for it.  su is an
    autocommit superuser connection to it."""

    def __init__(self, kind):
        assert kind in KINDS, kind
        self.kind = kind
        self.made = kind != "fresh"
        self.roles = []
        self.schemas = []
        self.conns = []
        if self.made:
            self.dbname = "jf_tenancy_" + uuid.uuid4().hex[:8]
            version = kind.split()[-1]
            admin = connect("postgres")
            try:
                skip_unless_older_versions_install(admin)
                with admin.cursor() as cur:
                    cur.execute("CREATE DATABASE %s" % self.dbname)
            finally:
                admin.close()
            conn = connect(self.dbname)
            with conn.cursor() as cur:
                cur.execute("SET client_min_messages = error")
                cur.execute("CREATE EXTENSION jobflow VERSION %s", (version,))
                cur.execute("ALTER EXTENSION jobflow UPDATE")
            conn.close()
        else:
            self.dbname = os.environ.get("PGDATABASE", "jobflow")
        self.su = self.connect()
        # schema net (extension jobflow_net, pg_net's interface) is part of
        # the API under test: made here, dropped at close() in the test
        # database if it was made here
        with self.su.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_extension WHERE extname = 'jobflow_net'")
            self.net_made = cur.fetchone()[0] == 0
            cur.execute("CREATE EXTENSION IF NOT EXISTS jobflow_net")
        wait_worker(self.su)

    def connect(self, user=None):
        """A connection to the target, closed with it."""
        conn = connect(self.dbname, user)
        self.conns.append(conn)
        return conn

    def role(self, prefix, *grants, login=True):
        """A new role granted grants (role names); dropped at close()."""
        name = "%s_%s" % (prefix, uuid.uuid4().hex[:8])
        with self.su.cursor() as cur:
            cur.execute("CREATE ROLE %s %s" % (name, "LOGIN" if login else "NOLOGIN"))
            for g in grants:
                cur.execute("GRANT %s TO %s" % (g, name))
        self.roles.append(name)
        return name

    def schema(self, name, owner):
        """A schema owned by owner (dropped, with what is in it, at close())."""
        with self.su.cursor() as cur:
            cur.execute("DROP SCHEMA IF EXISTS %s CASCADE" % name)
            cur.execute("CREATE SCHEMA %s AUTHORIZATION %s" % (name, owner))
        self.schemas.append(name)

    def close(self):
        for conn in self.conns:
            try:
                conn.close()
            except psycopg2.Error:
                pass
        if self.made:
            admin = connect("postgres")
            try:
                with admin.cursor() as cur:
                    cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % self.dbname)
                    self._drop_roles(cur)
            finally:
                admin.close()
            return
        conn = connect(self.dbname)
        try:
            with conn.cursor() as cur:
                # prepared transactions a failed test left behind hold locks
                cur.execute("SELECT gid FROM pg_prepared_xacts WHERE owner = ANY(%s)"
                            " AND database = current_database()", (self.roles,))
                for (gid,) in cur.fetchall():
                    cur.execute("ROLLBACK PREPARED %s", (gid,))
                for table in OWNED_TABLES:
                    cur.execute("DELETE FROM jobflow.%s WHERE owner::oid IN"
                                " (SELECT oid FROM pg_roles WHERE rolname = ANY(%%s))" % table,
                                (self.roles,))
                for name in self.schemas:
                    cur.execute("DROP SCHEMA IF EXISTS %s CASCADE" % name)
                if self.net_made:
                    # with its schema, which DROP EXTENSION leaves
                    cur.execute("DROP EXTENSION IF EXISTS jobflow_net")
                    cur.execute("DROP SCHEMA IF EXISTS net")
                for role in self.roles:
                    cur.execute("DROP OWNED BY %s" % role)
                self._drop_roles(cur)
        finally:
            conn.close()

    def _drop_roles(self, cur):
        for role in reversed(self.roles):
            cur.execute("DROP ROLE IF EXISTS %s" % role)
