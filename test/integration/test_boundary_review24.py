# -------------------------------------------------------------------------
#
# test_boundary_review24.py
#     A review of issue 24 (figures per queue, jobflow.explain(), the
#     Prometheus wiring) as a hostile tenant and a careless operator would
#     try it.  What the review found, each test failing on the code
#     reviewed (main at a2cae56):
#       - one tenant blinds the figures of every other: the queues'
#         figures show the worst 100 queues of the database, worst by the
#         age of the oldest overdue task, and a tenant that pauses 100
#         queues of its own with a task due long ago (schedule() takes any
#         past run_at) fills all 100; another tenant's queue, however late,
#         has no series and no alert can fire for it (metrics.c,
#         queue_figures_sql);
#       - scripts/wire-prometheus.sh with two databases, as its usage
#         line has it, writes a connection string per database, and
#         Debian's exporter then answers every scrape with HTTP 500: its
#         own figures of the server (pg_locks_count, pg_stat_database_*,
#         ...) are collected once per connection and clash;
#       - scripts/wire-prometheus.sh edits prometheus.yml in place before
#         promtool checks it: a job already named "postgres" (in double
#         quotes, as YAML allows) is not recognised, a second one is
#         appended, promtool refuses, and the script exits leaving the
#         broken file for Prometheus' next start.
#     And its proposals, done after it: explain_cron() quoted a name back
#     raw, newlines included, into the error (a forged log line); a queue
#     name with a byte over 0x7f in a SQL_ASCII database made the
#     exporter's query of the queues fail for every tenant there.
#     What the review tried that held is tested here too where cheap:
#     explain() and explain_cron() answer another tenant's task or timer
#     exactly as a missing one; jobflow_user reads no figure; metrics()
#     leaves the caller's settings as they were; operators and functions
#     of a schema on the caller's search_path run neither in metrics() nor
#     in explain().
#
# -------------------------------------------------------------------------

import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import psycopg2
import pytest

from conftest import call, schedule

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "wire-prometheus.sh")
EXPORTER = "/usr/bin/prometheus-postgres-exporter"
DEBIAN_FILES = ("/etc/default/prometheus-postgres-exporter", "/etc/prometheus/prometheus.yml")


def as_role(conn, role, sql, args=None):
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        try:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None
        finally:
            cur.execute("RESET ROLE")


@pytest.fixture
def tenants(databases):
    """(connection to a database of its own, make()): make() is a new role
    granted jobflow_user; its rows and the role go at the end."""
    name, conn = databases()
    made = []

    def make():
        role = "jf_r24_%s" % uuid.uuid4().hex[:8]
        with conn.cursor() as cur:
            cur.execute("CREATE ROLE %s IN ROLE jobflow_user" % role)
        made.append(role)
        return role
    yield conn, make
    with conn.cursor() as cur:
        cur.execute("RESET ROLE")
        for role in made:
            for table in ("task_log", "tasks", "cron_timers", "queues"):
                cur.execute("DELETE FROM jobflow.%s WHERE owner = %%s::regrole" % table, (role,))
            cur.execute("DROP ROLE %s" % role)


def stats_queues(conn):
    """{(owner, queue): oldest overdue seconds} of jobflow.stats, read
    afresh (figures are kept for a second)."""
    time.sleep(1.1)
    with conn.cursor() as cur:
        cur.execute("SELECT label_set->>'owner', label_set->>'queue', value FROM jobflow.stats"
                    " WHERE metric = 'queue_oldest_overdue_seconds'")
        return {(o, q): v for o, q, v in cur.fetchall()}


