# -------------------------------------------------------------------------
#
# conftest.py
#     Fixtures and helpers shared by jobflow's integration tests.
#
# The tests run against a real cluster with jobflow preloaded (started by
# scripts/test.sh, which exports PGHOST, PGPORT, PGUSER, PGDATABASE,
# JOBFLOW_PGDATA, JOBFLOW_PGBIN and JOBFLOW_RUN_USER) and a real HTTP
# receiver (test/receiver.py) on 127.0.0.1, started once per session.
# The cluster is configured with jobflow.allow_networks = '127.0.0.0/8,
# ::1/128' (loopback is denied by default): a test of the deny lists sets
# both lists itself and resets them (set_guc(conn, name, None)).
#
# Fixtures:
#   receiver   session: the running receiver (Receiver below): url(),
#              unique_url(), requests(), tagged(), reset(), wait_for().
#   second_receiver  another receiver process, for one test.
#   receiver6  a receiver on ::1 (url() gives http://[::1]:port/...), for
#              one test.
#   new_role   factory: new_role() -> name of a fresh LOGIN role granted
#              jobflow_user; its tasks, log rows and timers are deleted,
#              and it is dropped, when the test ends.
#   app_role   one such role.
#   role       factory: role() -> name of a fresh NOLOGIN role granted
#              jobflow_user; dropped, with what it owns (DROP OWNED), when
#              the test ends if it still exists.
#   connect    factory: connect(autocommit=True) -> psycopg2 connection,
#              closed when the test ends.
#   db         one autocommit connection (connect()).
#   server     session: the cluster (Server below): worker_pid(),
#              wait_worker(), wait_ready(), kill9(), restart(),
#              crash_restart(), set_guc().
#
# Helpers (plain functions, importable with "from conftest import ..."):
#   query(conn, sql, args)           rows as dicts
#   schedule(conn, url, ...)         jobflow.schedule() with keywords
#   wait_final(conn, ids, timeout)   wait until tasks reach a final state
#   task_row(conn, id), task_log(conn, id), worker_status(conn)
#   epoch(conn, id)                  run_at of a task as Unix seconds
#   call(conn, sql, args)            the first column of sql's first row
#                                    (None when it returns no rows)
#   stat(conn, name), settle(...)    a figure of jobflow.stats; the same
#                                    once it has not moved for a while
#   as_role(conn, role, sql, args)   sql after SET ROLE role: the first
#                                    column of its first row (or None)
#   notifications(conn, seconds)     the notifications conn receives
#                                    within seconds
#
# It also puts test/ on sys.path: the tests that make servers of their own
# (test_failover.py, test_logical.py) "import pgnode".
#
# A test that restarts the server or kills one of its processes ends every
# open connection: it must open new ones afterwards (connect()), and
# should leave the cluster as it found it (set_guc(conn, name, None)).
#
# Tests must be independent: tag every URL with a unique query string
# (receiver.unique_url) and match requests by tag or task id, never by
# position in the receiver's list.
#
# -------------------------------------------------------------------------

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import psycopg2
import psycopg2.extras
import pytest

import starved


def pytest_configure(config):
    # "pytest -m smoke": what scripts/test.sh runs on PostgreSQL 14, 16 and
    # 17 (every test runs on 15 and 18)
    config.addinivalue_line(
        "markers", "smoke: the subset run on every supported major: start, schedule "
        "and fire, cron, retries, restore, upgrade from 0.1.0, two databases, "
        "failover, poolers, logical replication")
    starved.pytest_configure(config)


# reruns of timing tests on a starved machine: hooks named here are registered
pytest_runtest_protocol = starved.pytest_runtest_protocol
pytest_terminal_summary = starved.pytest_terminal_summary

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RECEIVER = os.path.join(REPO, "test", "receiver.py")

# test/ on the path, for the modules the suites share ("import pgnode")
if os.path.join(REPO, "test") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "test"))

FINAL_STATES = ("succeeded", "failed", "cancelled")


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.exit("%s is not set: run the integration tests through "
                    "scripts/test.sh (or export the cluster settings)" % name,
                    returncode=2)
    return value


# -------------------------------------------------------------------------
# HTTP receiver
# -------------------------------------------------------------------------

