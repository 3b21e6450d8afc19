#!/usr/bin/python3
# -------------------------------------------------------------------------
#
# ab.py
#     Run by bench/ab.sh: two builds of jobflow, each in its own cluster,
#     measured by the same workloads in one sitting, side by side.
#
#     In rounds that alternate the order (a b, then b a, ...), on one
#     cluster after the other, each run after a VACUUM ANALYZE and a
#     CHECKPOINT (autovacuum is off), the workloads of bench/indexes.py:
#       W1   100 tasks/s for 20 s, one INSERT ... SELECT 3 s ahead: lateness
#            at the receiver (nginx's $msec - due ms in the URL)
#       W2   20,000 tasks due at one instant, default caps: callbacks/s from
#            first to last arrival, time until every outcome is written
#       W2f  W2 with every tenth callback answered 404 (max_attempts 1)
#       W2c  (when asked for) one occurrence of each of 20,000 cron timers,
#            due at one instant: tasks with cron_id and cron_at
#     and for each, the WAL written from the INSERT's commit until every
#     outcome is written, per callback (pg_current_wal_lsn, pg_waldump
#     --stats), the worker's CPU per callback, its statements per callback
#     and its own clocks per callback (jobflow.stats: claim statements,
#     outcome writes), and how busy the machine was.  Prints each run, then
#     the medians side by side, b / a, and each build's range.
#
#     AB_ROUNDS (default 3), AB_KINDS (default w1,w2,w2f; w2c too when
#     asked), AB_JSON (also write every run to that file), AB_SQL_A and
#     AB_SQL_B (run on that build's cluster before anything else: an index
#     dropped, say).
#
# -------------------------------------------------------------------------

import json
import os
import subprocess
import sys
import time

import psycopg2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dispatcher as b          # noqa: E402  (connects to a, reads the environment)
import indexes as ix            # noqa: E402  (the workloads and their figures)
from schemes import median      # noqa: E402

ROUNDS = int(os.environ.get("AB_ROUNDS", "3"))
KINDS = [k for k in os.environ.get("AB_KINDS", "w1,w2,w2f").split(",") if k]
if not KINDS or any(k not in ("w1", "w2", "w2f", "w2c") for k in KINDS):
    sys.exit("AB_KINDS: a comma list of w1, w2, w2f, w2c")
BUILDS = ("a", "b")
LABEL = {x: os.environ.get("AB_LABEL_" + x.upper(), x) for x in BUILDS}
CLUSTER = {x: {"dir": os.environ["AB_DIR_" + x.upper()], "bin": os.environ["AB_BIN_" + x.upper()],
               "port": int(os.environ["AB_PORT_" + x.upper()])} for x in BUILDS}
for x in BUILDS:
    CLUSTER[x]["db"] = psycopg2.connect(host=os.path.join(CLUSTER[x]["dir"], "sock"),
                                        port=CLUSTER[x]["port"], dbname="jobflow")
    CLUSTER[x]["db"].autocommit = True


def use(x):
    """Point the helpers of dispatcher.py and indexes.py at build x's cluster."""
    b.db = CLUSTER[x]["db"]
    ix.PGDATA = os.path.join(CLUSTER[x]["dir"], "data")
    ix.PGBIN = CLUSTER[x]["bin"]


def own_pids():
    """The processes of this benchmark: both clusters' (the idle one is
    ours too), nginx's and this one."""
    keep = ix.PGDATA
    pids = set()
    try:
        for x in BUILDS:
            ix.PGDATA = os.path.join(CLUSTER[x]["dir"], "data")
            pids |= OWN_PIDS()
    finally:
        ix.PGDATA = keep
    return pids


OWN_PIDS = ix.own_pids
ix.own_pids = own_pids          # what indexes.Busy counts as the benchmark's own


def pgss_reset():
    if b.has_pgss():
        b.q("SELECT pg_stat_statements_reset()")


def cron_timers():
    """W2c's timers: ix.W2_TASKS of them, inactive (the worker makes no
    occurrence of its own), made once per cluster."""
    b.q("INSERT INTO jobflow.cron_timers (name, owner, schedule, url, active, next_at)"
        " SELECT 'ab-' || i, current_user::regrole, '0 0 1 1 *', %s, false, NULL"
        "   FROM generate_series(1, %s) i ON CONFLICT DO NOTHING",
        (b.base_url() + "/cb/unused", ix.W2_TASKS))


