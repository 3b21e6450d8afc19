# -------------------------------------------------------------------------
#
# test_upgrade.py
#     From 0.1.0 to the current version with the new library loaded: the
#     worker waits on the old schema (and says once what to run), ALTER
#     EXTENSION jobflow UPDATE runs while it waits, nothing is lost, pending
#     tasks and cron timers fire afterwards, and the upgraded schema is the
#     schema of a fresh install.
#
# The old schema is installed in a database of its own, served from the
# server's start (the launcher's probe finds it after a restart, as after
# the package upgrade).  These tests end every connection open at the time.
#
# -------------------------------------------------------------------------

import difflib
import os
import re
import subprocess
import time
import uuid

import psycopg2
import pytest

from conftest import REPO, query, schedule, wait_final

UPGRADE_DB = "jobflow_upgrade"
FRESH_DB = "jobflow_fresh"


def default_version():
    with open(os.path.join(REPO, "jobflow.control")) as f:
        return re.search(r"^default_version\s*=\s*'([^']+)'", f.read(), re.M).group(1)


def log_since(server, offset):
    with open(server.logfile, errors="replace") as f:
        f.seek(offset)
        return f.read()


def rows(conn, sql, args=None):
    return {r["id"]: r for r in query(conn, sql, args)}


def dump_schema(server, dbname):
    """pg_dump --schema-only --binary-upgrade: binary-upgrade mode dumps
    the extension's member objects one by one (a plain dump only says
    CREATE EXTENSION).  OIDs and relfilenodes it pins are normalised: they
    must differ between two databases; so must \\restrict keys, and the
    values of sequences (pg_dump 15 includes them) are data."""
    out = subprocess.run([os.path.join(server.pgbin, "pg_dump"), "--schema-only",
                          "--binary-upgrade", "--no-owner", "-d", dbname],
                         capture_output=True, text=True, check=True).stdout
    lines = []
    for line in out.splitlines():
        if re.match(r"^\\(un)?restrict ", line):
            continue
        # the state of the extension's (configuration) sequences is data
        if line.startswith("SELECT pg_catalog.setval("):
            continue
        if "binary_upgrade_set_next_" in line or "binary_upgrade_set_record_init_privs" in line:
            continue
        if "binary_upgrade" in line:
            line = re.sub(r"\b\d{4,}\b", "<oid>", line)
        # binary-upgrade carries the tables' freeze horizons over
        line = re.sub(r"(rel(frozen|minm)xid) = '\d+'", r"\1 = '<xid>'", line)
        line = re.sub(r"^WHERE oid = '\d+';$", "WHERE oid = '<oid>';", line)
        lines.append(line)
    return "\n".join(lines)


@pytest.fixture
def upgrade_env(connect, server):
    """Databases UPGRADE_DB (jobflow 0.1.0, served by a worker started
    with the server) and FRESH_DB (current version)."""
    admin = connect(dbname="postgres")
    if admin.server_version < 150000:
        pytest.skip("jobflow 0.1.0 and 0.2.0 need PostgreSQL 15 or later: on 14 there is "
                    "nothing to update from, installs start at 0.3.0")
    with admin.cursor() as cur:
        for name in (UPGRADE_DB, FRESH_DB):
            cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
            cur.execute("CREATE DATABASE %s" % name)
    old = connect(dbname=UPGRADE_DB)
    with old.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow VERSION '0.1.0'")
    old.close()
    admin.close()
    # the worker CREATE EXTENSION started says it waits: before the offset
    deadline = time.time() + 30
    while ('jobflow worker waiting: database "%s"' % UPGRADE_DB) not in log_since(server, 0):
        assert time.time() < deadline, "no worker in %s after CREATE EXTENSION" % UPGRADE_DB
        time.sleep(0.1)
    offset = os.path.getsize(server.logfile)
    server.restart()
    try:
        yield offset
    finally:
        server.wait_ready()
        admin = connect(dbname="postgres")
        with admin.cursor() as cur:
            for name in (UPGRADE_DB, FRESH_DB):
                cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        server.wait_worker(None)


