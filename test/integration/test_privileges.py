# -------------------------------------------------------------------------
#
# test_privileges.py
#     Who may do what (issue 20): the installed extension against the
#     table of docs/user-guide.md, section "Who may do what", both ways;
#     and the search_path of the functions that run with more privileges.
#
# The guide's table has a row per function (with its signature), table,
# view, sequence and type of schema jobflow, and a column per role: none
# (a role without grants), jobflow_user, jobflow_monitor, pg_monitor,
# jobflow_admin, another tenant and owner.  The tests check that
#
#   - every object of the schema has a row, and every row an object (a new
#     object without a decision fails; a row may name a function by any
#     spelling of its argument types: timestamptz or timestamp with time
#     zone; rows may come in any order, cells' privileges too);
#   - every cell grants what the catalog grants that role, no more and no
#     less: EXECUTE, table and column privileges (the columns listed after
#     insert or update are exactly those it may write), sequence and type
#     USAGE, each only with USAGE on the schema; all means a superuser;
#   - own and pending hold: a tenant sees and changes its own rows and a
#     second tenant none of them through the same grant, jobflow_admin all
#     of them, and an update limited to pending tasks leaves a failed one;
#   - another tenant: a second tenant tries every path on the first one's
#     task, failed task, timer, queue setting, secret and signing secret
#     and gets nothing (no rows, nothing changed, or an error), and every
#     object of the schema is either probed so or holds no tenant's rows.
#
# test_functions_that_run_with_more_privileges_pin_search_path reads the
# catalog: every SECURITY DEFINER function, trigger function and C
# function of the extension has search_path in its settings, or is listed
# in PIN_EXEMPT with the reason (a C function that never switches user, or
# that switches only through the C code that pins search_path itself,
# which test/meta/test_pins.py checks); which of the two a C function is,
# the sources tell (csource.py: does it reach a switch of user?).
#
# Each runs on the test database and on databases updated from 0.2.0 and
# from 0.1.0 (tenancy.py).
#
# -------------------------------------------------------------------------

import json
import os
import re
import sys
import time
import uuid

import psycopg2
import pytest

from conftest import REPO, wait_final
from tenancy import KIND_IDS, KINDS, Target, origin_of, rows, set_secret_sql, value

sys.path.insert(0, os.path.join(REPO, "test", "meta"))
import csource  # noqa: E402

# where the table is: its section "Who may do what"
GUIDE = "docs/user-guide.md"
COLUMNS = ["none", "jobflow_user", "jobflow_monitor", "pg_monitor", "jobflow_admin",
           "another tenant", "owner"]
VERBS = {"execute", "select", "insert", "update", "delete", "truncate", "references",
         "trigger", "usage", "all"}
ITEM = re.compile(r"^(?P<verb>[a-z]+)(?P<quals>(?:\s+(?:own|pending))*)\s*"
                  r"(?:\((?P<cols>[^)]*)\))?$")


# -------------------------------------------------------------------------
# The table of docs/user-guide.md
# -------------------------------------------------------------------------

def parse_cell(text):
    """A cell as a list of (verb, qualifiers, columns or None)."""
    text = text.strip().strip("`").strip().lower()
    if text in ("", "-", "\u2013", "\u2014", "none", "nothing"):
        return []
    items = []
    for part in text.split(";"):
        part = re.sub(r"\s+", " ", part.strip().strip("`").strip())
        if not part:
            continue
        m = ITEM.match(part)
        assert m and m.group("verb") in VERBS, GUIDE + ', "Who may do what": cannot read %r' % part
        cols = m.group("cols")
        items.append((m.group("verb"), frozenset(m.group("quals").split()),
                      None if cols is None else
                      frozenset(c.strip().strip('"') for c in cols.split(",") if c.strip())))
    return items


def table_matrix():
    """{object as written: {column: [items]}} from docs/user-guide.md."""
    with open(os.path.join(REPO, GUIDE)) as f:
        text = f.read()
    m = re.search(r"^#+\s*Who may do what\s*$(.*?)(?=^#{1,3} |\Z)", text, re.M | re.S)
    assert m, GUIDE + ' has no section "Who may do what"'
    lines = [l.strip() for l in m.group(1).splitlines() if l.strip().startswith("|")]
    assert len(lines) > 2, GUIDE + ', "Who may do what": no table'

    def cells(line):
        return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
    header = [re.sub(r"\s+", " ", c.strip("`* ").lower()) for c in cells(lines[0])]
    missing = [c for c in ["object"] + COLUMNS if c not in header]
    assert not missing, "the table of %s lacks the column(s) %s" % (GUIDE, missing)
    matrix = {}
    for line in lines[1:]:
        row = cells(line)
        if all(re.fullmatch(r":?-+:?", c) for c in row if c):
            continue                                    # the separator
        obj = row[header.index("object")].strip("` ").replace("\\|", "|")
        assert obj not in matrix, "the table of %s has two rows for %s" % (GUIDE, obj)
        matrix[obj] = {c: parse_cell(row[header.index(c)]) for c in COLUMNS}
    return matrix


