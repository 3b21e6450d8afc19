#!/usr/bin/python3
# -------------------------------------------------------------------------
#
# indexes.py
#     Run by bench/indexes.sh: what the partial indexes of running and of
#     failed tasks (tasks_running, tasks_failed_queue) cost the dispatcher.
#     Every claim (pending -> running) adds an entry to tasks_running and
#     every dead letter (-> failed) one to tasks_failed_queue.
#
#     In rounds that alternate the order (with without bare, then bare
#     without with, ...), for the schema as installed ("with"), with both
#     indexes dropped ("without"), and with tasks_running's predicate as
#     first written, state = 'running' alone ("bare": the same entries, but
#     the worker's outcome write implies the predicate, and its generic
#     plan may read the whole index at every flush: what the "AND owner IS
#     NOT NULL" of the schema avoids), each run after a VACUUM ANALYZE and a CHECKPOINT
#     (autovacuum is off: the same starting point for every run, and every
#     run pays the same full-page images):
#       W1   100 tasks/s for 20 s, one INSERT ... SELECT 3 s ahead: lateness
#            at the receiver (nginx's $msec - due ms in the URL)
#       W2   20,000 tasks due at one instant, default caps: callbacks/s from
#            first to last arrival
#       W2f  W2 with every tenth callback answered 404 (max_attempts 1): 2,000
#            dead letters per run, entries of tasks_failed_queue
#     and for each, the WAL written from the INSERT's commit until every
#     outcome is written (pg_current_wal_lsn), per callback, with the B-tree
#     share of it (pg_waldump --stats over the same range).  Prints each
#     run, then the medians side by side and with / without.
#
#     Uses bench/dispatcher.py's helpers (connection, nginx's access log,
#     worker_status(), tables).  INDEXES_ROUNDS (default 4), INDEXES_VARIANTS
#     (default with,without,bare).
#
# -------------------------------------------------------------------------

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dispatcher as b          # noqa: E402  (connects, reads the environment)
from schemes import median          # noqa: E402

ROUNDS = int(os.environ.get("INDEXES_ROUNDS", "4"))
# with: the schema as installed; without: both indexes dropped; bare:
# tasks_running as first written, WHERE state = 'running' alone, which the
# worker's outcome write implies (see bench/README.md)
VARIANTS = [v for v in os.environ.get("INDEXES_VARIANTS", "with,without,bare").split(",") if v]
if not VARIANTS or any(v not in ("with", "without", "bare") for v in VARIANTS):
    sys.exit("INDEXES_VARIANTS: a comma list of with, without, bare")
INDEXES = ("tasks_running", "tasks_failed_queue")
W2_TASKS = b.BURST_TASKS
FAIL_EVERY = 10                 # W2f: every tenth callback is answered 404
PGDATA = os.environ["JOBFLOW_PGDATA"]
PGBIN = os.environ["JOBFLOW_PGBIN"]
RUN_USER = os.environ.get("JOBFLOW_RUN_USER", "")


def ratio(a, c):
    return round(a / c, 3) if a is not None and c else None


def lsn():
    return b.q1("SELECT pg_current_wal_lsn()")[0]


def lsn_bytes(lo, hi):
    return int(b.q1("SELECT pg_wal_lsn_diff(%s, %s)", (hi, lo))[0])


def waldump_stats(lo, hi):
    """Bytes (records and full-page images) by resource manager between two
    LSNs, from pg_waldump --stats, run as the server's user (pg_wal is its
    own); None when it cannot be read."""
    cmd = [os.path.join(PGBIN, "pg_waldump"), "-p", os.path.join(PGDATA, "pg_wal"),
           "-s", lo, "-e", hi, "--stats"]
    if os.getuid() == 0 and RUN_USER:
        cmd = ["runuser", "-u", RUN_USER, "--"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True)
    got = {}
    # "Btree   123 ( 4.5)   4567 ( 1.2)   0 ( 0.0)   4567 ( 1.2)": count,
    # record bytes, FPI bytes, combined bytes
    for line in out.stdout.splitlines():
        m = re.match(r"^(\w[\w/]*)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)"
                     r"\s+\(\s*[\d.]+\)\s+(\d+)", line)
        if m and m.group(1) != "Total":
            got[m.group(1)] = {"count": int(m.group(2)), "rec": int(m.group(3)),
                               "fpi": int(m.group(4)), "bytes": int(m.group(5))}
    return got or None


