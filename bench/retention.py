# -------------------------------------------------------------------------
#
# bench/retention.py
#     Driver of bench/retention.sh (see there): sustained load with and
#     without pruning, table sizes and lateness over time, then batched
#     DELETE against dropping a time partition.
#
# Connects with the PG* variables of scripts/lib.sh; the receiver is the
# private nginx of bench/nginx.sh (NGINX_PORT, NGINX_DIR).  The load: a
# generator thread with its own connection inserts, every BATCH_MS, one
# INSERT ... SELECT of the tasks due in one BATCH_MS slice, AHEAD seconds
# before the slice begins (the NOTIFY range path); task i of a run is due
# at t0 + i / RATE, evenly over each second.  Each callback's URL carries
# its due time in microseconds, so lateness is nginx's $msec (arrival,
# millisecond resolution, truncated) minus the due time, as in
# bench/dispatcher.sh (W1): it reads up to 1 ms low.  The generator records
# how long before its first due time each batch committed; a batch that
# commits late is the generator's failure, not jobflow's, and is reported.
#
# -------------------------------------------------------------------------

import os
import threading
import time

import psycopg2

PORT = int(os.environ["NGINX_PORT"])
NGINX_DIR = os.environ["NGINX_DIR"]
NGINX_PID = int(os.environ["NGINX_PID"])
ACCESS_LOG = os.path.join(NGINX_DIR, "access.log")
URL = "http://127.0.0.1:%d/cb/ret?due=" % PORT
RATE = int(os.environ.get("RETENTION_RATE", "500"))
SECONDS = int(os.environ.get("RETENTION_SECONDS", "90"))
KEEP = int(os.environ.get("RETENTION_KEEP", "20"))
AHEAD = float(os.environ.get("RETENTION_AHEAD", "2"))
BATCH_MS = 250
WINDOW = 5.0
SLO_MS = 5.0
DRAIN_S = 300


def connect():
    conn = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "jobflow"))
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


def cpu_s(pid):
    """CPU seconds (user + system) process pid has used."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nginx_cpu_s():
    """CPU seconds of nginx: its master and its workers."""
    total = cpu_s(NGINX_PID)
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/stat" % pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == NGINX_PID:
                    total += cpu_s(int(pid))
            except (OSError, ValueError):
                pass
    return total


def worker_pids(conn):
    """The database's jobflow workers (several with BENCH_WORKERS)."""
    with conn.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobflow worker'"
                    " AND datname = current_database()")
        return [r[0] for r in cur.fetchall()]


def workers_cpu_s(pids):
    return sum(cpu_s(p) for p in pids)


def stat(conn, metric):
    row = one(conn, "SELECT sum(value) FROM jobflow.stats WHERE metric = %s", (metric,))
    return int(row[0] or 0)


class AccessLog:
    """Reads what nginx appended since the last call: lateness (ms) of each
    callback that arrived, from $msec and the due time in its URL."""

    def __init__(self, path):
        self.path = path
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0

    def new(self):
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        late = []
        for line in data[:end].split(b"\n"):
            parts = line.split(b" ", 2)
            if len(parts) < 2 or not parts[1].startswith(b"/cb/ret?due="):
                continue
            sec, _, frac = parts[0].partition(b".")
            arrival_us = int(sec) * 1000000 + int((frac + b"000")[:3]) * 1000
            late.append((arrival_us - int(parts[1][12:])) / 1000.0)
        return late


