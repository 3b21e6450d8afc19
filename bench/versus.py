#!/usr/bin/python3
"""bench/versus.py OUT OLD NEW: the table of bench/versus.sh.

OUT holds old-<round>.json and new-<round>.json, each written by
bench/dispatcher.py (BENCH_JSON) for phases steady, burst and burst.  Prints, per
figure, each run of either build, their medians and the ratio new / old:
above 1 for lateness, or below 1 for callbacks/s, is a regression.  The
goals of issue 22 are printed beside them for comparison only.
"""

import glob
import json
import os
import statistics
import sys


def load(out, which):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, "%s-*.json" % which)),
                       key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0])):
        with open(path) as f:
            runs.append(json.load(f))
    return runs


def figures(run):
    """The compared figures of one run: W1 per variant, W2 at the default caps."""
    got = {}
    for variant in ("steady-set", "steady-notify"):
        for s in run["steady"].get(variant, [])[:1]:
            for k in ("p50", "p99", "max", "retried"):
                got["W1 %s %s" % (variant[7:], k)] = s[k]
    bursts = [b for b in run["burst"] if b["caps"] == "512/64"]
    for i, b in enumerate(bursts[:2]):
        w = "W2" if i == 0 else "W2 again"
        got[w + " cb/s"] = b["rate"]
        got[w + " all final ms"] = b["final_ms"]
        got[w + " retried"] = b["retried"]
        got[w + " stmt/cb"] = b["stmt_per_cb"]
        got[w + " worker cpu us/cb"] = b["cpu_us_per_cb"]
    return got


GOALS = {"W1 set p99": "<=3, ratio <=1", "W1 set max": "<=10, ratio <=1",
         "W1 notify p99": "<=3, ratio <=1", "W1 notify max": "<=10, ratio <=1",
         "W1 set p50": "ratio <=1", "W1 notify p50": "ratio <=1",
         "W1 set retried": "0", "W1 notify retried": "0", "W2 retried": "0",
         "W2 cb/s": "ratio >=1", "W2 stmt/cb": "<=0.01",
         "W2 again retried": "0", "W2 again cb/s": "ratio >=1", "W2 again stmt/cb": "<=0.01"}


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, float):
        return "%.3f" % v if abs(v) < 10 else "%.0f" % v
    return str(v)


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def main():
    out, old_name, new_name = sys.argv[1:4]
    old, new = load(out, "old"), load(out, "new")
    if not old or not new:
        sys.exit("versus.py: no runs of %s" % ("old" if not old else "new"))
    fo, fn = [figures(r) for r in old], [figures(r) for r in new]
    names = [k for k in fn[0] if k in fo[0]]
    headers = ["figure", "%s runs" % old_name, "median", "%s runs" % new_name, "median",
               "%s / %s" % (new_name, old_name), "[goal]"]
    rows = []
    for k in names:
        mo, mn = median([f.get(k) for f in fo]), median([f.get(k) for f in fn])
        r = round(mn / mo, 2) if mo and mn is not None else None
        rows.append([k, " ".join(fmt(f.get(k)) for f in fo), fmt(mo),
                     " ".join(fmt(f.get(k)) for f in fn), fmt(mn), fmt(r), GOALS.get(k, "")])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("\nV. %s vs %s, built and run alternately in one sitting (%d run(s) each):"
          " W1 (100 tasks/s for %s s, plain HTTP) and W2 (20000 due at once, caps 512/64)"
          % (new_name, old_name, len(fn), os.environ.get("BENCH_STEADY_SECONDS", "20")))
    print("  %s: %s" % (old_name, old[0].get("commit", "?")))
    print("  %s: %s" % (new_name, new[0].get("commit", "?")))
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print("  W1 set: one INSERT ... SELECT 3 s ahead; W1 notify: one jobflow.schedule() per task ~50 ms"
          " ahead; lateness in ms at the receiver")
    print("  runs in order of their round; on each fresh cluster W1, then W2, then W2 again;"
          " the ratio is of the medians")


if __name__ == "__main__":
    main()
