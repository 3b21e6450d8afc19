# -------------------------------------------------------------------------
#
# test_hostile.py
#     A hostile tenant plants objects in a schema of its own and then uses
#     every path of jobflow's API its grants allow; nothing it planted may
#     ever run with more privileges than its session (issue 20).
#
# The tenant (LOGIN, granted jobflow_user) owns schema app, where it plants:
#
#   - operators for every (left, right) pair of TYPES (and every prefix
#     operator) of the names in OPERATORS that pg_catalog resolves by an
#     implicit cast rather than an exact match: PostgreSQL prefers an exact
#     match from any schema of the path, so app.= (regrole, oid) wins over
#     pg_catalog.= (oid, oid) even when pg_catalog comes first (the issue's
#     reproduction); and, for the pairs pg_catalog matches exactly, copies
#     that only win when app comes before pg_catalog;
#   - functions shadowing built-ins by name: every pg_catalog overload of
#     the names jobflow's SQL scripts and the SQL strings of its C sources
#     call (identifiers followed by "("), and of COMMON_FUNCTIONS, with the
#     same arguments and result; plus, for overloads of at most two
#     arguments, variants taking one of TYPES where pg_catalog needs an
#     implicit cast (like the operators above, they win from anywhere in
#     the path).  Aggregates are reproduced with a wrapped transition
#     function when their state is an ordinary type (count(*), min, max,
#     sum of integers ...).  Skipped, because a SQL function cannot
#     reproduce them: overloads with internal, cstring, "any" or other
#     pseudo-type arguments or results (format(text, VARIADIC "any"),
#     concat, count("any"), jsonb_object_agg ...), aggregates whose state
#     is internal (array_agg, string_agg, sum(bigint) ...), window functions
#     (row_number) and what PostgreSQL itself refuses (min(anyenum)); the
#     planting reports them.
#
# Each planted object is a SQL function that first calls app.record(what)
# and then returns what the pg_catalog object returns (queries that use it
# still work, so the path goes on).  app.record counts an escalation in
# the sequence app.escalations (nextval is not rolled back with an error)
# and raises a WARNING naming what ran, when it runs as a role other than
# the session's (a SECURITY DEFINER function, C code switching to the
# extension's owner) or as a superuser (the worker); as a superuser it also
# does what an attacker would: ALTER ROLE <session_user> SUPERUSER.  After
# each call the test reads the sequence and the roles' rolsuper (and takes
# back a superuser it finds), so a failure names the call that escalated.
#
# Then, with SET search_path = app (pg_catalog is implicitly first) and
# again with SET search_path = app, pg_catalog, the tenant calls every
# function of schema jobflow it may execute, reads every view and table it
# may read, and INSERTs, UPDATEs, DELETEs and COPYs where its grants allow
# (and where they do not: those must be refused); so do a member of
# jobflow_monitor, a member of pg_monitor and a member of jobflow_admin
# (the admin paths: for_role =>, owner =>, prune ...), and a second tenant
# runs DROP OWNED / REASSIGN OWNED on itself.  The worker then fires tasks
# of the tenant at the test receiver, retries a failing one, materialises
# a cron timer; and it goes on firing while a monitoring role whose COPY
# INTO jobflow.task_log was refused keeps its session open (item 2).
# Errors of single calls are fine; escalations are not, and no role may
# end up superuser.
#
# test_every_api_object_is_called reads the catalog: every function, view,
# table and sequence of schema jobflow that a role other than a superuser
# may use, with each privilege it may use it with, must be covered by a
# call below, so a new API object without a call fails.
#
# Every test runs on the test database (a fresh install) and on databases
# updated from 0.2.0 and from 0.1.0 (tenancy.py).
#
# -------------------------------------------------------------------------

import glob
import io
import os
import re
import time
import uuid

import psycopg2
import psycopg2.extensions
import pytest

from conftest import REPO, wait_final
from tenancy import KIND_IDS, KINDS, Target, origin_of, rows, set_secret_sql, value

OPERATORS = ["=", "<>", "<", ">", "<=", ">=", "->>", "->", "@>", "?", "||", "~~", "+", "-"]

TYPES = ["oid", "regrole", "regclass", "regnamespace", "regproc", "regprocedure", "regtype",
         "name", "text", "varchar", "bpchar", '"char"', "int2", "int4", "int8", "numeric",
         "float4", "float8", "bool", "jsonb", "json", "bytea", "timestamptz", "timestamp",
         "date", "interval", "uuid", "inet", "tid", "xid", "xid8", "jobflow.task_state",
         "int8[]", "int4[]", "oid[]", "text[]", "name[]", "jsonb[]"]

# functions an attacker would shadow whether jobflow calls them or not
COMMON_FUNCTIONS = [
    "now", "lower", "upper", "length", "format", "concat", "concat_ws", "left", "right",
    "substr", "replace", "position", "strpos", "btrim", "ltrim", "rtrim", "split_part",
    "md5", "encode", "decode", "quote_ident", "quote_literal", "quote_nullable",
    "pg_has_role", "has_table_privilege", "has_column_privilege", "has_function_privilege",
    "has_schema_privilege", "has_sequence_privilege", "jsonb_each", "jsonb_each_text",
    "jsonb_typeof", "jsonb_object_keys", "jsonb_array_elements", "jsonb_build_object",
    "jsonb_extract_path_text", "to_jsonb", "count", "min", "max", "sum", "array_agg",
    "string_agg", "array_length", "cardinality", "unnest", "nextval", "currval", "setval",
    "current_setting", "set_config", "clock_timestamp", "statement_timestamp",
    "transaction_timestamp", "isfinite", "date_trunc", "make_interval", "gen_random_uuid",
    "pg_notify", "pg_typeof", "octet_length", "char_length", "current_database",
    "pg_get_userbyid", "generate_series",
]

RECORDER = """
CREATE SEQUENCE app.escalations;
GRANT USAGE ON SCHEMA app TO PUBLIC;
GRANT USAGE, UPDATE ON SEQUENCE app.escalations TO PUBLIC;
CREATE FUNCTION app.record(what text) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $record$
DECLARE
    super boolean;
BEGIN
    SELECT r.rolsuper INTO super FROM pg_catalog.pg_roles r
     WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER;
    IF CURRENT_USER OPERATOR(pg_catalog.<>) SESSION_USER OR super THEN
        PERFORM pg_catalog.nextval('app.escalations');
        RAISE WARNING 'hostile: % ran as % in a session of %', what, CURRENT_USER, SESSION_USER;
        IF super THEN
            EXECUTE pg_catalog.format('ALTER ROLE %I SUPERUSER', SESSION_USER);
        END IF;
    END IF;
END
$record$;
"""