def resolve(conn, obj):
    """(kind, oid) of an object named as in the table, or None."""
    if "(" in obj:
        oid = value(conn, "SELECT to_regprocedure(%s)::oid", (obj,))
        return ("function", oid) if oid else None
    oid = value(conn, "SELECT to_regclass(%s)::oid", (obj,))
    # a composite type (net.http_response) has a pg_class row too: a type
    if oid and value(conn, "SELECT relkind <> 'c' FROM pg_class WHERE oid = %s", (oid,)):
        return ("relation", oid)
    oid = value(conn, "SELECT to_regtype(%s)::oid", (obj,))
    return ("type", oid) if oid else None


def catalog_objects(conn):
    """{(kind, oid): name} of every function, relation and type of schema
    jobflow, and of schema net (extension jobflow_net), with no row types
    of tables and no array types."""
    got = rows(conn, """
        WITH s AS (SELECT oid FROM pg_namespace WHERE nspname IN ('jobflow', 'net'))
        SELECT 'function' AS kind, p.oid, p.oid::regprocedure::text AS name FROM pg_proc p
         WHERE p.pronamespace IN (SELECT oid FROM s)
        UNION ALL
        SELECT 'relation', c.oid, c.oid::regclass::text FROM pg_class c
         WHERE c.relnamespace IN (SELECT oid FROM s) AND c.relkind IN ('r', 'v', 'm', 'S', 'f', 'p')
        UNION ALL
        SELECT 'type', t.oid, t.oid::regtype::text FROM pg_type t
         WHERE t.typnamespace IN (SELECT oid FROM s) AND t.typcategory <> 'A'
           AND (t.typtype <> 'c' OR (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c')""")
    return {(r["kind"], r["oid"]): r["name"] for r in got}