def w2c(tag):
    """W2c: one occurrence of each of ix.W2_TASKS cron timers, all due at one
    instant (every customer's report at midnight), as the worker's cron
    would insert them: cron_id and cron_at set."""
    cron_timers()
    busy = ix.Busy()
    s0 = b.status()
    cpu0 = b.cpu_seconds(s0["pid"])
    due = b.now_ms() + 5000
    lo, hi = b.q1(
        "WITH ins AS (INSERT INTO jobflow.tasks (url, run_at, cron_id, cron_at)"
        " SELECT " + b.url_sql(tag, "%(due)s") + ", pg_catalog.to_timestamp(%(due)s / 1000.0),"
        "        c, pg_catalog.to_timestamp(%(due)s / 1000.0)"
        "   FROM (SELECT id FROM jobflow.cron_timers WHERE name LIKE 'ab-%%') c(c) RETURNING id)"
        " SELECT min(id), max(id) FROM ins", {"due": due})
    l0 = ix.lsn()
    observed = ix.wait_done(s0, ix.W2_TASKS)
    l1 = ix.lsn()
    s1 = b.status()
    cpu1 = b.cpu_seconds(s0["pid"])
    row = b.q1("SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*) FILTER (WHERE state = 'failed')"
               "  FROM jobflow.tasks WHERE id BETWEEN %s AND %s", (lo, hi))
    arrivals = sorted(e[0] for e in b.access.wait(tag, ix.W2_TASKS, 15))
    span = arrivals[-1] - arrivals[0] if arrivals else 0
    fired = s1["fired"] - s0["fired"]
    r = {"arrived": len(arrivals), "succeeded": row[0], "failed": row[1],
         "retried": s1["retried"] - s0["retried"],
         "first": arrivals[0] - due if arrivals else None,
         "last": arrivals[-1] - due if arrivals else None,
         "rate": round(len(arrivals) / (max(span, 1) / 1000.0)) if arrivals else None,
         "final_ms": observed - due if observed else None,
         "cpu_us_per_cb": round((cpu1 - cpu0) * 1e6 / fired) if fired else None,
         "load": busy.load}
    r.update(busy.figures())
    r.update(ix.wal_figures(l0, l1, len(arrivals)))
    return r


def run(kind, tag):
    """One run of kind on the current cluster, with the worker's CPU,
    statements and clocks per callback around it."""
    s0 = b.status()
    p0 = b.phase_seconds()
    cpu0 = b.cpu_seconds(s0["pid"])
    if kind == "w1":
        r = ix.w1(tag)
    elif kind == "w2c":
        r = w2c(tag)
    else:
        r = ix.w2(tag, kind == "w2f")
    time.sleep(0.5)             # the clocks are published at the end of a turn
    s1 = b.status()
    p1 = b.phase_seconds()
    fired = s1["fired"] - s0["fired"]
    per = (lambda v: round(v * 1e6 / fired) if fired and v is not None else None)
    if kind == "w1":
        r["cpu_us_per_cb"] = per(b.cpu_seconds(s0["pid"]) - cpu0)
    r["fired"] = fired
    r["stmt_per_cb"] = round((s1["statements"] - s0["statements"]) / fired, 4) if fired else None
    r["claim_us_per_cb"] = per(p1["claim"] - p0["claim"]) if p0 and p1 else None
    r["flush_us_per_cb"] = per(p1["flush"] - p0["flush"]) if p0 and p1 else None
    return r


def pgss_top():
    """The worker's statements in pg_stat_statements: calls, ms in all, ms per call."""
    if not b.has_pgss():
        return []
    return b.q("SELECT calls, round(total_exec_time::numeric, 1),"
               " round((total_exec_time / greatest(calls, 1))::numeric, 3),"
               " regexp_replace(left(query, 70), '\\s+', ' ', 'g')"
               "  FROM pg_stat_statements"
               " WHERE query ~ '^(UPDATE jobflow\\.tasks t|INSERT INTO jobflow\\.task_log"
               "|SELECT id, run_at|SELECT t\\.id, t\\.run_at|WITH )'"
               " ORDER BY total_exec_time DESC LIMIT 8")


