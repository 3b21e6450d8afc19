# -------------------------------------------------------------------------
#
# bench/retention.py
#     Driver of bench/retention.sh (see there): sustained load with and
#     without pruning, table sizes and lateness over time, then batched
#     DELETE against dropping a time partition.
#
# Connects with the PG* variables of scripts/lib.sh.  The load: every
# 0.25 s one INSERT ... SELECT of RATE/4 tasks due evenly over a quarter
# second, 2 s ahead (the wake-up path).  Lateness is task_log.started_at -
# scheduled_at, the worker's own view (the receiver is a Python process
# and is not what is measured here).
#
# -------------------------------------------------------------------------

import os
import sys
import time
import urllib.request

import psycopg2

URL = sys.argv[1]
RATE = int(os.environ.get("RETENTION_RATE", "500"))
SECONDS = int(os.environ.get("RETENTION_SECONDS", "90"))
KEEP = int(os.environ.get("RETENTION_KEEP", "20"))
WINDOW = 5.0


def connect():
    conn = psycopg2.connect(dbname="jobflow")
    conn.autocommit = True
    return conn


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()


def set_guc(conn, name, value):
    with conn.cursor() as cur:
        cur.execute("ALTER SYSTEM SET %s = %%s" % name, (str(value),))
        cur.execute("SELECT pg_reload_conf()")


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def worker_cpu_s(conn):
    """CPU seconds (user + system) the jobflow worker has used."""
    pid = one(conn, "SELECT pid FROM jobflow.worker_status()")[0]
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(conn, name, retention_s):
    """One run of the load; returns the per-window p99s and last sizes."""
    print("\n== %s: %d callbacks/s for %d s, jobflow.retention = %d s"
          % (name, RATE, SECONDS, retention_s))
    set_guc(conn, "jobflow.retention", retention_s)
    with conn.cursor() as cur:
        cur.execute("TRUNCATE jobflow.tasks")     # and the log, by its trigger
        cur.execute("VACUUM jobflow.tasks, jobflow.task_log")
    urllib.request.urlopen(urllib.request.Request(URL.rsplit("/", 1)[0] + "/_reset",
                                                  method="POST")).read()
    print("%6s %10s %10s %10s %10s %9s %8s %8s %8s"
          % ("t s", "tasks", "tasks MB", "log rows", "log MB", "done/s", "p50 ms", "p99 ms", "max ms"))
    start = time.time()
    step = 0.25
    per_step = RATE // 4
    next_insert = start
    next_sample = start + WINDOW
    p99s = []
    sizes = None
    cpu0 = worker_cpu_s(conn)
    fired0 = one(conn, "SELECT fired FROM jobflow.worker_status()")[0]
    with conn.cursor() as cur:
        while True:
            now = time.time()
            if now >= start + SECONDS + 4:
                break
            if now >= next_insert and now < start + SECONDS:
                cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                            " SELECT %s, now() + interval '2 s'"
                            "        + (i * %s) * interval '1 ms'"
                            "   FROM generate_series(0, %s - 1) i",
                            (URL, 250.0 / per_step, per_step))
                next_insert += step
            if now >= next_sample:
                cur.execute("SELECT (SELECT count(*) FROM jobflow.tasks),"
                            " pg_total_relation_size('jobflow.tasks'),"
                            " (SELECT count(*) FROM jobflow.task_log),"
                            " pg_total_relation_size('jobflow.task_log')")
                ntasks, tbytes, nlog, lbytes = cur.fetchone()
                cur.execute("SELECT extract(epoch FROM started_at - scheduled_at) * 1000"
                            "  FROM jobflow.task_log"
                            " WHERE finished_at >= now() - %s * interval '1 s'", (WINDOW,))
                late = [r[0] for r in cur.fetchall()]
                cur.execute("SELECT count(*) FROM jobflow.tasks"
                            " WHERE state = 'succeeded'"
                            "   AND updated_at >= now() - %s * interval '1 s'", (WINDOW,))
                done = cur.fetchone()[0]
                print("%6.0f %10d %10.1f %10d %10.1f %9.0f %8.2f %8.2f %8.2f"
                      % (now - start, ntasks, tbytes / 1e6, nlog, lbytes / 1e6,
                         done / WINDOW, pct(late, 50), pct(late, 99),
                         max(late) if late else float("nan")), flush=True)
                if late and now - start > 10:
                    p99s.append(pct(late, 99))
                sizes = (tbytes, lbytes)
                next_sample += WINDOW
            time.sleep(max(0.0, min(next_insert, next_sample) - time.time()))
    fired = one(conn, "SELECT fired FROM jobflow.worker_status()")[0] - fired0
    cpu = worker_cpu_s(conn) - cpu0
    print("worker CPU (metrics on): %.2f s for %d callbacks, %.0f us a callback"
          % (cpu, fired, cpu * 1e6 / max(fired, 1)))
    return p99s, sizes


