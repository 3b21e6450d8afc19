#!/usr/bin/env bash
# bench/retention.sh: pruning under sustained load (issue 10, item 1).
#
# Starts a throwaway cluster (scripts/lib.sh) and test/receiver.py on
# 127.0.0.1, then bench/retention.py runs the same sustained load twice in
# one run: RETENTION_RATE callbacks/s (default 500) for RETENTION_SECONDS
# (default 90), first with jobflow.retention = 0 (the baseline: nothing is
# pruned), then with a short retention (RETENTION_KEEP, default 20 s) so
# that the worker prunes as fast as tasks finish.  Every 5 s it prints the
# sizes of jobflow.tasks and jobflow.task_log and the lateness (request
# start - due, from task_log) of the callbacks of those 5 s, and after each
# run the worker's CPU time per callback (metrics on).  Last, it
# compares the cost of removing one partition's worth of log rows by the
# worker's batched DELETE with dropping a time partition of the same rows.
#
#   bench/retention.sh        RETENTION_RATE=1000 RETENTION_SECONDS=120 bench/retention.sh
#   RETENTION_BENCH_PORT=54414 (default)   SKIP_BUILD=1 to use the installed build
source "$(dirname "$0")/../scripts/lib.sh"

PORT=${RETENTION_BENCH_PORT:-54414}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-retention-bench.XXXXXX")
chmod 755 "$WORK"
RECEIVER_PID=""

cleanup() {
	[ -n "$RECEIVER_PID" ] && kill "$RECEIVER_PID" 2>/dev/null
	cluster_remove
	rm -rf "$WORK"
}
trap cleanup EXIT

[ -n "${SKIP_BUILD:-}" ] || build_and_install
set_pgbin
cluster_start retbench "$PORT" "shared_buffers = 256MB" "max_wal_size = 4GB" \
	"jobflow.reconcile_interval = 1s"

"$PYTHON" "$REPO/test/receiver.py" --port 0 --port-file "$WORK/port" >/dev/null 2>&1 &
RECEIVER_PID=$!
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done

"$PYTHON" "$REPO/bench/retention.py" "http://127.0.0.1:$(cat "$WORK/port")/ok"