# The planting, run by the tenant itself: a function of its schema, called
# once and dropped.  Operators and variants are made only where pg_catalog
# resolves the call (else no query of jobflow's can use them).
PLANT = r"""
CREATE FUNCTION app._plant(ops text[], types text[], fnames text[],
    OUT operators integer, OUT shadow_operators integer, OUT functions integer,
    OUT variants integer, OUT aggregates integer, OUT skipped text[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $plant$
DECLARE
    op text;
    l text;
    r text;
    t text;
    lt oid;
    res text;
    n integer := 0;
    pos integer;
    fn text;
    what text;
    f record;
    a record;
    callargs text;
    argtypes text;
    vtypes text[];
    polymorphic CONSTANT text[] := ARRAY['anyelement', 'anyarray', 'anynonarray', 'anyenum',
        'anyrange', 'anymultirange', 'anycompatible', 'anycompatiblearray',
        'anycompatiblenonarray', 'anycompatiblerange', 'anycompatiblemultirange'];
BEGIN
    operators := 0;
    shadow_operators := 0;
    functions := 0;
    variants := 0;
    aggregates := 0;
    skipped := '{}';

    FOREACH op IN ARRAY ops LOOP
        FOREACH l IN ARRAY ARRAY['NONE'] || types LOOP
            lt := CASE WHEN l = 'NONE' THEN 0 ELSE l::regtype::oid END;
            FOREACH r IN ARRAY types LOOP
                BEGIN
                    IF l = 'NONE' THEN
                        EXECUTE format('SELECT pg_typeof(OPERATOR(pg_catalog.%s) NULL::%s)::text',
                                       op, r) INTO res;
                    ELSE
                        EXECUTE format('SELECT pg_typeof(NULL::%s OPERATOR(pg_catalog.%s) NULL::%s)::text',
                                       l, op, r) INTO res;
                    END IF;
                EXCEPTION WHEN OTHERS THEN
                    CONTINUE;
                END;
                n := n + 1;
                fn := 'app._op' || n;
                what := format('operator %s %s %s', l, op, r);
                IF l = 'NONE' THEN
                    EXECUTE format('CREATE FUNCTION %s(%s) RETURNS %s LANGUAGE sql AS %L', fn, r, res,
                                   format('SELECT app.record(%L); SELECT OPERATOR(pg_catalog.%s) $1',
                                          what, op));
                    EXECUTE format('CREATE OPERATOR app.%s (RIGHTARG = %s, FUNCTION = %s)', op, r, fn);
                ELSE
                    EXECUTE format('CREATE FUNCTION %s(%s, %s) RETURNS %s LANGUAGE sql AS %L',
                                   fn, l, r, res,
                                   format('SELECT app.record(%L); SELECT $1 OPERATOR(pg_catalog.%s) $2',
                                          what, op));
                    EXECUTE format('CREATE OPERATOR app.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %s)',
                                   op, l, r, fn);
                END IF;
                IF EXISTS (SELECT 1 FROM pg_operator o
                            WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprname = op
                              AND o.oprleft = lt AND o.oprright = r::regtype) THEN
                    shadow_operators := shadow_operators + 1;
                ELSE
                    operators := operators + 1;
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;

    FOR f IN
        SELECT p.oid, p.proname, p.prokind, p.provariadic, p.pronargs, p.proisstrict, p.proretset,
               p.proargtypes::oid[] AS argoids, p.proallargtypes IS NULL AS no_out,
               pg_get_function_arguments(p.oid) AS args, pg_get_function_result(p.oid) AS result,
               p.oid::regprocedure::text AS sig,
               (SELECT array_agg(y.typname::text)
                  FROM unnest(COALESCE(p.proallargtypes, p.proargtypes::oid[]) || p.prorettype) u(oid)
                  JOIN pg_type y ON y.oid = u.oid
                 WHERE y.typtype = 'p'
                   AND y.typname <> ALL (polymorphic || ARRAY['record', 'void'])) AS pseudo
          FROM pg_proc p
         WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY (fnames)
         ORDER BY p.oid
    LOOP
        IF f.pseudo IS NOT NULL THEN
            skipped := skipped || format('%s (%s)', f.sig, array_to_string(f.pseudo, ', '));
            CONTINUE;
        END IF;
        n := n + 1;
        IF f.prokind = 'f' THEN
            SELECT string_agg(CASE WHEN i = f.pronargs AND f.provariadic <> 0
                                   THEN 'VARIADIC $' || i ELSE '$' || i END, ', ' ORDER BY i)
              INTO callargs FROM generate_series(1, f.pronargs) i;
            callargs := COALESCE(callargs, '');
            BEGIN
                EXECUTE format('CREATE FUNCTION app.%I(%s) RETURNS %s LANGUAGE sql %s AS %L',
                               f.proname, f.args, f.result,
                               CASE WHEN f.proisstrict THEN 'STRICT' ELSE '' END,
                               format('SELECT app.record(%L); SELECT * FROM pg_catalog.%I(%s)',
                                      'function ' || f.sig, f.proname, callargs));
                functions := functions + 1;
            EXCEPTION WHEN OTHERS THEN
                skipped := skipped || format('%s (%s)', f.sig, SQLERRM);
            END;
            /* variants: one argument of another type, cast implicitly by pg_catalog */
            IF f.pronargs BETWEEN 1 AND 2 AND f.provariadic = 0 AND f.no_out THEN
                FOR pos IN 1 .. f.pronargs LOOP
                    FOREACH t IN ARRAY types LOOP
                        SELECT array_agg(CASE WHEN u.i = pos THEN t ELSE format_type(u.oid, NULL) END
                                         ORDER BY u.i)
                          INTO vtypes FROM unnest(f.argoids) WITH ORDINALITY u(oid, i);
                        CONTINUE WHEN EXISTS (
                            SELECT 1 FROM pg_proc q
                             WHERE q.pronamespace = 'pg_catalog'::regnamespace
                               AND q.proname = f.proname
                               AND q.proargtypes::oid[] = (SELECT array_agg(x::regtype::oid ORDER BY i)
                                                             FROM unnest(vtypes) WITH ORDINALITY v(x, i)));
                        BEGIN
                            EXECUTE format('SELECT pg_typeof(s.x)::text FROM (SELECT %s) v LEFT JOIN'
                                           ' LATERAL pg_catalog.%I(%s) s(x) ON true',
                                           (SELECT string_agg(format('NULL::%s AS a%s', x, i), ', ')
                                              FROM unnest(vtypes) WITH ORDINALITY v(x, i)),
                                           f.proname,
                                           (SELECT string_agg('v.a' || i, ', ')
                                              FROM unnest(vtypes) WITH ORDINALITY v(x, i)))
                                INTO res;
                            EXECUTE format('CREATE FUNCTION app.%I(%s) RETURNS %s%s LANGUAGE sql AS %L',
                                           f.proname, array_to_string(vtypes, ', '),
                                           CASE WHEN f.proretset THEN 'SETOF ' ELSE '' END, res,
                                           format('SELECT app.record(%L); SELECT * FROM pg_catalog.%I(%s)',
                                                  format('function %s(%s)', f.proname,
                                                         array_to_string(vtypes, ',')),
                                                  f.proname, callargs));
                            variants := variants + 1;
                        EXCEPTION WHEN OTHERS THEN
                            NULL;       /* not callable so, or made already from another overload */
                        END;
                    END LOOP;
                END LOOP;
            END IF;
        ELSIF f.prokind = 'a' THEN
            SELECT g.aggkind, tf.proname AS transname, tf.proisstrict AS transstrict,
                   format_type(g.aggtranstype, NULL) AS stype, g.agginitval, g.aggfinalextra,
                   (SELECT 'pg_catalog.' || quote_ident(ff.proname) FROM pg_proc ff
                     WHERE ff.oid = g.aggfinalfn) AS finalfn,
                   (SELECT y.typtype = 'p' AND y.typname <> ALL (polymorphic)
                      FROM pg_type y WHERE y.oid = g.aggtranstype) AS pseudo_state
              INTO a
              FROM pg_aggregate g JOIN pg_proc tf ON tf.oid = g.aggtransfn
             WHERE g.aggfnoid = f.oid;
            IF a.aggkind <> 'n' OR a.pseudo_state OR a.aggfinalextra THEN
                skipped := skipped || format('%s (aggregate of kind %s, state %s)',
                                             f.sig, a.aggkind, a.stype);
                CONTINUE;
            END IF;
            SELECT string_agg(format_type(u.oid, NULL), ', ' ORDER BY u.i) INTO argtypes
              FROM unnest(f.argoids) WITH ORDINALITY u(oid, i);
            SELECT string_agg('$' || i, ', ' ORDER BY i) INTO callargs
              FROM generate_series(1, f.pronargs + 1) i;
            fn := 'app._agg' || n;
            BEGIN
                EXECUTE format('CREATE FUNCTION %s(%s) RETURNS %s LANGUAGE sql %s AS %L',
                               fn, concat_ws(', ', a.stype, argtypes), a.stype,
                               CASE WHEN a.transstrict THEN 'STRICT' ELSE '' END,
                               format('SELECT app.record(%L); SELECT pg_catalog.%I(%s)',
                                      'aggregate ' || f.sig, a.transname, callargs));
                EXECUTE format('CREATE AGGREGATE app.%I(%s) (SFUNC = %s, STYPE = %s%s%s)',
                               f.proname, COALESCE(argtypes, '*'), fn, a.stype,
                               CASE WHEN a.finalfn IS NOT NULL
                                    THEN ', FINALFUNC = ' || a.finalfn ELSE '' END,
                               CASE WHEN a.agginitval IS NOT NULL
                                    THEN ', INITCOND = ' || quote_literal(a.agginitval) ELSE '' END);
                aggregates := aggregates + 1;
            EXCEPTION WHEN OTHERS THEN
                skipped := skipped || format('%s (%s)', f.sig, SQLERRM);
            END;
        ELSE
            skipped := skipped || format('%s (kind %s)', f.sig, f.prokind);
        END IF;
    END LOOP;
END
$plant$;
"""

SEARCH_PATHS = ["app", "app, pg_catalog"]


def called_functions():
    """Names followed by "(" in jobflow's SQL scripts and in the string
    literals of its C sources (most are no functions of pg_catalog: the
    planting keeps the names pg_catalog has)."""
    names = set()
    call = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
    for path in glob.glob(os.path.join(REPO, "jobflow--*.sql")) + \
            [os.path.join(REPO, "src", "install_prelude.sql"),
             os.path.join(REPO, "src", "jobflow_net.sql")]:
        with open(path) as f:
            names |= {m.lower() for m in call.findall(f.read())}
    for path in glob.glob(os.path.join(REPO, "src", "**", "*.c"), recursive=True):
        with open(path) as f:
            for literal in re.findall(r'"((?:[^"\\\n]|\\.)*)"', f.read()):
                names |= {m.lower() for m in call.findall(literal)}
    return names


# -------------------------------------------------------------------------
# The calls
# -------------------------------------------------------------------------

def F(*names):
    """Coverage: EXECUTE of jobflow.<name> (any of its overloads)."""
    return {("jobflow." + n, "EXECUTE") for n in names}


def R(name, *privileges):
    """Coverage: these privileges on the relation jobflow.<name>."""
    return {("jobflow." + name, p) for p in privileges}


def NF(*names):
    """Coverage: EXECUTE of net.<name> (extension jobflow_net)."""
    return {("net." + n, "EXECUTE") for n in names}


def NR(name, *privileges):
    """Coverage: these privileges on the relation net.<name>."""
    return {("net." + name, p) for p in privileges}


class Call:
    """One path of the API: statements run in one session, in autocommit
    mode (an explicit BEGIN makes them one transaction), with the context's
    values as named parameters.  must: "succeed" (the path was really
    taken), "refuse" (the grants do not allow it), or None.  save: the
    context key that takes the first column of the last row returned."""

    def __init__(self, name, covers, *sql, must=None, save=None, copy_in=None):
        self.name = name
        self.covers = set(covers)
        self.sql = sql
        self.must = must
        self.save = save
        self.copy_in = copy_in

    def run(self, conn, ctx):
        """None, or the error as "SQLSTATE message"."""
        try:
            with conn.cursor() as cur:
                for stmt in self.sql:
                    if stmt.startswith("COPY") and "FROM STDIN" in stmt:
                        cur.copy_expert(stmt, io.StringIO(self.copy_in % ctx))
                    elif stmt.startswith("COPY"):
                        cur.copy_expert(stmt, io.StringIO())
                    else:
                        cur.execute(stmt, ctx)
                        if self.save and cur.description:
                            row = cur.fetchone()
                            if row is not None and row[0] is not None:
                                ctx[self.save] = row[0]
            return None
        except psycopg2.Error as e:
            return "%s %s" % (e.pgcode, (e.pgerror or str(e)).strip().splitlines()[0])
        finally:
            if conn.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
                with conn.cursor() as cur:
                    cur.execute("ROLLBACK")


SECRET_HEADERS = '{"X-Api-Key": {"secret": "%(secret)s"}}'
COPY_ROWS = "%(url)s&copy=1\t" + SECRET_HEADERS + "\t2100-01-01 00:00:00+00\n" \
            "%(url)s&copy=2\t{}\t2100-01-01 00:00:00+00\n"

# ---- client certificates (issue 25, item 7) ----
# PEM in shape only: set_client_certificate() checks the form, the
# handshake the rest; the origin is https, as a certificate's must be
PEM_CERT = "'-----BEGIN CERTIFICATE-----\nMIIBhostile\n-----END CERTIFICATE-----\n'"
PEM_KEY = "'-----BEGIN PRIVATE KEY-----\nMIIEhostile\n-----END PRIVATE KEY-----\n'"
CERT_ORIGINS = "ARRAY['https://127.0.0.1:1']"
# ---- end of client certificates ----