class Receiver:
    """test/receiver.py running on 127.0.0.1 (or [::1]) for the whole
    session."""

    def __init__(self, proc, port, host="127.0.0.1"):
        self.proc = proc
        self.port = port
        self.host = "[%s]" % host if ":" in host else host
        self.base = "http://%s:%d" % (self.host, port)

    def url(self, path, host=None):
        """URL of path on the receiver; host may be "localhost" (same
        socket, a different host key for jobflow's per-host caps)."""
        return "http://%s:%d%s" % (host or self.host, self.port, path)

    def unique_url(self, path="/ok", host=None):
        """(url, tag): path with ?t=<uuid> (or &t=) so that this test's
        requests can be told apart from every other test's."""
        tag = uuid.uuid4().hex
        sep = "&" if "?" in path else "?"
        return self.url("%s%st=%s" % (path, sep, tag), host), tag

    def _call(self, method, path):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read()

    def reset(self):
        """Forget every recorded request (and the /flaky counters)."""
        self._call("POST", "/_reset")

    def requests(self, pred=None):
        """Recorded requests (dicts: time, method, path, query, headers,
        body, inflight), optionally filtered by pred."""
        recs = json.loads(self._call("GET", "/_requests"))
        return [r for r in recs if pred is None or pred(r)]

    def tagged(self, tag):
        """Requests whose query carries the given unique tag."""
        return self.requests(lambda r: ("t=" + tag) in r["query"])

    def wait_for(self, pred, n=1, timeout=10.0, interval=0.05):
        """Wait until at least n recorded requests satisfy pred; return
        them all.  Fails the test with what was seen on timeout."""
        deadline = time.time() + timeout
        while True:
            got = self.requests(pred)
            if len(got) >= n:
                return got
            if time.time() >= deadline:
                pytest.fail("receiver: %d of %d expected request(s) after %.1f s; "
                            "matching so far: %s" % (len(got), n, timeout,
                                                     json.dumps(got[:5], indent=1)))
            time.sleep(interval)