class Generator(threading.Thread):
    """Schedules RATE tasks a second for SECONDS, BATCH_MS' worth a
    statement, each committed AHEAD seconds before its first task is due.
    Records each batch's lead (first due - commit) and statement time."""

    def __init__(self, t0):
        super().__init__(daemon=True)
        self.t0 = t0
        self.conn = connect()
        self.backend = one(self.conn, "SELECT pg_backend_pid()")[0]
        self.cpu0 = cpu_s(self.backend)
        self.leads = []
        self.took = []
        self.scheduled = 0
        self.error = None

    def run(self):
        try:
            self.load()
        except Exception as e:  # reported by the sampler
            self.error = e

    def load(self):
        t0_us = int(self.t0 * 1e6)
        batches = SECONDS * 1000 // BATCH_MS
        with self.conn.cursor() as cur:
            for b in range(batches):
                lo = b * RATE * BATCH_MS // 1000
                hi = (b + 1) * RATE * BATCH_MS // 1000
                first_due = self.t0 + lo / RATE
                pause = first_due - AHEAD - time.time()
                if pause > 0:
                    time.sleep(pause)
                s = time.time()
                cur.execute("INSERT INTO jobflow.tasks (url, run_at)"
                            " SELECT %(url)s || d,"
                            "        timestamptz 'epoch' + d * interval '1 microsecond'"
                            "   FROM (SELECT %(t0)s::bigint + i * 1000000 / %(rate)s AS d"
                            "           FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) i) s",
                            {"url": URL, "t0": t0_us, "rate": RATE, "lo": lo, "hi": hi})
                e = time.time()
                self.took.append((e - s) * 1000)
                self.leads.append((first_due - e) * 1000)
                self.scheduled += hi - lo

    def report(self):
        cpu = cpu_s(self.backend) - self.cpu0
        late = sum(1 for lead in self.leads if lead < 0)
        print("generator: %d tasks in %d statements; a statement %.1f ms p50, %.1f ms max;"
              " committed %.0f ms (min) before its first due time (target %.0f ms), %d after;"
              " its backend's CPU %.0f us a task"
              % (self.scheduled, len(self.took), pct(self.took, 50), max(self.took),
                 min(self.leads), AHEAD * 1000, late, cpu * 1e6 / max(self.scheduled, 1)))
        if late or min(self.leads) < AHEAD * 500:
            print("generator: FELL BEHIND (a batch committed less than AHEAD/2 before it was due)")
        self.conn.close()


def drain(conn, last_due):
    """Waits (at most DRAIN_S) until the worker has fired and logged every
    task, so that the next run starts from an idle worker; prints how far
    behind the last due time that was."""
    deadline = time.time() + DRAIN_S
    while True:
        busy = one(conn, "SELECT EXISTS (SELECT FROM jobflow.tasks"
                         "               WHERE state IN ('pending', 'running'))"
                         "    OR (SELECT in_flight + queued + buffered_rows > 0"
                         "          FROM jobflow.worker_status())")[0]
        if not busy or time.time() > deadline:
            break
        time.sleep(0.5)
    print("%s %.1f s after the last due time"
          % ("still busy" if busy else "worker idle", time.time() - last_due))