# what a tenant (a member of jobflow_user) may do, and what it may not
TENANT_CALLS = [
    Call("set_secret", F("set_secret"), set_secret_sql("secret", "secret_value"), must="succeed"),
    Call("set_secret: a second one", F("set_secret"), set_secret_sql("secret2", "secret_value")),
    Call("set_secret for_role itself", F("set_secret"),
         set_secret_sql("secret2", "secret_value", for_role="me")),
    Call("secret_names", R("secret_names", "SELECT"), "SELECT * FROM jobflow.secret_names"),
    Call("schedule: a header secret", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, run_at => now() + interval '1 hour',"
         " headers => %(secret_headers)s)", must="succeed", save="task"),
    Call("schedule: a second one", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, run_at => now() + interval '1 hour',"
         " headers => %(secret_headers)s)", save="task2"),
    Call("schedule: every argument", F("schedule", "_json_content_type"),
         "SELECT jobflow.schedule(url => %(url)s, run_at => now() + interval '1 hour',"
         " body => '{\"a\": 1}',"
         " headers => '{\"Content-Type\": \"application/json\", \"X-Test\": \"h\"}',"
         " method => 'put', timeout_ms => 1000, max_attempts => 2, queue => %(queue)s,"
         " key => %(key)s || '-all', on_duplicate => 'error', notify => true)"),
    Call("schedule: body_text", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, body_text => 'a=1',"
         " content_type => 'application/x-www-form-urlencoded', headers => %(secret_headers)s)"),
    Call("schedule: body_bytes", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, body_bytes => '\\x00ff'::bytea,"
         " run_at => now() + interval '1 hour')"),
    Call("schedule: a key", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, key => %(key)s, run_at => now() + interval '1 hour',"
         " headers => %(secret_headers)s)", save="keyed"),
    Call("schedule: the key again, ignore", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, key => %(key)s, headers => %(secret_headers)s)"),
    Call("schedule: the key again, replace", F("schedule", "_replace_task"),
         "SELECT jobflow.schedule(%(url)s || '&replaced', key => %(key)s,"
         " on_duplicate => 'replace',"
         " run_at => now() + interval '2 hours', headers => %(secret_headers)s)", must="succeed"),
    Call("schedule: the key again, error", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, key => %(key)s, on_duplicate => 'error')"),
    Call("schedule: a flow key", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, flow_key => %(key)s || '-flow',"
         " queue => %(queue)s || '-flow', run_at => now() + interval '1 hour',"
         " headers => %(secret_headers)s)", must="succeed"),
    Call("_replace_task", F("_replace_task"),
         "SELECT jobflow._replace_task(%(keyed)s, %(url)s, now() + interval '3 hours', NULL, NULL,"
         " %(secret_headers)s::jsonb, 'POST', 1000, 3, 'default', NULL)"),
    Call("_json_content_type", F("_json_content_type"),
         "SELECT jobflow._json_content_type(NULL, '{\"content-type\": \"application/json\"}')"),
    Call("_current_role", F("_current_role"), "SELECT jobflow._current_role()"),
    Call("reschedule", F("reschedule"),
         "SELECT jobflow.reschedule(%(task)s, now() + interval '2 hours')", must="succeed"),
    Call("cancel", F("cancel"), "SELECT jobflow.cancel(%(task)s)", must="succeed"),
    Call("retry a cancelled task", F("retry"),
         "SELECT jobflow.retry(%(task)s, now() + interval '1 hour')", must="succeed"),
    Call("retry: due now", F("retry"), "SELECT jobflow.retry(%(task)s)"),
    Call("retry_failed", F("retry_failed"), "SELECT jobflow.retry_failed()"),
    Call("retry_failed of a queue since", F("retry_failed"),
         "SELECT jobflow.retry_failed(%(queue)s, now() - interval '1 hour')"),
    Call("failed_tasks", R("failed_tasks", "SELECT"), "SELECT * FROM jobflow.failed_tasks"),
    Call("tasks: select", R("tasks", "SELECT"),
         "SELECT * FROM jobflow.tasks WHERE owner = %(me)s::regrole"),
    Call("tasks: select for update", R("tasks", "SELECT", "UPDATE"),
         "SELECT id FROM jobflow.tasks WHERE id = %(task2)s FOR UPDATE"),
    Call("task_log: select", R("task_log", "SELECT"), "SELECT * FROM jobflow.task_log"),
    Call("installation: select", R("installation", "SELECT"), "SELECT * FROM jobflow.installation"),
    Call("queues: select", R("queues", "SELECT"), "SELECT * FROM jobflow.queues"),
    Call("INSERT INTO tasks with a header secret (the issue's reproduction)", R("tasks", "INSERT"),
         "INSERT INTO jobflow.tasks (url, headers) VALUES (%(url)s, %(secret_headers)s)",
         must="succeed"),
    Call("INSERT INTO tasks: every column it may set", R("tasks", "INSERT"),
         "INSERT INTO jobflow.tasks (url, method, headers, body, content_type, run_at,"
         " max_attempts, timeout_ms, queue, key, notify, flow_key)"
         " VALUES (%(url)s, 'PATCH', %(secret_headers)s, 'b', 'text/plain',"
         " now() + interval '1 hour', 3, 5000, %(queue)s, %(key)s || '-insert', true,"
         " %(key)s || '-insert-flow')",
         must="succeed"),
    Call("INSERT INTO tasks: body_bytes", R("tasks", "INSERT"),
         "INSERT INTO jobflow.tasks (url, body_bytes, run_at)"
         " VALUES (%(url)s, '\\x01'::bytea, now() + interval '1 hour')"),
    Call("INSERT INTO tasks ... SELECT", R("tasks", "INSERT"),
         "INSERT INTO jobflow.tasks (url, run_at, headers)"
         " SELECT %(url)s || '&n=' || g, now() + interval '1 hour', %(secret_headers)s::jsonb"
         "   FROM generate_series(1, 3) g"),
    Call("INSERT INTO tasks ... ON CONFLICT DO NOTHING", R("tasks", "INSERT"),
         "INSERT INTO jobflow.tasks (url, key, headers)"
         " VALUES (%(url)s, %(key)s, %(secret_headers)s)"
         " ON CONFLICT DO NOTHING"),
    Call("INSERT INTO tasks ... RETURNING", R("tasks", "INSERT", "SELECT"),
         "INSERT INTO jobflow.tasks (url, run_at) VALUES (%(url)s, now() + interval '1 hour')"
         " RETURNING id", save="row_task"),
    Call("UPDATE tasks: run_at of a task with a header secret", R("tasks", "UPDATE"),
         "UPDATE jobflow.tasks SET run_at = now() + interval '3 hours' WHERE id = %(task2)s",
         must="succeed"),
    Call("UPDATE tasks: cancel", R("tasks", "UPDATE"),
         "UPDATE jobflow.tasks SET state = 'cancelled' WHERE id = %(row_task)s"),
    Call("UPDATE tasks: url", set(),
         "UPDATE jobflow.tasks SET url = %(url)s WHERE id = %(task2)s", must="refuse"),
    Call("UPDATE tasks: owner", set(),
         "UPDATE jobflow.tasks SET owner = 'postgres' WHERE id = %(task2)s", must="refuse"),
    Call("INSERT INTO tasks: owner", set(),
         "INSERT INTO jobflow.tasks (url, owner) VALUES (%(url)s, 'postgres')", must="refuse"),
    Call("DELETE FROM tasks", set(), "DELETE FROM jobflow.tasks WHERE id = %(task2)s",
         must="refuse"),
    Call("TRUNCATE tasks", set(), "TRUNCATE jobflow.tasks", must="refuse"),
    Call("LOCK tasks", set(), "BEGIN", "LOCK TABLE jobflow.tasks IN ACCESS EXCLUSIVE MODE",
         must="refuse"),
    Call("COPY INTO task_import", R("task_import", "INSERT"),
         "COPY jobflow.task_import (url, headers, run_at) FROM STDIN", copy_in=COPY_ROWS,
         must="succeed"),
    Call("INSERT INTO task_import", R("task_import", "INSERT"),
         "INSERT INTO jobflow.task_import (url, headers) VALUES (%(url)s, %(secret_headers)s)"),
    Call("COPY INTO tasks", set(), "COPY jobflow.tasks (url) FROM STDIN",
         copy_in="%(url)s\n", must="refuse"),
    Call("COPY INTO task_log", set(),
         "COPY jobflow.task_log (task_id, attempt, owner, scheduled_at, outcome) FROM STDIN",
         copy_in="1\t1\tpostgres\t2020-01-01 00:00:00+00\tsucceeded\n", must="refuse"),
    Call("COPY INTO cron_timers", set(),
         "COPY jobflow.cron_timers (name, schedule, url) FROM STDIN",
         copy_in="c\t* * * * *\t%(url)s\n", must="refuse"),
    Call("COPY tasks TO", R("tasks", "SELECT"), "COPY jobflow.tasks TO STDOUT"),
    Call("COPY task_log TO", R("task_log", "SELECT"), "COPY jobflow.task_log TO STDOUT"),
    Call("schedule_cron", F("schedule_cron", "_json_content_type"),
         "SELECT jobflow.schedule_cron(%(timer)s, '0 3 * * *', %(url)s, body => '{}',"
         " headers => %(secret_headers)s)", must="succeed", save="timer_id"),
    Call("schedule_cron: replace, every argument", F("schedule_cron"),
         "SELECT jobflow.schedule_cron(%(timer)s, '*/5 * * * * *', %(url)s, body_text => 'x',"
         " content_type => 'text/plain', headers => %(secret_headers)s, method => 'PUT',"
         " timezone => 'Europe/Paris', timeout_ms => 1000, max_attempts => 2, queue => %(queue)s,"
         " active => true, missed => 'once')", must="succeed"),
    Call("set_cron_active false", F("set_cron_active"),
         "SELECT jobflow.set_cron_active(%(timer)s, false)", must="succeed"),
    Call("set_cron_active true", F("set_cron_active"),
         "SELECT jobflow.set_cron_active(%(timer)s, true)"),
    # ---- cron overlap and conveniences (issue 25, items 3 and 4) ----
    Call("schedule_cron: overlap", F("schedule_cron", "_json_content_type"),
         "SELECT jobflow.schedule_cron(%(timer)s, '0 3 * * *', %(url)s, body => '{}',"
         " headers => %(secret_headers)s, overlap => 'skip')", must="succeed"),
    Call("run_cron_now its own timer", F("run_cron_now"),
         "SELECT jobflow.run_cron_now(%(timer)s)", must="succeed"),
    Call("run_cron_now: a name it has no timer of", F("run_cron_now"),
         "SELECT jobflow.run_cron_now(%(timer)s || '-none')"),
    Call("cron_preview", F("cron_preview"),
         "SELECT * FROM jobflow.cron_preview('30 2 * * *', 'Europe/Berlin', 20)", must="succeed"),
    Call("INSERT INTO cron_timers: overlap", R("cron_timers", "INSERT"),
         "INSERT INTO jobflow.cron_timers (name, schedule, url, overlap, active)"
         " VALUES (%(timer)s || '-overlap', '@daily', %(url)s, 'queue', false)", must="succeed"),
    Call("UPDATE cron_timers: overlap", R("cron_timers", "UPDATE"),
         "UPDATE jobflow.cron_timers SET overlap = 'allow' WHERE name = %(timer)s || '-overlap'",
         must="succeed"),
    Call("UPDATE cron_timers: skipped", set(),
         "UPDATE jobflow.cron_timers SET skipped = 0, last_skipped_at = NULL"
         " WHERE name = %(timer)s", must="refuse"),
    # ---- end of cron overlap and conveniences ----
    # ---- explain (issue 24, item 5) ----
    Call("explain its own task", F("explain"), "SELECT * FROM jobflow.explain(%(task2)s)",
         must="succeed"),
    Call("explain_cron its own timer", F("explain_cron"),
         "SELECT * FROM jobflow.explain_cron(%(timer)s)", must="succeed"),
    # ---- end of explain ----
    # ---- circuits (issue 25, item 5) ----
    Call("endpoints", R("endpoints", "SELECT") | F("_endpoints"),
         "SELECT * FROM jobflow.endpoints", must="succeed"),
    Call("_endpoints", F("_endpoints"), "SELECT * FROM jobflow._endpoints()", must="succeed"),
    Call("reset_circuit of its own", F("reset_circuit"),
         "SELECT jobflow.reset_circuit(%(url)s)", must="succeed"),
    Call("reset_circuit owner itself", F("reset_circuit"),
         "SELECT jobflow.reset_circuit(%(url)s, %(me)s::regrole)"),
    # ---- end of circuits ----
    Call("cron: select", R("cron", "SELECT"), "SELECT * FROM jobflow.cron"),
    Call("cron_timers: select", R("cron_timers", "SELECT"), "SELECT * FROM jobflow.cron_timers"),
    Call("INSERT INTO cron_timers with a header secret", R("cron_timers", "INSERT"),
         "INSERT INTO jobflow.cron_timers (name, schedule, url, headers)"
         " VALUES (%(timer)s || '-row', '*/5 * * * *', %(url)s, %(secret_headers)s)",
         must="succeed"),
    Call("INSERT INTO cron_timers: every column it may set", R("cron_timers", "INSERT"),
         "INSERT INTO jobflow.cron_timers (name, schedule, timezone, url, method, headers, body,"
         " content_type, timeout_ms, max_attempts, queue, active, missed)"
         " VALUES (%(timer)s || '-all', '@hourly', 'UTC', %(url)s, 'GET', %(secret_headers)s, NULL,"
         " NULL, 1000, 2, %(queue)s, false, 'once')"),
    Call("UPDATE cron_timers: url and a header secret", R("cron_timers", "UPDATE"),
         "UPDATE jobflow.cron_timers SET url = %(url)s || '&u=1', headers = %(secret_headers)s,"
         " schedule = '*/10 * * * *' WHERE name = %(timer)s || '-row'", must="succeed"),
    Call("UPDATE cron_timers: pause", R("cron_timers", "UPDATE"),
         "UPDATE jobflow.cron_timers SET active = false WHERE name = %(timer)s || '-row'"),
    Call("UPDATE cron_timers: nothing", R("cron_timers", "UPDATE"),
         "UPDATE jobflow.cron_timers SET url = url WHERE false"),
    Call("UPDATE cron_timers: owner", set(),
         "UPDATE jobflow.cron_timers SET owner = 'postgres' WHERE name = %(timer)s",
         must="refuse"),
    Call("DELETE FROM cron_timers", set(),
         "DELETE FROM jobflow.cron_timers WHERE name = %(timer)s || '-all'", must="refuse"),
    Call("_delete_cron_timer", F("_delete_cron_timer"),
         "SELECT jobflow._delete_cron_timer((SELECT id FROM jobflow.cron_timers"
         " WHERE name = %(timer)s || '-row'))", must="succeed"),
    Call("unschedule_cron", F("unschedule_cron", "_delete_cron_timer"),
         "SELECT jobflow.unschedule_cron(%(timer)s)", must="succeed"),
    Call("cron_next", F("cron_next"),
         "SELECT jobflow.cron_next('30 2 * * *', 'Europe/Paris', now())", must="succeed"),
    Call("set_queue", F("set_queue"),
         "SELECT jobflow.set_queue(%(queue)s, max_concurrent => 2, max_per_second => 5,"
         " priority => 1, retention => '1 day')", must="succeed"),
    Call("set_queue owner itself", F("set_queue"),
         "SELECT jobflow.set_queue(%(queue)s, max_concurrent => 3, owner => %(me)s::regrole)"),
    Call("set_queue log_attempts", F("set_queue"),
         "SELECT jobflow.set_queue(%(queue)s, max_concurrent => 3, log_attempts => 'failures')",
         must="succeed"),
    Call("set_queue flow control per key", F("set_queue"),
         "SELECT jobflow.set_queue(%(queue)s || '-flow', max_per_second_per_key => 5,"
         " ordered => true, dead_letter => 'skip')", must="succeed"),
    Call("set_queue per-key cap against ordered", F("set_queue"),
         "SELECT jobflow.set_queue(%(queue)s || '-flow', max_concurrent_per_key => 2,"
         " ordered => true)"),
    Call("pause_queue", F("pause_queue"), "SELECT jobflow.pause_queue(%(queue)s)", must="succeed"),
    Call("pause_queue owner itself", F("pause_queue"),
         "SELECT jobflow.pause_queue(%(queue)s, owner => %(me)s::regrole)"),
    Call("resume_queue", F("resume_queue"), "SELECT jobflow.resume_queue(%(queue)s)",
         must="succeed"),
    Call("resume_queue: never paused", F("resume_queue"),
         "SELECT jobflow.resume_queue('never-paused')"),
    Call("drop_queue", F("drop_queue"), "SELECT jobflow.drop_queue(%(queue)s)", must="succeed"),
    Call("drop_queue owner itself", F("drop_queue"),
         "SELECT jobflow.drop_queue(%(queue)s, owner => %(me)s::regrole)"),
    Call("INSERT INTO queues", set(),
         "INSERT INTO jobflow.queues (owner, name) VALUES (%(me)s::regrole, 'x')", must="refuse"),
    Call("create_signing_secret", F("create_signing_secret"),
         "SELECT jobflow.create_signing_secret()", must="succeed"),
    Call("create_signing_secret: rotate", F("create_signing_secret"),
         "SELECT jobflow.create_signing_secret(grace => interval '1 hour')"),
    Call("create_signing_secret for_role itself", F("create_signing_secret"),
         "SELECT jobflow.create_signing_secret(for_role => %(me)s::regrole)"),
    Call("signing_keys", R("signing_keys", "SELECT"), "SELECT * FROM jobflow.signing_keys"),
    Call("revoke_signing_secret: previous", F("revoke_signing_secret"),
         "SELECT jobflow.revoke_signing_secret(only_previous => true)", must="succeed"),
    Call("revoke_signing_secret", F("revoke_signing_secret"),
         "SELECT jobflow.revoke_signing_secret(for_role => %(me)s::regrole)"),
    Call("signing_secrets: select", set(), "SELECT * FROM jobflow.signing_secrets", must="refuse"),
    Call("secrets: select", set(), "SELECT * FROM jobflow.secrets", must="refuse"),
    Call("import_pg_cron", set(), "SELECT * FROM jobflow.import_pg_cron()", must="refuse"),
    Call("drop_secret: in use", F("drop_secret"), "SELECT jobflow.drop_secret(%(secret)s)"),
    Call("drop_secret", F("drop_secret"), "SELECT jobflow.drop_secret(%(secret2)s)",
         must="succeed"),
    Call("drop_secret for_role itself", F("drop_secret"),
         "SELECT jobflow.drop_secret(%(secret2)s, for_role => %(me)s::regrole)"),
    # ---- client certificates (issue 25, item 7) ----
    Call("set_client_certificate", F("set_client_certificate"),
         "SELECT jobflow.set_client_certificate(%(secret)s, " + PEM_CERT + ", " + PEM_KEY + ", "
         + CERT_ORIGINS + ")", must="succeed"),
    Call("set_client_certificate for_role itself", F("set_client_certificate"),
         "SELECT jobflow.set_client_certificate(%(secret2)s, " + PEM_CERT + ", " + PEM_KEY + ", "
         + CERT_ORIGINS + ", for_role => %(me)s::regrole)"),
    Call("client_certificate_names", R("client_certificate_names", "SELECT"),
         "SELECT * FROM jobflow.client_certificate_names", must="succeed"),
    Call("client_certificates: select", set(), "SELECT * FROM jobflow.client_certificates",
         must="refuse"),
    Call("set_queue_client_certificate", F("set_queue_client_certificate"),
         "SELECT jobflow.set_queue_client_certificate(%(queue)s || '-tls', %(secret)s)",
         must="succeed"),
    Call("set_queue_client_certificate owner itself", F("set_queue_client_certificate"),
         "SELECT jobflow.set_queue_client_certificate(%(queue)s || '-tls', %(secret)s,"
         " owner => %(me)s::regrole)"),
    Call("drop_client_certificate: in use", F("drop_client_certificate"),
         "SELECT jobflow.drop_client_certificate(%(secret)s)"),
    Call("set_queue_client_certificate: none", F("set_queue_client_certificate"),
         "SELECT jobflow.set_queue_client_certificate(%(queue)s || '-tls', NULL)", must="succeed"),
    Call("drop_client_certificate", F("drop_client_certificate"),
         "SELECT jobflow.drop_client_certificate(%(secret)s)", must="succeed"),
    Call("drop_client_certificate for_role itself", F("drop_client_certificate"),
         "SELECT jobflow.drop_client_certificate(%(secret2)s, for_role => %(me)s::regrole)"),
    # ---- end of client certificates ----
    Call("worker_status", F("worker_status"), "SELECT * FROM jobflow.worker_status()",
         must="succeed"),
    Call("outcome_channel", F("outcome_channel"), "SELECT jobflow.outcome_channel()",
         must="succeed"),
    Call("outcome_channel for_role itself", F("outcome_channel"),
         "SELECT jobflow.outcome_channel(for_role => %(me)s::regrole)"),
    Call("listen_outcomes", F("listen_outcomes"), "SELECT jobflow.listen_outcomes()",
         must="succeed"),
    Call("listen_outcomes for_role itself", F("listen_outcomes"),
         "SELECT jobflow.listen_outcomes(for_role => %(me)s::regrole)"),
    Call("_outcome_channel", set(), "SELECT jobflow._outcome_channel(%(me)s::regrole)",
         must="refuse"),
    Call("_origin", set(), "SELECT jobflow._origin(%(url)s)", must="refuse"),
    # ---- importing pg_cron's jobs (issue 26, item 2): a superuser's only;
    # the command text is parsed, never run ----
    Call("import_pg_cron", set(), "SELECT * FROM jobflow.import_pg_cron(dry_run => false)",
         must="refuse"),
    Call("_pg_net_call", set(),
         "SELECT jobflow._pg_net_call('select net.http_get(url := app.nope())')", must="refuse"),
    Call("outcome_key: select", set(), "SELECT * FROM jobflow.outcome_key", must="refuse"),
    Call("nextval of tasks_id_seq", R("tasks_id_seq", "USAGE"),
         "SELECT nextval('jobflow.tasks_id_seq')"),
    Call("nextval of cron_timers_id_seq", R("cron_timers_id_seq", "USAGE"),
         "SELECT nextval('jobflow.cron_timers_id_seq')"),
    Call("metrics", set(), "SELECT jobflow.metrics()", must="refuse"),
    Call("stats", set(), "SELECT * FROM jobflow.stats", must="refuse"),
    Call("wakeups", set(), "SELECT * FROM jobflow.wakeups()", must="refuse"),
    Call("prune", set(), "SELECT jobflow.prune(interval '3650 days')", must="refuse"),
    Call("_materialize_cron", set(),
         "SELECT * FROM jobflow._materialize_cron(now() + interval '1 minute')", must="refuse"),
    Call("_webhook_signature", set(),
         "SELECT jobflow._webhook_signature('whsec_AAAA', 'id', 1, '')", must="refuse"),
    Call("a prepared transaction", R("tasks", "INSERT"),
         "BEGIN",
         "INSERT INTO jobflow.tasks (url, headers) VALUES (%(url)s, %(secret_headers)s)",
         "PREPARE TRANSACTION %(gid)s",
         "COMMIT PREPARED %(gid)s"),
    Call("LISTEN and NOTIFY", set(),
         "LISTEN jobflow_outcome", "NOTIFY jobflow, 'cron'",
         "NOTIFY jobflow_outcome, '1:succeeded'",
         "UNLISTEN *"),
    # ---- extension jobflow_net (issue 26): pg_net's interface ----
    Call("net.http_post", NF("http_post", "jobflow_request", "_schedule", "_urlencode"),
         "SELECT net.http_post(%(url)s, '{\"a\": 1}', '{\"p\": \"x y\"}',"
         " '{\"X-Test\": \"1\"}', 2000)", must="succeed", save="net_post"),
    Call("net.http_get", NF("http_get", "jobflow_request", "_schedule", "_urlencode"),
         "SELECT net.http_get(%(url)s, '{\"p\": \"\u00e9\"}', %(secret_headers)s)",
         must="succeed"),
    Call("net.http_delete", NF("http_delete"),
         "SELECT net.http_delete(%(url)s, body => '{}')", must="succeed"),
    Call("net.jobflow_request", NF("jobflow_request", "_urlencode"),
         "SELECT net.jobflow_request('post', %(url)s, '{\"q\": \"a&b\"}')", must="succeed"),
    Call("net._schedule", NF("_schedule"),
         "SELECT net._schedule(jsonb_build_object('url', %(url)s, 'method', 'GET',"
         " 'headers', '{}'::jsonb, 'timeout_ms', 1000))", must="succeed"),
    Call("net._http_response", NR("_http_response", "SELECT"),
         "SELECT * FROM net._http_response", must="succeed"),
    Call("net._http_collect_response", NF("_http_collect_response"),
         "SELECT net._http_collect_response(%(net_post)s)", must="succeed"),
    Call("net.http_collect_response", NF("http_collect_response"),
         "SELECT net.http_collect_response(%(net_post)s)", must="succeed"),
    Call("net._await_response", NF("_await_response"),
         "SET statement_timeout = '3s'",
         "SELECT net._await_response(%(net_post)s)", "RESET statement_timeout"),
    # ---- end of jobflow_net ----
]

