# -------------------------------------------------------------------------
#
# test_restore.py
#     Issue 9, Data 1: a dump of a database with 100,000 tasks, their log
#     and cron timers with materialised occurrences comes back whole in
#     every restore mode (pg_restore plain, -j 2, --single-transaction, a
#     plain-SQL dump through psql, --data-only into an existing jobflow
#     schema), into a fresh cluster with jobflow preloaded whose worker
#     serves the restored database; the worker writes nothing that could
#     collide while the restore runs and resumes on its own: the pending
#     tasks that were due fire, the timers go on.
#
# The source is a template database of the test cluster, which no worker
# serves, so nothing in it fires; each mode restores into a copy of one
# initdb'd cluster on the next port.
#
# -------------------------------------------------------------------------

import os
import shutil
import subprocess
import tempfile
import time

import psycopg2
import pytest

from conftest import query

N_TASKS = 100000
N_FIRE = 20

# what must come back unchanged: every row's identity and content
TASKS_SUM = ("SELECT count(*), md5(string_agg(concat_ws('|', id, url, method, headers, body,"
             " content_type, max_attempts, timeout_ms, queue, owner, created_at, cron_id,"
             " cron_at), ',' ORDER BY id)) FROM jobflow.tasks WHERE id <= %s")
# and the tasks nothing touches after the restore, whole
FAR_SUM = ("SELECT count(*), md5(string_agg(concat_ws('|', id, state, attempts, run_at,"
           " updated_at, last_status, last_error), ',' ORDER BY id)) FROM jobflow.tasks"
           " WHERE id <= %s AND run_at > now() + interval '12 hours'")
LOG_SUM = ("SELECT count(*), md5(string_agg(concat_ws('|', task_id, attempt, owner, scheduled_at,"
           " started_at, finished_at, outcome, http_status, error, response), ','"
           " ORDER BY task_id, attempt)) FROM jobflow.task_log WHERE task_id <= %s")
TIMERS_SUM = ("SELECT count(*), md5(string_agg(concat_ws('|', id, name, owner, schedule, timezone,"
              " url, method, active, missed, created_at), ',' ORDER BY id)) FROM jobflow.cron_timers")


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()