def test_a_tenant_cannot_push_other_tenants_queues_out_of_the_figures(tenants):
    """A tenant pauses 100 queues of its own, each with a task due in 2000:
    they are the "worst" 100 of the database.  Another tenant's queue,
    with a task 10 minutes overdue, must still have its series (each
    owner's worst queue comes before any owner's second)."""
    conn, make = tenants
    victim, hostile = make(), make()
    url = "http://127.0.0.1:9/never"        # nothing fires: the queues are paused
    as_role(conn, victim, "SELECT jobflow.pause_queue('important')")
    as_role(conn, victim, "SELECT jobflow.schedule(%s, run_at => now() - interval '10 minutes',"
                          " queue => 'important')", (url,))
    as_role(conn, hostile, "SELECT count(jobflow.pause_queue('h' || g)) FROM generate_series(1, 100) g")
    as_role(conn, hostile, "SELECT count(jobflow.schedule(%s, run_at => '2000-01-01',"
                           " queue => 'h' || g)) FROM generate_series(1, 100) g", (url,))
    shown = stats_queues(conn)
    assert len(shown) == 100, len(shown)
    assert (victim, "important") in shown, \
        "the victim's queue, 10 minutes late, is not among the figures: %d of the hostile " \
        "tenant's are" % sum(1 for o, _ in shown if o == hostile)
    assert shown[(victim, "important")] >= 600
    # the hostile tenant still has the rest of the series: 99 of its queues
    assert sum(1 for o, _ in shown if o == hostile) == 99


def test_explain_tells_another_tenants_task_and_timer_from_nothing(new_role, connect):
    """explain(id) of another tenant's task and of an id no task has
    fail alike (code, message but for the id, hint, no detail);
    explain_cron(name) of another tenant's timer and of a name no timer
    has fail alike; NULL and the extreme ids are no trouble."""
    owner, other = new_role(), new_role()
    a, b = connect(user=owner), connect(user=other)
    task = schedule(a, "http://127.0.0.1:9/x", run_at="2100-01-01")
    timer = "t_%s" % uuid.uuid4().hex[:6]
    call(a, "SELECT jobflow.schedule_cron(%s, '0 3 * * *', 'http://127.0.0.1:9/c')", (timer,))
    assert call(a, "SELECT count(*) FROM jobflow.explain(%s)", (task,)) >= 1
    assert call(a, "SELECT count(*) FROM jobflow.explain_cron(%s)", (timer,)) >= 1

    def failure(sql, arg):
        with pytest.raises(psycopg2.Error) as e:
            call(b, sql, (arg,))
        d = e.value.diag
        return (e.value.pgcode, d.message_primary.replace(str(arg), "X"), d.message_hint,
                d.message_detail)

    missing = call(a, "SELECT max(id) + 1000000 FROM jobflow.tasks")
    assert failure("SELECT * FROM jobflow.explain(%s)", task) == \
        failure("SELECT * FROM jobflow.explain(%s)", missing)
    for extreme in (-2 ** 63, 2 ** 63 - 1, 0):
        assert failure("SELECT * FROM jobflow.explain(%s)", extreme)[0] == "42704"
    assert failure("SELECT * FROM jobflow.explain_cron(%s)", timer) == \
        failure("SELECT * FROM jobflow.explain_cron(%s)", "no_such_timer_" + timer[2:])
    assert call(b, "SELECT count(*) FROM jobflow.explain(NULL)") == 0
    assert call(b, "SELECT count(*) FROM jobflow.explain_cron(NULL)") == 0


def test_figures_are_for_monitors_and_leave_the_session_alone(db, new_role, connect):
    """jobflow_user calls neither metrics() nor _figures() and reads no
    jobflow.stats; a monitor's metrics() (which reads the queues as the
    table's owner with seqscan and jit off) leaves search_path,
    enable_seqscan and jit as they were in its session."""
    tenant = connect(user=new_role())
    for sql in ("SELECT jobflow.metrics()", "SELECT count(*) FROM jobflow.stats",
                "SELECT count(*) FROM jobflow._figures()"):
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            call(tenant, sql)
    settings = "SELECT current_setting('search_path'), current_setting('enable_seqscan')," \
               " current_setting('jit')"
    with db.cursor() as cur:
        cur.execute(settings)
        before = cur.fetchone()
        time.sleep(1.1)
        cur.execute("SELECT jobflow.metrics()")
        cur.execute(settings)
        assert cur.fetchone() == before


