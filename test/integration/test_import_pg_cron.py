# -------------------------------------------------------------------------
#
# test_import_pg_cron.py
#     jobflow.import_pg_cron(): pg_cron's HTTP jobs become jobflow timers.
#
# A cluster of its own (test/pgnode.py's Node) preloads jobflow and
# pg_cron (cron.database_name = postgres) and holds pg_cron jobs of the
# shapes Supabase's dashboard writes (net.http_post with
# jsonb_build_object headers and a Vault lookup, net.http_get with
# '...'::jsonb, a positional net.http_delete), SQL jobs, malformed
# commands and ones jobflow cannot express.  The right ones migrate, the
# others are reported with their reason, a second run changes nothing,
# and no command text is ever executed.  Nothing reaches a network:
# schema net does not exist in that database (pg_cron's own runs of the
# jobs fail), and every URL is on 127.0.0.1.
#
# Needs pg_cron installed into the PostgreSQL under test (Debian's
# postgresql-15-cron for 15, or built from source: scripts/peers.sh); the
# module is skipped when it is not.
#
# -------------------------------------------------------------------------

import os
import subprocess

import psycopg2
import pytest

import pgnode

PORT = int(os.environ.get("PGPORT", "54329")) + 40
PGBIN = os.environ.get("JOBFLOW_PGBIN", pgnode.PGBIN)


def pg_cron_installed():
    """Whether pg_cron's control file is in the installation under test."""
    share = subprocess.run([os.path.join(PGBIN, "pg_config"), "--sharedir"],
                           capture_output=True, text=True).stdout.strip()
    return os.path.exists(os.path.join(share, "extension", "pg_cron.control"))


# scripts/peers.sh sets JOBFLOW_PG_CRON=1 once pg_cron is there: then a
# missing pg_cron is a failure, not a skip
pytestmark = pytest.mark.skipif(not pg_cron_installed() and not os.environ.get("JOBFLOW_PG_CRON"),
                                reason="pg_cron is not installed (scripts/peers.sh)")

# (jobname, schedule, command, owner); owner None: the role app
VAULT = "(select decrypted_secret from vault.decrypted_secrets where name = 'service_key')"
JOBS = [
    ("edge-function", "*/5 * * * *",
     "select net.http_post(url:='http://127.0.0.1:9/functions/v1/hello',"
     " headers:=jsonb_build_object('Content-Type','application/json',"
     " 'Authorization','Bearer ' || " + VAULT + "),"
     " body:=jsonb_build_object('name', 'cron', 'n', 1), timeout_milliseconds:=1000) as request_id",
     None),
    ("get-ping", "0 3 * * *",
     "SELECT net.http_get(url := 'http://127.0.0.1:9/ping', params := '{}'::jsonb,"
     " headers := '{\"X-Source\": \"cron\"}'::jsonb) AS request_id;",
     None),
    ("delete-positional", "@daily",
     "select net.http_delete('http://127.0.0.1:9/old')", None),
    ("with-now", "* * * * *",
     "select net.http_post(url:='http://127.0.0.1:9/t', body:=jsonb_build_object('time', now()))",
     None),
    # Supabase's docs' own example: url from Vault, body with the time
    ("docs-example", "* * * * *",
     "select net.http_post(url:= " + VAULT.replace("service_key", "project_url")
     + " || '/functions/v1/function-name', headers:=jsonb_build_object("
     "'Content-type', 'application/json', 'Authorization', 'Bearer ' || " + VAULT + "),"
     " body:=concat('{\"time\": \"', now(), '\"}')::jsonb) as request_id", None),
    ("docs-body-only", "* * * * *",
     "select net.http_post(url:='http://127.0.0.1:9/f',"
     " body:=concat('{\"time\": \"', now(), '\"}')::jsonb) as request_id", None),
    ("sql-job", "0 * * * *", "DELETE FROM app_events WHERE at < now() - interval '1 day'", None),
    ("two-calls", "0 * * * *",
     "select net.http_get('http://127.0.0.1:9/a'); select net.http_get('http://127.0.0.1:9/b')",
     None),
    ("malformed", "0 * * * *", "select net.http_post(url:='http://127.0.0.1:9/x'", None),
    ("bad-json", "0 * * * *",
     "select net.http_post(url:='http://127.0.0.1:9/x', body:='{bad'::jsonb)", None),
    ("every-30s", "30 seconds", "select net.http_get('http://127.0.0.1:9/s')", None),
    ("last-day", "0 0 $ * *", "select net.http_get('http://127.0.0.1:9/l')", None),
    ("url-from-vault", "0 * * * *",
     "select net.http_post(url:=" + VAULT + " || '/functions/v1/x')", None),
    ("planted", "0 * * * *",
     "select net.http_get(url:=(select public.importer_ran()))", None),
    ("outsider-job", "0 * * * *", "select net.http_get('http://127.0.0.1:9/o')", "outsider"),
    # a superuser's job (Supabase's are postgres's) becomes the superuser's timer
    ("superuser-job", "15 4 * * 1", "select net.http_get('http://127.0.0.1:9/su')", "postgres"),
    ("other-database", "0 * * * *", "select net.http_get('http://127.0.0.1:9/db')", None),
    ("inactive", "0 * * * *", "select net.http_get('http://127.0.0.1:9/i')", None),
    ("taken-name", "0 * * * *", "select net.http_get('http://127.0.0.1:9/new')", None),
    ("bad-url", "0 * * * *", "select net.http_get('ftp://127.0.0.1:9/f')", None),
]