# a member of jobflow_monitor (and of pg_monitor)
MONITOR_CALLS = [
    Call("metrics", F("metrics"), "SELECT jobflow.metrics()", must="succeed"),
    Call("stats", R("stats", "SELECT") | F("_figures"), "SELECT * FROM jobflow.stats",
         must="succeed"),
    Call("_figures", F("_figures"), "SELECT * FROM jobflow._figures()", must="succeed"),
    Call("worker_status", F("worker_status"), "SELECT * FROM jobflow.worker_status()",
         must="succeed"),
    Call("tasks: select", set(), "SELECT * FROM jobflow.tasks", must="refuse"),
    Call("task_log: select", set(), "SELECT * FROM jobflow.task_log", must="refuse"),
    Call("COPY INTO task_log", set(),
         "COPY jobflow.task_log (task_id, attempt, owner, scheduled_at, outcome) FROM STDIN",
         copy_in="1\t1\tpostgres\t2020-01-01 00:00:00+00\tsucceeded\n", must="refuse"),
    Call("schedule", set(), "SELECT jobflow.schedule(%(url)s)", must="refuse"),
    Call("INSERT INTO tasks", set(), "INSERT INTO jobflow.tasks (url) VALUES (%(url)s)",
         must="refuse"),
    Call("cron_next", set(), "SELECT jobflow.cron_next('* * * * *')", must="refuse"),
    Call("run_cron_now", set(), "SELECT jobflow.run_cron_now('x')", must="refuse"),
    Call("cron_preview", set(), "SELECT * FROM jobflow.cron_preview('* * * * *')", must="refuse"),
    Call("outcome_channel", set(), "SELECT jobflow.outcome_channel()", must="refuse"),
    Call("listen_outcomes", set(), "SELECT jobflow.listen_outcomes()", must="refuse"),
    # ---- circuits (issue 25, item 5) ----
    Call("endpoints", set(), "SELECT * FROM jobflow.endpoints", must="refuse"),
    Call("reset_circuit", set(), "SELECT jobflow.reset_circuit(%(url)s)", must="refuse"),
    # ---- end of circuits ----
    # ---- extension jobflow_net (issue 26) ----
    Call("net.http_get", set(), "SELECT net.http_get(%(url)s)", must="refuse"),
    Call("net._http_response", set(), "SELECT * FROM net._http_response", must="refuse"),
    # ---- end of jobflow_net ----
]

