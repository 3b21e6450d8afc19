#!/usr/bin/python3
"""bench/dispatcher.py: the phases of bench/dispatcher.sh.

Run by dispatcher.sh against its throwaway cluster (PGHOST/PGPORT/PGDATABASE
in the environment) and its private nginx (NGINX_PORT, NGINX_DIR; HTTPS on
NGINX_TLS_PORT and NGINX_H2_PORT with the test CA NGINX_CA_FILE).  Every
callback URL is http(s)://127.0.0.1:PORT/cb/<phase>?due=<epoch ms>, so the
lateness of a callback is nginx's $msec (arrival, ms resolution) minus the
due time in its URL.  Prints tables; asserts nothing about time.  With
BENCH_JSON=FILE the main figures are also written there (bench/versus.sh).

The build measured may be older than these scripts (BENCH_REV, e.g. 0.1.0):
what it lacks (jobflow.stats, jobflow.tls_ca_file) is printed as n/a.
"""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone

import psycopg2

PORT = int(os.environ["NGINX_PORT"])
# the receiver's ports by scheme: "h2" is HTTPS on the listener offering HTTP/2
SCHEME_PORTS = {"http": PORT}
if os.environ.get("NGINX_TLS_PORT"):
    SCHEME_PORTS["https"] = int(os.environ["NGINX_TLS_PORT"])
if os.environ.get("NGINX_H2_PORT"):
    SCHEME_PORTS["h2"] = int(os.environ["NGINX_H2_PORT"])
CA_FILE = os.environ.get("NGINX_CA_FILE", "")
NGINX_DIR = os.environ["NGINX_DIR"]
ACCESS_LOG = os.path.join(NGINX_DIR, "access.log")
CLUSTER_LOG = os.environ["CLUSTER_LOG"]
N_BIG = int(os.environ.get("BENCH_TASKS_1M", "1000000"))
PERF = os.environ.get("BENCH_PERF", "") not in ("", "0")
# in this order; a phase may come twice (W2 on a fresh cluster, then after steady load)
PHASES = os.environ.get("BENCH_PHASES", "burst,steady,burst,schemes,ceiling,big").split(",")

STEADY_RATE = 100           # tasks per second
STEADY_SECONDS = int(os.environ.get("BENCH_STEADY_SECONDS", "20"))
BURST_TASKS = 20000
# (max_concurrent_requests, max_requests_per_host); the first is the default
BURST_CONFIGS = [tuple(int(x) for x in c.split("/"))
                 for c in os.environ.get("BENCH_BURST_CAPS", "512/64,512/512,2048/2048").split(",")]

tables = []
# the main figures by phase, written to BENCH_JSON at the end
RESULTS = {"steady": {}, "burst": []}


def now_ms():
    return time.time_ns() // 1000000


def connect():
    conn = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "jobflow"))
    conn.autocommit = True
    return conn


db = connect()


def q(sql, args=None):
    cur = db.cursor()
    cur.execute(sql, args)
    rows = cur.fetchall() if cur.description else None
    cur.close()
    return rows


def q1(sql, args=None):
    rows = q(sql, args)
    return rows[0] if rows else None


STATUS_COLS = ["pid", "started_ms", "wheel_tasks", "wheel_bytes", "in_flight",
               "queued", "buffered_rows", "fired", "succeeded", "failed",
               "retried", "flushes", "flushed_rows", "statements"]


def status():
    row = q1("SELECT pid, (extract(epoch FROM started_at) * 1000)::bigint,"
             " wheel_tasks, wheel_bytes, in_flight, queued, buffered_rows,"
             " fired, succeeded, failed, retried, flushes, flushed_rows,"
             " statements FROM jobflow.worker_status()")
    return dict(zip(STATUS_COLS, row))