def phase(conn, name, retention_s):
    """One run of the load; returns the per-window p99s and sizes."""
    print("\n== %s: %d callbacks/s for %d s, jobflow.retention = %d s"
          % (name, RATE, SECONDS, retention_s))
    set_guc(conn, "jobflow.retention", retention_s)
    with conn.cursor() as cur:
        cur.execute("TRUNCATE jobflow.tasks")     # and the log, by its trigger
        cur.execute("VACUUM jobflow.tasks, jobflow.task_log")
        cur.execute("SELECT pg_stat_statements_reset()")
    print("%6s %10s %9s %10s %9s %9s %4s %9s %9s %8s %8s %8s %6s"
          % ("t s", "~tasks", "tasks MB", "~log rows", "log MB", "~dead", "av",
             "pruned/s",
             "arrived/s", "p50 ms", "p99 ms", "max ms", ">5ms"))
    access = AccessLog(ACCESS_LOG)
    wpids = worker_pids(conn)
    cpu0, ncpu0 = workers_cpu_s(wpids), nginx_cpu_s()
    fired0 = one(conn, "SELECT fired FROM jobflow.worker_status()")[0]
    pruned0 = last_pruned = stat(conn, "pruned_tasks_total")
    start = time.time()
    gen = Generator(start + AHEAD)
    gen.start()
    p99s, sizes, arrived, over, vac0 = [], [], 0, 0, None
    end = start + AHEAD + SECONDS + 3
    next_sample = start + WINDOW
    with conn.cursor() as cur:
        while True:
            time.sleep(max(0.0, next_sample - time.time()))
            now = time.time()
            cur.execute("SELECT (SELECT n_live_tup FROM pg_stat_user_tables"
                        "         WHERE relid = 'jobflow.tasks'::regclass),"
                        " pg_total_relation_size('jobflow.tasks'),"
                        " (SELECT n_live_tup FROM pg_stat_user_tables"
                        "   WHERE relid = 'jobflow.task_log'::regclass),"
                        " pg_total_relation_size('jobflow.task_log'),"
                        " (SELECT sum(n_dead_tup) FROM pg_stat_user_tables"
                        "   WHERE relid IN ('jobflow.tasks'::regclass, 'jobflow.task_log'::regclass)),"
                        " (SELECT sum(autovacuum_count) FROM pg_stat_user_tables"
                        "   WHERE relid IN ('jobflow.tasks'::regclass, 'jobflow.task_log'::regclass))")
            ntasks, tbytes, nlog, lbytes, ndead, nvac = cur.fetchone()
            if vac0 is None:
                vac0 = nvac
            pruned = stat(conn, "pruned_tasks_total")
            late = access.new()
            arrived += len(late)
            n_over = sum(1 for v in late if v > SLO_MS)
            print("%6.0f %10d %9.1f %10d %9.1f %9d %4d %9.0f %9.0f %8.2f %8.2f %8.2f %6d"
                  % (now - start, ntasks, tbytes / 1e6, nlog, lbytes / 1e6, ndead, nvac - vac0,
                     (pruned - last_pruned) / WINDOW, len(late) / WINDOW,
                     pct(late, 50), pct(late, 99), max(late) if late else float("nan"),
                     n_over), flush=True)
            last_pruned = pruned
            if late and now - start > AHEAD + 10:
                p99s.append(pct(late, 99))
                over += n_over
            sizes.append((now - start, tbytes, lbytes))
            if gen.error:
                raise gen.error
            next_sample += WINDOW
            if now >= end and (arrived >= gen.scheduled or now >= end + 30):
                break
    gen.join()
    drain(conn, start + AHEAD + SECONDS)
    fired = one(conn, "SELECT fired FROM jobflow.worker_status()")[0] - fired0
    cpu, ncpu = workers_cpu_s(wpids) - cpu0, nginx_cpu_s() - ncpu0
    print("arrived %d of %d scheduled; pruned %d tasks"
          % (arrived, gen.scheduled, stat(conn, "pruned_tasks_total") - pruned0))
    gen.report()
    print("worker CPU (metrics on): %.2f s for %d callbacks, %.0f us a callback;"
          " nginx %.0f us a callback"
          % (cpu, fired, cpu * 1e6 / max(fired, 1), ncpu * 1e6 / max(fired, 1)))
    with conn.cursor() as cur:
        cur.execute("SELECT calls, round(total_exec_time::numeric, 1),"
                    "       round(mean_exec_time::numeric, 3), rows,"
                    "       regexp_replace(left(query, 90), '\\s+', ' ', 'g')"
                    "  FROM pg_stat_statements WHERE query ~* 'jobflow'"
                    " ORDER BY total_exec_time DESC LIMIT 6")
        print("statements by total time (pg_stat_statements):")
        print("%8s %10s %9s %9s  %s" % ("calls", "total ms", "mean ms", "rows", "query"))
        for r in cur.fetchall():
            print("%8d %10s %9s %9d  %s" % r)
    return p99s, over, sizes


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


def growth(sizes):
    """Sizes once retention has had time to work (KEEP + 15 s into the
    load) and at the end: flat means no growth in between."""
    settled = [x for x in sizes if x[0] >= AHEAD + KEEP + 15] or sizes[-1:]
    return settled[0], sizes[-1]


def main():
    conn = connect()
    base, base_over, base_sizes = phase(conn, "baseline, no pruning", 0)
    pruned, pruned_over, pruned_sizes = phase(conn, "pruning by the worker", KEEP)
    set_guc(conn, "jobflow.retention", 0)
    print("\n== summary (%d callbacks/s, %d s; 5 s windows after the first 10 s; goal p99 <= %.0f ms)"
          % (RATE, SECONDS, SLO_MS))
    for name, p99s, over, sizes in (("baseline", base, base_over, base_sizes),
                                    ("pruning", pruned, pruned_over, pruned_sizes)):
        (t1, tb1, lb1), (t2, tb2, lb2) = growth(sizes)
        print("%-9s p99 of the windows: median %.2f ms, worst %.2f ms; %d callbacks over %.0f ms;"
              " tasks %.1f -> %.1f MB, log %.1f -> %.1f MB (t = %.0f -> %.0f s)"
              % (name + ":", pct(p99s, 50), max(p99s) if p99s else float("nan"), over, SLO_MS,
                 tb1 / 1e6, tb2 / 1e6, lb1 / 1e6, lb2 / 1e6, t1, t2))
    partitions(conn)


if __name__ == "__main__":
    main()
