# -------------------------------------------------------------------------
#
# conftest.py
#     The HA suite's cluster: one etcd and three PostgreSQL nodes managed
#     by Patroni, all on loopback, with jobflow preloaded on every node.
#
# Environment: JOBFLOW_PGBIN (required: the bin directory of a PostgreSQL
# with jobflow installed), JOBFLOW_RUN_USER (the OS user the servers run
# as when the suite runs as root; postgres by default), JOBFLOW_HA_PORT
# (the first of the ports used: etcd's client and peer ports, then
# +10.. for PostgreSQL, +20.. for Patroni's REST APIs, +30 the receiver;
# 56300 by default), JOBFLOW_KEEP_CLUSTER (keep the directory).
#
# Everything the fixture starts is stopped in its teardown, also when a
# test fails: Patroni (which stops its PostgreSQL), then any PostgreSQL
# process left in the suite's directory (by pid, found through its
# working directory), then etcd and the receiver.
#
# -------------------------------------------------------------------------

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

import psycopg2
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

# test/ on the path, for the modules the suites share ("import pgnode")
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

import pgnode                           # noqa: E402
from ha_receiver import postgres_pids   # noqa: E402
from pgnode import wait_until           # noqa: E402

PGBIN = os.environ.get("JOBFLOW_PGBIN")
RUN_USER = os.environ.get("JOBFLOW_RUN_USER") or ("postgres" if os.geteuid() == 0
                                                  else pwd.getpwuid(os.geteuid()).pw_name)
BASE_PORT = int(os.environ.get("JOBFLOW_HA_PORT", "56300"))
SCOPE = "jobflow-ha"
DBNAME = "jobflow"
APP_ROLE = "ha_app"
NODES = 3
RECEIVER_DELAY_MS = 50      # each answer's delay: about 10 requests in flight at 200/s


def child_env():
    """The environment of every daemon: no proxy may stand between the
    loopback services."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    if os.geteuid() == 0:
        env["HOME"] = pwd.getpwnam(RUN_USER).pw_dir
        env["USER"] = env["LOGNAME"] = RUN_USER
    return env


def spawn(cmd, log_path):
    """Start a daemon as the run user (when root), its output in log_path."""
    kwargs = {}
    if os.geteuid() == 0:
        pw = pwd.getpwnam(RUN_USER)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_env(), cwd="/", start_new_session=True, **kwargs)
    finally:
        log.close()


def stop_process(proc, timeout=30):
    """SIGTERM, then SIGKILL; proc is one of ours."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def http_json(url, method="GET", body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout) as resp:
        text = resp.read().decode()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text