def start_receiver(directory, host="127.0.0.1"):
    """Start test/receiver.py on 127.0.0.1 or ::1 (free port), writing its
    port file in directory; the caller kills rec.proc."""
    port_file = directory / "port"
    proc = subprocess.Popen([sys.executable, RECEIVER, "--port", "0",
                             "--port-file", str(port_file), "--host", host],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while not port_file.exists() or not port_file.read_text().strip():
        if proc.poll() is not None:
            pytest.exit("receiver exited: %s" % proc.stderr.read().decode(), returncode=2)
        if time.time() > deadline:
            proc.kill()
            pytest.exit("receiver did not write its port file", returncode=2)
        time.sleep(0.02)
    return Receiver(proc, int(port_file.read_text().strip()), host)


def _stop_receiver(rec):
    rec.proc.kill()
    rec.proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def written_back():
    """Each test starts with the page cache written back.  Tests time the
    worker to the second, and what an earlier test wrote in bulk (the
    copies of CREATE DATABASE, 200,000-row inserts, clusters made for the
    failover and restore tests) would otherwise still be written back to
    this machine's shared disk while the next test runs; a strace of the
    worker on a cluster just made showed its writes waiting 25-208 ms
    behind such writeback.  A test measures jobflow, not the last one's
    I/O.  (The other cause of late callbacks seen in CI, the host taking
    the VM's CPUs away, no test can remove: scripts/test.sh reports it
    when the suite fails.)"""
    os.sync()
    yield


@pytest.fixture(scope="session")
def receiver(tmp_path_factory):
    """The receiver every test shares, for the whole session."""
    rec = start_receiver(tmp_path_factory.mktemp("receiver"))
    try:
        yield rec
    finally:
        _stop_receiver(rec)


@pytest.fixture
def second_receiver(tmp_path):
    """Another receiver process, for one test: load sent there does not
    slow down the shared one."""
    rec = start_receiver(tmp_path)
    try:
        yield rec
    finally:
        _stop_receiver(rec)


@pytest.fixture
def receiver6(tmp_path):
    """A receiver on ::1, for one test."""
    directory = tmp_path / "receiver6"     # second_receiver may use tmp_path
    directory.mkdir()
    rec = start_receiver(directory, host="::1")
    try:
        yield rec
    finally:
        _stop_receiver(rec)


# -------------------------------------------------------------------------
# Database connections
# -------------------------------------------------------------------------

def _connect(autocommit=True, **kwargs):
    # libpq takes host, port, user and database from the PG* variables
    kwargs.setdefault("dbname", os.environ.get("PGDATABASE", "jobflow"))
    conn = psycopg2.connect(**kwargs)
    conn.autocommit = autocommit
    return conn


@pytest.fixture
def connect():
    """Factory: connect(autocommit=True, **libpq keywords).  Every
    connection it opened is closed at the end of the test."""
    opened = []

    def factory(autocommit=True, **kwargs):
        conn = _connect(autocommit, **kwargs)
        opened.append(conn)
        return conn

    yield factory
    for conn in opened:
        try:
            conn.close()
        except psycopg2.Error:
            pass


@pytest.fixture
def db(connect):
    """One autocommit connection to the jobflow database."""
    return connect()


def _roles(db, prefix, attributes, drop):
    """A factory of roles granted jobflow_user, and the list of their names
    for drop(cur, name) to clean up after the test."""
    names = []

    def make():
        name = prefix + uuid.uuid4().hex[:10]
        with db.cursor() as cur:
            cur.execute("CREATE ROLE %s %s" % (name, attributes))
            cur.execute("GRANT jobflow_user TO %s" % name)
        names.append(name)
        return name

    def cleanup():
        with db.cursor() as cur:
            cur.execute("RESET ROLE")
            for name in names:
                drop(cur, name)
    return make, cleanup


@pytest.fixture
def new_role(db):
    """Factory of throwaway application roles (see the header)."""
    def drop(cur, name):
        cur.execute("DELETE FROM jobflow.cron_timers WHERE owner = %s::regrole", (name,))
        cur.execute("DELETE FROM jobflow.task_log WHERE owner = %s::regrole", (name,))
        cur.execute("DELETE FROM jobflow.tasks WHERE owner = %s::regrole", (name,))
        cur.execute("DROP ROLE %s" % name)
    make, cleanup = _roles(db, "app_", "LOGIN", drop)
    yield make
    cleanup()


@pytest.fixture
def role(db):
    """Factory of NOLOGIN roles granted jobflow_user (see the header)."""
    def drop(cur, name):
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
        if cur.fetchone():
            cur.execute("DROP OWNED BY %s" % name)
            cur.execute("DROP ROLE %s" % name)
    make, cleanup = _roles(db, "jf_role_", "NOLOGIN", drop)
    yield make
    cleanup()


@pytest.fixture
def app_role(new_role):
    return new_role()


@pytest.fixture
def monitor(db):
    """A LOGIN role that is a member of pg_monitor and nothing else, as an
    exporter logs in (roles are the cluster's: any database's tests use it)."""
    name = "jf_mon_%s" % uuid.uuid4().hex[:8]
    with db.cursor() as cur:
        cur.execute("CREATE ROLE %s LOGIN IN ROLE pg_monitor" % name)
    yield name
    with db.cursor() as cur:
        cur.execute("DROP ROLE %s" % name)


@pytest.fixture
def databases(connect):
    """Factory: new_db(extension=True) -> (name, autocommit connection) of a
    fresh database (with jobflow unless told otherwise), and
    new_db.copy_of(name) -> the name of a copy made from it as a template;
    every one is dropped at the end of the test."""
    admin = connect(dbname="postgres")
    made = []

    def new_db(extension=True):
        name = "jf_db_" + uuid.uuid4().hex[:8]
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE %s" % name)
        made.append(name)
        conn = connect(dbname=name)
        if extension:
            with conn.cursor() as cur:
                cur.execute("CREATE EXTENSION jobflow")
        return name, conn

    def copy_of(template):
        """CREATE DATABASE ... TEMPLATE template; the copy's name."""
        name = "jf_copy_" + uuid.uuid4().hex[:8]
        made.append(name)
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE %s TEMPLATE %s" % (name, template))
        return name

    new_db.admin = admin
    new_db.made = made
    new_db.copy_of = copy_of
    yield new_db
    for conn_name in made:
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % conn_name)


