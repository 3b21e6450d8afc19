# -------------------------------------------------------------------------
#
# bench/queues.py
#     Driver of bench/queues.sh (see there): how closely a queue's
#     max_per_second holds at the receiver, next to an unlimited queue.
#
# Connects with the PG* variables of scripts/lib.sh.  Each phase schedules
# its whole backlog in one statement, due at once, in its own queue, and
# reads the arrival times the receiver recorded (time.time() as each
# request arrives; the receiver is a Python process, so its own jitter is
# in these figures).
#
# -------------------------------------------------------------------------

import json
import math
import os
import sys
import time
import urllib.request

import psycopg2

BASE = sys.argv[1]
RATES = [float(r) for r in os.environ.get("QUEUES_RATES", "100 1000").split()]
SECONDS = int(os.environ.get("QUEUES_SECONDS", "10"))
BASELINE = int(os.environ.get("QUEUES_BASELINE", "2000"))


def connect():
    conn = psycopg2.connect(dbname="jobflow")
    conn.autocommit = True
    return conn


def receiver(method, path):
    req = urllib.request.Request(BASE + path, method=method,
                                 data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def run(conn, queue, rate, n):
    """Schedule n tasks due now in queue (rate None: no limit); wait for
    them; return the receiver's arrival times, sorted."""
    with conn.cursor() as cur:
        cur.execute("SELECT jobflow.drop_queue(%s)", (queue,))
        if rate is not None:
            cur.execute("SELECT jobflow.set_queue(%s, max_per_second => %s)", (queue, rate))
    receiver("POST", "/_reset")
    url = "%s/ok?q=%s" % (BASE, queue)
    with conn.cursor() as cur:
        cur.execute("SELECT count(jobflow.schedule(%s, queue => %s))"
                    "  FROM generate_series(1, %s)", (url, queue, n))
    deadline = time.time() + n / (rate or 1000.0) + 60
    while time.time() < deadline:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM jobflow.tasks WHERE queue = %s"
                        "   AND state IN ('pending', 'running')", (queue,))
            if cur.fetchone()[0] == 0:
                break
        time.sleep(0.2)
    recs = json.loads(receiver("GET", "/_requests"))
    with conn.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM l.started_at)::float8 FROM jobflow.task_log l"
                    "  JOIN jobflow.tasks t ON t.id = l.task_id WHERE t.queue = %s", (queue,))
        sent = sorted(r[0] for r in cur.fetchall())
    return sorted(r["time"] for r in recs if ("q=" + queue) in r["query"]), sent


def report(label, rate, result):
    times, sent = result
    gaps_ms = [(b - a) * 1000 for a, b in zip(times, times[1:])]
    line = "%-12s %6d requests in %6.2f s (%8.1f/s)" % (
        label, len(times), times[-1] - times[0],
        (len(times) - 1) / max(times[-1] - times[0], 1e-9))
    if gaps_ms:
        line += "  inter-arrival p50 %.2f ms  p99 %.2f ms  max %.2f ms" % (
            pct(gaps_ms, 50), pct(gaps_ms, 99), max(gaps_ms))
    print(line)
    if rate is None:
        return
    start = times[0] + 1.0
    whole = int((times[-1] - start))
    counts = [sum(1 for t in times if start + k <= t < start + k + 1) for k in range(whole)]
    if not counts:
        return
    mean = sum(counts) / len(counts)
    sd = math.sqrt(sum((c - mean) ** 2 for c in counts) / len(counts))
    print("%-12s per second after the first: %s" % ("", " ".join(str(c) for c in counts)))
    print("%-12s mean %.1f  stddev %.2f  max deviation from %g: %d" % (
        "", mean, sd, rate, max(abs(c - rate) for c in counts)))
    print("%-12s the busiest second, at any start: %d at the receiver, %d sent by the worker"
          % ("", busiest_second(times), busiest_second(sent)))


def busiest_second(times):
    """The most arrivals within any one second (a sliding window)."""
    most, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        most = max(most, i - j + 1)
    return most


def main():
    conn = connect()
    # the worker must be attached before the first phase
    deadline = time.time() + 30
    while time.time() < deadline:
        with conn.cursor() as cur:
            cur.execute("SELECT pid FROM jobflow.worker_status()")
            if cur.fetchone()[0] is not None:
                break
        time.sleep(0.2)
    print("queues: %d s' worth at each rate, arrival times at the receiver" % SECONDS)
    report("unlimited", None, run(conn, "bench_unlimited", None, BASELINE))
    for rate in RATES:
        report("%g/s" % rate, rate, run(conn, "bench_%d" % int(rate), rate, int(rate * SECONDS)))


if __name__ == "__main__":
    main()
