# -------------------------------------------------------------------------
#
# conftest.py
#     Fixtures of the major-version upgrade tests (test_pg_upgrade.py):
#     the pairs of servers to upgrade between, throwaway clusters of any
#     installed PostgreSQL, and the HTTP receiver of the integration tests.
#
# JOBFLOW_UPGRADE_PAIRS names the upgrades to run, separated by spaces:
#
#     OLD_PG_CONFIG:NEW_PG_CONFIG[:MODES]
#
# each PG_CONFIG the path of an installation's pg_config (jobflow must be
# installed into both), MODES a comma-separated list of pg_upgrade's
# transfer modes, copy and link (default: copy).  Each pair and mode is
# one test case, named OLDVERSION-NEWVERSION-MODE.  Without the variable
# the tests are skipped, saying so.
#
# JOBFLOW_UPGRADE_PORT is the port of the old cluster (the new one gets
# the next); default PGPORT + 20, or 54349.  JOBFLOW_RUN_USER is the OS
# user the servers run as when the tests run as root (default postgres).
# JOBFLOW_KEEP_CLUSTER=1 keeps the clusters' directory (its path is
# printed).
#
# -------------------------------------------------------------------------

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg2
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(HERE, "..", "integration")
RUN_USER = os.environ.get("JOBFLOW_RUN_USER", "postgres")
PAIRS_VAR = "JOBFLOW_UPGRADE_PAIRS"
MODES = ("copy", "link")


def _port():
    if os.environ.get("JOBFLOW_UPGRADE_PORT"):
        return int(os.environ["JOBFLOW_UPGRADE_PORT"])
    return int(os.environ.get("PGPORT", "54329")) + 20


# -------------------------------------------------------------------------
# The pairs
# -------------------------------------------------------------------------