class Node(pgnode.Queries):
    """One Patroni-managed PostgreSQL node; query() and value() of
    test/pgnode.py, on the database jobflow unless told."""

    dbname = DBNAME

    def __init__(self, top, index):
        self.name = "node%d" % index
        self.dir = os.path.join(top, self.name)
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.port = BASE_PORT + 10 + index
        self.api_port = BASE_PORT + 20 + index
        self.api = "http://127.0.0.1:%d" % self.api_port
        self.config = os.path.join(self.dir, "patroni.yml")
        self.log = os.path.join(self.dir, "patroni.log")
        self.proc = None

    def write_config(self, top):
        # JSON is YAML: no YAML writer needed
        conf = {
            "scope": SCOPE,
            "namespace": "/jobflow-test/",
            "name": self.name,
            "log": {"level": "INFO", "format": "%(asctime)s %(levelname)s: %(message)s"},
            "restapi": {"listen": "127.0.0.1:%d" % self.api_port,
                        "connect_address": "127.0.0.1:%d" % self.api_port},
            "etcd3": {"hosts": ["127.0.0.1:%d" % BASE_PORT]},
            "bootstrap": {
                "dcs": {
                    "ttl": 20,
                    "loop_wait": 1,
                    "retry_timeout": 5,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    # a commit acknowledged on the leader is on a standby,
                    # and only that standby may be promoted: no claim (no
                    # attempt that may have been sent) is lost
                    "synchronous_mode": True,
                    # a crashed leader fails over at once rather than
                    # being restarted in place
                    "primary_start_timeout": 0,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "shared_preload_libraries": "jobflow",
                            "wal_log_hints": "on",
                            "jobflow.allow_networks": "127.0.0.0/8",
                            "jobflow.reconcile_interval": "1s",
                            "jobflow.retry_backoff_base": "200ms",
                            "fsync": "off",
                            "max_connections": 50,
                            "max_worker_processes": 16,
                            "wal_keep_size": "128MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": "127.0.0.1:%d" % self.port,
                "connect_address": "127.0.0.1:%d" % self.port,
                "data_dir": self.data,
                "bin_dir": PGBIN,
                "pgpass": os.path.join(self.dir, "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "ha-test"},
                    "replication": {"username": "replicator", "password": "ha-test"},
                },
                "parameters": {"unix_socket_directories": self.sock},
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
        }
        with open(self.config, "w") as f:
            json.dump(conf, f, indent=1)

    def start(self):
        self.proc = spawn(["/usr/bin/patroni", self.config], self.log)

    def status(self):
        """Patroni's view of this node (GET /patroni), or None."""
        try:
            return http_json(self.api + "/patroni", timeout=2)[1]
        except Exception:
            return None

    def connect(self, user="postgres", dbname=DBNAME, timeout=3):
        """A new autocommit connection over TCP, as Patroni's nodes listen."""
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=user, dbname=dbname,
                                connect_timeout=timeout)
        conn.autocommit = True
        return conn

    def in_recovery(self):
        """True/False, or None when the node does not answer."""
        try:
            return self.query("SELECT pg_is_in_recovery()", dbname="postgres")[0][0]
        except Exception:
            return None

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None


class Cluster:
    def __init__(self, top):
        self.top = top
        self.nodes = [Node(top, i) for i in range(NODES)]
        self.etcd = None
        self.receiver = None
        self.receiver_port = BASE_PORT + 30
        self.receiver_log = os.path.join(top, "received.jsonl")

    def by_name(self, name):
        return next(n for n in self.nodes if n.name == name)

    def members(self):
        """Patroni's cluster members (GET /cluster from any node that
        answers): dicts with name, role, state."""
        for node in self.nodes:
            try:
                return http_json(node.api + "/cluster", timeout=2)[1]["members"]
            except Exception:
                continue
        return []

    def leader(self):
        """The node Patroni calls leader and that is read-write, or None."""
        for m in self.members():
            if m.get("role") == "leader" and m.get("state") == "running":
                node = self.by_name(m["name"])
                if node.in_recovery() is False:
                    return node
        return None

    def healthy(self):
        """A running leader, a running sync standby and a running replica."""
        roles = sorted(m.get("role") for m in self.members() if m.get("state") == "running")
        return roles == ["leader", "replica", "sync_standby"]

    def sync_standby(self):
        for m in self.members():
            if m.get("role") == "sync_standby":
                return self.by_name(m["name"])
        return None

    def received(self):
        """The receiver's records so far."""
        out = []
        with open(self.receiver_log) as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
        return out

    def dsn(self, user=APP_ROLE):
        """libpq's own choice of the read-write node among the three."""
        return ("host=%s port=%s user=%s dbname=%s connect_timeout=2 "
                "target_session_attrs=read-write" % (
                    ",".join("127.0.0.1" for _ in self.nodes),
                    ",".join(str(n.port) for n in self.nodes), user, DBNAME))

    def logs_tail(self, lines=40):
        out = []
        for node in self.nodes:
            try:
                with open(node.log) as f:
                    out.append("--- %s\n%s" % (node.name, "".join(f.readlines()[-lines:])))
            except OSError:
                pass
        return "\n".join(out)


def own_postgres_pids(top):
    """PostgreSQL processes whose working directory is under top: the
    suite's own, orphans of a killed postmaster included."""
    return [int(pid) for pid in postgres_pids()
            if os.path.realpath("/proc/%s/cwd" % pid).startswith(top + os.sep)]


@pytest.fixture(scope="session")
def cluster():
    if not PGBIN or not os.path.exists(os.path.join(PGBIN, "postgres")):
        pytest.fail("JOBFLOW_PGBIN must name a PostgreSQL bin directory with jobflow installed")
    for tool in ("/usr/bin/patroni", "/usr/bin/etcd"):
        if not os.path.exists(tool):
            pytest.fail("%s is missing: install the patroni and etcd-server packages" % tool)
    top = os.path.realpath(tempfile.mkdtemp(prefix="jobflow-ha-"))
    if os.geteuid() == 0:
        shutil.chown(top, RUN_USER)
    c = Cluster(top)
    try:
        for node in c.nodes:
            os.makedirs(node.sock)
            node.write_config(top)
        if os.geteuid() == 0:
            for dirpath, dirnames, filenames in os.walk(top):
                for name in dirnames + filenames:
                    shutil.chown(os.path.join(dirpath, name), RUN_USER)
        etcd_dir = os.path.join(top, "etcd")
        peer = "http://127.0.0.1:%d" % (BASE_PORT + 1)
        client = "http://127.0.0.1:%d" % BASE_PORT
        c.etcd = spawn(["/usr/bin/etcd", "--name", "ha", "--data-dir", etcd_dir,
                        "--listen-client-urls", client, "--advertise-client-urls", client,
                        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                        "--initial-cluster", "ha=" + peer, "--initial-cluster-state", "new",
                        "--listen-metrics-urls", "", "--log-level", "warn"],
                       os.path.join(top, "etcd.log"))
        wait_until(lambda: _etcd_up(client), 30, "etcd")
        c.receiver = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "ha_receiver.py"), "--port", str(c.receiver_port),
             "--log", c.receiver_log, "--delay-ms", str(RECEIVER_DELAY_MS)] + ["--node=%s=%s" % (n.name, n.data) for n in c.nodes],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(top, "receiver.log"), "ab"),
            env=child_env())
        open(c.receiver_log, "a").close()
        # the first node bootstraps alone, so that it is the one initdb runs on
        c.nodes[0].start()
        wait_until(lambda: c.leader(), 120, "the first leader\n" + c.logs_tail())
        for node in c.nodes[1:]:
            node.start()
        wait_until(c.healthy, 180, "a leader, a sync standby and a replica")
        leader = c.leader()
        leader.query("CREATE DATABASE %s" % DBNAME, dbname="postgres")
        leader.query("CREATE EXTENSION jobflow")
        leader.query("CREATE ROLE %s LOGIN IN ROLE jobflow_user" % APP_ROLE)
        yield c
    finally:
        for node in c.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in c.nodes:
            try:
                stop_process(node.proc, timeout=60)
            except Exception:
                pass
        for node in c.nodes:
            if os.path.exists(os.path.join(node.data, "postmaster.pid")):
                pgnode.as_server_user([os.path.join(PGBIN, "pg_ctl"), "-D", node.data, "-m",
                                       "immediate", "-w", "stop"], timeout=60, check=False)
        for pid in own_postgres_pids(top):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        stop_process(c.etcd)
        stop_process(c.receiver, timeout=5)
        if not os.environ.get("JOBFLOW_KEEP_CLUSTER"):
            shutil.rmtree(top, ignore_errors=True)
        else:
            print("kept the HA cluster's directory: %s" % top)


def _etcd_up(client):
    try:
        return http_json(client + "/health", timeout=2)[0] == 200
    except Exception:
        return False