@pytest.mark.smoke
def test_update_from_0_1_0_while_the_worker_runs(connect, receiver, server, upgrade_env):
    log_offset = upgrade_env
    target = default_version()
    assert target != "0.1.0"
    db = connect(dbname=UPGRADE_DB)
    assert query(db, "SELECT extversion FROM pg_extension WHERE extname = 'jobflow'")[0][
        "extversion"] == "0.1.0"

    # the worker of the new library is up, and waits
    deadline = time.time() + 30
    while query(db, "SELECT pid FROM jobflow.worker_status()")[0]["pid"] is None:
        assert time.time() < deadline, "no worker after the restart"
        time.sleep(0.1)
    pid = query(db, "SELECT pid FROM jobflow.worker_status()")[0]["pid"]

    # fill 0.1.0: pending tasks (due at once and far ahead), a cron timer ...
    url, tag = receiver.unique_url("/ok")
    due = [schedule(db, url + "&n=%d" % i) for i in range(5)]
    later = [schedule(db, url + "&later=%d" % i, run_at_sql="now() + interval '3 days'")
             for i in range(3)]
    cron_url, cron_tag = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("SELECT jobflow.schedule_cron('upgrade-tick', 'every 1 seconds', %s)",
                    (cron_url,))
        # ... and finished tasks with their log, as 0.1.0's worker left them
        # (written as the worker writes: replica role skips the row checks)
        cur.execute("SET session_replication_role = replica")
        cur.execute("""
            WITH t AS (
                INSERT INTO jobflow.tasks (url, state, attempts, owner, last_status, last_error,
                                           run_at)
                SELECT 'http://127.0.0.1:9/done?' || g,
                       (CASE WHEN g % 2 = 0 THEN 'succeeded' ELSE 'failed' END)::jobflow.task_state,
                       2, 'postgres'::regrole,
                       CASE WHEN g % 2 = 0 THEN 200 ELSE 500 END,
                       CASE WHEN g % 2 = 0 THEN NULL ELSE 'HTTP 500' END,
                       now() - interval '1 hour'
                  FROM generate_series(1, 6) g
                RETURNING id, last_status)
            INSERT INTO jobflow.task_log (task_id, attempt, owner, scheduled_at, started_at,
                                          finished_at, outcome, http_status, error)
            SELECT t.id, a, 'postgres'::regrole, now() - interval '1 hour',
                   now() - interval '59 minutes', now() - interval '59 minutes',
                   CASE WHEN a = 2 AND t.last_status = 200 THEN 'succeeded' ELSE 'failed' END,
                   CASE WHEN a = 2 THEN t.last_status ELSE 503 END, NULL
              FROM t, generate_series(1, 2) a""")
        cur.execute("RESET session_replication_role")
    before_tasks = rows(db, "SELECT * FROM jobflow.tasks")
    before_log = query(db, "SELECT * FROM jobflow.task_log ORDER BY task_id, attempt")
    before_cron = rows(db, "SELECT * FROM jobflow.cron_timers")
    assert len(before_log) == 12 and len(before_cron) == 1

    # wake the waiting worker a few times: it must neither fire nor repeat itself
    for _ in range(3):
        with db.cursor() as cur:
            cur.execute("NOTIFY jobflow")
        time.sleep(0.5)
    time.sleep(1.5)
    assert receiver.tagged(tag) == [] and receiver.tagged(cron_tag) == []
    assert query(db, "SELECT count(*) AS n FROM jobflow.tasks WHERE id = ANY(%s)"
                 " AND state = 'pending' AND attempts = 0", (due,))[0]["n"] == len(due)
    log = log_since(server, log_offset)
    warnings = re.findall(r"WARNING:  jobflow worker waiting: database \"%s\" has jobflow "
                          r"0\.1\.0, this library needs %s" % (UPGRADE_DB, re.escape(target)), log)
    assert len(warnings) == 1, log[-3000:]
    assert re.search(r"HINT:  Run ALTER EXTENSION jobflow UPDATE in database \"%s\"\."
                     % UPGRADE_DB, log), log[-3000:]
    assert query(db, "SELECT pid FROM jobflow.worker_status()")[0]["pid"] == pid

    # the update, with the worker running
    with db.cursor() as cur:
        cur.execute("ALTER EXTENSION jobflow UPDATE")
    assert query(db, "SELECT extversion FROM pg_extension WHERE extname = 'jobflow'")[0][
        "extversion"] == target

    # \dx+ jobflow documents its objects: every function, table and view
    undocumented = query(db, """
        SELECT p.oid::regprocedure::text AS obj FROM pg_proc p
         WHERE p.pronamespace = 'jobflow'::regnamespace
           AND obj_description(p.oid, 'pg_proc') IS NULL
        UNION ALL
        SELECT c.oid::regclass::text FROM pg_class c
         WHERE c.relnamespace = 'jobflow'::regnamespace AND c.relkind IN ('r', 'v')
           AND obj_description(c.oid, 'pg_class') IS NULL""")
    assert undocumented == []

    # it resumes by itself, the same process: due tasks and cron timers fire
    states = wait_final(db, due, timeout=30)
    assert set(states.values()) == {"succeeded"}, states
    receiver.wait_for(lambda r: ("t=" + cron_tag) in r["query"], n=2, timeout=30)
    assert query(db, "SELECT pid FROM jobflow.worker_status()")[0]["pid"] == pid
    assert "terminated by signal" not in log_since(server, log_offset)

    # nothing lost: every row and every value of before is still there
    after_tasks = rows(db, "SELECT * FROM jobflow.tasks")
    for tid, row in before_tasks.items():
        assert tid in after_tasks, "task %s lost" % tid
        if tid in due:
            continue                    # these moved on: they fired
        assert {k: after_tasks[tid][k] for k in row} == row
    after_log = query(db, "SELECT * FROM jobflow.task_log WHERE task_id <> ALL(%s)"
                      " ORDER BY task_id, attempt", (due,))
    assert [{k: r[k] for k in before_log[0]} for r in after_log
            if r["task_id"] in before_tasks] == before_log
    after_cron = rows(db, "SELECT * FROM jobflow.cron_timers")
    assert set(after_cron) == set(before_cron)
    for cid, row in before_cron.items():
        moved = ("next_at", "updated_at")  # the worker materialised occurrences
        assert {k: after_cron[cid][k] for k in row if k not in moved} == \
            {k: v for k, v in row.items() if k not in moved}

    # the upgraded schema is the schema of a fresh install
    fresh = connect(dbname=FRESH_DB)
    with fresh.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow")
    fresh.close()
    upgraded, new = dump_schema(server, UPGRADE_DB), dump_schema(server, FRESH_DB)
    assert "CREATE TABLE jobflow.tasks" in new      # members are in the dump
    if upgraded != new:
        diff = difflib.unified_diff(upgraded.splitlines(), new.splitlines(),
                                    "upgraded", "fresh", lineterm="", n=1)
        pytest.fail("schema of the upgraded database differs:\n" + "\n".join(diff))
