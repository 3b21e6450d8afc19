#!/usr/bin/python3
# -------------------------------------------------------------------------
#
# quiet.py
#     Run by bench/quiet.sh: what quiet logging saves.  With
#     jobflow.log_attempts = failures, a success at a task's first attempt
#     updates its task and writes no jobflow.task_log row; with all (the
#     default), every attempt writes one.
#
#     In rounds that alternate the order (all failures, then failures all,
#     ...), each run after a VACUUM ANALYZE and a CHECKPOINT (autovacuum is
#     off: the same starting point for every run):
#       W2   20,000 tasks due at one instant, default caps, all answered 200
#       W2f  W2 with every tenth answered 404 (max_attempts 1): 2,000 dead
#            letters, whose attempts are logged either way
#     and for each: callbacks/s from first to last arrival, the WAL written
#     from the INSERT's commit until every outcome is written
#     (pg_current_wal_lsn), per callback, with the heap and B-tree shares
#     of it (pg_waldump --stats over the same range), and the log rows the
#     run wrote.  Prints each run, then the medians side by side and
#     failures / all.
#
#     Uses bench/indexes.py's runs and bench/dispatcher.py's helpers.
#     QUIET_ROUNDS (default 4).
#
# -------------------------------------------------------------------------

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dispatcher as b          # noqa: E402  (connects, reads the environment)
import indexes as ix            # noqa: E402
from schemes import median      # noqa: E402

ROUNDS = int(os.environ.get("QUIET_ROUNDS", "4"))
MODES = ["all", "failures"]


def set_mode(mode):
    """jobflow.log_attempts = mode, reloaded, and seen by the worker: a
    probe task's success is logged under all only."""
    b.q("ALTER SYSTEM SET jobflow.log_attempts = %s", (mode,))
    b.q("SELECT pg_reload_conf()")
    deadline = time.time() + 20
    while time.time() < deadline:
        (tid,) = b.q1("INSERT INTO jobflow.tasks (url) VALUES (%s) RETURNING id",
                      (b.base_url() + "/cb/probe",))
        while b.q1("SELECT state::text FROM jobflow.tasks WHERE id = %s", (tid,))[0] != "succeeded":
            time.sleep(0.02)
        time.sleep(0.1)
        logged = b.q1("SELECT count(*) FROM jobflow.task_log WHERE task_id = %s", (tid,))[0]
        if (logged > 0) == (mode == "all"):
            return
        time.sleep(0.2)
    sys.exit("the worker did not apply jobflow.log_attempts = %s" % mode)


def log_rows():
    return b.q1("SELECT count(*) FROM jobflow.task_log")[0]


def run(kind, tag):
    """One W2 or W2f; the heap share of its WAL over the range w2 measures
    (from the INSERT's commit until every outcome is written)."""
    n0 = log_rows()
    lsns = []
    lsn = ix.lsn
    ix.lsn = lambda: lsns.append(lsn()) or lsns[-1]
    try:
        r = ix.w2(tag, kind == "w2f")
    finally:
        ix.lsn = lsn
    r["log_rows"] = log_rows() - n0
    st = ix.waldump_stats(lsns[0], lsns[1])
    heap = (st.get("Heap", {}).get("bytes", 0) + st.get("Heap2", {}).get("bytes", 0)) if st else None
    r["heap_per_cb"] = round(heap / r["arrived"]) if heap is not None and r["arrived"] else None
    return r