def own_pids():
    """The processes of this benchmark: the cluster's (the postmaster and
    its children), nginx's (master and worker) and this one."""
    roots = set()
    for path in (os.path.join(PGDATA, "postmaster.pid"), os.path.join(b.NGINX_DIR, "nginx.pid")):
        try:
            with open(path) as f:
                roots.add(int(f.readline()))
        except (OSError, ValueError):
            pass
    pids = {os.getpid()} | roots
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) in roots:
                        pids.add(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            pass
    return total


class Busy:
    """The machine's CPU use over a run (all processes, /proc/stat), the
    part of it that was not this benchmark's (the cluster, nginx, this
    process), and the load average at its start: how noisy the machine was."""

    def __init__(self):
        self.pids = own_pids()
        self.own0 = cpu_ticks(self.pids)
        self.t0 = self.read()
        with open("/proc/loadavg") as f:
            self.load = float(f.read().split()[0])

    @staticmethod
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v[:8]) - idle, sum(v[:8])

    def figures(self):
        """busy: % of the machine's CPU time (all cores) in use; others: the
        % used by processes not of this benchmark."""
        b1, t1 = self.read()
        own = cpu_ticks(self.pids | own_pids()) - self.own0
        span = max(1, t1 - self.t0[1])
        return {"busy": round(100.0 * (b1 - self.t0[0]) / span),
                "others": max(0, round(100.0 * (b1 - self.t0[0] - own) / span))}


def prepare():
    """Every run starts from the same point: dead rows and index entries of
    the earlier runs vacuumed, statistics fresh, and a checkpoint so that
    no timed one lands inside the run and every run pays the full-page
    images of the pages it is the first to touch."""
    b.q("VACUUM ANALYZE jobflow.tasks")
    b.q("VACUUM ANALYZE jobflow.task_log")
    b.q("CHECKPOINT")


def index_defs():
    return dict(b.q("SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid)"
                    "  FROM pg_index WHERE indrelid = 'jobflow.tasks'::regclass"))


def wanted_defs(variant, defs):
    """The definitions of INDEXES a variant has (None: dropped)."""
    if variant == "without":
        return {n: None for n in INDEXES}
    want = {n: defs["jobflow." + n] for n in INDEXES}
    if variant == "bare":
        # the same entries (owner is never null), but the worker's outcome
        # write implies the predicate: its generic plan may read the index
        want["tasks_running"] = ("CREATE INDEX tasks_running ON jobflow.tasks USING btree"
                                 " (owner, queue) WHERE (state = 'running'::jobflow.task_state)")
    return want


def set_variant(variant, defs):
    have = index_defs()
    for name, want in wanted_defs(variant, defs).items():
        qual = "jobflow." + name
        cur = have.get(qual)
        if cur is not None and cur != want:
            b.q("DROP INDEX " + qual)
            cur = None
        if want is not None and cur is None:
            b.q(want)
            got = index_defs().get(qual)
            if variant == "with" and got != want:
                sys.exit("recreated %s differs: %s" % (qual, got))


