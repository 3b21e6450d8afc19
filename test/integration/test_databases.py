# -------------------------------------------------------------------------
#
# test_databases.py
#     A worker for every database with the extension (issue 12, part 1):
#     the launcher starts one at CREATE EXTENSION without a restart, each
#     fires its own database's tasks only, DROP DATABASE and CREATE
#     DATABASE ... TEMPLATE succeed while a worker serves the database,
#     DROP EXTENSION makes the worker go, and jobflow.max_databases caps
#     the databases served with a warning.
#
# -------------------------------------------------------------------------

import time
import uuid

import psycopg2
import pytest

from conftest import query, schedule, wait_final
from pgnode import wait_until


def workers(conn):
    """{database: pid} of the jobflow workers running now."""
    rows = query(conn, "SELECT datname, pid FROM pg_stat_activity"
                 " WHERE backend_type = 'jobflow worker'")
    return {r["datname"]: r["pid"] for r in rows}


def served_pid(conn):
    """worker_status().pid in conn's database once its worker has loaded
    its horizon (it is serving)."""
    rows = query(conn, "SELECT pid FROM jobflow.worker_status() WHERE horizon_end IS NOT NULL")
    return rows[0]["pid"] if rows else None


def ids_at(receiver, tag):
    return sorted(int(r["headers"]["x-jobflow-task-id"]) for r in receiver.tagged(tag))


@pytest.mark.smoke
def test_three_databases_fire_at_once_each_its_own(databases, receiver):
    dbs = [databases() for _ in range(3)]
    start = query(databases.admin, "SELECT pg_postmaster_start_time() AS t")[0]["t"]
    pids = [wait_until(lambda c=c: served_pid(c), 30, "a worker in %s" % n) for n, c in dbs]
    assert len(set(pids)) == 3
    running = workers(databases.admin)
    for (name, _), pid in zip(dbs, pids):
        assert running.get(name) == pid

    # the same ids in every database (each has its own sequence), all due
    # at the same moment: a worker that fired another database's tasks, or
    # read another's wake-ups, would send a tag twice or miss one
    scheduled = []
    for name, conn in dbs:
        url, tag = receiver.unique_url("/ok?db=" + name)
        with conn.cursor() as cur:
            cur.execute("SELECT jobflow.schedule(%s, run_at => date_trunc('second', now())"
                        " + interval '2 s') FROM generate_series(1, 30)", (url,))
            ids = sorted(r[0] for r in cur.fetchall())
        scheduled.append((name, conn, tag, ids))
    for name, conn, tag, ids in scheduled:
        assert set(wait_final(conn, ids, timeout=30).values()) == {"succeeded"}
        assert ids_at(receiver, tag) == ids, name
        got = receiver.tagged(tag)
        assert all(("db=" + name) in r["query"] for r in got)
        st = query(conn, "SELECT pid, fired, succeeded FROM jobflow.worker_status()")[0]
        # each database's figures are its own worker's
        assert st["fired"] == 30 and st["succeeded"] == 30, (name, st)
    assert query(databases.admin, "SELECT pg_postmaster_start_time() AS t")[0]["t"] == start
    assert [workers(databases.admin).get(n) for n, _ in dbs] == pids


@pytest.mark.smoke
def test_create_extension_fires_without_restart(databases, receiver):
    name, conn = databases(extension=False)
    start = query(conn, "SELECT pg_postmaster_start_time() AS t")[0]["t"]
    time.sleep(1)
    assert name not in workers(conn)
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow")
    url, tag = receiver.unique_url("/ok")
    task = schedule(conn, url)
    assert wait_final(conn, task, timeout=20) == "succeeded"
    assert ids_at(receiver, tag) == [task]
    assert query(conn, "SELECT pg_postmaster_start_time() AS t")[0]["t"] == start