def skip_unless_older_versions_install(conn):
    """Skip a test that installs jobflow 0.1.0 or 0.2.0 to update it: their
    scripts make security_invoker views, which PostgreSQL 14 does not have
    (installs on 14 start at 0.3.0: src/install_pg14.sql)."""
    if conn.server_version < 150000:
        pytest.skip("jobflow 0.1.0 and 0.2.0 need PostgreSQL 15 or later (security_invoker "
                    "views): on 14 installs start at 0.3.0, there is nothing to update from")


def query(conn, sql, args=None):
    """Rows of sql as a list of dicts."""
    with conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(sql, args)
        return [dict(r) for r in cur.fetchall()]


def schedule(conn, url, **kw):
    """jobflow.schedule(url, name => value, ...); returns the task id.
    Values are passed as parameters; run_at may be a timestamptz or an
    SQL expression given as run_at_sql (e.g. "now() + interval '1 s'")."""
    args = [url]
    parts = ["%s"]
    run_at_sql = kw.pop("run_at_sql", None)
    if run_at_sql is not None:
        parts.append("run_at => %s" % run_at_sql)
    for name, value in kw.items():
        if name in ("body", "headers"):
            parts.append("%s => %%s::jsonb" % name)
            value = json.dumps(value)
        else:
            parts.append("%s => %%s" % name)
        args.append(value)
    with conn.cursor() as cur:
        cur.execute("SELECT jobflow.schedule(%s)" % ", ".join(parts), args)
        return cur.fetchone()[0]


def call(conn, sql, args=None):
    """The first column of sql's first row, or None when it returns none."""
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone() if cur.description else None
        return row[0] if row else None


def stat(conn, name):
    """A figure of jobflow.stats."""
    return call(conn, "SELECT value FROM jobflow.stats WHERE metric = %s", (name,))


def settle(conn, name, quiet=1.5, timeout=20):
    """The figure once it has not moved for quiet seconds (at most timeout)."""
    deadline = time.time() + timeout
    last = stat(conn, name)
    since = time.time()
    while time.time() < deadline:
        time.sleep(0.1)
        now = stat(conn, name)
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= quiet:
            break
    return last


def as_role(conn, role, sql, args=None):
    """sql run as role (SET ROLE, reset whatever happens): the first column
    of its first row, or None when it returns no rows."""
    with conn.cursor() as cur:
        cur.execute("SET ROLE %s" % role)
        try:
            cur.execute(sql, args)
            return cur.fetchone()[0] if cur.description else None
        finally:
            cur.execute("RESET ROLE")


def notifications(conn, seconds):
    """The notifications conn receives within seconds (psycopg2 Notify)."""
    got = []
    deadline = time.time() + seconds
    while time.time() < deadline:
        if select.select([conn], [], [], 0.2) != ([], [], []):
            conn.poll()
            while conn.notifies:
                got.append(conn.notifies.pop(0))
    return got


def task_row(conn, task_id):
    rows = query(conn, "SELECT * FROM jobflow.tasks WHERE id = %s", (task_id,))
    return rows[0] if rows else None


def task_log(conn, task_id):
    """The task's log rows by attempt (then finish time)."""
    return query(conn, "SELECT * FROM jobflow.task_log WHERE task_id = %s"
                 " ORDER BY attempt, finished_at NULLS FIRST", (task_id,))


def epoch(conn, task_id, column="run_at"):
    """A timestamptz column of a task as Unix seconds (float)."""
    with conn.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM %s)::float8 FROM jobflow.tasks"
                    " WHERE id = %%s" % column, (task_id,))
        return cur.fetchone()[0]


def worker_status(conn):
    return query(conn, "SELECT * FROM jobflow.worker_status()")[0]


def _describe(conn, task_id):
    try:
        row = task_row(conn, task_id)
        log = task_log(conn, task_id)
    except psycopg2.Error as e:
        return "task %s: could not read it (%s)" % (task_id, e)
    return "task %s: %s\n  log: %s" % (task_id, row, log)