def main():
    t_start = time.time()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    head = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True).stdout.strip()
    b.progress("jobflow at %s; %s" % (head, b.q1("SELECT version()")[0].split(" on ")[0]))
    b.wait_for_worker()
    caps = b.q("SELECT name, setting FROM pg_settings WHERE name IN"
               " ('jobflow.max_concurrent_requests', 'jobflow.max_requests_per_host') ORDER BY 1")
    b.progress("warm-up: one unmeasured W2 and W2f")
    ix.prepare()
    ix.w2("warm-up", False)
    ix.prepare()
    ix.w2("warm-up-f", True)

    runs = []
    for i in range(ROUNDS):
        for mode in (MODES if i % 2 == 0 else MODES[::-1]):
            set_mode(mode)
            for kind in ("w2", "w2f"):
                ix.prepare()
                tag = "%s-%s-%d" % (kind, mode, i + 1)
                b.progress(tag)
                r = run(kind, tag)
                r.update({"mode": mode, "round": i + 1, "kind": kind})
                runs.append(r)
                b.progress("  %s cb/s, all final %s ms, WAL %s B/cb (heap %s, btree %s), %d log rows,"
                           " machine busy %s%% (others %s%%)"
                           % (r["rate"], r["final_ms"], r["wal_per_cb"], r["heap_per_cb"],
                              r["btree_per_cb"], r["log_rows"], r["busy"], r["others"]))
                time.sleep(1)
    b.q("ALTER SYSTEM RESET jobflow.log_attempts")
    b.q("SELECT pg_reload_conf()")

    def mine(kind, mode=None):
        return [r for r in runs if r["kind"] == kind and (mode is None or r["mode"] == mode)]

    for kind, title in (("w2", "Q1. W2: %d tasks due at one instant, all answered 200" % ix.W2_TASKS),
                        ("w2f", "Q2. W2f: W2 with every %dth callback answered 404 (max_attempts 1)"
                                % ix.FAIL_EVERY)):
        rows = [[r["mode"], r["round"], r["arrived"], r["succeeded"], r["failed"], r["log_rows"],
                 r["rate"], r["final_ms"], r["cpu_us_per_cb"], r["wal_per_cb"], r["heap_per_cb"],
                 r["btree_per_cb"], r["fpi_per_cb"], r["wal_mb"], r["load"], r["busy"], r["others"]]
                for r in mine(kind)]
        b.table(title + ", caps %s" % "/".join(v for _, v in caps),
                ["log_attempts", "round", "arrived", "succeeded", "failed", "log rows", "cb/s",
                 "all final ms", "cpu us/cb", "WAL B/cb", "heap B/cb", "btree B/cb", "FPI B/cb",
                 "WAL MB", "load", "busy %", "others %"], rows,
                ["cb/s = arrivals / (last - first); all final: due -> worker_status() shows every"
                 " outcome written; cpu: the worker process's user+system time per callback",
                 "WAL: pg_current_wal_lsn() from the INSERT's commit until every outcome is written,"
                 " per arrival; heap, btree, FPI: of that, heap records, B-tree records and full-page"
                 " images (pg_waldump --stats)"])

    def med(kind, mode, key):
        return median([r[key] for r in mine(kind, mode)])

    def spread(kind, mode, key):
        vals = [r[key] for r in mine(kind, mode) if r[key] is not None]
        return "%s..%s" % (min(vals), max(vals)) if vals else None

    figures = [("W2 WAL B/cb", "w2", "wal_per_cb"), ("W2 heap B/cb", "w2", "heap_per_cb"),
               ("W2 btree B/cb", "w2", "btree_per_cb"), ("W2 FPI B/cb", "w2", "fpi_per_cb"),
               ("W2 cb/s", "w2", "rate"), ("W2 all final ms", "w2", "final_ms"),
               ("W2 cpu us/cb", "w2", "cpu_us_per_cb"), ("W2 log rows", "w2", "log_rows"),
               ("W2f WAL B/cb", "w2f", "wal_per_cb"), ("W2f cb/s", "w2f", "rate"),
               ("W2f all final ms", "w2f", "final_ms"), ("W2f log rows", "w2f", "log_rows")]
    rows = []
    for name, kind, key in figures:
        m = {v: med(kind, v, key) for v in MODES}
        rows.append([name] + [m[v] for v in MODES] + [ix.ratio(m["failures"], m["all"])]
                    + [spread(kind, v, key) for v in MODES])
    b.table("Q. Quiet logging: medians of %d rounds" % ROUNDS,
            ["figure"] + MODES + ["failures / all"] + ["%s: range" % v for v in MODES], rows,
            ["all: every attempt logged (the default); failures: a success at a task's first"
             " attempt writes no log row",
             "rounds alternate the order; VACUUM ANALYZE and CHECKPOINT before each run"])
    busy = [r["busy"] for r in runs]
    loads = [r["load"] for r in runs]
    print("\nmachine during the runs: busy %d..%d%% (median %s), 1-min load %.2f..%.2f"
          % (min(busy), max(busy), median(busy), min(loads), max(loads)))
    print("\n%.0f s in all" % (time.time() - t_start))


if __name__ == "__main__":
    main()
