# -------------------------------------------------------------------------
#
# conftest.py
#     Fixtures of the major-version upgrade tests (test_pg_upgrade.py):
#     the pairs of servers to upgrade between, throwaway clusters of any
#     installed PostgreSQL (test/pgnode.py's servers), and the HTTP
#     receiver of the integration tests.
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
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
INTEGRATION = os.path.join(HERE, "..", "integration")
TEST = os.path.dirname(HERE)

# test/ on the path, for the modules the suites share ("import pgnode")
if TEST not in sys.path:
    sys.path.insert(0, TEST)

import pgnode                   # noqa: E402

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

class Cluster(pgnode.Node):
    """A throwaway cluster of one installation (test/pgnode.py's Node)."""

    pg_ctl_wait = 120

    def __init__(self, top, name, install, port):
        super().__init__(top, name, port, bindir=install.bindir)
        self.install = install


@pytest.fixture
def workdir():
    """A directory the server's OS user owns (pg_upgrade writes its logs
    into its working directory); removed at the end unless kept."""
    with pgnode.scratch_dir("jobflow-pg-upgrade-") as top:
        yield top


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
            c.stop_quietly()


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
