#!/usr/bin/env bash
# bench/versus.sh: W1 and W2 of two builds of jobflow, in one sitting.
#
# Runs bench/dispatcher.sh (phases steady, burst, burst: W1, W2 and W2
# again; plain HTTP, default caps) alternately for a baseline commit and for the one measured: A B,
# then B A, and so on for VERSUS_ROUNDS rounds, each run on a fresh cluster
# with its own build installed (BENCH_REV: a snapshot of the commit, built
# and installed into PG_CONFIG's server).  The scripts that measure (this
# one, dispatcher.sh, dispatcher.py, the nginx) are always the current
# ones, so both builds are measured the same way.  Then bench/versus.py
# prints, per build, each run's figures and their median, and the ratio
# measured / baseline: a regression shows as a ratio, not as a change
# between sittings.  Figures only; nothing passes or fails on time.
#
# Environment: VERSUS_OLD (the baseline, default v0.1.0), VERSUS_NEW (the
# commit measured, default HEAD), VERSUS_ROUNDS (default 2: A B B A),
# VERSUS_OUT (directory kept for each run's log and JSON, default a new one
# under $TMPDIR), and what dispatcher.sh reads (PG_CONFIG, BENCH_PORT,
# BENCH_STEADY_SECONDS).  About 3 minutes per run.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
OLD=${VERSUS_OLD:-v0.1.0}
NEW=${VERSUS_NEW:-HEAD}
ROUNDS=${VERSUS_ROUNDS:-2}
OUT=${VERSUS_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/jobflow-versus.XXXXXX")}
mkdir -p "$OUT"

old_rev=$(git -C "$here/.." rev-parse --verify "$OLD^{commit}")
new_rev=$(git -C "$here/.." rev-parse --verify "$NEW^{commit}")
printf '== %s (%s) vs %s (%s), %d round(s); logs in %s\n' \
	"$NEW" "${new_rev:0:7}" "$OLD" "${old_rev:0:7}" "$ROUNDS" "$OUT"

for ((i = 1; i <= ROUNDS; i++)); do
	if ((i % 2)); then order="old new"; else order="new old"; fi
	for which in $order; do
		if [ "$which" = old ]; then rev=$old_rev; else rev=$new_rev; fi
		printf '== %s round %d: %s (%s) ...\n' "$(date +%H:%M:%S)" "$i" "$which" "${rev:0:7}"
		if ! BENCH_REV=$rev BENCH_PHASES=steady,burst,burst BENCH_BURST_CAPS=512/64 \
			BENCH_JSON="$OUT/$which-$i.json" "$here/dispatcher.sh" >"$OUT/$which-$i.log" 2>&1; then
			echo "dispatcher.sh failed for $which ($rev); the end of $OUT/$which-$i.log:" >&2
			tail -20 "$OUT/$which-$i.log" >&2
			exit 1
		fi
	done
done

/usr/bin/python3 "$here/versus.py" "$OUT" "$OLD" "$NEW"
