# -------------------------------------------------------------------------
#
# test_workers.py
#     Several workers per database (issue 12, part 2):
#     jobflow.workers_per_database = 2 starts two workers for the
#     database, each serving the task ids equal to its number modulo 2.
#     A burst due at once fires every task exactly once (checked by id, at
#     the receiver and in the log); stopping one worker holds back its ids
#     only, and they fire once it runs again; a cron timer, run by the
#     first worker alone, fires once per occurrence; the busiest origins
#     of the metrics add up both workers' requests; a restore pauses both;
#     CREATE DATABASE ... TEMPLATE a served database succeeds; all tasks
#     of a flow key are one worker's, so a cap of 1 per key holds.
#
# The setting needs a restart: the module restarts the server with it and
# restarts it again without it at the end.
#
# -------------------------------------------------------------------------

import io
import os
import signal
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import _connect, query, wait_final

WORKERS = 2


def workers(conn):
    """pid -> backend name of this database's jobflow workers."""
    return {r["pid"]: r["name"] for r in query(
        conn, "SELECT pid, backend_type AS name FROM pg_stat_activity"
              " WHERE datname = current_database() AND backend_type = 'jobflow worker'")}


def worker_pids(conn):
    """The workers' pids by number (0 first), from their process titles."""
    pids = {}
    for pid in workers(conn):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                title = f.read().decode(errors="replace")
        except OSError:
            continue
        for k in range(WORKERS):
            if "jobflow worker %d of %d" % (k + 1, WORKERS) in title:
                pids[k] = pid
    return pids


@pytest.fixture(scope="module")
def two_workers(server, receiver):
    conn = _connect()
    server.set_guc(conn, "jobflow.workers_per_database", WORKERS)
    conn.close()
    server.restart()
    server.wait_worker(None)
    deadline = time.time() + 30
    conn = _connect()
    try:
        while len(worker_pids(conn)) < WORKERS:
            assert time.time() < deadline, "workers: %s" % workers(conn)
            time.sleep(0.1)
    finally:
        conn.close()
    yield
    conn = _connect()
    server.set_guc(conn, "jobflow.workers_per_database", None)
    conn.close()
    server.restart()
    server.wait_worker(None)


def test_a_flow_key_is_one_workers(two_workers, db, receiver):
    """6 keys of 4 tasks each, consecutive ids (split by id, each key's
    tasks would be both workers'), in a queue with max_concurrent_per_key
    1, to a receiver that takes 0.5 s: no two tasks of a key are ever in
    flight together (each worker would allow one of its own), and every
    task fires once."""
    url, tag = receiver.unique_url("/delay/500")
    with db.cursor() as cur:
        cur.execute("SELECT jobflow.set_queue('one-per-key', max_concurrent_per_key => 1)")
        cur.execute("SELECT array_agg(jobflow.schedule(%s || '&k=' || k || '&n=' || n,"
                    "        queue => 'one-per-key', flow_key => 'key-' || k) ORDER BY k, n)"
                    "  FROM generate_series(1, 6) k, generate_series(1, 4) n", (url,))
        ids = cur.fetchone()[0]
    try:
        assert set(wait_final(db, ids, timeout=60).values()) == {"succeeded"}
        rows = query(db, "SELECT t.flow_key, l.started_at, l.finished_at FROM jobflow.task_log l"
                         "  JOIN jobflow.tasks t ON t.id = l.task_id WHERE l.task_id = ANY(%s)"
                         " ORDER BY t.flow_key, l.started_at", (ids,))
        assert len(rows) == 24
        overlaps = [(a["flow_key"], str(a["started_at"]), str(b["started_at"]))
                    for a, b in zip(rows, rows[1:])
                    if a["flow_key"] == b["flow_key"] and b["started_at"] < a["finished_at"]]
        assert overlaps == [], overlaps
        assert len(receiver.tagged(tag)) == 24
    finally:
        with db.cursor() as cur:
            cur.execute("SELECT jobflow.drop_queue('one-per-key')")


def test_two_workers_start_for_the_database(two_workers, db):
    pids = worker_pids(db)
    assert sorted(pids) == [0, 1], pids
    status = query(db, "SELECT pid FROM jobflow.worker_status()")[0]
    assert status["pid"] == pids[0], "worker_status() reports the first worker"