# a member of jobflow_admin, on the tenant's objects (made by admin_setup)
ADMIN_CALLS = [
    Call("set_secret of its own", F("set_secret"), set_secret_sql("secret", "secret_value"),
         must="succeed"),
    Call("schedule with its own secret", F("schedule"),
         "SELECT jobflow.schedule(%(url)s, run_at => now() + interval '1 hour',"
         " headers => %(secret_headers)s)", must="succeed"),
    Call("INSERT INTO tasks with its own secret", R("tasks", "INSERT"),
         "INSERT INTO jobflow.tasks (url, headers, run_at)"
         " VALUES (%(url)s, %(secret_headers)s, now() + interval '1 hour')", must="succeed"),
    Call("set_secret for_role tenant", F("set_secret"),
         set_secret_sql("tsecret", "secret_value", for_role="tenant"), must="succeed"),
    Call("set_secret for_role tenant: another", F("set_secret"),
         set_secret_sql("tsecret2", "secret_value", for_role="tenant")),
    Call("drop_secret for_role tenant", F("drop_secret"),
         "SELECT jobflow.drop_secret(%(tsecret2)s, for_role => %(tenant)s::regrole)",
         must="succeed"),
    Call("drop_secret for_role tenant: in use", F("drop_secret"),
         "SELECT jobflow.drop_secret(%(tsecret)s, for_role => %(tenant)s::regrole)"),
    Call("create_signing_secret for_role tenant", F("create_signing_secret"),
         "SELECT jobflow.create_signing_secret(for_role => %(tenant)s::regrole)", must="succeed"),
    Call("create_signing_secret for_role tenant: rotate", F("create_signing_secret"),
         "SELECT jobflow.create_signing_secret(for_role => %(tenant)s::regrole,"
         " grace => interval '1 minute')"),
    Call("revoke_signing_secret for_role tenant: previous", F("revoke_signing_secret"),
         "SELECT jobflow.revoke_signing_secret(for_role => %(tenant)s::regrole,"
         " only_previous => true)",
         must="succeed"),
    Call("revoke_signing_secret for_role tenant", F("revoke_signing_secret"),
         "SELECT jobflow.revoke_signing_secret(for_role => %(tenant)s::regrole)"),
    # ---- client certificates (issue 25, item 7) ----
    Call("set_client_certificate for_role tenant", F("set_client_certificate"),
         "SELECT jobflow.set_client_certificate(%(tsecret2)s, " + PEM_CERT + ", " + PEM_KEY + ", "
         + CERT_ORIGINS + ", for_role => %(tenant)s::regrole)", must="succeed"),
    Call("set_queue_client_certificate owner tenant", F("set_queue_client_certificate"),
         "SELECT jobflow.set_queue_client_certificate(%(tqueue)s, %(tsecret2)s,"
         " owner => %(tenant)s::regrole)", must="succeed"),
    Call("the tenant's client_certificate_names", R("client_certificate_names", "SELECT"),
         "SELECT count(*) FROM jobflow.client_certificate_names WHERE owner = %(tenant)s::regrole",
         must="succeed"),
    Call("set_queue_client_certificate owner tenant: none", F("set_queue_client_certificate"),
         "SELECT jobflow.set_queue_client_certificate(%(tqueue)s, NULL,"
         " owner => %(tenant)s::regrole)", must="succeed"),
    Call("drop_client_certificate for_role tenant", F("drop_client_certificate"),
         "SELECT jobflow.drop_client_certificate(%(tsecret2)s, for_role => %(tenant)s::regrole)",
         must="succeed"),
    Call("client_certificates: select", set(), "SELECT * FROM jobflow.client_certificates",
         must="refuse"),
    # ---- end of client certificates ----
    Call("set_queue owner tenant", F("set_queue"),
         "SELECT jobflow.set_queue(%(tqueue)s, max_per_second => 10, owner => %(tenant)s::regrole)",
         must="succeed"),
    Call("set_queue owner tenant log_attempts", F("set_queue"),
         "SELECT jobflow.set_queue(%(tqueue)s, owner => %(tenant)s::regrole,"
         " log_attempts => 'all')", must="succeed"),
    Call("pause_queue owner tenant", F("pause_queue"),
         "SELECT jobflow.pause_queue(%(tqueue)s, owner => %(tenant)s::regrole)", must="succeed"),
    Call("resume_queue owner tenant", F("resume_queue"),
         "SELECT jobflow.resume_queue(%(tqueue)s, owner => %(tenant)s::regrole)", must="succeed"),
    Call("drop_queue owner tenant", F("drop_queue"),
         "SELECT jobflow.drop_queue(%(tqueue)s, owner => %(tenant)s::regrole)", must="succeed"),
    Call("reschedule the tenant's task", F("reschedule"),
         "SELECT jobflow.reschedule(%(ttask)s, now() + interval '2 hours')", must="succeed"),
    Call("UPDATE the tenant's tasks", R("tasks", "UPDATE"),
         "UPDATE jobflow.tasks SET run_at = now() + interval '3 hours'"
         " WHERE owner = %(tenant)s::regrole AND state = 'pending'", must="succeed"),
    Call("_replace_task of the tenant's task", F("_replace_task"),
         "SELECT jobflow._replace_task(%(ttask)s, %(url)s, now() + interval '3 hours', NULL, NULL,"
         " %(tsecret_headers)s::jsonb, 'POST', 1000, 3, 'default', NULL)"),
    # ---- explain (issue 24, item 5) ----
    Call("explain the tenant's task", F("explain"), "SELECT * FROM jobflow.explain(%(ttask)s)",
         must="succeed"),
    # ---- end of explain ----
    # ---- circuits (issue 25, item 5) ----
    Call("endpoints of every tenant", R("endpoints", "SELECT") | F("_endpoints"),
         "SELECT * FROM jobflow.endpoints", must="succeed"),
    Call("reset_circuit of the tenant", F("reset_circuit"),
         "SELECT jobflow.reset_circuit(%(url)s, %(tenant)s::regrole)", must="succeed"),
    Call("reset_circuit of every owner", F("reset_circuit"),
         "SELECT jobflow.reset_circuit(%(url)s)", must="succeed"),
    # ---- end of circuits ----
    Call("cancel the tenant's task", F("cancel"), "SELECT jobflow.cancel(%(ttask)s)",
         must="succeed"),
    Call("retry the tenant's task", F("retry"), "SELECT jobflow.retry(%(ttask)s)", must="succeed"),
    Call("retry_failed of the tenant's queue", F("retry_failed"),
         "SELECT jobflow.retry_failed(%(tqueue)s)"),
    Call("UPDATE the tenant's timer", R("cron_timers", "UPDATE"),
         "UPDATE jobflow.cron_timers SET url = %(url)s || '&admin', headers = %(tsecret_headers)s"
         " WHERE id = %(ttimer)s", must="succeed"),
    Call("schedule_cron of its own", F("schedule_cron"),
         "SELECT jobflow.schedule_cron(%(timer)s, '0 4 * * *', %(url)s,"
         " headers => %(secret_headers)s)",
         must="succeed"),
    Call("INSERT INTO cron_timers of its own", R("cron_timers", "INSERT"),
         "INSERT INTO jobflow.cron_timers (name, schedule, url, headers)"
         " VALUES (%(timer)s || '-row', '0 5 * * *', %(url)s, %(secret_headers)s)"),
    # ---- cron overlap and conveniences (issue 25, items 3 and 4) ----
    Call("run_cron_now of its own timer", F("run_cron_now"),
         "SELECT jobflow.run_cron_now(%(timer)s)", must="succeed"),
    Call("run_cron_now of the tenant's timer: not found", F("run_cron_now"),
         "SELECT jobflow.run_cron_now((SELECT name FROM jobflow.cron_timers WHERE id = %(ttimer)s))",
         must="refuse"),
    # ---- end of cron overlap and conveniences ----
    Call("set_cron_active", F("set_cron_active"),
         "SELECT jobflow.set_cron_active(%(timer)s, false)"),
    Call("unschedule_cron", F("unschedule_cron", "_delete_cron_timer"),
         "SELECT jobflow.unschedule_cron(%(timer)s)"),
    Call("_delete_cron_timer of the tenant's timer", F("_delete_cron_timer"),
         "SELECT jobflow._delete_cron_timer(%(ttimer2)s)", must="succeed"),
    Call("DELETE the tenant's timer", R("cron_timers", "DELETE", "SELECT"),
         "DELETE FROM jobflow.cron_timers WHERE id = %(ttimer)s", must="succeed"),
    Call("COPY INTO task_import", R("task_import", "INSERT"),
         "COPY jobflow.task_import (url, headers, run_at) FROM STDIN", copy_in=COPY_ROWS),
    Call("prune", F("prune"), "SELECT jobflow.prune(interval '3650 days')", must="succeed"),
    Call("wakeups", F("wakeups"), "SELECT * FROM jobflow.wakeups()", must="succeed"),
    Call("outcome_channel for_role tenant", F("outcome_channel"),
         "SELECT jobflow.outcome_channel(for_role => %(tenant)s::regrole)", must="succeed"),
    Call("listen_outcomes for_role tenant", F("listen_outcomes"),
         "SELECT jobflow.listen_outcomes(for_role => %(tenant)s::regrole)", must="succeed"),
    Call("metrics", F("metrics"), "SELECT jobflow.metrics()", must="succeed"),
    Call("stats", R("stats", "SELECT") | F("_figures"), "SELECT * FROM jobflow.stats"),
    Call("worker_status", F("worker_status"), "SELECT * FROM jobflow.worker_status()"),
    Call("the tenant's rows", R("tasks", "SELECT") | R("task_log", "SELECT")
         | R("cron_timers", "SELECT") | R("cron", "SELECT") | R("failed_tasks", "SELECT")
         | R("queues", "SELECT") | R("signing_keys", "SELECT") | R("secret_names", "SELECT")
         | R("installation", "SELECT"),
         "SELECT (SELECT count(*) FROM jobflow.tasks WHERE owner = %(tenant)s::regrole),"
         " (SELECT count(*) FROM jobflow.task_log WHERE owner = %(tenant)s::regrole),"
         " (SELECT count(*) FROM jobflow.cron_timers WHERE owner = %(tenant)s::regrole),"
         " (SELECT count(*) FROM jobflow.cron WHERE owner = %(tenant)s::regrole),"
         " (SELECT count(*) FROM jobflow.failed_tasks),"
         " (SELECT count(*) FROM jobflow.queues WHERE owner = %(tenant)s::regrole),"
         " (SELECT count(*) FROM jobflow.signing_keys WHERE owner = %(tenant)s::regrole),"
         " (SELECT count(*) FROM jobflow.secret_names WHERE owner = %(tenant)s::regrole),"
         " (SELECT count(*) FROM jobflow.installation)", must="succeed"),
    Call("nextval", R("tasks_id_seq", "USAGE") | R("cron_timers_id_seq", "USAGE"),
         "SELECT nextval('jobflow.tasks_id_seq'), nextval('jobflow.cron_timers_id_seq')"),
    Call("secrets: select", set(), "SELECT * FROM jobflow.secrets", must="refuse"),
    # ---- extension jobflow_net (issue 26) ----
    Call("net: the tenant's responses, a request of its own", NR("_http_response", "SELECT")
         | NF("http_post", "jobflow_request", "_schedule", "_urlencode", "_http_collect_response"),
         "SELECT (SELECT count(*) FROM net._http_response),"
         " net.http_post(%(url)s),"
         " net._http_collect_response(-1)", must="succeed"),
    # ---- end of jobflow_net ----
]