def test_operators_on_the_search_path_run_nowhere(db, new_role, connect):
    """A tenant's schema, first on the search_path of the monitor that
    scrapes and of the tenant itself, defines =, <= and < for every type
    the statements of metrics() and explain() compare, and count():
    none of them runs (each raises)."""
    tenant = new_role()
    schema = "r24_%s" % uuid.uuid4().hex[:6]
    with db.cursor() as cur:
        cur.execute("CREATE SCHEMA %s AUTHORIZATION %s" % (schema, tenant))
    try:
        t = connect(user=tenant)
        with t.cursor() as cur:
            cur.execute("SET search_path = %s, pg_catalog, public" % schema)
            for typ in ("text", "bigint", "regrole", "oid", "timestamptz", "jobflow.task_state"):
                fn = "%s.boom_%s" % (schema, re.sub(r"\W", "_", typ))
                cur.execute("CREATE FUNCTION %s(%s, %s) RETURNS boolean LANGUAGE plpgsql AS"
                            " $$BEGIN RAISE EXCEPTION 'hijacked by %s'; END$$" % (fn, typ, typ, typ))
                for op in ("=", "<=", "<", ">=", "<>"):
                    cur.execute("CREATE OPERATOR %s.%s (leftarg = %s, rightarg = %s,"
                                " function = %s)" % (schema, op, typ, typ, fn))
            cur.execute("CREATE FUNCTION %s.count() RETURNS bigint LANGUAGE plpgsql AS"
                        " $$BEGIN RAISE EXCEPTION 'hijacked count'; END$$" % schema)
        task = schedule(t, "http://127.0.0.1:9/x", run_at="2100-01-01")
        with t.cursor() as cur:
            cur.execute("SET search_path = %s, pg_catalog, public" % schema)
            cur.execute("SELECT pg_catalog.count(*) FROM jobflow.explain(%s)", (task,))
        with db.cursor() as cur:
            cur.execute("SET search_path = %s, pg_catalog, public" % schema)
            time.sleep(1.1)
            cur.execute("SELECT jobflow.metrics()")
            cur.execute("SELECT pg_catalog.count(*) FROM jobflow.stats")
            cur.execute("RESET search_path")
    finally:
        with db.cursor() as cur:
            cur.execute("RESET search_path")
            cur.execute("DROP SCHEMA %s CASCADE" % schema)


# -------------------------------------------------------------------------
# scripts/wire-prometheus.sh
# -------------------------------------------------------------------------

def debian_copies(tmp_path):
    for f in DEBIAN_FILES:
        if not os.path.exists(f):
            if os.environ.get("CI") == "true":
                pytest.fail("%s is missing: test.sh installs prometheus and the exporter" % f)
            pytest.skip("%s is missing (packages prometheus, prometheus-postgres-exporter)" % f)
    (tmp_path / "default").mkdir()
    (tmp_path / "prometheus").mkdir()
    shutil.copy(DEBIAN_FILES[0], tmp_path / "default")
    shutil.copy(DEBIAN_FILES[1], tmp_path / "prometheus")
    return dict(os.environ, JOBFLOW_ETC=str(tmp_path), JOBFLOW_NO_RESTART="1")


def read_defaults(path):
    """The exporter's environment from a file of /etc/default (shell
    assignments of single- or double-quoted values)."""
    out = {}
    for line in open(path):
        m = re.match(r"""^([A-Z_]+)=(['"])(.*)\2\s*$""", line)
        if m:
            out[m.group(1)] = m.group(3)
    return out