def test_burst_fires_each_task_exactly_once(two_workers, db, receiver):
    """4,000 tasks due at once, both workers claiming: each id arrives once
    at the receiver and has one attempt in the log."""
    url, tag = receiver.unique_url("/ok")
    with db.cursor() as cur:
        cur.execute("SELECT array_agg(jobflow.schedule(%s || '&id=' || g))"
                    "  FROM generate_series(1, 4000) g", (url,))
        ids = cur.fetchone()[0]
    assert set(wait_final(db, ids, timeout=120).values()) == {"succeeded"}
    got = receiver.tagged(tag)
    seen = {}
    for r in got:
        g = r["query"].split("id=")[1].split("&")[0]
        seen[g] = seen.get(g, 0) + 1
    twice = {g: n for g, n in seen.items() if n > 1}
    assert not twice, "fired more than once: %s" % sorted(twice.items())[:10]
    assert len(seen) == 4000
    attempts = query(db, "SELECT task_id, count(*) AS n FROM jobflow.task_log"
                         " WHERE task_id = ANY(%s) GROUP BY task_id HAVING count(*) <> 1",
                     (ids,))
    assert attempts == [], "tasks logged more than once: %s" % attempts[:10]


def test_a_stopped_worker_holds_back_its_ids_only(two_workers, db, receiver):
    """SIGSTOP the second worker: tasks with odd ids wait, even ones fire on
    time; SIGCONT: the odd ones fire.  No task is starved, none taken by
    the other worker."""
    pids = worker_pids(db)
    url, tag = receiver.unique_url("/ok")
    os.kill(pids[1], signal.SIGSTOP)
    try:
        with db.cursor() as cur:
            cur.execute("SELECT array_agg(jobflow.schedule(%s || '&id=' || g))"
                        "  FROM generate_series(1, 20) g", (url,))
            ids = cur.fetchone()[0]
        time.sleep(2.0)
        states = {r["id"]: r["state"] for r in query(
            db, "SELECT id, state::text FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))}
        assert {i for i, s in states.items() if s == "succeeded"} == \
            {i for i in ids if i % 2 == 0}, states
    finally:
        os.kill(pids[1], signal.SIGCONT)
    assert set(wait_final(db, ids, timeout=30).values()) == {"succeeded"}
    assert len(receiver.tagged(tag)) == 20


def test_busiest_origins_add_up_both_workers(two_workers, db, receiver):
    """Eight hanging callbacks to one origin, four to each worker: the
    metrics show that origin with 8 in flight, not the first worker's 4."""
    busy = "http://127.0.0.1:%d" % receiver.port
    hang, _ = receiver.unique_url("/hang")
    with db.cursor() as cur:
        cur.execute("SELECT array_agg(jobflow.schedule(%s, timeout_ms => 4000, max_attempts => 1))"
                    "  FROM generate_series(1, 8)", (hang,))
        ids = cur.fetchone()[0]
    assert sorted(i % 2 for i in ids) == [0] * 4 + [1] * 4
    seen = None
    deadline = time.time() + 3.5
    while time.time() < deadline:
        text = query(db, "SELECT jobflow.metrics() AS m")[0]["m"]
        seen = {s.labels.get("origin"): s.value
                for f in text_string_to_metric_families(text)
                if f.name == "jobflow_host_requests_in_flight" for s in f.samples}
        if seen.get(busy) == 8:
            break
        time.sleep(0.1)
    assert seen.get(busy) == 8, seen
    wait_final(db, ids, timeout=20)


def test_cron_tasks_are_the_first_workers(two_workers, db, receiver):
    """A per-second timer, with the second worker stopped: the first runs
    the timer and serves every occurrence, odd ids too (catching up on
    missed ones stays in one place), each one task, called once."""
    pids = worker_pids(db)
    url, tag = receiver.unique_url("/ok")
    name = "workers_" + tag
    os.kill(pids[1], signal.SIGSTOP)
    try:
        query(db, "SELECT jobflow.schedule_cron(%s, '* * * * * *', %s)", (name, url))
        time.sleep(4.5)
        query(db, "SELECT jobflow.unschedule_cron(%s)", (name,))
        tasks = query(db, "SELECT id, run_at FROM jobflow.tasks WHERE url = %s", (url,))
        assert len({t["run_at"] for t in tasks}) == len(tasks), "an occurrence became two tasks"
        states = wait_final(db, [t["id"] for t in tasks], timeout=10)
    finally:
        os.kill(pids[1], signal.SIGCONT)
    fired = [i for i, s in states.items() if s == "succeeded"]
    assert len(fired) >= 3, states
    assert {i % 2 for i in fired} == {0, 1}, "ids of one parity only: %s" % fired
    assert len(receiver.tagged(tag)) == len(fired), "a task was called twice or not at all"


def test_a_restore_pauses_both_workers(two_workers, db, receiver, connect):
    """While a session restores jobflow's tables (a COPY into its log, as
    pg_dump writes), neither worker claims anything, odd ids included;
    once that session ends, every task fires once."""
    restorer = connect()
    with restorer.cursor() as cur:
        cur.copy_expert("COPY jobflow.task_log FROM STDIN", io.StringIO(""))
    try:
        url, tag = receiver.unique_url("/ok")
        with db.cursor() as cur:
            cur.execute("SELECT array_agg(jobflow.schedule(%s)) FROM generate_series(1, 10)", (url,))
            ids = cur.fetchone()[0]
        time.sleep(2.0)
        assert receiver.tagged(tag) == []
        states = query(db, "SELECT id, state::text FROM jobflow.tasks WHERE id = ANY(%s)", (ids,))
        assert {r["state"] for r in states} == {"pending"}, states
    finally:
        restorer.close()
    assert set(wait_final(db, ids, timeout=30).values()) == {"succeeded"}
    assert len(receiver.tagged(tag)) == 10


def test_create_database_from_a_template_with_two_workers(two_workers, databases, receiver,
                                                          connect):
    """CREATE DATABASE ... TEMPLATE a database served by two workers: both
    leave it for the copy (which needs it to themselves), both come back,
    and the copy is served by two of its own, each firing its ids."""
    name, conn = databases()

    def both(c, label):
        deadline = time.time() + 30
        while len(worker_pids(c)) < WORKERS:
            assert time.time() < deadline, "workers in %s: %s" % (label, workers(c))
            time.sleep(0.1)
        return worker_pids(c)

    before = both(conn, name)
    conn.close()
    copy = databases.copy_of(name)
    conn = connect(dbname=name)
    after = both(conn, name)
    assert not set(after.values()) & set(before.values())
    copied = connect(dbname=copy)
    both(copied, copy)
    for c in (conn, copied):
        url, tag = receiver.unique_url("/ok")
        with c.cursor() as cur:
            cur.execute("SELECT array_agg(jobflow.schedule(%s)) FROM generate_series(1, 10)", (url,))
            ids = cur.fetchone()[0]
        assert {i % 2 for i in ids} == {0, 1}
        assert set(wait_final(c, ids, timeout=30).values()) == {"succeeded"}
        assert len(receiver.tagged(tag)) == 10


@pytest.mark.timing
def test_drop_database_stops_both_workers(two_workers, databases, receiver, connect):
    """DROP DATABASE stops every worker of the database (each was told to
    stop and waited for), then goes through; the name again is served by
    two workers from scratch."""
    name, conn = databases()
    deadline = time.time() + 30
    while len(worker_pids(conn)) < WORKERS:
        assert time.time() < deadline, "workers in %s: %s" % (name, workers(conn))
        time.sleep(0.1)
    pids = worker_pids(conn)
    conn.close()
    began = time.time()
    with databases.admin.cursor() as cur:
        cur.execute("DROP DATABASE %s" % name)
    assert time.time() - began < 15
    assert not query(databases.admin, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)",
                     (list(pids.values()),))
    with databases.admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s" % name)
    again = connect(dbname=name)
    with again.cursor() as cur:
        cur.execute("CREATE EXTENSION jobflow")
        url, tag = receiver.unique_url("/ok")
        cur.execute("SELECT array_agg(jobflow.schedule(%s)) FROM generate_series(1, 10)", (url,))
        ids = cur.fetchone()[0]
    assert set(wait_final(again, ids, timeout=30).values()) == {"succeeded"}
    # both workers' counts, from zero: none wiped by the other's start
    assert query(again, "SELECT fired FROM jobflow.worker_status()")[0]["fired"] == 10
    assert len(receiver.tagged(tag)) == 10
    assert sorted(worker_pids(again)) == [0, 1]