def main():
    t_start = time.time()
    for x in BUILDS:
        use(x)
        b.wait_for_worker()
        b.progress("%s (%s): %s, jobflow %s" % (
            x, LABEL[x], b.q1("SELECT version()")[0].split(" on ")[0],
            b.q1("SELECT extversion FROM pg_extension WHERE extname = 'jobflow'")[0]))
    # what a build's cluster is to have before the runs (an index dropped, a
    # setting): AB_SQL_A, AB_SQL_B
    for x in BUILDS:
        sql = os.environ.get("AB_SQL_" + x.upper(), "")
        if sql:
            use(x)
            b.progress("%s: %s" % (x, sql))
            b.q(sql)
    # the first burst on a fresh cluster runs slower (relations extended,
    # caches cold): one unmeasured W2 and W2f on each
    for x in BUILDS:
        use(x)
        b.progress("%s: warm-up, one unmeasured W2 and W2f" % x)
        ix.prepare()
        ix.w2("warm-up-" + x, False)
        ix.prepare()
        ix.w2("warm-up-f-" + x, True)
        if "w2c" in KINDS:
            ix.prepare()
            w2c("warm-up-c-" + x)
        pgss_reset()

    runs = []
    for i in range(ROUNDS):
        for x in (BUILDS if i % 2 == 0 else BUILDS[::-1]):
            use(x)
            rnd = i + 1
            for kind in KINDS:
                ix.prepare()
                tag = "%s-%s-%d" % (kind, x, rnd)
                b.progress(tag)
                r = run(kind, tag)
                r.update({"build": x, "round": rnd, "kind": kind})
                runs.append(r)
                if kind == "w1":
                    b.progress("  p50 %s p99 %s max %s ms, cpu %s us/cb, WAL %s B/cb, busy %s%% (others %s%%)"
                               % (r["p50"], r["p99"], r["max"], r["cpu_us_per_cb"], r["wal_per_cb"],
                                  r["busy"], r["others"]))
                else:
                    b.progress("  %s cb/s, all final %s ms, cpu %s us/cb (claim %s, flush %s), WAL %s B/cb,"
                               " busy %s%% (others %s%%)"
                               % (r["rate"], r["final_ms"], r["cpu_us_per_cb"], r["claim_us_per_cb"],
                                  r["flush_us_per_cb"], r["wal_per_cb"], r["busy"], r["others"]))
                time.sleep(1)

    if os.environ.get("AB_JSON"):
        with open(os.environ["AB_JSON"], "w") as f:
            json.dump({"labels": LABEL, "runs": runs}, f, indent=1)

    def mine(kind, x=None):
        return [r for r in runs if r["kind"] == kind and (x is None or r["build"] == x)]

    if "w1" in KINDS:
        rows = [[LABEL[r["build"]], r["round"], r["arrived"], r["succeeded"], r["p50"], r["p90"], r["p99"],
                 r["max"], r["retried"], r["non200"], r["cpu_us_per_cb"], r["stmt_per_cb"], r["wal_per_cb"],
                 r["load"], r["busy"], r["others"]] for r in mine("w1")]
        b.table("A1. W1: %d tasks/s for %d s, one INSERT ... SELECT 3 s ahead; lateness (ms) at the receiver"
                % (b.STEADY_RATE, b.STEADY_SECONDS),
                ["build", "round", "arrived", "succeeded", "p50", "p90", "p99", "max", "retried", "non-200",
                 "cpu us/cb", "stmt/cb", "WAL B/cb", "load", "busy %", "others %"], rows,
                ["WAL: pg_current_wal_lsn() from the INSERT's commit until every outcome is written, per"
                 " arrival; cpu: the worker's user+system time during the run, per callback",
                 "load: 1-min load average at the start; busy: the machine's CPU use during the run"
                 " (all processes, all cores = 100%); others: of it, processes not of this benchmark"
                 " (the two clusters, nginx, this script)"])
    for kind, title in (("w2", "A2. W2: %d tasks due at one instant" % ix.W2_TASKS),
                        ("w2f", "A3. W2f: W2 with every %dth callback answered 404 (max_attempts 1)"
                                % ix.FAIL_EVERY),
                        ("w2c", "A4. W2c: one occurrence of each of %d cron timers, due at one instant"
                                % ix.W2_TASKS)):
        if kind not in KINDS:
            continue
        rows = [[LABEL[r["build"]], r["round"], r["arrived"], r["succeeded"], r["failed"], r["retried"],
                 r["first"], r["last"], r["rate"], r["final_ms"], r["cpu_us_per_cb"], r["claim_us_per_cb"],
                 r["flush_us_per_cb"], r["stmt_per_cb"], r["wal_per_cb"], r["btree_per_cb"], r["fpi_per_cb"],
                 r["load"], r["busy"], r["others"]] for r in mine(kind)]
        b.table(title, ["build", "round", "arrived", "succeeded", "failed", "retried", "first ms", "last ms",
                        "cb/s", "all final ms", "cpu us/cb", "claim us/cb", "flush us/cb", "stmt/cb",
                        "WAL B/cb", "btree B/cb", "FPI B/cb", "load", "busy %", "others %"], rows,
                ["cb/s = arrivals / (last - first); all final: due -> worker_status() shows every"
                 " outcome written; cpu: the worker process's user+system time per callback;"
                 " claim, flush: the worker's own clocks (jobflow.stats) in claim statements and"
                 " outcome-write transactions, per callback (they include waits for fsync)"])

    def med(kind, x, key):
        return median([r[key] for r in mine(kind, x)])

    def spread(kind, x, key):
        vals = [r[key] for r in mine(kind, x) if r[key] is not None]
        return "%s..%s" % (min(vals), max(vals)) if vals else None

    figures = [("W1 p50 ms", "w1", "p50"), ("W1 p99 ms", "w1", "p99"), ("W1 max ms", "w1", "max"),
               ("W1 cpu us/cb", "w1", "cpu_us_per_cb"), ("W1 WAL B/cb", "w1", "wal_per_cb")]
    for kind in ("w2", "w2f", "w2c"):
        name = kind[:2].upper() + kind[2:]
        figures += [(name + " cb/s", kind, "rate"), (name + " all final ms", kind, "final_ms"),
                    (name + " cpu us/cb", kind, "cpu_us_per_cb"),
                    (name + " claim us/cb", kind, "claim_us_per_cb"),
                    (name + " flush us/cb", kind, "flush_us_per_cb"), (name + " stmt/cb", kind, "stmt_per_cb"),
                    (name + " WAL B/cb", kind, "wal_per_cb"), (name + " btree B/cb", kind, "btree_per_cb")]

    def paired(kind, key):
        """b / a of each round (a and b ran one right after the other, on
        a machine about as busy): their median and range."""
        got = {(r["round"], r["build"]): r[key] for r in mine(kind)}
        vals = sorted(ix.ratio(got[(i, "b")], got[(i, "a")]) for i in range(1, ROUNDS + 1)
                      if got.get((i, "a")) and got.get((i, "b")) is not None)
        return (median(vals), "%s..%s" % (vals[0], vals[-1])) if vals else (None, None)

    rows = []
    for name, kind, key in figures:
        if kind not in KINDS:
            continue
        m = {x: med(kind, x, key) for x in BUILDS}
        rows.append([name, m["a"], m["b"], ix.ratio(m["b"], m["a"])] + list(paired(kind, key))
                    + [spread(kind, "a", key), spread(kind, "b", key)])
    b.table("A. %s (a) vs %s (b): medians of %d rounds" % (LABEL["a"], LABEL["b"], ROUNDS),
            ["figure", LABEL["a"], LABEL["b"], "b / a", "paired", "paired: range", "a: range", "b: range"],
            rows,
            ["rounds alternate the order (a b, b a, ...); VACUUM ANALYZE and CHECKPOINT before each run",
             "b / a: of the medians; paired: the median of each round's b / a (the two ran one"
             " right after the other), less moved by a machine whose load changes between rounds",
             "b / a above 1 is a cost for lateness, time, CPU and WAL; below 1 for cb/s;"
             " range: the lowest and highest run, to compare with the difference of the medians"])
    busy = [r["busy"] for r in runs]
    others = [r["others"] for r in runs]
    loads = [r["load"] for r in runs]
    print("\nmachine during the runs: busy %d..%d%% (median %s), of it not this benchmark's %d..%d%%"
          " (median %s), 1-min load %.2f..%.2f"
          % (min(busy), max(busy), median(busy), min(others), max(others), median(others),
             min(loads), max(loads)))
    for x in BUILDS:
        use(x)
        top = pgss_top()
        if top:
            print("\npg_stat_statements, the worker's statements on %s (all measured runs):" % LABEL[x])
            print("\n".join("  %8d calls %10s ms %8s ms/call  %s" % tuple(r) for r in top))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    head = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%h"],
                          capture_output=True, text=True).stdout.strip()
    print("\nmeasured by the scripts of %s; %.0f s in all" % (head, time.time() - t_start))


if __name__ == "__main__":
    main()