MIGRATE = {"edge-function", "get-ping", "delete-positional", "superuser-job"}
REASONS = {
    "with-now": "calls now()",
    "docs-example": "argument url reads Vault",
    "docs-body-only": "concat() with now()",
    "sql-job": "SQL command stays with pg_cron",
    "two-calls": "not a single net.http_* call",
    "malformed": "not a single net.http_* call",
    "bad-json": "not valid JSON",
    "every-30s": "more often than once a minute",
    "last-day": "$",
    "url-from-vault": "argument url reads Vault",
    "planted": "subquery other than a lookup in vault.decrypted_secrets",
    "outsider-job": "may not use jobflow",
    "other-database": "runs in database nocron",
    "inactive": "inactive in pg_cron",
    "taken-name": "exists with another definition",
    "bad-url": "jobflow refused the timer",
}


@pytest.fixture(scope="module")
def node():
    with pgnode.scratch_dir("jobflow-pgcron-") as top:
        n = pgnode.Node(top, "cron", PORT, bindir=PGBIN)
        try:
            n.initdb()
            n.configure(["shared_preload_libraries = 'jobflow,pg_cron'",
                         "cron.database_name = 'postgres'"])
            n.start()
            n.query("CREATE EXTENSION jobflow")
            n.query("CREATE EXTENSION pg_cron")
            n.query("CREATE ROLE app LOGIN IN ROLE jobflow_user")
            n.query("CREATE ROLE outsider LOGIN")
            n.query("CREATE DATABASE nocron")
            n.query("CREATE EXTENSION jobflow", dbname="nocron")
            # what a planted command would leave behind if it ever ran
            n.query("CREATE TABLE public.ran (at timestamptz)")
            n.query("CREATE FUNCTION public.importer_ran() RETURNS text LANGUAGE sql"
                    " AS $$ INSERT INTO public.ran VALUES (now()) RETURNING 'http://127.0.0.1:9/'::text $$")
            for name, schedule, command, owner in JOBS:
                n.query("INSERT INTO cron.job (schedule, command, nodename, nodeport, database,"
                        " username, jobname, active) VALUES (%s, %s, 'localhost', 5432, %s, %s, %s, %s)",
                        (schedule, command, "nocron" if name == "other-database" else "postgres",
                         owner or "app", name, name != "inactive"))
            # the role already has a timer of the name the import would give
            conn = n.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("SET ROLE app")
                    cur.execute("SELECT jobflow.schedule_cron('pg_cron:taken-name', '0 * * * *',"
                                " 'http://127.0.0.1:9/old', active => false)")
            finally:
                conn.close()
            yield n
        finally:
            n.stop_quietly()


def run(node, dry_run, conn=None):
    """import_pg_cron's rows by job name, as dicts."""
    own = conn is None
    conn = conn or node.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT jobid, jobname, username, action, timer, reason"
                        " FROM jobflow.import_pg_cron(dry_run => %s)", (dry_run,))
            cols = [d[0] for d in cur.description]
            return {r[1]: dict(zip(cols, r)) for r in cur.fetchall()}
    finally:
        if own:
            conn.close()


def state(node):
    """Everything the importer may change: the timers and the jobs' flags."""
    return (node.query("SELECT owner::text, name, schedule, timezone, url, method, headers::text,"
                       " body, timeout_ms, max_attempts, active, updated_at"
                       " FROM jobflow.cron_timers ORDER BY name"),
            node.query("SELECT jobname, active FROM cron.job ORDER BY jobid"))