class Target:
    """A fresh cluster with jobflow preloaded, serving database target."""

    def __init__(self, server, template, port):
        self.server = server
        self.dir = tempfile.mkdtemp(prefix="jobflow-restore-")
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.log = os.path.join(self.dir, "postgres.log")
        self.port = port
        subprocess.run(["cp", "-a", template, self.data], check=True)
        os.mkdir(self.sock)
        shutil.chown(self.dir, server.run_user)
        shutil.chown(self.sock, server.run_user)
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("port = %d\nunix_socket_directories = '%s'\n" % (port, self.sock))

    def run(self, *cmd, check=True, as_server=True):
        cmd = list(cmd)
        if as_server and os.geteuid() == 0:
            cmd = ["runuser", "-u", self.server.run_user, "--"] + cmd
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=600)
        if check and res.returncode != 0:
            pytest.fail("%s failed (%d): %s%s" % (" ".join(cmd), res.returncode,
                                                  res.stdout[-2000:], res.stderr[-2000:]))
        return res

    def client(self, tool, *args):
        return self.run(os.path.join(self.server.pgbin, tool), "-h", self.sock,
                        "-p", str(self.port), "-U", "postgres", *args, as_server=False)

    def start(self):
        self.run(os.path.join(self.server.pgbin, "pg_ctl"), "-D", self.data, "-l", self.log,
                 "-w", "-t", "60", "start")

    def stop(self):
        self.run(os.path.join(self.server.pgbin, "pg_ctl"), "-D", self.data, "-m", "immediate",
                 "-w", "-t", "60", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def connect(self):
        conn = psycopg2.connect(host=self.sock, port=self.port, user="postgres", dbname="target")
        conn.autocommit = True
        return conn


# the installation token in every webhook-id (signing.c)
INSTALLATION = "SELECT id FROM jobflow.installation ORDER BY created_at, id LIMIT 1"


@pytest.fixture(scope="module")
def dumped(server, receiver, tmp_path_factory):
    """The source database, its dumps (custom and plain) and its sums."""
    src = "restore_src"
    out = tmp_path_factory.mktemp("dump")
    os.chmod(out, 0o777)
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS %s" % src)
        cur.execute("CREATE DATABASE %s IS_TEMPLATE true" % src)
    conn = psycopg2.connect(dbname=src)
    conn.autocommit = True
    far = receiver.url("/ok?t=restore-far")
    with conn.cursor() as cur:
        cur.execute("SET client_min_messages = error")
        cur.execute("CREATE EXTENSION jobflow")
        cur.execute("INSERT INTO jobflow.tasks (url, run_at, body, content_type)"
                    " SELECT %s || '&n=' || g, now() + interval '1 day' + g * interval '1 ms',"
                    "        '{\"n\": ' || g || '}', 'application/json'"
                    "   FROM generate_series(1, %s) g", (far, N_TASKS))
        # history: half of them succeeded, with their log rows
        cur.execute("SET session_replication_role = replica")
        cur.execute("UPDATE jobflow.tasks SET state = 'succeeded', attempts = 1, last_status = 200"
                    " WHERE id % 2 = 0")
        cur.execute("INSERT INTO jobflow.task_log (task_id, attempt, owner, scheduled_at,"
                    "   started_at, finished_at, outcome, http_status, response)"
                    " SELECT id, 1, owner, run_at, run_at, run_at, 'succeeded', 200, 'ok'"
                    "   FROM jobflow.tasks WHERE state = 'succeeded'")
        cur.execute("RESET session_replication_role")
        # due now: they must fire once restored
        cur.execute("INSERT INTO jobflow.tasks (url) SELECT %s FROM generate_series(1, %s)",
                    (receiver.url("/ok?t=restore-fire"), N_FIRE))
        for i in range(3):
            cur.execute("SELECT jobflow.schedule_cron(%s, '*/5 * * * * *', %s)",
                        ("restore-%d" % i, receiver.url("/ok?t=restore-cron")))
        cur.execute("SELECT count(*) FROM jobflow._materialize_cron(now() + interval '1 minute')")
        assert cur.fetchone()[0] >= 30
    # the log of the first N_TASKS tasks (the restored worker logs the others' calls)
    sums = {name: one(conn, sql, (N_TASKS if name == "log" else 10 ** 9,))
            if "%s" in sql else one(conn, sql)
            for name, sql in (("tasks", TASKS_SUM), ("far", FAR_SUM), ("log", LOG_SUM),
                              ("timers", TIMERS_SUM))}
    max_id = one(conn, "SELECT max(id) FROM jobflow.tasks")[0]
    installation = one(conn, INSTALLATION)[0]
    fire = [r["id"] for r in query(conn, "SELECT id FROM jobflow.tasks WHERE url LIKE %s",
                                   ("%restore-fire%",))]
    conn.close()
    dump = os.path.join(str(out), "src.dump")
    plain = os.path.join(str(out), "src.sql")
    for args in (["-Fc", "-f", dump], ["-Fp", "-f", plain]):
        res = subprocess.run([os.path.join(server.pgbin, "pg_dump"), "-d", src] + args,
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        os.chmod(args[-1], 0o644)
    with admin.cursor() as cur:
        cur.execute("ALTER DATABASE %s IS_TEMPLATE false" % src)
        cur.execute("DROP DATABASE %s" % src)
    admin.close()
    yield {"dump": dump, "plain": plain, "sums": sums, "max_id": max_id, "fire": fire,
           "installation": installation}


@pytest.fixture(scope="module")
def template(server, tmp_path_factory):
    """An initdb'd data directory with jobflow preloaded, copied per mode."""
    base = tempfile.mkdtemp(prefix="jobflow-template-")
    shutil.chown(base, server.run_user)
    data = os.path.join(base, "data")
    cmd = [os.path.join(server.pgbin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
           "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", server.run_user, "--"] + cmd
    subprocess.run(cmd, check=True, capture_output=True)
    with open(os.path.join(data, "postgresql.conf"), "a") as f:
        f.write("listen_addresses = ''\nshared_preload_libraries = 'jobflow'\n"
                "fsync = off\n"
                "jobflow.reconcile_interval = 1s\nlog_line_prefix = '%m [%p] %q%a '\n"
                "jobflow.allow_networks = '127.0.0.0/8, ::1/128'\n")
    yield data
    shutil.rmtree(base, ignore_errors=True)


MODES = {
    "plain": lambda t, d: t.client("pg_restore", "-d", "target", d["dump"]),
    "jobs": lambda t, d: t.client("pg_restore", "-j", "2", "-d", "target", d["dump"]),
    "single_transaction": lambda t, d: t.client("pg_restore", "--single-transaction",
                                                "-d", "target", d["dump"]),
    "psql": lambda t, d: t.client("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "target",
                                  "-f", d["plain"]),
    "data_only": lambda t, d: t.client("pg_restore", "--data-only", "-d", "target", d["dump"]),
}


@pytest.mark.smoke
@pytest.mark.parametrize("mode", list(MODES))
def test_restore_brings_everything_back(mode, dumped, template, server, receiver):
    target = Target(server, template, int(os.environ["PGPORT"]) + 1)
    try:
        target.start()
        target.client("psql", "-X", "-q", "-d", "postgres", "-c", "CREATE DATABASE target")
        if mode == "data_only":
            target.client("psql", "-X", "-q", "-d", "target", "-c", "CREATE EXTENSION jobflow")
        log_from = os.path.getsize(target.log)
        started = time.time()
        MODES[mode](target, dumped)
        restored = time.time()
        conn = target.connect()
        max_id = dumped["max_id"]
        for name, sql in (("tasks", TASKS_SUM), ("far", FAR_SUM), ("log", LOG_SUM),
                          ("timers", TIMERS_SUM)):
            got = one(conn, sql, (N_TASKS if name == "log" else max_id,)) \
                if "%s" in sql else one(conn, sql)
            assert got == dumped["sums"][name], "%s differ after %s restore" % (name, mode)
        # restored tasks keep their webhook-id: the dumped installation is in use
        assert one(conn, INSTALLATION)[0] == dumped["installation"]
        # the worker made nothing that could collide: its own rows come after
        seq = one(conn, "SELECT last_value FROM jobflow.tasks_id_seq")[0]
        assert seq >= max_id
        assert one(conn, "SELECT count(*) FROM jobflow.tasks WHERE id <= %s", (max_id,))[0] \
            == dumped["sums"]["tasks"][0]
        # and resumes on its own: the due tasks fire, the timers go on
        deadline = time.time() + 30
        while time.time() < deadline:
            states = one(conn, "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*)"
                         " FROM jobflow.tasks WHERE id = ANY(%s)", (dumped["fire"],))
            if states[0] == states[1]:
                break
            time.sleep(0.2)
        assert states == (N_FIRE, N_FIRE), "due tasks did not fire after the restore"
        fired = receiver.requests(lambda r: "t=restore-fire" in r["query"]
                                  and r["time"] >= started)
        assert sorted(int(r["headers"]["x-jobflow-task-id"]) for r in fired) == sorted(dumped["fire"])
        receiver.wait_for(lambda r: "t=restore-cron" in r["query"] and r["time"] > restored,
                          n=3, timeout=15)
        conn.close()
        with open(target.log, "rb") as f:
            f.seek(log_from)
            text = f.read().decode("utf-8", "replace")
        assert "ERROR" not in text, text[-3000:]
    finally:
        target.stop()