def wait_for_worker(timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = status()
        if s["pid"] is not None:
            return s
        time.sleep(0.05)
    raise RuntimeError("no jobflow worker")


def base_url(scheme="http"):
    """The receiver's URL for scheme (http, https, or h2: https offering HTTP/2)."""
    return "%s://127.0.0.1:%d" % ("http" if scheme == "http" else "https", SCHEME_PORTS[scheme])


def url_sql(tag, due_expr, scheme="http"):
    """SQL expression for the callback URL of phase tag, due at due_expr."""
    return "'%s/cb/%s?due=' || (%s)::text" % (base_url(scheme), tag, due_expr)


def has_setting(name):
    return q1("SELECT count(*) FROM pg_settings WHERE name = %s", (name,))[0] > 0


def mem(pid):
    """Worker memory in kB: VmRSS, RssAnon (status), Pss, Pss_Anon (smaps_rollup)."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon"):
                out[k] = int(v.split()[0])
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Pss", "Pss_Anon"):
                out[k] = int(v.split()[0])
    return out


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(vals, p):
    """Nearest-rank percentile of a sorted list."""
    if not vals:
        return None
    k = max(0, math.ceil(p / 100.0 * len(vals)) - 1)
    return vals[k]


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.3f" % v if abs(v) < 10 else "%.1f" % v
    return str(v)


def table(title, headers, rows, notes=()):
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    lines = ["", title]
    lines.append("  ".join(h.rjust(w) if i else h.ljust(w)
                           for i, (h, w) in enumerate(zip(headers, widths))))
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    for n in notes:
        lines.append("  " + n)
    text = "\n".join(lines)
    print(text, flush=True)
    tables.append(text)


def progress(msg):
    print("-- %s %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class AccessLog:
    """Incremental reader of nginx's access log, entries grouped by phase.
    An entry: (arrival ms, due ms, task id, attempt, status, connection,
    new, protocol, TLS version, TLS session resumed); new is whether this
    is the first request seen on that connection in the whole log (nginx's
    $connection is a serial number, its one worker never reuses it)."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.by_tag = {}
        self.seen = set()

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self.offset += end + 1
        for line in data[:end].decode("ascii", "replace").split("\n"):
            parts = line.split()
            conn = parts[6] if len(parts) > 6 else "-"
            new = conn not in self.seen
            self.seen.add(conn)
            if len(parts) < 6 or not parts[1].startswith("/cb/"):
                continue
            path, _, query = parts[1][4:].partition("?due=")
            sec, _, frac = parts[0].partition(".")
            arrival = int(sec) * 1000 + int((frac + "000")[:3])
            try:
                due = int(query)
            except ValueError:
                continue
            proto, tls, reused = (parts[8:11] + ["-", "-", "-"])[:3]
            self.by_tag.setdefault(path, []).append(
                (arrival, due, parts[2], parts[3], parts[4], conn, new, proto, tls, reused))

    def entries(self, tag):
        self.poll()
        return self.by_tag.get(tag, [])

    def wait(self, tag, n, timeout):
        deadline = time.time() + timeout
        while len(self.entries(tag)) < n and time.time() < deadline:
            time.sleep(0.2)
        return self.entries(tag)


access = AccessLog(ACCESS_LOG)


def wait_final(lo, hi, n, timeout):
    """Wait until tasks lo..hi are all in a final state; returns state counts."""
    deadline = time.time() + timeout
    while True:
        row = q1("SELECT count(*) FILTER (WHERE state = 'succeeded'),"
                 " count(*) FILTER (WHERE state IN ('succeeded', 'failed', 'cancelled')),"
                 " count(*) FROM jobflow.tasks WHERE id BETWEEN %s AND %s", (lo, hi))
        if row[1] >= n or time.time() > deadline:
            return {"succeeded": row[0], "final": row[1], "total": row[2]}
        time.sleep(0.25)


def lateness_row(name, n, entries, extra=()):
    late = sorted(a - d for a, d, *_ in entries)
    ids = {e[2] for e in entries}
    return [name, n, len(entries), len(ids), pct(late, 50), pct(late, 90),
            pct(late, 99), late[-1] if late else None,
            sum(1 for x in late if x < 0), len({e[5] for e in entries})] + list(extra)


# ---------------------------------------------------------------- phases

def conn_figures(entries):
    """Connections used, new ones (first request seen on them), and of the
    new ones those whose TLS session was resumed."""
    new = [e for e in entries if e[6]]
    return {"conns": len({e[5] for e in entries}), "new_conns": len(new),
            "resumed": sum(1 for e in new if e[9] == "r"),
            "protocols": sorted({"%s %s" % (e[7], e[8]) if e[8] != "-" else e[7] for e in entries})}


def steady_set(tag, scheme="http"):
    """100/s for 20 s, scheduled by one INSERT ... SELECT 3 s ahead."""
    n = STEADY_RATE * STEADY_SECONDS
    step = 1000 // STEADY_RATE
    base = now_ms() + 3000
    t0 = now_ms()
    lo, hi, cnt = q1(
        "WITH ins AS (INSERT INTO jobflow.tasks (url, run_at)"
        " SELECT " + url_sql(tag, "%(base)s + i * %(step)s", scheme) + ","
        "        pg_catalog.to_timestamp((%(base)s + i * %(step)s) / 1000.0)"
        "   FROM generate_series(0, %(n)s - 1) i RETURNING id)"
        " SELECT min(id), max(id), count(*) FROM ins",
        {"base": base, "step": step, "n": n})
    committed = now_ms()
    progress("%s: %d tasks inserted in %d ms, first due %d ms after commit"
             % (tag, cnt, committed - t0, base - committed))
    time.sleep(max(0, (base + n * step - now_ms()) / 1000.0) + 0.5)
    states = wait_final(lo, hi, n, 30)
    entries = access.wait(tag, n, 10)
    return n, entries, states, "INSERT ... SELECT, committed %d ms before first due" % (base - committed)


def steady_notify(tag, lead_ms=50):
    """100/s for 20 s, each task scheduled by its own transaction lead_ms before due."""
    n = STEADY_RATE * STEADY_SECONDS
    step = 1000 // STEADY_RATE
    conn = connect()
    cur = conn.cursor()
    u = "http://127.0.0.1:%d/cb/%s?due=" % (PORT, tag)
    start = now_ms() + 1000
    leads = []
    ids = []
    for i in range(n):
        due = start + i * step
        wait = (due - lead_ms) / 1000.0 - time.time()
        if wait > 0:
            time.sleep(wait)
        cur.execute("SELECT jobflow.schedule(%s, pg_catalog.to_timestamp(%s / 1000.0))",
                    (u + str(due), due))
        ids.append(cur.fetchone()[0])
        leads.append(due - now_ms())
    conn.close()
    time.sleep(1.0)
    states = wait_final(min(ids), max(ids), n, 30)
    entries = access.wait(tag, n, 10)
    leads.sort()
    note = ("jobflow.schedule() per transaction, committed ~%d ms before due"
            " (measured lead p50 %d ms, min %d ms, %d under 10 ms)"
            % (lead_ms, pct(leads, 50), leads[0], sum(1 for x in leads if x < 10)))
    return n, entries, states, note


def steady_figures(entries):
    late = sorted(a - d for a, d, *_ in entries)
    return {"p50": pct(late, 50), "p90": pct(late, 90), "p99": pct(late, 99),
            "max": late[-1] if late else None, "arrived": len(entries),
            "retried": sum(1 for e in entries if e[3] not in ("1", "-")),
            "non200": sum(1 for e in entries if e[4] != "200")}


def run_steady():
    rows = []
    notes = []
    for name, fn in (("steady-set", steady_set), ("steady-notify", steady_notify)):
        progress("%s: %d tasks/s for %d s" % (name, STEADY_RATE, STEADY_SECONDS))
        n, entries, states, note = fn(name)
        ok = sum(1 for e in entries if e[4] == "200")
        rows.append(lateness_row(name, n, entries, [states["succeeded"]]))
        RESULTS["steady"].setdefault(name, []).append(steady_figures(entries))
        notes.append("%s: %s; %d responses 200" % (name, note, ok))
    rows.append(["[goal]", "", "", "", "<=2", "", "<=10", "", "0", "", ""])
    notes.append("lateness = nginx $msec (arrival, truncated to ms) - due ms in the URL;"
                 " early means arrival_ms < due_ms")
    notes.append("(due times are whole ms, so a truncated arrival below due is a real early fire)")
    table("1. Steady load: lateness at the receiver (ms)",
          ["variant", "tasks", "arrived", "distinct", "p50", "p90", "p99", "max",
           "early", "conns", "succeeded"], rows, notes)


def fd_limit(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def restart_worker():
    old = status()["pid"]
    q("SELECT pg_terminate_backend(%s)", (old,))
    deadline = time.time() + 30
    while time.time() < deadline:
        s = status()
        if s["pid"] is not None and s["pid"] != old:
            break
        time.sleep(0.05)
    time.sleep(0.5)


def set_caps(max_conc, per_host):
    """New caps by reload.  The worker raises its open-files limit for
    max_concurrent_requests only when it starts, so restart it if the limit
    it has is too low for the new cap (see the notes of table 2)."""
    q("ALTER SYSTEM SET jobflow.max_concurrent_requests = %s", (max_conc,))
    q("ALTER SYSTEM SET jobflow.max_requests_per_host = %s", (per_host,))
    q("SELECT pg_reload_conf()")
    time.sleep(1.0)
    limit = fd_limit(status()["pid"])
    if limit is not None and limit < 2 * max_conc + 64:
        progress("worker's open-files limit %d < 2 x %d + 64: restarting it" % (limit, max_conc))
        restart_worker()


def has_pgss():
    """Whether pg_stat_statements is there (a server built without contrib
    has none: its figures print as n/a)."""
    if not hasattr(has_pgss, "known"):
        has_pgss.known = q1("SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'")[0] > 0
    return has_pgss.known


def pgss_worker():
    """The worker's statements in pg_stat_statements (by their text)."""
    if not has_pgss():
        return None
    return q("SELECT calls, round(total_exec_time::numeric, 1), rows,"
             " regexp_replace(left(query, 60), '\\s+', ' ', 'g')"
             "  FROM pg_stat_statements"
             " WHERE query ~ '^(UPDATE jobflow\\.tasks t|INSERT INTO jobflow\\.task_log"
             "|SELECT id, run_at|SELECT t\\.id, t\\.run_at|WITH r AS)'"
             " ORDER BY total_exec_time DESC")


def perf_start(pid, path):
    return subprocess.Popen(["perf", "record", "-q", "-g", "-p", str(pid), "-o", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_stop(proc, path):
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    if os.environ.get("BENCH_PERF_DATA"):
        # kept for a closer look (perf report -i ...); the bench's files go
        subprocess.run(["cp", path, os.environ["BENCH_PERF_DATA"]], check=False)
    out = subprocess.run(["perf", "report", "-i", path, "--stdio", "--no-children",
                          "-g", "none", "--percent-limit", "1", "--sort", "dso,symbol"],
                         capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.strip() and not l.startswith("#")]
    print("\nperf: worker during the first burst (self time, >= 1%)")
    print("\n".join(lines[:40]), flush=True)
    # where the time goes, by library, and the worker's own phases with
    # what they call (inclusive): the next bottleneck at a glance
    out = subprocess.run(["perf", "report", "-i", path, "--stdio", "--no-children",
                          "-g", "none", "--sort", "dso"],
                         capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.strip() and not l.startswith("#")]
    print("\nperf: self time by library")
    print("\n".join(lines[:12]), flush=True)
    out = subprocess.run(["perf", "report", "-i", path, "--stdio", "--children",
                          "-g", "none", "--percent-limit", "2", "--sort", "symbol"],
                         capture_output=True, text=True).stdout
    keep = re.compile(r"\b(jf_\w+|jobflow_\w+|curl_multi_\w+|SPI_\w+|"
                      r"CommitTransaction\w*|XLogFlush|heap_\w+|ExecModifyTable|"
                      r"epoll_wait|build_request|claim_and_submit|record_result)\b")
    lines = [l for l in out.splitlines() if keep.search(l) and not l.startswith("#")]
    print("\nperf: inclusive time of the worker's phases and what they call (>= 2%)")
    print("\n".join(lines[:40]), flush=True)


def warm_up():
    """One unmeasured burst over plain HTTP when none has run yet: the first
    burst on a fresh cluster runs slower (relations extended, caches cold),
    and a phase comparing bursts must not charge that to the first compared."""
    if getattr(burst, "runs", 0) == 0:
        progress("warm-up: one unmeasured burst over plain HTTP")
        mc, ph = BURST_CONFIGS[0]
        burst("warm-up", mc, ph, False)
        q("VACUUM jobflow.tasks")
        q("VACUUM jobflow.task_log")


def burst(tag, max_conc, per_host, do_perf, scheme="http"):
    burst.runs = getattr(burst, "runs", 0) + 1
    set_caps(max_conc, per_host)
    s0 = status()
    pid = s0["pid"]
    nofile = fd_limit(pid)
    if has_pgss():
        q("SELECT pg_stat_statements_reset()")
    cpu0 = cpu_seconds(pid)
    phases0 = phase_seconds()
    due = now_ms() + 5000
    t0 = now_ms()
    lo, hi, cnt = q1(
        "WITH ins AS (INSERT INTO jobflow.tasks (url, run_at)"
        " SELECT " + url_sql(tag, "%(due)s", scheme) + ", pg_catalog.to_timestamp(%(due)s / 1000.0)"
        "   FROM generate_series(1, %(n)s) RETURNING id)"
        " SELECT min(id), max(id), count(*) FROM ins",
        {"due": due, "n": BURST_TASKS})
    committed = now_ms()
    progress("%s: %d tasks inserted in %d ms, due %d ms after commit (caps %d/%d)"
             % (tag, cnt, committed - t0, due - committed, max_conc, per_host))
    perf = None
    if do_perf:
        perf_path = os.path.join(NGINX_DIR, "perf.data")
        time.sleep(max(0, (due - now_ms() - 300) / 1000.0))
        perf = perf_start(pid, perf_path)
    # final = outcomes of every task written and committed (counters are bumped after commit)
    deadline = time.time() + 120
    observed = None
    while time.time() < deadline:
        s = status()
        done = (s["succeeded"] - s0["succeeded"]) + (s["failed"] - s0["failed"])
        tried = done + s["retried"] - s0["retried"]
        if (done >= cnt and s["flushed_rows"] - s0["flushed_rows"] >= tried
                and s["buffered_rows"] == 0 and s["in_flight"] == 0 and s["queued"] == 0):
            observed = now_ms()
            break
        time.sleep(0.01)
    if perf is not None:
        perf_stop(perf, perf_path)
    s1 = status()
    cpu1 = cpu_seconds(pid)
    phases1 = phase_seconds()
    states = wait_final(lo, hi, cnt, 30)
    max_upd = q1("SELECT (extract(epoch FROM max(updated_at)) * 1000)::bigint"
                 "  FROM jobflow.tasks WHERE id BETWEEN %s AND %s", (lo, hi))[0]
    entries = access.wait(tag, cnt, 15)
    arrivals = sorted(e[0] for e in entries)
    ids = {e[2] for e in entries}
    span = arrivals[-1] - arrivals[0] if arrivals else 0
    fired = s1["fired"] - s0["fired"]
    stmts = s1["statements"] - s0["statements"]
    flushes = s1["flushes"] - s0["flushes"]
    flushed = s1["flushed_rows"] - s0["flushed_rows"]
    pg = pgss_worker()
    errors = q("SELECT outcome, coalesce(http_status::text, '-'), left(coalesce(error, '-'), 70), count(*)"
               "  FROM jobflow.task_log WHERE task_id BETWEEN %s AND %s AND outcome <> 'succeeded'"
               " GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 6", (lo, hi))
    return dict(conn_figures(entries), **{
        "scheme": scheme,
        "errors": errors,
        "caps": "%d/%d" % (max_conc, per_host),
        "nofile": nofile,
        "insert_ms": committed - t0,
        "lead_ms": due - committed,
        "arrived": len(entries),
        "distinct": len(ids),
        "conns": len({e[5] for e in entries}),
        "non200": sum(1 for e in entries if e[4] != "200"),
        "first": arrivals[0] - due if arrivals else None,
        "last": arrivals[-1] - due if arrivals else None,
        "rate": round(len(arrivals) / (max(span, 1) / 1000.0)) if arrivals else None,
        "final_ms": observed - due if observed else None,
        "final_upd_ms": max_upd - due if max_upd else None,
        "succeeded": states["succeeded"],
        "statements": stmts,
        "stmt_per_cb": stmts / fired if fired else None,
        "rows_per_flush": flushed / flushes if flushes else None,
        "flushes": flushes,
        "fired": fired,
        "retried": s1["retried"] - s0["retried"],
        "pgss_stmts": sum(r[0] for r in pg) if pg is not None else "n/a",
        "pgss": pg,
        "cpu_us_per_cb": round((cpu1 - cpu0) * 1e6 / fired) if fired else None,
        "cpu_s": cpu1 - cpu0,
        "phases": {k: phases1[k] - phases0[k] for k in phases1} if phases1 and phases0 else None,
    })


def phase_seconds():
    """The worker's own clocks (jobflow.stats): time in claim statements,
    in outcome-write transactions, and in loop turns (waiting excluded)."""
    if q1("SELECT to_regclass('jobflow.stats')")[0] is None:
        return None         # an older build (0.1.0): no clocks of its own
    rows = q("SELECT metric, value FROM jobflow.stats WHERE metric IN"
             " ('claim_duration_seconds_sum', 'flush_duration_seconds_sum', 'loop_turn_seconds_sum')")
    got = {r[0].split("_")[0]: r[1] for r in rows}
    return {"claim": got.get("claim", 0.0), "flush": got.get("flush", 0.0), "turn": got.get("loop", 0.0)}


def http_alone(conc, scheme="http"):
    """The same-run baseline of W2: jobflow's HTTP layer (src/http/, built
    into bench/bench_http by dispatcher.sh) sending BURST_TASKS requests to
    the same nginx at the same concurrency, with no database.  What W2 runs
    slower than this is the worker's loop and SPI; requests/s and its CPU
    time per request (user + system, from rusage)."""
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_http")
    if not os.access(exe, os.X_OK):
        return None
    import resource
    args = [exe, str(BURST_TASKS), str(conc), base_url(scheme) + "/http-alone/" + scheme]
    if scheme != "http":
        args.append(CA_FILE)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(args, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"(\d+) requests/s", out.stdout)
    ok = re.search(r"(\d+) ok, (\d+) failed", out.stdout)
    if out.returncode != 0 or m is None or ok is None:
        print("bench_http failed: %s %s" % (out.stdout.strip(), out.stderr.strip()))
        return None
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"rate": int(m.group(1)), "ok": int(ok.group(1)), "failed": int(ok.group(2)),
            "cpu_us": round(cpu * 1e6 / BURST_TASKS)}


def run_burst(when):
    # each run its own tags: arrivals are counted by tag in nginx's log
    run_burst.runs = getattr(run_burst, "runs", 0) + 1
    prefix = "burst-" if run_burst.runs == 1 else "burst%d-" % run_burst.runs
    results = []
    for i, (mc, ph) in enumerate(BURST_CONFIGS):
        results.append(burst("%s%d" % (prefix, i + 1), mc, ph, PERF and run_burst.runs == 1 and i == 0))
        RESULTS["burst"].append({k: results[-1][k] for k in
                                 ("caps", "rate", "arrived", "succeeded", "retried", "stmt_per_cb",
                                  "cpu_us_per_cb", "final_ms", "conns", "new_conns")})
        RESULTS["burst"][-1]["when"] = when
        time.sleep(1)
    q("ALTER SYSTEM RESET jobflow.max_concurrent_requests")
    q("ALTER SYSTEM RESET jobflow.max_requests_per_host")
    q("SELECT pg_reload_conf()")

    rows = [[r["caps"], r["nofile"], BURST_TASKS, r["arrived"], r["distinct"], r["conns"], r["new_conns"],
             r["non200"],
             r["first"], r["last"], r["rate"], r["final_ms"], r["final_upd_ms"],
             r["succeeded"], r["retried"]] for r in results]
    rows.append(["[goal]", "", "", "", "20000", "", "", "0", "", "", ">=25000", "", "", "20000", ""])
    table("2. Burst %s: %d tasks due at the same instant (task_log written for each)" % (when, BURST_TASKS),
          ["caps conc/host", "fd limit", "tasks", "arrived", "distinct", "conns", "new", "non-200", "first ms",
           "last ms", "cb/s", "all final ms", "max upd ms", "succeeded", "retried"],
          rows,
          ["first/last ms: arrival of the first/last callback after the due instant;"
           " cb/s = arrivals / (last - first); conns: distinct nginx connections used,"
           " new: those first seen in this burst",
           "all final ms: due -> worker_status() shows every outcome flushed (polled every 10 ms);"
           " max upd ms: due -> latest updated_at",
           "inserts: " + ", ".join("%d ms (due %d ms after commit)" % (r["insert_ms"], r["lead_ms"])
                                   for r in results)])

    rows = [[r["caps"], r["fired"], r["statements"], r["stmt_per_cb"], r["pgss_stmts"],
             r["pgss_stmts"] / r["fired"] if r["fired"] and r["pgss"] is not None else "n/a", r["flushes"],
             r["rows_per_flush"], r["cpu_s"], r["cpu_us_per_cb"]] for r in results]
    rows.append(["[goal]", "", "", "<=0.01", "", "<=0.01", "", "", "", ""])
    table("3. Statements written per callback during the burst %s" % when,
          ["caps conc/host", "fired", "statements", "stmt/cb", "pgss stmts", "pgss/cb",
           "flushes", "rows/flush", "worker cpu s", "cpu us/cb"], rows,
          ["statements, fired, flushes, rows: deltas of jobflow.worker_status();"
           " pgss: the worker's statements in pg_stat_statements"])

    def per_cb(r, seconds):
        return round(seconds * 1e6 / r["fired"]) if r["fired"] else None
    rows = []
    for r in results:
        ph = r["phases"]
        if ph is None:
            rows.append([r["caps"], per_cb(r, r["cpu_s"]), "n/a", "n/a", "n/a", "n/a"])
            continue
        rest = ph["turn"] - ph["claim"] - ph["flush"]
        rows.append([r["caps"], per_cb(r, r["cpu_s"]), per_cb(r, ph["turn"]), per_cb(r, ph["claim"]),
                     per_cb(r, ph["flush"]), per_cb(r, rest)])
    table("3b. The worker's time per callback by phase during the burst %s (us)" % when,
          ["caps conc/host", "cpu", "in turns", "claim", "outcome write", "rest of the turns"], rows,
          ["cpu: the worker process's user+system time; the others are its own clocks"
           " (jobflow.stats sums), waiting excluded, so they include waits for fsync",
           "claim: the claim statement; outcome write: each flush's transaction;"
           " rest: libcurl (sending, reading replies), parking, loading, the loop itself"])
    # the same run's baseline: the HTTP layer alone, right after the bursts
    rows = []
    for (mc, ph), r in zip(BURST_CONFIGS, results):
        alone = http_alone(ph)
        if alone is None:
            continue
        rows.append([r["caps"], ph, alone["ok"], alone["rate"], alone["cpu_us"], r["rate"],
                     r["cpu_us_per_cb"],
                     round(r["rate"] / alone["rate"], 2) if r["rate"] and alone["rate"] else None])
    if rows:
        table("3c. Same-run baseline %s: jobflow's HTTP layer alone (bench/bench_http, no database)"
              " against the same nginx" % when,
              ["caps conc/host", "concurrency", "ok", "req/s alone", "cpu us/req", "W2 cb/s",
               "W2 worker cpu us/cb", "W2 / alone"], rows,
              ["alone: src/http.c (libcurl multi) in a plain process, %d requests kept"
               " `concurrency` at a time; its CPU is user+system from rusage" % BURST_TASKS,
               "W2 / alone: what the worker's loop, claims and outcome writes leave of the HTTP"
               " layer's own rate"])
    for r in results:
        for outcome, st, err, c in r["errors"]:
            print("  caps %s: %d attempt(s) %s, status %s: %s" % (r["caps"], c, outcome, st, err))
    for r in results:
        if r["pgss"] is None:
            continue
        print("\npg_stat_statements, worker statements during burst with caps %s:" % r["caps"])
        print("  %8s %10s %8s  %s" % ("calls", "total ms", "rows", "query"))
        for c, t, n, text in r["pgss"]:
            print("  %8d %10s %8d  %s" % (c, t, n, text))
    sys.stdout.flush()


def run_big(idle_fresh):
    """Memory with N_BIG pending tasks, insert cost, and worker load time."""
    s = status()
    idle = mem(s["pid"])
    idle_bytes = s["wheel_bytes"]
    span_ms = 50 * 60 * 1000
    start = now_ms() + 5 * 60 * 1000
    src = ("SELECT " + url_sql("big", "d") + " AS url, pg_catalog.to_timestamp(d / 1000.0) AS run_at,"
           " 'postgres'::regrole AS owner"
           "  FROM (SELECT %(start)s + i * %(span)s / %(n)s AS d"
           "          FROM generate_series(0, %(n)s - 1::bigint) i) s")
    args = {"start": start, "span": span_ms, "n": N_BIG}

    timings = []
    for name, ddl in (("plain copy, no indexes",
                       "CREATE TABLE public.bench_plain (LIKE jobflow.tasks INCLUDING DEFAULTS)"),
                      ("plain copy with its indexes",
                       "CREATE TABLE public.bench_plain_idx (LIKE jobflow.tasks INCLUDING DEFAULTS"
                       " INCLUDING INDEXES)")):
        q(ddl)
        tbl = ddl.split()[2]
        q("CHECKPOINT")
        t0 = time.time()
        q("INSERT INTO " + tbl + " (url, run_at, owner) " + src, args)
        timings.append((name, time.time() - t0))
        progress("%s: %.2f s" % (name, timings[-1][1]))
        q("DROP TABLE " + tbl)

    q("CHECKPOINT")
    t0 = time.time()
    q("INSERT INTO jobflow.tasks (url, run_at, owner) " + src, args)
    committed = time.time()
    timings.append(("jobflow.tasks (row check + notify trigger)", committed - t0))
    progress("jobflow.tasks: %.2f s" % timings[-1][1])
    # tasks due soon are announced by NOTIFY, the others loaded by the
    # horizon scans: wait a little for whatever the worker loads now
    deadline = time.time() + 15
    while status()["wheel_tasks"] < N_BIG and time.time() < deadline:
        time.sleep(0.05)
    s = status()
    notified_load = time.time() - committed if s["wheel_tasks"] >= N_BIG else None
    time.sleep(1)
    s = status()
    loaded = mem(s["pid"])
    loaded_bytes = s["wheel_bytes"]
    loaded_tasks = s["wheel_tasks"]

    # restart: SIGTERM, the postmaster starts a new worker after 1 s
    old = s["pid"]
    with open(CLUSTER_LOG, "rb") as f:
        f.seek(0, 2)
        log_pos = f.tell()
    t_kill = now_ms()
    q("SELECT pg_terminate_backend(%s)", (old,))
    # worker_status().wheel_tasks keeps the old worker's figure until the
    # new one publishes, so the start is timed by the new worker's log line
    pat = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC \[(\d+)\] .*"
                     r"jobflow worker started in database .* with (\d+) task")
    log_ms = None
    log_count = None
    observed = None
    deadline = time.time() + 300
    while log_ms is None and time.time() < deadline:
        time.sleep(0.02)
        with open(CLUSTER_LOG, "rb") as f:
            f.seek(log_pos)
            for line in f.read().decode("utf-8", "replace").splitlines():
                m = pat.match(line)
                if m:
                    observed = now_ms()
                    log_ms = int(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
                                 .replace(tzinfo=timezone.utc).timestamp() * 1000 + 0.5)
                    log_count = int(m.group(3))
    time.sleep(1)
    s = status()
    new_pid = s["pid"]
    started = s["started_ms"]
    reloaded = mem(new_pid)

    def mb(kb):
        return round(kb / 1024.0, 1)

    rows = []
    for name, m, wb, wt in (("fresh worker, idle", idle_fresh[0], idle_fresh[1], 0),
                            ("idle before the load (after bursts)", idle, idle_bytes, 0),
                            ("%d pending, after the INSERT" % N_BIG, loaded, loaded_bytes, loaded_tasks),
                            ("%d pending, after restart" % N_BIG, reloaded, s["wheel_bytes"],
                             s["wheel_tasks"])):
        rows.append([name, wt, mb(m["VmRSS"]), mb(m["RssAnon"]), mb(m["Pss"]),
                     mb(m.get("Pss_Anon", 0)), mb(wb / 1024.0),
                     mb(m["VmRSS"] - idle["VmRSS"]), mb(m["Pss"] - idle["Pss"])])
    rows.append(["[goal]", "", "", "", "", "", "", "<=64 over idle", ""])
    table("4. Worker memory (MB); tasks spread over 5..55 min ahead (default 1 h horizon)",
          ["state", "wheel tasks", "VmRSS", "RssAnon", "Pss", "Pss_Anon", "wheel_bytes",
           "RSS-idle", "Pss-idle"], rows,
          ["idle = the worker before the load; RSS counts the shared_buffers pages the worker"
           " touched, RssAnon/Pss_Anon its private memory"])

    plain = timings[0][1]
    rows = [[name, round(t, 2), round(t / plain, 2), round(N_BIG / t)] for name, t in timings]
    rows.append(["[goal]", "", "~1", ""])
    table("5a. INSERT ... SELECT of %d tasks (one statement, CHECKPOINT before each)" % N_BIG,
          ["target", "seconds", "x plain", "rows/s"], rows)

    rows = [["started_at -> 'worker started ... with N task(s)' log line",
             log_ms - started if log_ms else None],
            ["started_at -> log line seen by the benchmark (polled, 20 ms)",
             observed - started if observed else None],
            ["pg_terminate_backend -> new worker's started_at", started - t_kill],
            ["INSERT commit -> wheel_tasks = %d (running worker, waited <= 15 s)" % N_BIG,
             round(notified_load * 1000) if notified_load is not None else None],
            ["[goal] load", "<=3000"]]
    table("5b. Load time of a (re)starting worker (ms); log line says %s task(s)" % log_count,
          ["what", "ms"], rows)
    q("TRUNCATE jobflow.tasks, jobflow.task_log")


def main():
    t_start = time.time()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    head = os.environ.get("BENCH_COMMIT")
    dirty = ""
    if not head:
        head = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%h %s"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no",
                                "src", "sql", "jobflow--0.1.0.sql"],
                               capture_output=True, text=True).stdout.strip()
    progress("jobflow at %s%s" % (head, " (+ uncommitted changes)" if dirty else ""))
    s = wait_for_worker()
    time.sleep(0.5)
    s = status()
    idle_fresh = (mem(s["pid"]), s["wheel_bytes"])
    progress("worker pid %d; nginx 127.0.0.1:%d" % (s["pid"], PORT))
    done = []
    for phase in PHASES:
        if phase == "steady":
            run_steady()
        elif phase == "burst":
            run_burst("after " + ", ".join(done) if done else "on a fresh cluster")
        elif phase == "big":
            run_big(idle_fresh)
        elif phase == "signing":
            import signing
            signing.run_signing(sys.modules[__name__])
        elif phase == "schemes":
            import schemes
            schemes.run_schemes(sys.modules[__name__])
        elif phase == "ceiling":
            import ceiling
            ceiling.run_ceiling(sys.modules[__name__])
        elif phase == "isolation":
            import isolation
            isolation.run_isolation(sys.modules[__name__], int(os.environ.get("BENCH_ISO_SECONDS", "10")))
        else:
            sys.exit("unknown phase %r (BENCH_PHASES)" % phase)
        done.append(phase)
    with open(os.path.join(NGINX_DIR, "error.log")) as f:
        errs = f.read().splitlines()
    if errs:
        print("\nnginx error.log (%d lines, last 5):" % len(errs))
        print("\n".join(errs[-5:]))
    print("\n==================== summary (%.0f s) ====================" % (time.time() - t_start))
    print("jobflow at %s%s" % (head, " (+ uncommitted changes)" if dirty else ""))
    for t in tables:
        print(t)
    if os.environ.get("BENCH_JSON"):
        RESULTS["commit"] = head
        with open(os.environ["BENCH_JSON"], "w") as f:
            json.dump(RESULTS, f, indent=1)
    hold = int(os.environ.get("BENCH_HOLD", "0"))
    if hold > 0:
        progress("holding the cluster and nginx for %d s (BENCH_HOLD)" % hold)
        time.sleep(hold)


if __name__ == "__main__":
    main()
