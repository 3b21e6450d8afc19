#!/usr/bin/python3
# -------------------------------------------------------------------------
#
# keys.py
#     Run by bench/keys.sh: what flow keys and ordered delivery cost.  W2
#     (20,000 tasks due at one instant, default caps, all answered 200)
#     run in these variants, each after a VACUUM ANALYZE and a CHECKPOINT,
#     in rounds that alternate their order:
#       none        no flow key (the baseline, measured in the same run)
#       1 key       every task with the same key, no limit per key
#       100 keys    keys k0..k99 in turn, no limit per key
#       10k keys    keys k0..k9999 in turn, no limit per key
#       10k cap 1   the same in a queue with max_concurrent_per_key 1
#       ordered 100 keys k0..k99 in an ordered queue: each key's 200 tasks
#                   one at a time, in order
#     and for each: callbacks/s from first to last arrival, due -> every
#     outcome written, the worker's CPU per callback, WAL per callback, and
#     its ratio to the baseline's median.  KEYS_ROUNDS (default 2).
#
#     Uses bench/indexes.py's helpers and bench/dispatcher.py's.
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

ROUNDS = int(os.environ.get("KEYS_ROUNDS", "2"))
N = ix.W2_TASKS
# name, number of keys (None: no key), queue
VARIANTS = [("none", None, "plain"), ("1 key", 1, "plain"), ("100 keys", 100, "plain"),
            ("10k keys", 10000, "plain"), ("10k cap 1", 10000, "capped"),
            ("ordered 100 keys", 100, "ordered")]


def w2(tag, keys, queue):
    """W2 over keys keys (None: unkeyed) in queue; figures as indexes.w2."""
    busy = ix.Busy()
    s0 = b.status()
    pid = s0["pid"]
    cpu0 = b.cpu_seconds(pid)
    due = b.now_ms() + 5000
    key_sql = "NULL" if keys is None else "'k' || (i %%%% %d)::text" % keys
    lo, hi = b.q1(
        "WITH ins AS (INSERT INTO jobflow.tasks (url, run_at, queue, flow_key)"
        " SELECT " + b.url_sql(tag, "%(due)s") + ","
        "        pg_catalog.to_timestamp(%(due)s / 1000.0), %(queue)s, " + key_sql +
        "   FROM generate_series(1, %(n)s) i RETURNING id)"
        " SELECT min(id), max(id) FROM ins",
        {"due": due, "n": N, "queue": queue})
    l0 = ix.lsn()
    observed = ix.wait_done(s0, N, timeout=600)
    l1 = ix.lsn()
    s1 = b.status()
    cpu1 = b.cpu_seconds(pid)
    ok = b.access.wait(tag, N, 15)
    arrivals = sorted(e[0] for e in ok)
    span = arrivals[-1] - arrivals[0] if arrivals else 0
    fired = s1["fired"] - s0["fired"]
    r = {"arrived": len(arrivals),
         "succeeded": b.q1("SELECT count(*) FROM jobflow.tasks WHERE id BETWEEN %s AND %s"
                           "   AND state = 'succeeded'", (lo, hi))[0],
         "claims": fired,
         "rate": round(len(arrivals) / (max(span, 1) / 1000.0)) if arrivals else None,
         "final_ms": observed - due if observed else None,
         "cpu_us_per_cb": round((cpu1 - cpu0) * 1e6 / max(len(arrivals), 1)),
         "load": busy.load}
    r.update(busy.figures())
    r.update(ix.wal_figures(l0, l1, len(arrivals)))
    return r


def main():
    t_start = time.time()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    head = subprocess.run(["git", "-C", repo, "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True).stdout.strip()
    b.progress("jobflow at %s; %s" % (head, b.q1("SELECT version()")[0].split(" on ")[0]))
    b.wait_for_worker()
    b.q("SELECT jobflow.set_queue('capped', max_concurrent_per_key => 1)")
    b.q("SELECT jobflow.set_queue('ordered', ordered => true)")
    caps = b.q("SELECT name, setting FROM pg_settings WHERE name IN"
               " ('jobflow.max_concurrent_requests', 'jobflow.max_requests_per_host') ORDER BY 1")
    b.progress("warm-up: one unmeasured W2")
    ix.prepare()
    w2("warm-up", None, "plain")

    runs = []
    for i in range(ROUNDS):
        for name, keys, queue in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            ix.prepare()
            tag = "w2-%s-%d" % (name.replace(" ", "-"), i + 1)
            b.progress(tag)
            r = w2(tag, keys, queue)
            r.update({"variant": name, "round": i + 1})
            runs.append(r)
            b.progress("  %s cb/s, all final %s ms, cpu %s us/cb, WAL %s B/cb, %d claimed for %d,"
                       " machine busy %s%% (others %s%%)"
                       % (r["rate"], r["final_ms"], r["cpu_us_per_cb"], r["wal_per_cb"],
                          r["claims"], r["arrived"], r["busy"], r["others"]))
            time.sleep(1)

    rows = [[r["variant"], r["round"], r["arrived"], r["succeeded"], r["claims"], r["rate"],
             r["final_ms"], r["cpu_us_per_cb"], r["wal_per_cb"], r["load"], r["busy"], r["others"]]
            for r in runs]
    b.table("K1. W2: %d tasks due at one instant, all answered 200, caps %s"
            % (N, "/".join(v for _, v in caps)),
            ["variant", "round", "arrived", "succeeded", "claims", "cb/s", "all final ms",
             "cpu us/cb", "WAL B/cb", "load", "busy %", "others %"], rows,
            ["cb/s = arrivals / (last - first); all final: due -> worker_status() shows every"
             " outcome written; cpu: the worker's user+system time per callback; claims: picks"
             " the claim took (an ordered key's task left behind an unwritten outcome is"
             " claimed again, not counted twice)"])

    def med(name, key):
        vals = [r[key] for r in runs if r["variant"] == name and r[key] is not None]
        return median(vals) if vals else None

    base = {k: med("none", k) for k in ("rate", "final_ms", "cpu_us_per_cb", "wal_per_cb")}
    rows = []
    for name, _, _ in VARIANTS:
        m = {k: med(name, k) for k in base}
        vals = [r["rate"] for r in runs if r["variant"] == name]
        rows.append([name, m["rate"], ix.ratio(m["rate"], base["rate"]),
                     "%s..%s" % (min(vals), max(vals)), m["final_ms"], m["cpu_us_per_cb"],
                     ix.ratio(m["cpu_us_per_cb"], base["cpu_us_per_cb"]), m["wal_per_cb"]])
    b.table("K. Flow keys: medians of %d rounds, ratios to W2 without keys" % ROUNDS,
            ["variant", "cb/s", "cb/s / none", "cb/s range", "all final ms", "cpu us/cb",
             "cpu / none", "WAL B/cb"], rows,
            ["rounds alternate the order; VACUUM ANALYZE and CHECKPOINT before each run"])
    busy = [r["busy"] for r in runs]
    loads = [r["load"] for r in runs]
    print("\nmachine during the runs: busy %d..%d%% (median %s), 1-min load %.2f..%.2f"
          % (min(busy), max(busy), median(busy), min(loads), max(loads)))
    print("\n%.0f s in all" % (time.time() - t_start))


if __name__ == "__main__":
    main()
