# -------------------------------------------------------------------------
#
# test_failover.py
#     Failover: a hot standby runs no jobflow worker; once promoted, its
#     worker fires every task the primary had committed.
#
# The test builds its own primary and streaming standby (pg_basebackup -R)
# next to the suite's cluster, kills the primary with an immediate stop
# before the tasks are due, promotes the standby and checks that the
# receiver gets every task, none before its time.
#
# -------------------------------------------------------------------------

import os
import shutil
import subprocess
import tempfile
import time

import psycopg2
import pytest

PGBIN = os.environ.get("JOBFLOW_PGBIN", "/usr/lib/postgresql/15/bin")
RUN_USER = os.environ.get("JOBFLOW_RUN_USER", "postgres")
BASE_PORT = int(os.environ.get("PGPORT", "54329")) + 10


def as_server_user(cmd):
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", RUN_USER, "--"] + cmd
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=120)


class Node:
    """One PostgreSQL server of the pair, in its own directory and port."""

    def __init__(self, top, name, port):
        self.dir = os.path.join(top, name)
        self.data = os.path.join(self.dir, "data")
        self.sock = os.path.join(self.dir, "sock")
        self.port = port
        as_server_user(["mkdir", "-p", self.sock])

    def configure(self):
        lines = [
            "port = %d" % self.port,
            "listen_addresses = ''",
            "unix_socket_directories = '%s'" % self.sock,
            "shared_preload_libraries = 'jobflow'",
            "fsync = off",
            # the receiver is on loopback
            "jobflow.allow_networks = '127.0.0.0/8, ::1/128'",
        ]
        conf = os.path.join(self.data, "postgresql.conf")
        subprocess.run((["runuser", "-u", RUN_USER, "--"] if os.geteuid() == 0 else [])
                       + ["sh", "-c", "cat >> '%s'" % conf],
                       input="\n".join(lines) + "\n", text=True, check=True)

    def pg_ctl(self, *args):
        as_server_user([os.path.join(PGBIN, "pg_ctl"), "-D", self.data,
                        "-l", os.path.join(self.dir, "log"), "-w", "-t", "60"]
                       + list(args))

    def connect(self, dbname="jobflow"):
        conn = psycopg2.connect(host=self.sock, port=self.port,
                                user="postgres", dbname=dbname)
        conn.autocommit = True
        return conn

    def query(self, sql, args=None, dbname="jobflow"):
        conn = self.connect(dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description else None
        finally:
            conn.close()


@pytest.fixture
def pair():
    top = tempfile.mkdtemp(prefix="jobflow-failover-")
    if os.geteuid() == 0:
        shutil.chown(top, RUN_USER)
    primary = Node(top, "primary", BASE_PORT)
    standby = Node(top, "standby", BASE_PORT + 1)
    try:
        as_server_user([os.path.join(PGBIN, "initdb"), "-D", primary.data,
                        "-U", "postgres", "-A", "trust", "--no-sync"])
        primary.configure()
        primary.pg_ctl("start")
        primary.query("CREATE DATABASE jobflow", dbname="postgres")
        primary.query("CREATE EXTENSION jobflow")
        as_server_user([os.path.join(PGBIN, "pg_basebackup"), "-D", standby.data,
                        "-d", "host=%s port=%d user=postgres" % (primary.sock, primary.port),
                        "-R", "-X", "stream", "-c", "fast", "--no-sync"])
        standby.configure()
        standby.pg_ctl("start")
        yield primary, standby
    finally:
        for node in (standby, primary):
            try:
                node.pg_ctl("-m", "immediate", "stop")
            except Exception:
                pass
        if not os.environ.get("JOBFLOW_KEEP_CLUSTER"):
            shutil.rmtree(top, ignore_errors=True)


def wait_until(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail("timed out after %.0f s waiting for %s" % (timeout, what))


@pytest.mark.smoke
def test_promoted_standby_fires_what_the_primary_committed(pair, receiver):
    primary, standby = pair
    url, tag = receiver.unique_url("/ok")

    assert standby.query("SELECT pg_is_in_recovery()")[0][0] is True
    assert standby.query("SELECT pid FROM jobflow.worker_status()")[0][0] is None, \
        "a standby must not run the jobflow worker"

    rows = primary.query(
        "SELECT jobflow.schedule(%s, run_at => now() + g * interval '300 milliseconds'"
        "                        + interval '2 seconds'),"
        "       extract(epoch FROM now() + g * interval '300 milliseconds' + interval '2 seconds')"
        "  FROM generate_series(1, 5) g", (url,))
    due = {int(r[0]): float(r[1]) for r in rows}

    # the standby has every committed task before the primary goes away
    lsn = primary.query("SELECT pg_current_wal_lsn()::text")[0][0]
    wait_until(lambda: standby.query(
        "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0], 30, "replay")
    primary.pg_ctl("-m", "immediate", "stop")
    assert not receiver.tagged(tag), "the primary fired before it was stopped"

    standby.pg_ctl("promote")
    wait_until(lambda: standby.query("SELECT pid FROM jobflow.worker_status()")[0][0],
               30, "the promoted standby's worker")

    wait_until(lambda: len({r["headers"].get("x-jobflow-task-id")
                            for r in receiver.tagged(tag)}) == len(due),
               30, "all tasks to reach the receiver")
    for r in receiver.tagged(tag):
        task_id = int(r["headers"]["x-jobflow-task-id"])
        assert r["time"] >= due[task_id], "task %d fired early" % task_id
    states = wait_until(lambda: (lambda s: s if all(x == "succeeded" for (_, x) in s) else None)(
        standby.query("SELECT id, state::text FROM jobflow.tasks ORDER BY id")),
        30, "all tasks succeeded on the new primary")
    assert sorted(i for (i, _) in states) == sorted(due)