class Install:
    """One PostgreSQL installation, found through its pg_config."""

    def __init__(self, pg_config):
        if not os.access(pg_config, os.X_OK):
            raise pytest.UsageError("%s: %s is not an executable pg_config"
                                    % (PAIRS_VAR, pg_config))
        out = subprocess.run([pg_config, "--bindir", "--version", "--pkglibdir"],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        self.bindir = out[0].strip()
        self.version = out[1].strip().split()[1]      # "PostgreSQL 16.4" -> 16.4
        self.major = int(self.version.split(".")[0])
        if not os.path.exists(os.path.join(out[2].strip(), "jobflow.so")):
            raise pytest.UsageError("%s: jobflow is not installed into %s (make install "
                                    "PG_CONFIG=%s)" % (PAIRS_VAR, out[2].strip(), pg_config))

    def bin(self, name):
        return os.path.join(self.bindir, name)


def parse_pairs(text):
    """[(old Install, new Install, mode)] from JOBFLOW_UPGRADE_PAIRS."""
    cases = []
    for item in text.split():
        parts = item.split(":")
        if len(parts) not in (2, 3):
            raise pytest.UsageError("%s: %r is not OLD_PG_CONFIG:NEW_PG_CONFIG[:MODES]"
                                    % (PAIRS_VAR, item))
        modes = parts[2].split(",") if len(parts) == 3 else ["copy"]
        for mode in modes:
            if mode not in MODES:
                raise pytest.UsageError("%s: mode %r is not one of %s"
                                        % (PAIRS_VAR, mode, ", ".join(MODES)))
        old, new = Install(parts[0]), Install(parts[1])
        if new.major <= old.major:
            raise pytest.UsageError("%s: %s -> %s is not an upgrade to a later major"
                                    % (PAIRS_VAR, old.version, new.version))
        cases += [(old, new, mode) for mode in modes]
    return cases


def pytest_generate_tests(metafunc):
    if "upgrade_case" not in metafunc.fixturenames:
        return
    text = os.environ.get(PAIRS_VAR, "").strip()
    if not text:
        metafunc.parametrize("upgrade_case", [pytest.param(
            None, marks=pytest.mark.skip(
                reason="%s is not set: it names the upgrades to test, "
                       "e.g. /pg16/bin/pg_config:/pg17/bin/pg_config:copy,link "
                       "(see test/majors/conftest.py)" % PAIRS_VAR))], ids=["no-pairs"])
        return
    cases = parse_pairs(text)
    metafunc.parametrize("upgrade_case", cases,
                         ids=["%s-%s-%s" % (o.version, n.version, m) for (o, n, m) in cases])


# -------------------------------------------------------------------------
# Clusters
# -------------------------------------------------------------------------

def as_server_user(cmd, cwd=None, timeout=300, check=True):
    """Run cmd as the server's OS user (when root); its output, or a test
    failure that shows it."""
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", RUN_USER, "--"] + cmd
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        pytest.fail("%s failed (%d):\n%s\n%s" % (" ".join(cmd), res.returncode,
                                                  res.stdout[-4000:], res.stderr[-4000:]))
    return res


class Cluster:
    """A throwaway cluster of one installation, in its own directory, on a
    Unix socket only; jobflow preloaded, loopback allowed."""

    def __init__(self, top, name, install, port):
        self.install = install
        self.dir = os.path.join(top, name)
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.log = os.path.join(self.dir, "log")
        self.port = port
        self.running = False
        as_server_user(["mkdir", "-p", self.sock])

    def initdb(self, checksums):
        args = [self.install.bin("initdb"), "-D", self.data, "-U", "postgres",
                "-A", "trust", "--no-sync"]
        if checksums:
            args.append("--data-checksums")
        elif self.install.major >= 18:
            args.append("--no-data-checksums")      # 18 turned them on by default
        as_server_user(args)

    def configure(self, extra=()):
        lines = [
            "port = %d" % self.port,
            "listen_addresses = ''",
            "unix_socket_directories = '%s'" % self.sock,
            "shared_preload_libraries = 'jobflow'",
            "fsync = off",
            "jobflow.allow_networks = '127.0.0.0/8, ::1/128'",
        ] + list(extra)
        conf = os.path.join(self.data, "postgresql.conf")
        subprocess.run((["runuser", "-u", RUN_USER, "--"] if os.geteuid() == 0 else [])
                       + ["sh", "-c", "cat >> '%s'" % conf],
                       input="\n".join(lines) + "\n", text=True, check=True)

    def pg_ctl(self, *args, options=None):
        cmd = [self.install.bin("pg_ctl"), "-D", self.data, "-l", self.log, "-w", "-t", "120"]
        if options:
            cmd += ["-o", options]
        as_server_user(cmd + list(args))

    def start(self, options=None):
        self.pg_ctl("start", options=options)
        self.running = True

    def stop(self, mode="fast"):
        self.pg_ctl("-m", mode, "stop")
        self.running = False

    def connect(self, dbname="postgres"):
        conn = psycopg2.connect(host=self.sock, port=self.port, user="postgres", dbname=dbname)
        conn.autocommit = True
        return conn

    def query(self, sql, args=None, dbname="postgres"):
        """Every row of sql, as tuples."""
        conn = self.connect(dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()

    def value(self, sql, args=None, dbname="postgres"):
        rows = self.query(sql, args, dbname)
        return rows[0][0] if rows else None


@pytest.fixture
def workdir():
    """A directory the server's OS user owns (pg_upgrade writes its logs
    into its working directory); removed at the end unless kept."""
    top = tempfile.mkdtemp(prefix="jobflow-pg-upgrade-")
    os.chmod(top, 0o755)
    if os.geteuid() == 0:
        shutil.chown(top, RUN_USER)
    try:
        yield top
    finally:
        if os.environ.get("JOBFLOW_KEEP_CLUSTER"):
            print("kept %s" % top)
        else:
            shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def clusters(upgrade_case, workdir):
    """(old, new): the two clusters of a case, not initialised yet; each is
    stopped at the end if it runs."""
    old_install, new_install, _ = upgrade_case
    port = _port()
    old = Cluster(workdir, "old", old_install, port)
    new = Cluster(workdir, "new", new_install, port + 1)
    try:
        yield old, new
    finally:
        for c in (new, old):
            if c.running or os.path.exists(os.path.join(c.data, "postmaster.pid")):
                try:
                    c.stop("immediate")
                except BaseException:
                    pass


# -------------------------------------------------------------------------
# The receiver: test/integration's, imported from its conftest.py
# -------------------------------------------------------------------------

def _integration_conftest():
    if INTEGRATION not in sys.path:
        sys.path.insert(0, INTEGRATION)      # for its "import starved"
    spec = importlib.util.spec_from_file_location(
        "jobflow_integration_conftest", os.path.join(INTEGRATION, "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def receiver(tmp_path):
    """test/receiver.py on 127.0.0.1, one per case: its /flaky counters go
    by task id, and each case's clusters number their tasks from 1."""
    integration = _integration_conftest()
    rec = integration.start_receiver(tmp_path)
    try:
        yield rec
    finally:
        integration._stop_receiver(rec)


def wait_until(predicate, timeout, what, interval=0.1):
    """predicate()'s first true value within timeout seconds, else a test
    failure naming what."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() >= deadline:
            pytest.fail("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)