def wait_final(conn, ids, timeout=20.0, interval=0.05):
    """Wait until every task of ids (an id or a list) is succeeded, failed
    or cancelled; return {id: state}.  On timeout, fail showing the
    unfinished tasks' rows and logs and the worker's status."""
    single = isinstance(ids, int)
    ids = [ids] if single else list(ids)
    deadline = time.time() + timeout
    while True:
        rows = query(conn, "SELECT id, state::text FROM jobflow.tasks"
                     " WHERE id = ANY(%s)", (ids,))
        states = {r["id"]: r["state"] for r in rows}
        waiting = [i for i in ids if states.get(i) not in FINAL_STATES]
        if not waiting:
            return states[ids[0]] if single else states
        if time.time() >= deadline:
            detail = "\n".join(_describe(conn, i) for i in waiting[:5])
            pytest.fail("%d of %d task(s) not final after %.1f s:\n%s\nworker: %s"
                        % (len(waiting), len(ids), timeout, detail,
                           worker_status(conn)))
        time.sleep(interval)


# -------------------------------------------------------------------------
# The server and its worker
# -------------------------------------------------------------------------

class Server:
    """The cluster the tests run against, for tests that restart it or
    kill its processes.  After either, open new connections: the old ones
    are gone."""

    def __init__(self):
        self.pgdata = _env("JOBFLOW_PGDATA")
        self.pgbin = _env("JOBFLOW_PGBIN")
        self.run_user = _env("JOBFLOW_RUN_USER")
        # where cluster_start (scripts/lib.sh) puts the server log
        self.logfile = os.path.join(os.path.dirname(self.pgdata), "postgres.log")

    def pg_ctl(self, *args, timeout=120):
        """Run pg_ctl as the server's OS user (runuser when we are root)."""
        cmd = [os.path.join(self.pgbin, "pg_ctl"), "-D", self.pgdata] + list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.run_user, "--"] + cmd
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=timeout)
        if res.returncode != 0:
            pytest.fail("%s failed (%d): %s%s" % (" ".join(cmd), res.returncode,
                                                  res.stdout, res.stderr))
        return res

    def restart(self):
        """pg_ctl restart -m fast -w: a clean shutdown, then a start."""
        self.pg_ctl("restart", "-m", "fast", "-w", "-t", "60", "-l", self.logfile)

    def crash_restart(self):
        """pg_ctl stop -m immediate (no shutdown checkpoint, WAL buffers
        not written: as a crash), then a start with crash recovery."""
        self.pg_ctl("stop", "-m", "immediate", "-w", "-t", "60")
        self.pg_ctl("start", "-w", "-t", "60", "-l", self.logfile)

    def worker_pid(self, conn=None):
        """worker_status().pid (None when no worker), on conn or a fresh
        connection."""
        if conn is not None:
            return worker_status(conn)["pid"]
        conn = _connect()
        try:
            return worker_status(conn)["pid"]
        finally:
            conn.close()

    def wait_worker(self, old_pid=None, timeout=60.0):
        """Wait until the server accepts connections and a worker other
        than old_pid is attached; return its pid."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                pid = self.worker_pid()
                if pid is not None and pid != old_pid:
                    return pid
                last = "worker pid %s" % pid
            except psycopg2.Error as e:
                last = str(e).strip()
            time.sleep(0.1)
        pytest.fail("no new jobflow worker (old pid %s) after %.0f s; last: %s"
                    % (old_pid, timeout, last))

    def wait_ready(self, timeout=60.0):
        """Wait until the server accepts connections again."""
        deadline = time.time() + timeout
        while True:
            try:
                _connect().close()
                return
            except psycopg2.Error as e:
                if time.time() >= deadline:
                    pytest.fail("server not back after %.0f s: %s" % (timeout, e))
                time.sleep(0.1)

    @staticmethod
    def kill9(pid):
        os.kill(pid, signal.SIGKILL)

    def set_guc(self, conn, name, value):
        """ALTER SYSTEM SET name = value (None resets) and reload."""
        with conn.cursor() as cur:
            if value is None:
                cur.execute("ALTER SYSTEM RESET %s" % name)
            else:
                cur.execute("ALTER SYSTEM SET %s = %%s" % name, (str(value),))
            cur.execute("SELECT pg_reload_conf()")


@pytest.fixture(scope="session")
def server():
    """The cluster under test (Server)."""
    return Server()
