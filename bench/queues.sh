#!/usr/bin/env bash
# bench/queues.sh: the rate-limit accuracy of queues (issue 10, item 3).
#
# Starts a throwaway cluster (scripts/lib.sh) and test/receiver.py on
# 127.0.0.1, then bench/queues.py runs, in one run: a backlog of tasks due
# at once in a queue without limits (the baseline), then in a queue at
# 100/s and one at 1000/s (QUEUES_RATES), QUEUES_SECONDS (default 10)
# seconds' worth each.  For each it prints the arrivals per second at the
# receiver after the first second, their mean, standard deviation and
# largest deviation from the rate, and the inter-arrival times p50/p99/max.
#
#   bench/queues.sh        QUEUES_RATES="100 1000 5000" QUEUES_SECONDS=20 bench/queues.sh
#   QUEUES_BENCH_PORT=54415 (default)   SKIP_BUILD=1 to use the installed build
source "$(dirname "$0")/../scripts/lib.sh"

PORT=${QUEUES_BENCH_PORT:-54415}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-queues-bench.XXXXXX")
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
cluster_start queuebench "$PORT" "shared_buffers = 256MB" "jobflow.reconcile_interval = 1s" \
	"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"

"$PYTHON" "$REPO/test/receiver.py" --port 0 --port-file "$WORK/port" >/dev/null 2>&1 &
RECEIVER_PID=$!
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done

"$PYTHON" "$REPO/bench/queues.py" "http://127.0.0.1:$(cat "$WORK/port")"