@pytest.mark.timing
def test_drop_database_while_served(databases, receiver, connect):
    name, conn = databases()
    pid = wait_until(lambda: served_pid(conn), 30, "a worker in " + name)
    # a request in flight too: the worker stops within its grace
    slow_url, _ = receiver.unique_url("/delay/1000")
    schedule(conn, slow_url)
    later_url, _ = receiver.unique_url("/ok")
    schedule(conn, later_url, run_at_sql="now() + interval '1 hour'")
    conn.close()
    began = time.time()
    with databases.admin.cursor() as cur:
        cur.execute("DROP DATABASE %s" % name)
    assert time.time() - began < 15
    assert not query(databases.admin, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
    assert name not in workers(databases.admin)

    # the name again: a new database, served from scratch
    with databases.admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s" % name)
    again = connect(dbname=name)
    with again.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow")
    url, tag = receiver.unique_url("/ok")
    task = schedule(again, url)
    assert wait_final(again, task, timeout=20) == "succeeded"
    assert ids_at(receiver, tag) == [task]


def test_create_database_from_a_served_template(databases, receiver, connect):
    name, conn = databases()
    pid = wait_until(lambda: served_pid(conn), 30, "a worker in " + name)
    conn.close()
    copy = databases.copy_of(name)

    # the template's worker comes back; the copy has jobflow and is served
    conn = connect(dbname=name)
    new_pid = wait_until(lambda: served_pid(conn), 30, "a worker back in " + name)
    assert new_pid != pid
    copied = connect(dbname=copy)
    wait_until(lambda: served_pid(copied), 30, "a worker in the copy " + copy)
    for c in (conn, copied):
        url, tag = receiver.unique_url("/ok")
        task = schedule(c, url)
        assert wait_final(c, task, timeout=20) == "succeeded"
        assert ids_at(receiver, tag) == [task]


def test_drop_extension_makes_the_worker_go(databases, receiver):
    name, conn = databases()
    pid = wait_until(lambda: served_pid(conn), 30, "a worker in " + name)
    with conn.cursor() as cur:
        cur.execute("DROP EXTENSION jobflow")
    wait_until(lambda: name not in workers(conn), 10, "the worker of %s to go" % name)
    assert not query(conn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))

    # and CREATE EXTENSION brings one back
    with conn.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow")
    url, tag = receiver.unique_url("/ok")
    task = schedule(conn, url)
    assert wait_final(conn, task, timeout=20) == "succeeded"
    assert ids_at(receiver, tag) == [task]


def served_databases(admin, connect):
    """Names of the connectable, non-template databases with jobflow."""
    names = [r["datname"] for r in query(
        admin, "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate")]
    served = []
    for name in names:
        c = connect(dbname=name)
        if query(c, "SELECT 1 FROM pg_extension WHERE extname = 'jobflow'"):
            served.append(name)
        c.close()
    return served


def test_cap_warns_and_leaves_the_extra_database_unserved(connect, server, receiver):
    admin = connect(dbname="postgres")
    served = served_databases(admin, connect)
    cap = len(served) + 1
    server.set_guc(admin, "jobflow.max_databases", cap)
    server.restart()
    names = []
    try:
        admin = connect(dbname="postgres")
        wait_until(lambda: len(workers(admin)) == len(served), 60,
                   "every database served again after the restart")
        conns = []
        for _ in range(2):
            name = "jf_cap_" + uuid.uuid4().hex[:8]
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE %s" % name)
            names.append(name)
            conns.append(connect(dbname=name))
        # the first fills the last slot, the second is one too many
        with conns[0].cursor() as cur:
            cur.execute("CREATE EXTENSION jobflow")
            assert not [n for n in conns[0].notices if "serves at most" in n]
        wait_until(lambda: served_pid(conns[0]), 30, "a worker in " + names[0])
        with conns[1].cursor() as cur:
            cur.execute("CREATE EXTENSION jobflow")
        warned = [n for n in conns[1].notices if "serves at most" in n]
        assert warned and ("serves at most %d databases" % cap) in warned[0], conns[1].notices

        urls = [receiver.unique_url("/ok") for _ in conns]
        tasks = [schedule(c, u) for c, (u, _) in zip(conns, urls)]
        assert wait_final(conns[0], tasks[0], timeout=20) == "succeeded"
        time.sleep(3)
        assert query(conns[1], "SELECT state::text FROM jobflow.tasks WHERE id = %s",
                     (tasks[1],))[0]["state"] == "pending"
        assert receiver.tagged(urls[1][1]) == []
        assert query(conns[1], "SELECT pid FROM jobflow.worker_status()")[0]["pid"] is None
        assert names[1] not in workers(admin)
        with open(server.logfile) as f:
            assert ('jobflow serves at most %d databases: database "%s" is not served'
                    % (cap, names[1])) in f.read()

        # a slot freed (the first database dropped) goes to the one waiting
        conns[0].close()
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE %s" % names[0])
        names.pop(0)
        assert wait_final(conns[1], tasks[1], timeout=30) == "succeeded"
        assert ids_at(receiver, urls[1][1]) == [tasks[1]]
    finally:
        admin = connect(dbname="postgres")
        for name in names:
            with admin.cursor() as cur:
                cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        server.set_guc(admin, "jobflow.max_databases", None)
        server.restart()
        server.wait_worker()


def test_database_name_is_deprecated(databases):
    # the 0.1.0 install script compares it with the current database
    name, conn = databases()
    assert query(conn, "SELECT current_setting('jobflow.database_name') AS v")[0]["v"] == name
    assert not [n for n in conn.notices if "worker runs in database" in n]