def partitions(conn):
    """Removing one partition's worth of log rows: the worker's batched
    DELETE (tasks with their log rows, 500 a statement) against DROP of a
    time partition of the log, on copies of the tables."""
    rows = max(RATE * 10, 5000)       # 10 s of the load
    print("\n== removing %d finished tasks and their log rows (10 s of the load)" % rows)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS bt, bl, pl")
        cur.execute("CREATE TABLE bt (LIKE jobflow.tasks INCLUDING ALL)")
        cur.execute("CREATE TABLE bl (LIKE jobflow.task_log INCLUDING ALL)")
        cur.execute("INSERT INTO bt (id, url, state, attempts, owner, updated_at)"
                    " SELECT i, 'http://127.0.0.1/ok', 'succeeded', 1, 'postgres',"
                    "        now() - interval '1 hour' + i * interval '1 ms'"
                    "   FROM generate_series(1, %s) i", (rows,))
        cur.execute("INSERT INTO bl (task_id, attempt, owner, scheduled_at, started_at,"
                    "                finished_at, outcome, http_status, response)"
                    " SELECT id, 1, owner, updated_at, updated_at, updated_at,"
                    "        'succeeded', 200, 'ok' FROM bt")
        cur.execute("CREATE INDEX ON bt (updated_at) WHERE state IN ('succeeded', 'failed', 'cancelled')")
        cur.execute("VACUUM ANALYZE bt, bl")
        cur.execute("CREATE TABLE pl (LIKE jobflow.task_log) PARTITION BY RANGE (finished_at)")
        cur.execute("CREATE TABLE pl_old PARTITION OF pl FOR VALUES FROM (MINVALUE) TO (now())")
        cur.execute("CREATE TABLE pl_new PARTITION OF pl FOR VALUES FROM (now()) TO (MAXVALUE)")
        cur.execute("CREATE INDEX ON pl (task_id)")
        cur.execute("INSERT INTO pl SELECT * FROM bl")
        cur.execute("CHECKPOINT")

        batches = []
        t0 = time.time()
        while True:
            b0 = time.time()
            cur.execute("WITH doomed AS (SELECT id FROM bt WHERE state IN"
                        " ('succeeded', 'failed', 'cancelled') AND updated_at < now()"
                        " ORDER BY updated_at LIMIT 500),"
                        " gone AS (DELETE FROM bt t USING doomed d WHERE t.id = d.id RETURNING t.id),"
                        " logs AS (DELETE FROM bl l USING gone g WHERE l.task_id = g.id RETURNING 1)"
                        " SELECT count(*) FROM gone")
            n = cur.fetchone()[0]
            batches.append((time.time() - b0) * 1000)
            if n == 0:
                break
        delete_ms = (time.time() - t0) * 1000
        t0 = time.time()
        cur.execute("ALTER TABLE pl DETACH PARTITION pl_old")
        cur.execute("DROP TABLE pl_old")
        drop_ms = (time.time() - t0) * 1000
        cur.execute("DROP TABLE bt, bl, pl")
    print("batched DELETE (500 tasks + log rows a statement): %.1f ms in all, %.1f us a task;"
          " a batch: p50 %.2f ms, max %.2f ms"
          % (delete_ms, delete_ms * 1000 / rows, pct(batches, 50), max(batches)))
    print("DETACH + DROP of the log partition holding them:   %.1f ms in all"
          " (ACCESS EXCLUSIVE on the parent while it runs)" % drop_ms)


def main():
    conn = connect()
    base, base_sizes = phase(conn, "baseline, no pruning", 0)
    pruned, pruned_sizes = phase(conn, "pruning by the worker", KEEP)
    set_guc(conn, "jobflow.retention", 0)
    print("\n== summary (%d callbacks/s, %d s; windows after the first 10 s)" % (RATE, SECONDS))
    print("baseline:  p99 of the 5 s windows: median %.2f ms, worst %.2f ms; final sizes tasks %.1f MB, log %.1f MB"
          % (pct(base, 50), max(base), base_sizes[0] / 1e6, base_sizes[1] / 1e6))
    print("pruning:   p99 of the 5 s windows: median %.2f ms, worst %.2f ms; final sizes tasks %.1f MB, log %.1f MB"
          % (pct(pruned, 50), max(pruned), pruned_sizes[0] / 1e6, pruned_sizes[1] / 1e6))
    partitions(conn)


if __name__ == "__main__":
    main()
