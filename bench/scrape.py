# -------------------------------------------------------------------------
#
# bench/scrape.py
#     Driver of bench/scrape.sh (see there): the cost of a scrape of
#     jobflow.metrics() and jobflow.stats as finished tasks, the pending
#     backlog and dead letters grow, against an empty database.
#
# -------------------------------------------------------------------------

import os
import statistics
import time

import psycopg2

REPEAT = int(os.environ.get("SCRAPE_REPEAT", "50"))


def connect():
    conn = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "jobflow"))
    conn.autocommit = True
    return conn


def run(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)


def timed(conn, sql):
    """Median and p99 in ms of REPEAT runs of sql (after one warm-up)."""
    with conn.cursor() as cur:
        cur.execute(sql)
        cur.fetchall()
        took = []
        for _ in range(REPEAT):
            t = time.perf_counter()
            cur.execute(sql)
            cur.fetchall()
            took.append((time.perf_counter() - t) * 1000)
    took.sort()
    return statistics.median(took), took[min(len(took) - 1, int(len(took) * 0.99))]


def insert(conn, n, state, run_at, owners=5, queues=50):
    run(conn, "SET session_replication_role = replica")
    run(conn, "INSERT INTO jobflow.tasks (url, state, owner, queue, run_at, updated_at)"
              " SELECT 'http://127.0.0.1:9/x', %s, ('bench_' || (g %% %s))::regrole, 'q' || (g %% %s),"
              "        " + run_at + ", now() - interval '1 hour'"
              "   FROM generate_series(1, %s) g", (state, owners, queues, n))
    run(conn, "RESET session_replication_role")
    run(conn, "VACUUM ANALYZE jobflow.tasks")


def main():
    conn = connect()
    for i in range(5):
        run(conn, "DO $$BEGIN CREATE ROLE bench_%d; EXCEPTION WHEN duplicate_object THEN NULL; END$$" % i)
    rows = []

    def measure(label):
        m = timed(conn, "SELECT jobflow.metrics()")
        s = timed(conn, "SELECT * FROM jobflow.stats")
        size = conn.cursor()
        size.execute("SELECT pg_size_pretty(pg_total_relation_size('jobflow.tasks'))")
        rows.append((label, m, s, size.fetchone()[0]))
        print("  %-52s metrics() %7.2f ms (p99 %7.2f)   stats %7.2f ms   tasks %s"
              % (label, m[0], m[1], s[0], rows[-1][3]), flush=True)

    print("scrape cost, median of %d scrapes (and p99):" % REPEAT)
    measure("baseline: empty database")
    insert(conn, 1000000, "succeeded", "now() - interval '2 hours'")
    measure("+ 1,000,000 finished tasks")
    insert(conn, 10000, "pending", "now() + interval '1 day'")
    measure("+ 10,000 pending (50 queues, 5 owners)")
    insert(conn, 90000, "pending", "now() + interval '1 day'")
    measure("+ 100,000 pending")
    insert(conn, 10000, "failed", "now() - interval '2 hours'")
    measure("+ 10,000 dead letters")
    base = rows[0][1][0]
    print("\nagainst the baseline (%.2f ms): 1M finished %.2fx, 10k pending %.2fx, "
          "100k pending %.2fx, + 10k dead letters %.2fx"
          % (base, rows[1][1][0] / base, rows[2][1][0] / base, rows[3][1][0] / base,
             rows[4][1][0] / base))
    per_pending = (rows[3][1][0] - rows[1][1][0]) / 100000 * 1000
    print("per pending task: %.2f us per scrape" % per_pending)


if __name__ == "__main__":
    main()