@pytest.mark.smoke
def test_import(node):
    before = state(node)
    rows = run(node, True)
    for r in rows.values():
        print("%(jobid)3s %(jobname)-18s %(action)-13s %(timer)s %(reason)s" % r)
    assert set(rows) == {j[0] for j in JOBS}
    assert state(node) == before, "a dry run changed something"
    # the Vault lookup needs the role's jobflow secret first, and says how
    edge = rows["edge-function"]
    assert edge["action"] == "left alone"
    assert "bearer.service_key" in edge["reason"] and "'Bearer ' followed by" in edge["reason"], edge
    for name in MIGRATE - {"edge-function"}:
        assert rows[name]["action"] == "would migrate", rows[name]
        assert rows[name]["timer"] == "pg_cron:" + name
    for name, why in REASONS.items():
        assert rows[name]["action"] == "left alone", rows[name]
        assert why in rows[name]["reason"], rows[name]

    node.query("SELECT jobflow.set_secret('bearer.service_key', 'Bearer s3cret',"
               " origins => ARRAY['http://127.0.0.1:9'], for_role => 'app')")
    assert run(node, True)["edge-function"]["action"] == "would migrate"

    # dry_run => false, rolled back: nothing stays (one transaction)
    conn = node.connect()
    conn.autocommit = False
    try:
        assert run(node, False, conn)["get-ping"]["action"] == "migrated"
        conn.rollback()
    finally:
        conn.close()
    assert state(node) == before

    rows = run(node, False)
    for name in MIGRATE:
        assert rows[name]["action"] == "migrated", rows[name]
    for name, why in REASONS.items():
        assert rows[name]["action"] == "left alone" and why in rows[name]["reason"], rows[name]
    timers = {r[0]: r[1:] for r in node.query(
        "SELECT name, owner::text, schedule, timezone, url, method, headers, body::jsonb,"
        " timeout_ms, max_attempts FROM jobflow.cron_timers")}
    assert set(timers) == {"pg_cron:" + n for n in MIGRATE} | {"pg_cron:taken-name"}
    assert timers["pg_cron:taken-name"][3] == "http://127.0.0.1:9/old"
    assert timers["pg_cron:superuser-job"][:2] == ("postgres", "15 4 * * 1")
    assert timers["pg_cron:edge-function"] == (
        "app", "*/5 * * * *", "GMT", "http://127.0.0.1:9/functions/v1/hello", "POST",
        {"Content-Type": "application/json", "Authorization": {"secret": "bearer.service_key"}},
        {"name": "cron", "n": 1}, 1000, 1)
    assert timers["pg_cron:get-ping"] == (
        "app", "0 3 * * *", "GMT", "http://127.0.0.1:9/ping", "GET", {"X-Source": "cron"},
        None, 5000, 1)
    assert timers["pg_cron:delete-positional"] == (
        "app", "@daily", "GMT", "http://127.0.0.1:9/old", "DELETE", {}, None, 5000, 1)
    active = dict(node.query("SELECT jobname, active FROM cron.job"))
    assert {n for n, a in active.items() if not a} == MIGRATE | {"inactive"}

    # a second run changes nothing and says so
    after = state(node)
    rows = run(node, False)
    assert state(node) == after
    for name in MIGRATE:
        assert rows[name]["action"] == "unchanged" and "already imported" in rows[name]["reason"]
    for name, why in REASONS.items():
        assert rows[name]["action"] == "left alone" and why in rows[name]["reason"], rows[name]
    # no command text ran, here or in pg_cron (schema net is not there)
    assert node.value("SELECT count(*) FROM public.ran") == 0


def test_refusals(node):
    # only a superuser imports
    conn = node.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET ROLE app")
            with pytest.raises(psycopg2.Error) as e:
                cur.execute("SELECT * FROM jobflow.import_pg_cron()")
            assert e.value.pgcode == "42501"
    finally:
        conn.close()
    # a database without pg_cron: a clear error
    conn = node.connect("nocron")
    try:
        with conn.cursor() as cur:
            # a planted cron.job of the right shape is not pg_cron's
            cur.execute("CREATE SCHEMA cron; CREATE TABLE cron.job (jobid bigint, jobname text,"
                        " schedule text, command text, database text, username text, active boolean)")
            with pytest.raises(psycopg2.Error) as e:
                cur.execute("SELECT * FROM jobflow.import_pg_cron()")
            assert e.value.pgcode == "42704"
            assert "pg_cron" in e.value.pgerror and e.value.diag.message_hint
    finally:
        conn.close()


def test_parser_never_runs(node):
    # the command is parsed, never executed, whatever it holds
    for command in ("select public.importer_ran()",
                    "select net.http_get(url := public.importer_ran())",
                    "insert into public.ran values (now())"):
        out = node.value("SELECT jobflow._pg_net_call(%s)::jsonb ->> 'reason'", (command,))
        assert out, command
    assert node.value("SELECT count(*) FROM public.ran") == 0