# a second tenant: DROP OWNED and REASSIGN OWNED of itself (the guard's paths)
OWNED_CALLS = [
    Call("schedule", F("schedule", "set_secret"),
         set_secret_sql("secret", "secret_value"),
         "SELECT jobflow.schedule(%(url)s, run_at => now() + interval '1 hour',"
         " headers => %(secret_headers)s)", must="succeed"),
    Call("schedule_cron", F("schedule_cron"),
         "SELECT jobflow.schedule_cron(%(timer)s, '0 3 * * *', %(url)s,"
         " headers => %(secret_headers)s)",
         must="succeed"),
    Call("REASSIGN OWNED BY itself TO itself", set(),
         "REASSIGN OWNED BY CURRENT_USER TO CURRENT_USER", must="succeed"),
    Call("DROP OWNED BY itself", set(), "DROP OWNED BY CURRENT_USER", must="succeed"),
]


# -------------------------------------------------------------------------
# The planted database
# -------------------------------------------------------------------------

class Hostile:
    """A target database with a tenant's planted schema app, the roles
    that call, and the record of what escalated."""

    def __init__(self, kind, receiver):
        self.kind = kind
        self.receiver = receiver
        self.target = Target(kind)
        t = self.target
        self.tenant = t.role("jf_hostile", "jobflow_user")
        self.tenant2 = t.role("jf_hostile2", "jobflow_user")
        self.monitor = t.role("jf_monitor", "jobflow_monitor")
        self.pgmon = t.role("jf_pgmon", "pg_monitor")
        self.admin = t.role("jf_admin", "jobflow_admin")
        t.schema("app", self.tenant)
        conn = t.connect(self.tenant)
        with conn.cursor() as cur:
            cur.execute("SET search_path = pg_catalog, pg_temp")
            cur.execute(RECORDER)
            cur.execute(PLANT)
            start = time.time()
            cur.execute("SELECT * FROM app._plant(%s, %s, %s)",
                        (OPERATORS, TYPES, sorted(called_functions() | set(COMMON_FUNCTIONS))))
            cols = [d[0] for d in cur.description]
            self.planted = dict(zip(cols, cur.fetchone()))
            self.planted["seconds"] = time.time() - start
            cur.execute("DROP FUNCTION app._plant(text[], text[], text[])")
        conn.close()
        self.reported = 0

    def escalations(self):
        """The escalations counted so far; a role of the test found
        superuser is recorded and made an ordinary role again."""
        n = value(self.target.su, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END"
                                  " FROM app.escalations")
        supers = [r["rolname"] for r in rows(self.target.su,
                  "SELECT rolname FROM pg_roles WHERE rolsuper AND rolname = ANY(%s)",
                  (self.target.roles,))]
        with self.target.su.cursor() as cur:
            for role in supers:
                cur.execute("ALTER ROLE %s NOSUPERUSER" % role)
        return n, supers

    def session(self, role, search_path):
        conn = self.target.connect(role)
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = '60s'")
            cur.execute("SET lock_timeout = '20s'")
            cur.execute("SET search_path = %s" % search_path)
        return conn

    def context(self, role):
        run = uuid.uuid4().hex[:8]
        secret = "s-" + run
        return {
            "run": run, "me": role, "tenant": self.tenant, "gid": "jf-hostile-" + run,
            "url": self.receiver.url("/ok?t=hostile-%s" % run),
            "origins": [origin_of(self.receiver.url("/"))],
            "secret": secret, "secret2": "t-" + run, "secret_value": "Bearer hostile-" + run,
            "secret_headers": SECRET_HEADERS % {"secret": secret},
            "timer": "timer-" + run, "queue": "queue-" + run, "key": "key-" + run,
            "task": 0, "task2": 0, "keyed": 0, "row_task": 0, "timer_id": 0,
            "net_post": 0,
        }

    def run(self, calls, role, search_path, ctx):
        """Run calls as role under search_path; the problems seen: every
        call that escalated (or made a role superuser), every call whose
        must did not hold."""
        conn = self.session(role, search_path)
        problems = []
        try:
            for call in calls:
                before, supers = self.escalations()
                if supers:
                    problems.append("ESCALATION: found superuser before %s: %s"
                                    % (call.name, ", ".join(supers)))
                del conn.notices[:]
                error = call.run(conn, ctx)
                after, supers = self.escalations()
                where = "%s (as %s, search_path %s, %s)" % (call.name, role, search_path, self.kind)
                if after != before or supers:
                    warnings = [m.strip() for m in conn.notices if "hostile:" in m]
                    became = "; became superuser: %s" % ", ".join(supers) if supers else ""
                    shown = "".join("\n    " + w for w in warnings[:5])
                    problems.append("ESCALATION: %s: %d planted object(s) ran with more"
                                    " privileges%s%s" % (where, after - before, became, shown))
                if call.must == "succeed" and error is not None:
                    problems.append("must succeed: %s: %s" % (where, error))
                if call.must == "refuse" and error is None:
                    problems.append("must be refused: %s" % where)
        finally:
            conn.close()
        return problems


@pytest.fixture(scope="module", params=KINDS, ids=KIND_IDS)
def env(request, receiver):
    env = Hostile(request.param, receiver)
    try:
        yield env
    finally:
        env.target.close()


def fail_on(problems):
    if problems:
        pytest.fail("%d problem(s):\n%s" % (len(problems), "\n".join(problems)))


# -------------------------------------------------------------------------
# Tests
# -------------------------------------------------------------------------

