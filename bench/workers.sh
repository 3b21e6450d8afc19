#!/usr/bin/env bash
# bench/workers.sh: W2 with one and with two workers per database (issue 12,
# part 2).
#
# Runs bench/dispatcher.sh's burst phase (20,000 callbacks due at the same
# instant, against a private nginx, fsync on) twice on fresh clusters: with
# jobflow.workers_per_database = 1 (the baseline), then = 2; each does
# BENCH_PHASES (default burst,burst: W2 on a fresh cluster, then again).
# Prints both runs' burst tables, then callbacks/s side by side for each
# cap setting and run, with the ratio.  Figures only: nothing passes or
# fails.  The full output of each run is kept in $TMPDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-workers.XXXXXX")
for n in 1 2; do
	echo "== workers_per_database = $n"
	BENCH_WORKERS=$n BENCH_PHASES=${BENCH_PHASES:-burst,burst} bench/dispatcher.sh \
		>"$out/w$n.log" 2>&1 || { tail -40 "$out/w$n.log"; exit 1; }
	sed -n '/^2\. Burst/,/^$/p' "$out/w$n.log"
done
python3 - "$out" <<'EOF'
import re, sys

def rates(path):
    """cb/s of each row of each '2. Burst' table, in order: [(caps, rate)]."""
    got, inside, seen = [], False, set()
    for line in open(path):
        if line.startswith("2. Burst"):
            inside, run = True, line.split(":")[0]
            continue
        if inside:
            cells = line.split()
            if not cells or cells[0].startswith("["):
                inside = not cells[0].startswith("[") if cells else False
                continue
            if re.match(r"^\d+/\d+$", cells[0]) and (run, cells[0]) not in seen:
                seen.add((run, cells[0]))
                got.append((run, cells[0], cells[9]))
    return got

one, two = rates(sys.argv[1] + "/w1.log"), rates(sys.argv[1] + "/w2.log")
print("\nW2 callbacks/s, one worker vs two (same machine, same run)")
print("%-22s %-10s %10s %10s %7s" % ("run", "caps", "1 worker", "2 workers", "ratio"))
for (run, caps, a), (_, _, b) in zip(one, two):
    try:
        ratio = "%.2f" % (float(b) / float(a))
    except ValueError:
        ratio = "-"
    print("%-22s %-10s %10s %10s %7s" % (run, caps, a, b, ratio))
print("(logs: %s)" % sys.argv[1])
EOF