def test_wired_exporter_answers_for_two_databases(tmp_path, databases):
    """The exporter as wire-prometheus.sh sets it up for two databases of
    one server (its connections pointed at the test cluster) answers a
    scrape with HTTP 200 and jobflow's figures of both."""
    if not os.path.exists(EXPORTER):
        pytest.skip("prometheus-postgres-exporter is not installed")
    env = debian_copies(tmp_path)
    first, _ = databases()
    second, _ = databases()
    done = subprocess.run([SCRIPT, first, second], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    conf = read_defaults(tmp_path / "default" / "prometheus-postgres-exporter")
    here = "user=postgres host=%s port=%s" % (os.environ["PGHOST"], os.environ["PGPORT"])
    dsn = conf["DATA_SOURCE_NAME"].replace("user=prometheus host=/run/postgresql", here)
    from promstack import free_port
    port = free_port()
    args = [a for a in conf.get("ARGS", "").split() if a]
    log = open(tmp_path / "exporter.log", "w")
    proc = subprocess.Popen([EXPORTER, "--web.listen-address=127.0.0.1:%d" % port] + args,
                            env=dict(os.environ, DATA_SOURCE_NAME=dsn),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        body, status = None, None
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                              timeout=5).read().decode()
                status = 200
                break
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read().decode()
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        assert status == 200, "scrape answered %s: %s" % (status, (body or "")[:600])
        for db in (first, second):
            assert 'jobflow_workers_up{database="%s"' % db in body, db
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_wire_script_never_leaves_a_broken_prometheus_yml(tmp_path):
    """A prometheus.yml with a job named "postgres" in double quotes: the
    script may refuse or leave the job as it is, but the file it leaves
    must still pass promtool."""
    env = debian_copies(tmp_path)
    config = tmp_path / "prometheus" / "prometheus.yml"
    with open(config, "a") as f:
        f.write('  - job_name: "postgres"\n    static_configs:\n'
                '      - targets: ["db.example:9187"]\n')
    check = ["promtool", "check", "config", str(config)]
    assert subprocess.run(check, capture_output=True).returncode == 0
    done = subprocess.run([SCRIPT, "app"], env=env, capture_output=True, text=True)
    checked = subprocess.run(check, capture_output=True, text=True)
    assert checked.returncode == 0, \
        "the script (exit %d) left a prometheus.yml promtool refuses:\n%s" % (
            done.returncode, checked.stdout + checked.stderr)
    assert open(config).read().count("job_name") == \
        open(DEBIAN_FILES[1]).read().count("job_name") + 1


def test_explain_cron_never_quotes_a_forged_line_back(new_role, connect):
    """A timer name no timer can have (a newline, a 10 MB name) is
    refused as such (22023), not quoted back in a "does not exist"."""
    conn = connect(user=new_role())
    for name in ("x\nLOG:  forged line", "x" * (10 * 1024 * 1024)):
        with pytest.raises(psycopg2.errors.InvalidParameterValue) as e:
            call(conn, "SELECT * FROM jobflow.explain_cron(%s)", (name,))
        assert "forged" not in str(e.value) and len(str(e.value)) < 300, str(e.value)[:300]


def test_sql_ascii_queue_names_are_ascii(connect):
    """In a SQL_ASCII database a queue name with a byte over 0x7f is
    refused: the exporter (UTF-8) could not read it, and failed the
    queues' figures of every tenant of the database."""
    admin = connect(dbname="postgres")
    name = "jf_ascii_%s" % uuid.uuid4().hex[:8]
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
                    " TEMPLATE template0" % name)
    try:
        conn = connect(dbname=name)
        with conn.cursor() as cur:
            cur.execute("CREATE EXTENSION jobflow")
            with pytest.raises(psycopg2.errors.InvalidParameterValue) as e:
                cur.execute("SELECT jobflow.schedule('http://127.0.0.1:9/x', queue => E'q\\xff')")
            assert "non-ASCII byte at byte 2" in str(e.value)
            cur.execute("SELECT jobflow.schedule('http://127.0.0.1:9/x', queue => 'plain',"
                        " run_at => now() + interval '1 day')")
        conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