def granted(conn, role, kind, oid):
    """What role may do with the object, as the catalog says: a set of
    (verb, columns or None)."""
    if value(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)):
        return {("all", None)}
    # USAGE on the object's schema (jobflow, or net)
    schema = value(conn, {"function": "SELECT pronamespace FROM pg_proc WHERE oid = %s",
                          "type": "SELECT typnamespace FROM pg_type WHERE oid = %s",
                          "relation": "SELECT relnamespace FROM pg_class WHERE oid = %s"}[kind],
                   (oid,))
    usage = value(conn, "SELECT has_schema_privilege(%s, %s::oid, 'USAGE')", (role, schema))
    if not usage:
        return set()
    if kind == "function":
        ok = value(conn, "SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (role, oid))
        return {("execute", None)} if ok else set()
    if kind == "type":
        ok = value(conn, "SELECT has_type_privilege(%s, %s::oid, 'USAGE')", (role, oid))
        return {("usage", None)} if ok else set()
    relkind = value(conn, "SELECT relkind::text FROM pg_class WHERE oid = %s", (oid,))
    out = set()
    if relkind == "S":
        for priv in ("USAGE", "SELECT", "UPDATE"):
            if value(conn, "SELECT has_sequence_privilege(%s, %s::oid, %s)", (role, oid, priv)):
                out.add((priv.lower(), None))
        return out
    for priv in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"):
        if value(conn, "SELECT has_table_privilege(%s, %s::oid, %s)", (role, oid, priv)):
            out.add((priv.lower(), None))
        elif priv in ("SELECT", "INSERT", "UPDATE", "REFERENCES"):
            cols = [r["attname"] for r in rows(conn, """
                SELECT a.attname FROM pg_attribute a
                 WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
                   AND has_column_privilege(%s, a.attrelid, a.attnum, %s)""", (oid, role, priv))]
            if cols:
                out.add((priv.lower(), frozenset(cols)))
    return out


# -------------------------------------------------------------------------
# The database, its tenants, and tenant A's objects
# -------------------------------------------------------------------------

class Tenancy:
    def __init__(self, kind, receiver):
        self.kind = kind
        self.target = t = Target(kind)
        self.none = t.role("jf_none")
        self.a = t.role("jf_tenant_a", "jobflow_user")
        self.b = t.role("jf_tenant_b", "jobflow_user")
        self.admin = t.role("jf_admin", "jobflow_admin")
        self.monitor = t.role("jf_monitor", "jobflow_monitor")
        self.pgmon = t.role("jf_pgmon", "pg_monitor")
        self.owner = value(t.su, "SELECT extowner::regrole::text FROM pg_extension"
                                 " WHERE extname = 'jobflow'")
        # who acts for each column (the behaviour of a group is its member's)
        self.member = {"none": self.none, "jobflow_user": self.b, "jobflow_monitor": self.monitor,
                       "pg_monitor": self.pgmon, "jobflow_admin": self.admin}
        self.role_of = {"none": self.none, "jobflow_user": "jobflow_user",
                        "jobflow_monitor": "jobflow_monitor", "pg_monitor": "pg_monitor",
                        "jobflow_admin": "jobflow_admin", "owner": self.owner}
        run = uuid.uuid4().hex[:8]
        ctx = {"a": self.a, "b": self.b, "url": receiver.url("/ok?t=priv-" + run),
               "a_secret": "a-secret", "a_timer_name": "a-timer", "a_queue": "a-queue",
               "a_key": "a-key", "a_value": "the value of a",
               "origins": [origin_of(receiver.url("/"))]}
        ctx["b_value"] = "the value of b"
        # ---- client certificates (issue 25, item 7): PEM in shape only ----
        ctx["a_cert"] = "a-cert"
        ctx["pem_cert"] = "-----BEGIN CERTIFICATE-----\nMIIBpriv\n-----END CERTIFICATE-----\n"
        ctx["pem_key"] = "-----BEGIN PRIVATE KEY-----\nMIIEpriv\n-----END PRIVATE KEY-----\n"
        ctx["cert_origins"] = ["https://127.0.0.1:1"]
        ctx["a_secret_headers"] = json.dumps({"X-Api-Key": {"secret": ctx["a_secret"]}})
        conn = t.connect(self.a)
        with conn.cursor() as cur:
            cur.execute(set_secret_sql("a_secret", "a_value"), ctx)
            cur.execute("SELECT jobflow.create_signing_secret()")
            cur.execute("SELECT jobflow.set_queue(%(a_queue)s, max_concurrent => 2)", ctx)
            cur.execute("SELECT jobflow.set_client_certificate(%(a_cert)s, %(pem_cert)s,"
                        " %(pem_key)s, %(cert_origins)s)", ctx)
            cur.execute("SELECT jobflow.set_queue_client_certificate(%(a_queue)s, %(a_cert)s)", ctx)
            cur.execute("SELECT jobflow.schedule(%(url)s, run_at => now() + interval '1 day',"
                        " headers => %(a_secret_headers)s, key => %(a_key)s, queue => %(a_queue)s)",
                        ctx)
            ctx["a_pending"] = cur.fetchone()[0]
            cur.execute("SELECT jobflow.schedule(%s, max_attempts => 1, queue => %s)",
                        (receiver.url("/status/400?t=priv-" + run), ctx["a_queue"]))
            ctx["a_failed"] = cur.fetchone()[0]
            # a request through pg_net's interface (extension jobflow_net),
            # answered before the 503 below (an answer resets A's circuit)
            cur.execute("SELECT net.http_get(%s)", (receiver.url("/ok?t=priv-net-" + run),))
            ctx["a_net"] = cur.fetchone()[0]
            cur.execute("SELECT jobflow.schedule_cron(%(a_timer_name)s, '0 3 * * *', %(url)s,"
                        " headers => %(a_secret_headers)s, active => false)", ctx)
            ctx["a_timer"] = cur.fetchone()[0]
        conn.close()
        assert wait_final(t.su, ctx["a_failed"], timeout=30) == "failed"
        assert wait_final(t.su, ctx["a_net"], timeout=30) == "succeeded"
        # after the 400 (an answer: it would count A's failures from zero
        # again), a 503: A's circuit to the receiver counts a failure, a row of
        # jobflow.endpoints for jobflow.circuit_window (a minute); circuits
        # on for it, should the suite's cluster have them off
        self.circuits_were = value(t.su, "SHOW jobflow.circuit_failures")
        if self.circuits_were == "0":
            with t.su.cursor() as cur:
                cur.execute("ALTER SYSTEM SET jobflow.circuit_failures = 10")
                cur.execute("SELECT pg_reload_conf()")
            time.sleep(0.5)
        conn = t.connect(self.a)
        with conn.cursor() as cur:
            cur.execute("SELECT jobflow.schedule(%s, max_attempts => 1)",
                        (receiver.url("/status/503?t=priv-" + run),))
            ctx["a_failed_503"] = cur.fetchone()[0]
        conn.close()
        assert wait_final(t.su, ctx["a_failed_503"], timeout=30) == "failed"
        deadline = time.time() + 10     # published within a second
        while not value(t.su, "SELECT count(*) FROM jobflow.endpoints WHERE owner = %s::regrole",
                        (self.a,)) and time.time() < deadline:
            time.sleep(0.1)
        self.ctx = ctx

    def snapshot(self):
        """Every row of tenant A in jobflow's tables, read as the owner."""
        snap = {}
        for table in ("tasks", "task_log", "cron_timers", "queues", "secrets", "signing_secrets",
                      "client_certificates"):
            snap[table] = rows(self.target.su, "SELECT * FROM jobflow.%s WHERE owner = %%s::regrole"
                                               " ORDER BY 1, 2" % table, (self.a,))
        return snap


@pytest.fixture(scope="module", params=KINDS, ids=KIND_IDS)
def env(request, receiver):
    env = Tenancy(request.param, receiver)
    try:
        yield env
    finally:
        if getattr(env, "circuits_were", None) == "0":
            with env.target.su.cursor() as cur:
                cur.execute("ALTER SYSTEM RESET jobflow.circuit_failures")
                cur.execute("SELECT pg_reload_conf()")
        env.target.close()


def outcome(conn, sql, ctx):
    """Run sql in its own transaction, rolled back: (error SQLSTATE or
    None, first value of the first row or None, rows changed)."""
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            cur.execute(sql, ctx)
            first = None
            if cur.description:
                row = cur.fetchone()
                first = None if row is None else row[0]
            return None, first, cur.rowcount
    except psycopg2.Error as e:
        return e.pgcode, None, 0
    finally:
        conn.rollback()
        conn.autocommit = True


# -------------------------------------------------------------------------
# The table against the catalog
# -------------------------------------------------------------------------

def test_the_table_has_a_row_for_every_object_and_no_other(env):
    su = env.target.su
    matrix = table_matrix()
    objects = catalog_objects(su)
    named = {}
    unknown = []
    for obj in matrix:
        key = resolve(su, obj)
        if key is None or key not in objects:
            unknown.append(obj)
        else:
            assert key not in named, "the table of %s has two rows for %s: %s and %s" % (
                GUIDE, objects[key], named[key], obj)
            named[key] = obj
    missing = sorted(name for key, name in objects.items() if key not in named)
    assert not missing, 'objects of schema jobflow without a row in %s, "Who may do' \
                        ' what" (decide who may use them): %s' % (GUIDE, missing)
    assert not unknown, 'rows of %s, "Who may do what", naming no object of schema' \
                        ' jobflow: %s' % (GUIDE, unknown)


def test_each_role_has_what_the_table_says(env):
    su = env.target.su
    wrong = []
    for obj, cells in table_matrix().items():
        key = resolve(su, obj)
        if key is None:
            continue                    # the test above says so
        for column, role in env.role_of.items():
            said = {(verb, cols) for verb, _, cols in cells[column]}
            got = granted(su, role, *key)
            if said != got:
                def show(items):
                    return "; ".join(sorted("%s%s" % (v, "" if c is None else
                                                      " (%s)" % ", ".join(sorted(c)))
                                            for v, c in items)) or "-"
                wrong.append("%s, %s: the table says %s, the catalog grants %s"
                             % (obj, column, show(said), show(got)))
        if cells["another tenant"]:
            wrong.append("%s, another tenant: the table says %s; a tenant must reach no"
                         " other tenant's rows (-)" % (obj, cells["another tenant"]))
    assert not wrong, "\n".join(wrong)


# (object) -> how many of tenant A's rows a role reaches through it, for
# the verbs that rows limit: "select" counts them, "update" and "delete"
# change them (rolled back); "update pending" is the same update on A's
# failed task, which no pending-only grant may reach
REACH = {
    "jobflow.tasks": {
        "select": "SELECT count(*) FROM jobflow.tasks WHERE owner = %(a)s::regrole",
        "update": "UPDATE jobflow.tasks SET run_at = run_at WHERE id = %(a_pending)s",
        "update pending": "UPDATE jobflow.tasks SET run_at = run_at WHERE id = %(a_failed)s",
    },
    "jobflow.task_log": {"select": "SELECT count(*) FROM jobflow.task_log WHERE owner = %(a)s::regrole"},
    "jobflow.cron_timers": {
        "select": "SELECT count(*) FROM jobflow.cron_timers WHERE owner = %(a)s::regrole",
        "update": "UPDATE jobflow.cron_timers SET url = url WHERE id = %(a_timer)s",
        "delete": "DELETE FROM jobflow.cron_timers WHERE id = %(a_timer)s",
    },
    "jobflow.queues": {"select": "SELECT count(*) FROM jobflow.queues WHERE owner = %(a)s::regrole"},
    "jobflow.cron": {"select": "SELECT count(*) FROM jobflow.cron WHERE owner = %(a)s::regrole"},
    "jobflow.failed_tasks": {"select": "SELECT count(*) FROM jobflow.failed_tasks WHERE id = %(a_failed)s"},
    "jobflow.secret_names": {
        "select": "SELECT count(*) FROM jobflow.secret_names WHERE owner = %(a)s::regrole"},
    "jobflow.client_certificate_names": {
        "select": "SELECT count(*) FROM jobflow.client_certificate_names"
                  " WHERE owner = %(a)s::regrole"},
    "jobflow.signing_keys": {
        "select": "SELECT count(*) FROM jobflow.signing_keys WHERE owner = %(a)s::regrole"},
    "jobflow.endpoints": {
        "select": "SELECT count(*) FROM jobflow.endpoints WHERE owner = %(a)s::regrole"},
    # no rows of a tenant: a role that may read them reads them all
    "jobflow.installation": {"select": "SELECT count(*) FROM jobflow.installation"},
    "jobflow.stats": {"select": "SELECT count(*) FROM jobflow.stats"},
    # extension jobflow_net (issue 26)
    "net._http_response": {"select": "SELECT count(*) FROM net._http_response WHERE id = %(a_net)s"},
}


def reached(conn, sql, ctx):
    error, first, changed = outcome(conn, sql, ctx)
    if error is not None:
        return "error %s" % error
    return first if sql.lstrip().upper().startswith("SELECT") else changed


def test_own_and_pending_hold(env):
    """For each row-limited privilege of the table: through it, a role
    without own reaches tenant A's rows, one with own reaches none of them
    (and A itself does), and pending leaves A's failed task alone."""
    ctx = env.ctx
    conns = {}

    def conn_of(role):
        if role not in conns:
            conns[role] = env.target.connect(role)
        return conns[role]
    wrong = []
    for obj, cells in table_matrix().items():
        if resolve(env.target.su, obj) is None:
            continue
        name = obj.strip()
        for column, member in env.member.items():
            for verb, quals, _ in cells[column]:
                if verb not in ("select", "update", "delete"):
                    continue
                probes = REACH.get(name, {})
                if verb not in probes:
                    wrong.append("%s: no probe of %s in REACH (test_privileges.py)" % (name, verb))
                    continue
                n = reached(conn_of(member), probes[verb], ctx)
                where = "%s, %s %s" % (name, column, " ".join([verb] + sorted(quals)))
                if "own" in quals:
                    if n != 0:
                        wrong.append("%s: %s (a member) reached %s of tenant A's rows"
                                     % (where, member, n))
                    if column == "jobflow_user":
                        mine = reached(conn_of(env.a), probes[verb], ctx)
                        if not (isinstance(mine, int) and mine > 0):
                            wrong.append("%s: tenant A reached %s of its own rows" % (where, mine))
                elif not (isinstance(n, int) and n > 0):
                    wrong.append("%s: %s (a member) reached %s of tenant A's rows, not all"
                                 % (where, member, n))
                if verb == "update":
                    other = probes.get("update pending")
                    who = env.a if "own" in quals and column == "jobflow_user" else member
                    if "pending" in quals:
                        if other is None:
                            wrong.append("%s: no probe of update pending in REACH" % where)
                        elif reached(conn_of(who), other, ctx) != 0:
                            wrong.append("%s: %s updated a task that is not pending" % (where, who))
                    elif other is not None and reached(conn_of(who), other, ctx) == 0:
                        wrong.append("%s: %s cannot update a task that is not pending: say"
                                     " pending" % (where, who))
    assert not wrong, "\n".join(wrong)


# Tenant B against tenant A: (object probed, SQL, how a reach shows).
# "rows": the first value is a count; "changed": rows changed; "true": the
# function said it did; "refused": no error; "none": only the snapshot of
# A's rows taken after all of them judges (B acting in its own namespace
# with A's names).  Every probe is committed.
OTHER_TENANT = [
    ("jobflow.tasks", "SELECT count(*) FROM jobflow.tasks WHERE owner = %(a)s::regrole", "rows"),
    ("jobflow.tasks", "SELECT count(*) FROM (SELECT 1 FROM jobflow.tasks WHERE id = %(a_pending)s"
                      " FOR UPDATE) s", "rows"),
    ("jobflow.tasks", "UPDATE jobflow.tasks SET run_at = now() WHERE id = %(a_pending)s", "changed"),
    ("jobflow.tasks", "UPDATE jobflow.tasks SET state = 'cancelled' WHERE id = %(a_pending)s",
     "changed"),
    ("jobflow.tasks", "INSERT INTO jobflow.tasks (url, owner) VALUES (%(url)s, %(a)s::regrole)",
     "refused"),
    ("jobflow.tasks", "DELETE FROM jobflow.tasks WHERE id = %(a_pending)s", "refused"),
    ("jobflow.task_log", "SELECT count(*) FROM jobflow.task_log WHERE owner = %(a)s::regrole", "rows"),
    ("jobflow.cron_timers", "SELECT count(*) FROM jobflow.cron_timers WHERE owner = %(a)s::regrole",
     "rows"),
    ("jobflow.cron_timers", "UPDATE jobflow.cron_timers SET active = true WHERE id = %(a_timer)s",
     "changed"),
    ("jobflow.cron_timers", "UPDATE jobflow.cron_timers SET url = %(url)s WHERE id = %(a_timer)s",
     "changed"),
    ("jobflow.cron_timers", "DELETE FROM jobflow.cron_timers WHERE id = %(a_timer)s", "refused"),
    ("jobflow.cron_timers", "INSERT INTO jobflow.cron_timers (name, schedule, url, owner)"
                            " VALUES ('x', '* * * * *', %(url)s, %(a)s::regrole)", "refused"),
    ("jobflow.cron", "SELECT count(*) FROM jobflow.cron WHERE id = %(a_timer)s", "rows"),
    ("jobflow.failed_tasks", "SELECT count(*) FROM jobflow.failed_tasks WHERE id = %(a_failed)s",
     "rows"),
    ("jobflow.queues", "SELECT count(*) FROM jobflow.queues WHERE owner = %(a)s::regrole", "rows"),
    ("jobflow.queues", "UPDATE jobflow.queues SET paused = true WHERE owner = %(a)s::regrole",
     "refused"),
    ("jobflow.secret_names", "SELECT count(*) FROM jobflow.secret_names WHERE owner = %(a)s::regrole",
     "rows"),
    ("jobflow.signing_keys", "SELECT count(*) FROM jobflow.signing_keys WHERE owner = %(a)s::regrole",
     "rows"),
    ("jobflow.secrets", "SELECT count(*) FROM jobflow.secrets", "refused"),
    ("jobflow.signing_secrets", "SELECT count(*) FROM jobflow.signing_secrets", "refused"),
    ("jobflow.task_import", "SELECT count(*) FROM jobflow.task_import", "refused"),
    ("jobflow.outcome_key", "SELECT count(*) FROM jobflow.outcome_key", "refused"),
    ("jobflow.outcome_channel", "SELECT jobflow.outcome_channel(for_role => %(a)s::regrole)",
     "refused"),
    ("jobflow.listen_outcomes", "SELECT jobflow.listen_outcomes(for_role => %(a)s::regrole)",
     "refused"),
    ("jobflow._outcome_channel", "SELECT jobflow._outcome_channel(%(a)s::regrole)", "refused"),
    ("jobflow.cancel", "SELECT jobflow.cancel(%(a_pending)s)", "true"),
    ("jobflow.reschedule", "SELECT jobflow.reschedule(%(a_pending)s, now())", "true"),
    ("jobflow.retry", "SELECT jobflow.retry(%(a_failed)s)", "true"),
    ("jobflow.retry_failed", "SELECT jobflow.retry_failed()", "none"),
    ("jobflow.retry_failed", "SELECT jobflow.retry_failed(%(a_queue)s)", "none"),
    ("jobflow._replace_task", "SELECT jobflow._replace_task(%(a_pending)s, %(url)s, now(), NULL,"
                              " NULL, '{}', 'POST', 1000, 1, 'default', NULL)", "true"),
    ("jobflow._delete_cron_timer", "SELECT jobflow._delete_cron_timer(%(a_timer)s)", "true"),
    ("jobflow.set_cron_active", "SELECT jobflow.set_cron_active(%(a_timer_name)s, true)", "true"),
    ("jobflow.unschedule_cron", "SELECT jobflow.unschedule_cron(%(a_timer_name)s)", "true"),
    ("jobflow.explain", "SELECT count(*) FROM jobflow.explain(%(a_pending)s)", "rows"),
    ("jobflow.endpoints", "SELECT count(*) FROM jobflow.endpoints WHERE owner = %(a)s::regrole",
     "rows"),
    ("jobflow._endpoints", "SELECT count(*) FROM jobflow._endpoints() WHERE owner = %(a)s::regrole",
     "rows"),
    ("jobflow.reset_circuit", "SELECT jobflow.reset_circuit(%(url)s, %(a)s::regrole)", "refused"),
    ("jobflow.reset_circuit", "SELECT jobflow.reset_circuit(%(url)s)", "none"),
    ("jobflow.explain_cron", "SELECT count(*) FROM jobflow.explain_cron(%(a_timer_name)s)", "rows"),
    # issue 25, item 4: B's call finds no timer of A's name (an error), and A's timer makes
    # no task: the snapshot of A's rows judges
    ("jobflow.run_cron_now", "SELECT jobflow.run_cron_now(%(a_timer_name)s)", "none"),
    ("jobflow.schedule_cron", "SELECT jobflow.schedule_cron(%(a_timer_name)s, '0 4 * * *', %(url)s,"
                              " active => false)", "none"),
    ("jobflow.schedule", "SELECT jobflow.schedule(%(url)s, key => %(a_key)s, on_duplicate => 'replace',"
                         " run_at => now() + interval '1 day')", "none"),
    ("jobflow.schedule", "SELECT jobflow.schedule(%(url)s, headers => %(a_secret_headers)s)",
     "refused"),
    ("jobflow.pause_queue", "SELECT jobflow.pause_queue(%(a_queue)s, owner => %(a)s::regrole)",
     "refused"),
    ("jobflow.pause_queue", "SELECT jobflow.pause_queue(%(a_queue)s)", "none"),
    ("jobflow.resume_queue", "SELECT jobflow.resume_queue(%(a_queue)s, owner => %(a)s::regrole)",
     "refused"),
    ("jobflow.set_queue", "SELECT jobflow.set_queue(%(a_queue)s, max_concurrent => 1,"
                          " owner => %(a)s::regrole)", "refused"),
    ("jobflow.set_queue", "SELECT jobflow.set_queue(%(a_queue)s, owner => %(a)s::regrole,"
                          " log_attempts => 'failures')", "refused"),
    ("jobflow.drop_queue", "SELECT jobflow.drop_queue(%(a_queue)s, owner => %(a)s::regrole)",
     "refused"),
    ("jobflow.drop_queue", "SELECT jobflow.drop_queue(%(a_queue)s)", "none"),
    ("jobflow.set_secret", set_secret_sql("a_secret", "b_value", for_role="a"), "refused"),
    ("jobflow.set_secret", set_secret_sql("a_secret", "b_value"), "none"),
    ("jobflow.drop_secret", "SELECT jobflow.drop_secret(%(a_secret)s, for_role => %(a)s::regrole)",
     "refused"),
    ("jobflow.drop_secret", "SELECT jobflow.drop_secret(%(a_secret)s)", "none"),
    # ---- client certificates (issue 25, item 7) ----
    ("jobflow.client_certificates", "SELECT count(*) FROM jobflow.client_certificates", "refused"),
    ("jobflow.client_certificate_names",
     "SELECT count(*) FROM jobflow.client_certificate_names WHERE owner = %(a)s::regrole", "rows"),
    ("jobflow.set_client_certificate",
     "SELECT jobflow.set_client_certificate(%(a_cert)s, %(pem_cert)s, %(pem_key)s, %(cert_origins)s,"
     " for_role => %(a)s::regrole)", "refused"),
    ("jobflow.set_client_certificate",
     "SELECT jobflow.set_client_certificate(%(a_cert)s || '-b', %(pem_cert)s, %(pem_key)s,"
     " %(cert_origins)s)", "none"),
    ("jobflow.set_queue_client_certificate",
     "SELECT jobflow.set_queue_client_certificate(%(a_queue)s, NULL, owner => %(a)s::regrole)",
     "refused"),
    ("jobflow.set_queue_client_certificate",
     "SELECT jobflow.set_queue_client_certificate(%(a_queue)s, %(a_cert)s)", "refused"),
    ("jobflow.drop_client_certificate",
     "SELECT jobflow.drop_client_certificate(%(a_cert)s, for_role => %(a)s::regrole)", "refused"),
    ("jobflow.drop_client_certificate", "SELECT jobflow.drop_client_certificate(%(a_cert)s)", "none"),
    # ---- end of client certificates ----
    ("jobflow.create_signing_secret", "SELECT jobflow.create_signing_secret(for_role => %(a)s::regrole)",
     "refused"),
    ("jobflow.revoke_signing_secret", "SELECT jobflow.revoke_signing_secret(for_role => %(a)s::regrole)",
     "refused"),
    ("jobflow.revoke_signing_secret", "SELECT jobflow.revoke_signing_secret()", "none"),
    ("jobflow.prune", "SELECT jobflow.prune(interval '0')", "refused"),
    ("jobflow.wakeups", "SELECT * FROM jobflow.wakeups()", "refused"),
    ("jobflow.metrics", "SELECT jobflow.metrics()", "refused"),
    ("jobflow._figures", "SELECT * FROM jobflow._figures()", "refused"),
    ("jobflow.stats", "SELECT * FROM jobflow.stats", "refused"),
    ("jobflow._materialize_cron", "SELECT * FROM jobflow._materialize_cron(now())", "refused"),
    ("jobflow._webhook_signature", "SELECT jobflow._webhook_signature('whsec_AAAA', 'id', 1, '')",
     "refused"),
    # ---- extension jobflow_net (issue 26): A's request and its response ----
    ("net._http_response", "SELECT count(*) FROM net._http_response WHERE id = %(a_net)s", "rows"),
    ("net._http_response", "SELECT count(*) FROM net._http_response", "rows"),
    ("net._http_collect_response",
     "SELECT (net._http_collect_response(%(a_net)s)).status = 'SUCCESS'", "true"),
    ("net.http_collect_response",
     "SELECT (net.http_collect_response(%(a_net)s)).status = 'SUCCESS'", "true"),
    # ---- end of jobflow_net ----
]

# objects that hold no rows of a tenant, or act on the caller's only
ROW_FREE = {
    "jobflow.installation": "the installation's token, the same for everyone",
    "jobflow.tasks_id_seq": "a sequence",
    "jobflow.cron_timers_id_seq": "a sequence",
    "jobflow.task_state": "a type",
    "jobflow.worker_status": "figures of the worker, summed over every tenant",
    "jobflow.cron_next": "computes from its arguments",
    "jobflow.cron_preview": "computes from its arguments",
    "jobflow._current_role": "the caller's role",
    "jobflow._json_content_type": "computes from its arguments",
    "jobflow._origin": "computes from its argument",
    "jobflow._pg_net_call": "computes from its argument",
    "jobflow.import_pg_cron": "a superuser's only",
    "jobflow._wake_horizon": "a time from shared memory",
    "jobflow._task_check": "a trigger: runs on the caller's own statement",
    "jobflow._notify_worker": "a trigger: runs on the caller's own statement",
    "jobflow._cron_check": "a trigger: runs on the caller's own statement",
    "jobflow._cron_notify": "a trigger: runs on the caller's own statement",
    "jobflow._cron_sync_occurrences": "a trigger: runs on the caller's own statement",
    "jobflow._task_import": "a trigger: runs on the caller's own statement",
    "jobflow._task_log_cascade": "a trigger: runs on the caller's own statement",
    "jobflow._queues_notify": "a trigger: runs on the caller's own statement",
    # extension jobflow_net (issue 26)
    "net.http_get": "schedules a task of the caller's own (jobflow.schedule, as the caller)",
    "net.http_post": "likewise",
    "net.http_delete": "likewise",
    "net._schedule": "likewise",
    "net.jobflow_request": "computes from its arguments",
    "net._urlencode": "computes from its argument",
    "net._await_response": "waits for a row of net._http_response, which the probes above try",
    "net.http_response": "a type",
    "net.http_response_result": "a type",
    "net.request_status": "a type",
}


def test_another_tenant_reaches_nothing(env):
    ctx = env.ctx
    before = env.snapshot()
    b = env.target.connect(env.b)
    reached_a = []
    for obj, sql, how in OTHER_TENANT:
        # committed, as a tenant would: the snapshot below sees what it did
        error, first, changed = None, None, 0
        try:
            with b.cursor() as cur:
                cur.execute(sql, ctx)
                changed = cur.rowcount
                if cur.description:
                    row = cur.fetchone()
                    first = None if row is None else row[0]
        except psycopg2.Error as e:
            error = e.pgcode
        if how == "rows" and error is None and first:
            reached_a.append("%s: %s rows of A: %s" % (obj, first, sql))
        elif how == "changed" and error is None and changed:
            reached_a.append("%s: changed %s rows of A: %s" % (obj, changed, sql))
        elif how == "true" and first is True:
            reached_a.append("%s: said it did: %s" % (obj, sql))
        elif how == "refused" and error is None:
            reached_a.append("%s: not refused: %s" % (obj, sql))
    after = env.snapshot()
    for table in before:
        if before[table] != after[table]:
            reached_a.append("tenant A's rows of jobflow.%s changed:\n  before %s\n  after  %s"
                             % (table, before[table], after[table]))
    assert not reached_a, "tenant B reached tenant A's rows:\n" + "\n".join(reached_a)

    probed = {obj for obj, _, _ in OTHER_TENANT}
    names = {re.sub(r"\(.*", "", name) for name in catalog_objects(env.target.su).values()}
    unprobed = sorted(names - probed - set(ROW_FREE))
    assert not unprobed, "objects no probe of OTHER_TENANT tries as another tenant, and not in" \
                         " ROW_FREE (test_privileges.py): %s" % unprobed
    stale = sorted((probed | set(ROW_FREE)) - names)
    assert not stale, "OTHER_TENANT or ROW_FREE name objects the schema does not have: %s" % stale


# -------------------------------------------------------------------------
# search_path of what runs with more privileges
# -------------------------------------------------------------------------

SWITCHES_USER = {"SetUserIdAndSecContext", "SetUserIdAndContext", "jf_as_owner_begin",
                 "as_owner_begin"}

# C functions without a search_path setting: (never switches user | pins in C, why)
PIN_EXEMPT = {
    "jobflow._task_check": ("pins in C", "a trigger that switches to the extension's owner"
                            " only through jf_as_owner_begin (a header secret's check), which"
                            " pins search_path itself (test/meta/test_pins.py)"),
    "jobflow._cron_check": ("pins in C", "likewise, for a timer's header secrets"),
    "jobflow._notify_worker": ("never switches user", "a trigger that publishes ids to shared memory"),
    "jobflow._cron_notify": ("never switches user", "a trigger that wakes the worker"),
    "jobflow._queues_notify": ("never switches user", "a trigger that wakes the worker"),
    "jobflow._wake_horizon": ("never switches user", "reads shared memory"),
    "jobflow.worker_status": ("never switches user", "reads shared memory"),
    "jobflow.metrics": ("pins in C", "reads shared memory, and the queues' figures as the"
                        " owner of jobflow.tasks through jf_as_owner_begin, which pins"
                        " search_path itself"),
    "jobflow._figures": ("pins in C", "likewise"),
    "jobflow.wakeups": ("never switches user", "reads shared memory"),
    "jobflow.cron_next": ("never switches user", "computes from its arguments"),
    "jobflow._webhook_signature": ("never switches user", "computes from its arguments"),
    "jobflow._origin": ("never switches user", "computes from its argument"),
    "jobflow._materialize_cron": ("never switches user", "runs as its caller, which only a"
                                  " superuser may be: the worker, whose search_path is pinned"),
}


def reaches_a_switch(src, symbol):
    """Whether the C function symbol calls, directly or through other
    functions of src/, something that switches user."""
    bodies = {}
    for f in src.functions:
        bodies.setdefault(f.name, set()).update(f.calls())
    seen = set()
    todo = [symbol]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        calls = bodies.get(name, set())
        if calls & SWITCHES_USER:
            return True
        todo.extend(calls & set(bodies))
    return False


def test_functions_that_run_with_more_privileges_pin_search_path(env):
    functions = rows(env.target.su, """
        SELECT 'jobflow.' || p.proname AS name, p.oid::regprocedure::text AS sig, p.prosrc,
               l.lanname, p.prosecdef, p.prorettype = 'trigger'::regtype AS is_trigger,
               (SELECT c FROM unnest(p.proconfig) c WHERE c LIKE 'search\\_path=%%') AS pin
          FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
         WHERE p.pronamespace = 'jobflow'::regnamespace""")
    src = csource.Source()
    wrong = []
    for f in functions:
        if f["pin"] is not None:
            path = [s.strip() for s in f["pin"].split("=", 1)[1].split(",")]
            if path != ["pg_catalog", "pg_temp"]:
                wrong.append("%s: search_path=%s, not pg_catalog, pg_temp" % (f["sig"], path))
            continue
        must = f["prosecdef"] or f["is_trigger"] or f["lanname"] == "c"
        if f["lanname"] in ("sql", "plpgsql"):
            wrong.append("%s: a %s function without SET search_path" % (f["sig"], f["lanname"]))
        elif must and f["name"] not in PIN_EXEMPT:
            wrong.append("%s: %s%s%s function without SET search_path, and not in PIN_EXEMPT"
                         % (f["sig"], "SECURITY DEFINER " if f["prosecdef"] else "",
                            "trigger " if f["is_trigger"] else "", f["lanname"]))
        elif f["name"] in PIN_EXEMPT and f["lanname"] == "c":
            kind = PIN_EXEMPT[f["name"]][0]
            switches = reaches_a_switch(src, f["prosrc"])
            if switches and kind != "pins in C":
                wrong.append("%s: listed as never switching user, but %s reaches a switch"
                             % (f["sig"], f["prosrc"]))
            if not switches and kind != "never switches user":
                wrong.append("%s: listed as pinning in C, but %s never switches user"
                             % (f["sig"], f["prosrc"]))
        if f["prosecdef"] and f["name"] in PIN_EXEMPT:
            wrong.append("%s: SECURITY DEFINER needs SET search_path, whatever PIN_EXEMPT says"
                         % f["sig"])
    names = {f["name"] for f in functions}
    stale = sorted(set(PIN_EXEMPT) - names)
    assert not wrong, "\n".join(wrong)
    assert not stale, "PIN_EXEMPT names functions the extension does not have: %s" % stale