def wait_done(s0, n, timeout=120):
    """Until worker_status() shows n outcomes final and written (the
    counters move after the commit); returns the ms it was seen."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = b.status()
        done = (s["succeeded"] - s0["succeeded"]) + (s["failed"] - s0["failed"])
        tried = done + s["retried"] - s0["retried"]
        if (done >= n and s["flushed_rows"] - s0["flushed_rows"] >= tried
                and s["buffered_rows"] == 0 and s["in_flight"] == 0 and s["queued"] == 0):
            return b.now_ms()
        time.sleep(0.01)
    return None


def wal_figures(lo, hi, callbacks):
    total = lsn_bytes(lo, hi)
    st = waldump_stats(lo, hi)
    btree = st.get("Btree") if st else None
    fpi = sum(r["fpi"] for r in st.values()) if st else None
    per = (lambda x: round(x / callbacks) if x is not None and callbacks else None)
    return {"wal_per_cb": per(total), "btree_per_cb": per(btree["bytes"] if btree else None),
            "btree_recs_per_cb": round(btree["count"] / callbacks, 2) if btree and callbacks else None,
            "fpi_per_cb": per(fpi), "wal_mb": round(total / 1048576.0, 1)}


def w1(tag):
    """W1: 100 tasks/s for 20 s, one INSERT ... SELECT committed 3 s ahead."""
    n = b.STEADY_RATE * b.STEADY_SECONDS
    step = 1000 // b.STEADY_RATE
    busy = Busy()
    s0 = b.status()
    base = b.now_ms() + 3000
    lo, hi = b.q1(
        "WITH ins AS (INSERT INTO jobflow.tasks (url, run_at)"
        " SELECT " + b.url_sql(tag, "%(base)s + i * %(step)s") + ","
        "        pg_catalog.to_timestamp((%(base)s + i * %(step)s) / 1000.0)"
        "   FROM generate_series(0, %(n)s - 1) i RETURNING id)"
        " SELECT min(id), max(id) FROM ins",
        {"base": base, "step": step, "n": n})
    l0 = lsn()
    time.sleep(max(0, (base + n * step - b.now_ms()) / 1000.0))
    wait_done(s0, n, 30)
    l1 = lsn()
    states = b.wait_final(lo, hi, n, 30)
    entries = b.access.wait(tag, n, 10)
    r = b.steady_figures(entries)
    r.update(busy.figures())
    r.update(wal_figures(l0, l1, len(entries)))
    r.update({"succeeded": states["succeeded"], "load": busy.load})
    return r


def w2(tag, fail):
    """W2: W2_TASKS due at one instant, 5 s after the INSERT; with fail,
    every FAIL_EVERY-th goes to .../gone (404) with max_attempts 1."""
    busy = Busy()
    s0 = b.status()
    pid = s0["pid"]
    cpu0 = b.cpu_seconds(pid)
    due = b.now_ms() + 5000
    gone = "'%s/cb/%s/gone?due=' || %s::text" % (b.base_url(), tag, due)
    lo, hi = b.q1(
        "WITH ins AS (INSERT INTO jobflow.tasks (url, run_at, max_attempts)"
        " SELECT CASE WHEN %(fail)s AND i %% %(every)s = 0 THEN " + gone +
        "             ELSE " + b.url_sql(tag, "%(due)s") + " END,"
        "        pg_catalog.to_timestamp(%(due)s / 1000.0),"
        "        CASE WHEN %(fail)s AND i %% %(every)s = 0 THEN 1 ELSE 5 END"
        "   FROM generate_series(1, %(n)s) i RETURNING id)"
        " SELECT min(id), max(id) FROM ins",
        {"due": due, "n": W2_TASKS, "fail": fail, "every": FAIL_EVERY})
    l0 = lsn()
    observed = wait_done(s0, W2_TASKS)
    l1 = lsn()
    s1 = b.status()
    cpu1 = b.cpu_seconds(pid)
    row = b.q1("SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'failed')"
               "  FROM jobflow.tasks WHERE id BETWEEN %s AND %s", (lo, hi))
    n_gone = W2_TASKS // FAIL_EVERY if fail else 0
    ok = b.access.wait(tag, W2_TASKS - n_gone, 15)
    bad = b.access.wait(tag + "/gone", n_gone, 15) if fail else []
    arrivals = sorted(e[0] for e in ok + bad)
    span = arrivals[-1] - arrivals[0] if arrivals else 0
    fired = s1["fired"] - s0["fired"]
    r = {"arrived": len(arrivals), "succeeded": row[0], "failed": row[1],
         "n404": sum(1 for e in bad if e[4] == "404"),
         "retried": s1["retried"] - s0["retried"],
         "first": arrivals[0] - due if arrivals else None,
         "last": arrivals[-1] - due if arrivals else None,
         "rate": round(len(arrivals) / (max(span, 1) / 1000.0)) if arrivals else None,
         "final_ms": observed - due if observed else None,
         "cpu_us_per_cb": round((cpu1 - cpu0) * 1e6 / fired) if fired else None,
         "load": busy.load}
    r.update(busy.figures())
    r.update(wal_figures(l0, l1, len(arrivals)))
    return r


def index_sizes():
    return b.q("SELECT c.relname, pg_relation_size(c.oid), coalesce(s.idx_scan, 0)"
               "  FROM pg_class c LEFT JOIN pg_stat_all_indexes s ON s.indexrelid = c.oid"
               " WHERE c.relname = ANY(%s) AND c.relnamespace = 'jobflow'::regnamespace"
               " ORDER BY 1", (list(INDEXES),))


def main():
    t_start = time.time()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    head = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True).stdout.strip()
    b.progress("jobflow at %s; %s" % (head, b.q1("SELECT version()")[0].split(" on ")[0]))
    b.wait_for_worker()
    defs = index_defs()
    missing = [n for n in INDEXES if "jobflow." + n not in defs]
    if missing:
        sys.exit("this build has no index %s on jobflow.tasks: nothing to compare" % ", ".join(missing))
    caps = b.q("SELECT name, setting FROM pg_settings WHERE name IN"
               " ('jobflow.max_concurrent_requests', 'jobflow.max_requests_per_host') ORDER BY 1")
    # the first burst on a fresh cluster runs slower (relations extended,
    # caches cold): one unmeasured W2 of each kind first
    b.progress("warm-up: one unmeasured W2 and W2f")
    prepare()
    w2("warm-up", False)
    prepare()
    w2("warm-up-f", True)

    runs = []
    for i in range(ROUNDS):
        for variant in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            set_variant(variant, defs)
            rnd = i + 1
            for kind in ("w1", "w2", "w2f"):
                prepare()
                tag = "%s-%s-%d" % (kind, variant, rnd)
                b.progress("%s" % tag)
                r = w1(tag) if kind == "w1" else w2(tag, kind == "w2f")
                r.update({"variant": variant, "round": rnd, "kind": kind})
                runs.append(r)
                if kind == "w1":
                    b.progress("  p50 %s p99 %s max %s ms, WAL %s B/cb, machine busy %s%% (others %s%%)"
                               % (r["p50"], r["p99"], r["max"], r["wal_per_cb"], r["busy"], r["others"]))
                else:
                    b.progress("  %s cb/s, all final %s ms, WAL %s B/cb (btree %s), failed %d,"
                               " machine busy %s%% (others %s%%)"
                               % (r["rate"], r["final_ms"], r["wal_per_cb"], r["btree_per_cb"], r["failed"],
                                  r["busy"], r["others"]))
                time.sleep(1)
    set_variant("with", defs)
    sizes = index_sizes()
    plan = b.q("EXPLAIN (COSTS off) UPDATE jobflow.tasks t SET updated_at = now()"
               "  FROM unnest('{1,2}'::bigint[], '{1,1}'::int[]) u(id, attempt)"
               " WHERE t.id = u.id AND t.attempts = u.attempt AND t.state = 'running'")

    def mine(kind, variant=None):
        return [r for r in runs if r["kind"] == kind and (variant is None or r["variant"] == variant)]

    rows = [[r["variant"], r["round"], r["arrived"], r["succeeded"], r["p50"], r["p90"], r["p99"], r["max"],
             r["retried"], r["non200"], r["wal_per_cb"], r["btree_per_cb"], r["fpi_per_cb"], r["load"],
             r["busy"], r["others"]] for r in mine("w1")]
    b.table("I1. W1: %d tasks/s for %d s, one INSERT ... SELECT 3 s ahead; lateness (ms) at the receiver"
            % (b.STEADY_RATE, b.STEADY_SECONDS),
            ["indexes", "round", "arrived", "succeeded", "p50", "p90", "p99", "max", "retried", "non-200",
             "WAL B/cb", "btree B/cb", "FPI B/cb", "load", "busy %", "others %"], rows,
            ["WAL: pg_current_wal_lsn() from the INSERT's commit until every outcome is written, per"
             " arrival; btree, FPI: of that, B-tree records and full-page images (pg_waldump --stats)",
             "load: 1-min load average at the start; busy: the machine's CPU use during the run"
             " (all processes, all cores = 100%); others: of it, processes not of this benchmark"
             " (the cluster, nginx, this script)"])
    for kind, title in (("w2", "I2. W2: %d tasks due at one instant" % W2_TASKS),
                        ("w2f", "I3. W2f: W2 with every %dth callback answered 404 (max_attempts 1:"
                                " %d dead letters per run)" % (FAIL_EVERY, W2_TASKS // FAIL_EVERY))):
        rows = [[r["variant"], r["round"], r["arrived"], r["succeeded"], r["failed"], r["n404"], r["retried"],
                 r["first"], r["last"], r["rate"], r["final_ms"], r["cpu_us_per_cb"], r["wal_per_cb"],
                 r["btree_per_cb"], r["btree_recs_per_cb"], r["fpi_per_cb"], r["wal_mb"], r["load"],
                 r["busy"], r["others"]] for r in mine(kind)]
        b.table(title + ", caps %s" % "/".join(v for _, v in caps),
                ["indexes", "round", "arrived", "succeeded", "failed", "404", "retried", "first ms",
                 "last ms", "cb/s", "all final ms", "cpu us/cb", "WAL B/cb", "btree B/cb", "btree rec/cb",
                 "FPI B/cb", "WAL MB", "load", "busy %", "others %"], rows,
                ["cb/s = arrivals / (last - first); all final: due -> worker_status() shows every"
                 " outcome written; cpu: the worker process's user+system time per callback"])

    def med(kind, variant, key):
        return median([r[key] for r in mine(kind, variant)])

    def spread(kind, variant, key):
        vals = [r[key] for r in mine(kind, variant) if r[key] is not None]
        return "%s..%s" % (min(vals), max(vals)) if vals else None

    figures = [("W2 cb/s", "w2", "rate"), ("W2 all final ms", "w2", "final_ms"),
               ("W2 cpu us/cb", "w2", "cpu_us_per_cb"), ("W2 WAL B/cb", "w2", "wal_per_cb"),
               ("W2 btree B/cb", "w2", "btree_per_cb"),
               ("W2f cb/s", "w2f", "rate"), ("W2f all final ms", "w2f", "final_ms"),
               ("W2f cpu us/cb", "w2f", "cpu_us_per_cb"), ("W2f WAL B/cb", "w2f", "wal_per_cb"),
               ("W2f btree B/cb", "w2f", "btree_per_cb"),
               ("W1 p50 ms", "w1", "p50"), ("W1 p99 ms", "w1", "p99"), ("W1 max ms", "w1", "max"),
               ("W1 WAL B/cb", "w1", "wal_per_cb")]
    others = [v for v in VARIANTS if v != "without"]
    base = "without" if "without" in VARIANTS else None
    rows = []
    for name, kind, key in figures:
        m = {v: med(kind, v, key) for v in VARIANTS}
        rows.append([name] + [m[v] for v in VARIANTS]
                    + ([ratio(m[v], m[base]) for v in others] if base else [])
                    + [spread(kind, v, key) for v in VARIANTS])
    b.table("I. Partial indexes of running and failed tasks: medians of %d rounds" % ROUNDS,
            ["figure"] + VARIANTS + (["%s / without" % v for v in others] if base else [])
            + ["%s: range" % v for v in VARIANTS], rows,
            ["with: the schema as installed (tasks_running WHERE state = 'running' AND owner IS"
             " NOT NULL); without: tasks_running and tasks_failed_queue dropped; bare:"
             " tasks_running WHERE state = 'running' alone, which the worker's outcome write implies",
             "rounds alternate the order; VACUUM ANALYZE and CHECKPOINT before each run",
             "a ratio above 1 is a cost for lateness, time, CPU and WAL; below 1 for cb/s;"
             " range: the lowest and highest run, to compare with the difference of the medians"])
    busy = [r["busy"] for r in runs]
    others = [r["others"] for r in runs]
    loads = [r["load"] for r in runs]
    print("\nmachine during the runs: busy %d..%d%% (median %s), of it not this benchmark's %d..%d%%"
          " (median %s), 1-min load %.2f..%.2f"
          % (min(busy), max(busy), median(busy), min(others), max(others), median(others),
             min(loads), max(loads)))
    for name, size, scans in sizes:
        print("%s: %d kB after the runs (recreated by the last 'with' or as installed), %d index scans"
              % (name, size // 1024, scans))
    print("\nthe plan of the worker's outcome write (its WHERE clause) with the indexes as installed:")
    print("\n".join("  " + r[0] for r in plan))
    print("\n%.0f s in all" % (time.time() - t_start))


if __name__ == "__main__":
    main()