def test_planted_objects_catch_an_escalation(env):
    """The checks below prove something: the planting made the objects a
    careless query would resolve, and they count a run as the superuser,
    not one as the session's own role."""
    p = env.planted
    assert p["operators"] > 1000 and p["shadow_operators"] > 200, p
    assert p["functions"] > 50 and p["variants"] > 50 and p["aggregates"] > 10, p
    su = env.target.su
    planted = {r["sig"] for r in rows(su, """
        SELECT o.oid::regoperator::text AS sig FROM pg_operator o
         WHERE o.oprnamespace = 'app'::regnamespace
        UNION ALL
        SELECT p.oid::regprocedure::text FROM pg_proc p
         WHERE p.pronamespace = 'app'::regnamespace""")}
    for sig in ("app.=(regrole,oid)", "app.=(jobflow.task_state,jobflow.task_state)",
                "app.=(text,text)", "app.->>(jsonb,text)", "app.now()", "app.count()",
                "app.pg_has_role(oid,text)", "app.nextval(regclass)",
                "app.lower(character varying)",
                "app.jsonb_each(jsonb)"):
        assert sig in planted, sig

    tenant = env.session(env.tenant, "app")
    before, _ = env.escalations()
    with tenant.cursor() as cur:
        cur.execute("SELECT 10::oid::regrole = 10::oid, now(), count(*) FROM (VALUES (1)) v(x)")
    assert env.escalations()[0] == before, "the tenant's own use of its objects counted"
    with tenant.cursor() as cur:
        cur.execute("SET search_path = app, pg_catalog")
        cur.execute("SELECT 1 = 1, now(), lower('A'::varchar), count(*) FROM (VALUES (1)) v(x)")
        assert cur.fetchone()[2] == "a"
    assert env.escalations()[0] == before, "the tenant's own use of its objects counted"
    tenant.close()

    su_app = env.session(env.target.su.info.user, "app")
    with su_app.cursor() as cur:
        cur.execute("SELECT 10::oid::regrole = 10::oid")
    after, _ = env.escalations()
    assert after == before + 1, "a planted operator run by a superuser was not counted"
    with su_app.cursor() as cur:
        cur.execute("SET search_path = app, pg_catalog")
        cur.execute("SELECT now(), count(*) FROM (VALUES (1), (2)) v(x)")
        assert cur.fetchone()[1] == 2
    assert env.escalations()[0] >= after + 3, "shadowing functions were not counted"
    su_app.close()


@pytest.mark.parametrize("search_path", SEARCH_PATHS)
def test_tenant_paths(env, search_path):
    ctx = env.context(env.tenant)
    fail_on(env.run(TENANT_CALLS, env.tenant, search_path, ctx))


@pytest.mark.parametrize("search_path", SEARCH_PATHS)
def test_monitor_paths(env, search_path):
    problems = []
    for role in (env.monitor, env.pgmon):
        problems += env.run(MONITOR_CALLS, role, search_path, env.context(role))
    fail_on(problems)


def admin_setup(env):
    """The tenant's objects the admin works on, made by the tenant without
    planted objects on its path; the admin's context."""
    ctx = env.context(env.admin)
    run = ctx["run"]
    t = {"tsecret": "ts-" + run, "tsecret2": "tt-" + run, "tqueue": "tq-" + run}
    t["tsecret_headers"] = SECRET_HEADERS % {"secret": t["tsecret"]}
    conn = env.target.connect(env.tenant)
    with conn.cursor() as cur:
        cur.execute(set_secret_sql("tsecret", "secret_value"), dict(ctx, **t))
        cur.execute("SELECT jobflow.set_queue(%s, max_concurrent => 1)", (t["tqueue"],))
        cur.execute("SELECT jobflow.schedule(%s, run_at => now() + interval '1 hour',"
                    " headers => %s, queue => %s)", (ctx["url"], t["tsecret_headers"], t["tqueue"]))
        t["ttask"] = cur.fetchone()[0]
        cur.execute("SELECT jobflow.schedule_cron(%s, '0 3 * * *', %s, headers => %s)",
                    ("tt-" + run, ctx["url"], t["tsecret_headers"]))
        t["ttimer"] = cur.fetchone()[0]
        cur.execute("SELECT jobflow.schedule_cron(%s, '0 3 * * *', %s)", ("tt2-" + run, ctx["url"]))
        t["ttimer2"] = cur.fetchone()[0]
    conn.close()
    ctx.update(t)
    return ctx


@pytest.mark.parametrize("search_path", SEARCH_PATHS)
def test_admin_paths(env, search_path):
    fail_on(env.run(ADMIN_CALLS, env.admin, search_path, admin_setup(env)))


@pytest.mark.parametrize("search_path", SEARCH_PATHS)
def test_drop_and_reassign_owned_paths(env, search_path):
    fail_on(env.run(OWNED_CALLS, env.tenant2, search_path, env.context(env.tenant2)))


def test_worker_runs_past_planted_objects(env, receiver, server):
    """The worker fires the tenant's tasks (a header secret, a signature,
    a queue with a rate that logs failures only, an outcome notification),
    retries a failing one and a redriven one, and materialises a cron
    timer; the tenant's schema stays on its session's path throughout."""
    before, _ = env.escalations()
    log_offset = os.path.getsize(server.logfile)
    run = uuid.uuid4().hex[:8]
    secret_value = "Bearer worker-" + run
    headers = SECRET_HEADERS % {"secret": "w-" + run}
    ok_url, ok_tag = receiver.unique_url("/ok")
    cron_url, cron_tag = receiver.unique_url("/ok")
    conn = env.session(env.tenant, "app")
    with conn.cursor() as cur:
        cur.execute(set_secret_sql("name", "value"), {"name": "w-" + run, "value": secret_value,
                                                      "origins": [origin_of(ok_url)]})
        cur.execute("SELECT jobflow.create_signing_secret()")
        cur.execute("SELECT jobflow.set_queue(%s, max_per_second => 50, log_attempts => 'failures')",
                    ("wq-" + run,))
        cur.execute("SELECT jobflow.schedule(%s, headers => %s, notify => true, queue => %s,"
                    " key => %s)", (ok_url, headers, "wq-" + run, "wk-" + run))
        ok = cur.fetchone()[0]
        cur.execute("SELECT jobflow.schedule(%s, headers => %s, max_attempts => 2)",
                    (receiver.url("/status/500?t=" + run), headers))
        failing = cur.fetchone()[0]
        cur.execute("SELECT jobflow.schedule_cron(%s, 'every 1 seconds', %s, headers => %s)",
                    ("wc-" + run, cron_url, headers))
    su = env.target.su
    states = wait_final(su, [ok, failing], timeout=30)
    assert states == {ok: "succeeded", failing: "failed"}, states
    req = receiver.wait_for(lambda r: ("t=" + ok_tag) in r["query"])[-1]
    assert req["headers"].get("x-api-key") == secret_value
    assert req["headers"].get("webhook-signature", "").startswith("v1,")
    # its queue logs failures only: a success at the first attempt, none
    assert value(su, "SELECT count(*) FROM jobflow.task_log WHERE task_id = %s", (ok,)) == 0
    with conn.cursor() as cur:
        cur.execute("SELECT jobflow.retry(%s)", (failing,))
        assert cur.fetchone()[0] is True
    assert wait_final(su, failing, timeout=30) == "failed"
    assert value(su, "SELECT attempts FROM jobflow.tasks WHERE id = %s", (failing,)) == 4
    receiver.wait_for(lambda r: ("t=" + cron_tag) in r["query"], timeout=30)
    with conn.cursor() as cur:
        cur.execute("SELECT jobflow.unschedule_cron(%s)", ("wc-" + run,))
    conn.close()
    after, supers = env.escalations()
    with open(server.logfile, errors="replace") as f:
        f.seek(log_offset)
        ran = [line.strip() for line in f if "hostile:" in line]
    assert (after - before, supers) == (0, []), \
        "planted objects ran with more privileges while the worker ran:\n" + "\n".join(ran[:20])


def test_a_refused_copy_does_not_stop_the_worker(env, receiver):
    """A COPY into jobflow.task_log, refused for lack of privilege, by a
    monitoring role whose session stays open: the worker goes on firing."""
    mon = env.session(env.monitor, "app")
    with mon.cursor() as cur:
        with pytest.raises(psycopg2.Error):
            cur.copy_expert("COPY jobflow.task_log (task_id, attempt, owner, scheduled_at, outcome)"
                            " FROM STDIN",
                            io.StringIO("1\t1\tpostgres\t2020-01-01 00:00:00+00\tsucceeded\n"))
    url, tag = receiver.unique_url("/ok")
    conn = env.target.connect(env.tenant)
    with conn.cursor() as cur:
        cur.execute("SELECT jobflow.schedule(%s)", (url,))
        task = cur.fetchone()[0]
    deadline = time.time() + 20
    while value(env.target.su, "SELECT state::text FROM jobflow.tasks WHERE id = %s",
                (task,)) != "succeeded":
        if time.time() > deadline:
            pytest.fail("the task did not fire within 20 s while the session whose COPY INTO"
                        " jobflow.task_log was refused stays open")
        time.sleep(0.1)
    mon.close()
    conn.close()


def test_no_role_became_superuser(env):
    su = env.target.su
    assert rows(su, "SELECT rolname FROM pg_roles WHERE rolsuper AND rolname = ANY(%s)",
                (env.target.roles,)) == []


class Notices:
    """Every notice of a connection (psycopg2 keeps only the last 50 in
    a list)."""

    def __init__(self):
        self.seen = []

    def append(self, message):
        self.seen.append(message)


LEAKY = """
CREATE FUNCTION %(schema)s.leak(VARIADIC args text[]) RETURNS boolean
LANGUAGE plpgsql COST 0.0001 AS $$
BEGIN
    RAISE NOTICE 'leak: %%', args;
    RETURN true;
END
$$;
CREATE FUNCTION %(schema)s.leak_eq(text, text) RETURNS boolean
LANGUAGE plpgsql COST 0.0001 AS $$
BEGIN
    RAISE NOTICE 'leak: %% %%', $1, $2;
    RETURN true;
END
$$;
CREATE OPERATOR %(schema)s.=== (LEFTARG = text, RIGHTARG = text,
                                FUNCTION = %(schema)s.leak_eq, RESTRICT = eqsel);
"""

# columns of the views as text, for the leaky function
CRON_TIMER_COLUMNS = "id::text, name, owner::text, schedule, timezone, url, method, active::text"
CRON_COLUMNS = CRON_TIMER_COLUMNS + (", next_at::text, last_at::text, last_task_id::text,"
                                     " last_state::text, last_status::text, last_error")
FAILED_COLUMNS = ("id::text, queue, url, attempts::text, last_status::text, last_error,"
                  " failed_at::text")


def test_leaky_functions_see_only_the_callers_rows(env, receiver):
    """A tenant's cheap leaky function (RAISE NOTICE of its arguments, COST
    0.0001) or operator in a WHERE against jobflow.cron, jobflow.failed_tasks
    and the tables behind them is only ever called with its own rows: the
    planner must not run it on another tenant's rows before the filter that
    hides them.  On 15 and later the views are security_invoker and the
    tables' row-level security does that; on 14 they are security_barrier
    views that filter as the policies do (src/install_pg14.sql)."""
    t = env.target
    run = uuid.uuid4().hex[:8]
    victim = t.role("jf_victim", "jobflow_user")
    spy = t.role("jf_spy", "jobflow_user")
    schema = "spy_" + run
    t.schema(schema, spy)
    victim_conn, spy_conn = t.connect(victim), t.connect(spy)
    for conn in (victim_conn, spy_conn):
        with conn.cursor() as cur:
            cur.execute("SET search_path = pg_catalog, pg_temp")
    timer = "victim-timer-" + run

    # each has a failed task and a timer; the victim's timer fires each
    # second (to a 500), so its occurrences fill the view's last_* columns
    def failed_task(conn, who):
        return value(conn, "SELECT jobflow.schedule(%s, max_attempts => 1)",
                     (receiver.url("/status/500?t=%s-%s" % (who, run)),))
    ids = [failed_task(victim_conn, "victim"), failed_task(spy_conn, "spy")]
    value(victim_conn, "SELECT jobflow.schedule_cron(%s, '*/1 * * * * *', %s, max_attempts => 1)",
          (timer, receiver.url("/status/500?t=victim-cron-" + run)))
    value(spy_conn, "SELECT jobflow.schedule_cron(%s, '0 0 1 1 *', %s)",
          ("spy-timer-" + run, receiver.url("/ok?t=spy-cron-" + run)))
    assert set(wait_final(t.su, ids, timeout=30).values()) == {"failed"}
    deadline = time.time() + 30
    while True:
        fired = value(victim_conn, "SELECT last_task_id FROM jobflow.cron WHERE name = %s",
                      (timer,))
        if fired is not None:
            break
        if time.time() > deadline:
            pytest.fail("the victim's timer fired no occurrence within 30 s")
        time.sleep(0.2)
    wait_final(t.su, fired, timeout=30)
    value(victim_conn, "SELECT jobflow.set_cron_active(%s, false)", (timer,))

    # the victim sees its rows (so there is something to leak)
    mine = rows(victim_conn, "SELECT url, last_error FROM jobflow.cron WHERE name = %s",
                (timer,))
    assert len(mine) == 1 and mine[0]["last_error"], mine
    assert len(rows(victim_conn, "SELECT 1 FROM jobflow.failed_tasks WHERE url LIKE %s",
                    ("%victim-" + run,))) == 1

    with spy_conn.cursor() as cur:
        cur.execute(LEAKY % {"schema": schema})
    leak = schema + ".leak"
    queries = [
        # text columns only: no cast adds to the function's cost
        "SELECT * FROM jobflow.failed_tasks WHERE %s(url, queue)" % leak,
        "SELECT * FROM jobflow.cron WHERE %s(name, url)" % leak,
        "SELECT * FROM jobflow.failed_tasks WHERE %s(%s)" % (leak, FAILED_COLUMNS),
        "SELECT * FROM jobflow.cron WHERE %s(%s)" % (leak, CRON_TIMER_COLUMNS),
        "SELECT * FROM jobflow.cron WHERE %s(%s)" % (leak, CRON_COLUMNS),
        "SELECT * FROM jobflow.failed_tasks WHERE url OPERATOR(%s.===) 'x'" % schema,
        "SELECT * FROM jobflow.cron WHERE url OPERATOR(%s.===) 'x'" % schema,
        "SELECT f.* FROM jobflow.failed_tasks f, jobflow.cron c"
        " WHERE %s(f.url, c.url, c.last_error)" % leak,
        "SELECT count(*) FROM jobflow.failed_tasks WHERE %s(%s)" % (leak, FAILED_COLUMNS),
        "SELECT * FROM jobflow.tasks WHERE %s(url, state::text, last_error)" % leak,
        "SELECT * FROM jobflow.task_log WHERE %s(task_id::text, owner::text, error)" % leak,
        "SELECT * FROM jobflow.cron_timers WHERE %s(name, url, owner::text)" % leak,
    ]
    victim_marks = ("victim-" + run, "victim-cron-" + run, timer, victim)
    spy_marks = ("spy-" + run, "spy-cron-" + run, "spy-timer-" + run, spy)
    problems = []
    for sql in queries:
        spy_conn.notices = notices = Notices()
        got = rows(spy_conn, sql)
        leaked = [m.strip() for m in notices.seen if any(v in m for v in victim_marks)]
        shown = [r for r in got if any(v in str(r) for v in victim_marks)]
        if leaked or shown:
            problems.append("%s: %d notice(s) and %d row(s) of the victim, e.g. %s"
                            % (sql, len(leaked), len(shown), (leaked + shown)[:2]))
        if not any(v in m for m in notices.seen for v in spy_marks):
            problems.append("%s: the leaky function never saw the spy's own rows: %s"
                            % (sql, notices.seen[:3]))
    fail_on(problems)


# ---- explain (issue 24, item 5) ----

def test_explain_tells_nothing_of_another_tenant(env, receiver, second_receiver):
    """jobflow.explain() and explain_cron() as a tenant on another's task
    id and timer name: exactly the error of an id and a name that do not
    exist (no existence oracle).  And a tenant's answer on its own task,
    due while the other's requests hang at another origin (so both are
    among the busiest origins the workers publish), names its own origin
    only: nothing of the other's origin, URL, queue, task or role."""
    t = env.target
    run = uuid.uuid4().hex[:8]
    victim = t.role("jf_victim", "jobflow_user")
    asker = t.role("jf_asker", "jobflow_user")
    victim_conn, asker_conn = t.connect(victim), t.connect(asker)
    for conn in (victim_conn, asker_conn):
        with conn.cursor() as cur:
            cur.execute("SET search_path = app, pg_catalog")
    vqueue = "vq-" + run
    # ids no figure of an answer could be by chance (a fresh cluster's 1, 2, 3 are)
    value(t.su, "SELECT setval('jobflow.tasks_id_seq', greatest(pg_catalog.nextval("
                "'jobflow.tasks_id_seq'), 7000000000) + (random() * 1000000)::bigint)")
    hanging = [value(victim_conn, "SELECT jobflow.schedule(%s, queue => %s, timeout_ms => 3000,"
                                  " max_attempts => 1)",
                     (second_receiver.url("/hang?t=victim-" + run), vqueue)) for _ in range(3)]
    timer = "victim-timer-" + run
    value(victim_conn, "SELECT jobflow.schedule_cron(%s, '0 3 * * *', %s)",
          (timer, second_receiver.url("/ok?t=victim-cron-" + run)))

    def error(sql, arg):
        try:
            rows(asker_conn, sql, (arg,))
        except psycopg2.Error as e:
            return e.pgcode, e.diag.message_primary, e.diag.message_hint
        pytest.fail("%s with %r was not refused" % (sql, arg))

    theirs = error("SELECT * FROM jobflow.explain(%s)", hanging[0])
    missing = value(t.su, "SELECT max(id) + 1000000 FROM jobflow.tasks")
    none = error("SELECT * FROM jobflow.explain(%s)", missing)
    assert theirs[0] == "42704", theirs
    assert (none[0], none[1].replace(str(missing), "N"), none[2]) == \
        (theirs[0], theirs[1].replace(str(hanging[0]), "N"), theirs[2])
    theirs = error("SELECT * FROM jobflow.explain_cron(%s)", timer)
    none = error("SELECT * FROM jobflow.explain_cron(%s)", timer + "-none")
    assert theirs[0] == "42704", theirs
    assert (none[0], none[1].replace(timer + "-none", "N"), none[2]) == \
        (theirs[0], theirs[1].replace(timer, "N"), theirs[2])

    # the asker's own tasks at the shared receiver's origin: one hangs,
    # the next waits behind its queue's cap
    aqueue = "aq-" + run
    value(asker_conn, "SELECT jobflow.set_queue(%s, max_concurrent => 1)", (aqueue,))
    own = [value(asker_conn, "SELECT jobflow.schedule(%s, queue => %s, timeout_ms => 3000,"
                             " max_attempts => 1)",
                 (receiver.url("/hang?t=asker-" + run), aqueue)) for _ in range(2)]
    deadline = time.time() + 10
    while value(t.su, "SELECT count(*) FROM jobflow.tasks WHERE id = ANY(%s)"
                      " AND state = 'running'", (hanging + own,)) < 2:
        assert time.time() < deadline, "the requests never ran"
        time.sleep(0.05)
    time.sleep(1.2)         # the busiest origins are published once a second
    answer = rows(asker_conn, "SELECT * FROM jobflow.explain(%s)", (own[1],))
    assert answer[0]["reason"] == "queue_cap", answer
    text = " ".join(x["explanation"] for x in answer)
    marks = [origin_of(second_receiver.url("/")), "victim-", vqueue, victim, timer]
    assert not [m for m in marks if m in text], (marks, text)
    # the victim's task ids as numbers of their own
    numbers = set(re.findall(r"(?<![\d.:-])\d+(?![\d.:-])", text))
    assert not numbers & {str(i) for i in hanging}, (hanging, text)
    wait_final(t.su, hanging + own, timeout=30)
    value(victim_conn, "SELECT jobflow.unschedule_cron(%s)", (timer,))
    victim_conn.close()
    asker_conn.close()

# ---- end of explain ----


def catalog_grants(conn):
    """(object, privilege) of every function, table, view and sequence of
    schema jobflow, and of schema net (extension jobflow_net), that some
    role other than a superuser may use (column privileges count as the
    table's)."""
    got = rows(conn, """
        WITH acl AS (
            SELECT 'jobflow.' || p.proname AS object, a.privilege_type, a.grantee
              FROM pg_proc p, aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
             WHERE p.pronamespace = 'jobflow'::regnamespace
            UNION ALL
            SELECT 'jobflow.' || c.relname, a.privilege_type, a.grantee
              FROM pg_class c,
                   aclexplode(COALESCE(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's'
                                                            ELSE 'r' END::"char", c.relowner))) a
             WHERE c.relnamespace = 'jobflow'::regnamespace
               AND c.relkind IN ('r', 'v', 'm', 'S', 'f', 'p')
            UNION ALL
            SELECT 'jobflow.' || c.relname, a.privilege_type, a.grantee
              FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid, aclexplode(t.attacl) a
             WHERE c.relnamespace = 'jobflow'::regnamespace AND t.attacl IS NOT NULL
            UNION ALL
            SELECT 'net.' || p.proname, a.privilege_type, a.grantee
              FROM pg_proc p, aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
             WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'net')
            UNION ALL
            SELECT 'net.' || c.relname, a.privilege_type, a.grantee
              FROM pg_class c, aclexplode(COALESCE(c.relacl, acldefault('r', c.relowner))) a
             WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'net')
               AND c.relkind IN ('r', 'v', 'm', 'S', 'f', 'p'))
        SELECT DISTINCT object, privilege_type FROM acl
         WHERE grantee = 0 OR NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = acl.grantee)""")
    return {(r["object"], r["privilege_type"]) for r in got}


def test_every_api_object_is_called(env):
    """A new function, view, table or sequence (or a new grant) that a role
    other than a superuser may use must join the calls above."""
    covered = set()
    for calls in (TENANT_CALLS, MONITOR_CALLS, ADMIN_CALLS, OWNED_CALLS):
        for call in calls:
            covered |= call.covers
    granted = catalog_grants(env.target.su)
    missing = sorted(granted - covered)
    stale = sorted(covered - granted)
    assert not missing, "usable by a role that is no superuser, but no call of test_hostile.py" \
                        " uses it: %s" % missing
    assert not stale, "calls of test_hostile.py cover what no such role may use: %s" % stale
