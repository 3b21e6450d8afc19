#!/usr/bin/env bash
# bench/dispatcher.sh: end-to-end benchmark of jobflow's dispatcher.
#
# Builds and installs jobflow, starts a throwaway cluster with
# production-like settings (fsync on, shared_buffers 256MB) and a private
# nginx on 127.0.0.1 as the callback receiver, then runs bench/dispatcher.py,
# which measures lateness under steady load, burst throughput, statements
# per callback, worker memory and load time, and prints them as tables.
# Figures only: nothing here passes or fails on time.  nginx and the cluster
# are always stopped on exit.
#
# Environment: BENCH_PORT (cluster port, default 54413), BENCH_PERF=1
# (perf-record the worker during the first burst and print its top symbols;
# BENCH_PERF_DATA=FILE keeps the recording),
# BENCH_TASKS_1M (size of the memory/load phase, default 1000000),
# BENCH_PHASES (comma list of steady,burst,big,isolation), BENCH_BUILD=head
# (build and install the last commit instead of the working tree), BENCH_REV
# (build and install that commit instead: a baseline for the same machine),
# JOBFLOW_KEEP_CLUSTER=1 (keep the stopped cluster's files for a post-mortem),
# BENCH_WORKERS (jobflow.workers_per_database, default 1; see bench/workers.sh).
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/nginx.sh"

BENCH_PORT=${BENCH_PORT:-54413}
nginx_install
if [ "${BENCH_BUILD:-tree}" = head ] || [ -n "${BENCH_REV:-}" ]; then
	# a commit (the last one, or BENCH_REV: a baseline such as 0.1.0's), not
	# the working tree (which others may be editing)
	SNAPSHOT=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-bench-src.XXXXXX")
	BENCH_COMMIT=$(git -C "$REPO" log -1 --format='%h %s' "${BENCH_REV:-HEAD}")
	export BENCH_COMMIT
	git -C "$REPO" archive "${BENCH_COMMIT%% *}" | tar -x -C "$SNAPSHOT"
	REPO=$SNAPSHOT build_and_install
	rm -rf "$SNAPSHOT"
else
	build_and_install
fi

# the same-run baseline of W2 (jobflow's HTTP layer alone, no database)
make -C "$REPO/bench" -s bench_http

cleanup() {
	stop_nginx
	cluster_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cluster_start bench "$BENCH_PORT" \
	"fsync = on" \
	"synchronous_commit = on" \
	"shared_buffers = 256MB" \
	"max_wal_size = 4GB" \
	"checkpoint_timeout = 15min" \
	"log_timezone = 'UTC'" \
	"max_worker_processes = 32" \
	"jobflow.workers_per_database = ${BENCH_WORKERS:-1}" \
	"shared_preload_libraries = 'jobflow,pg_stat_statements'" \
	"pg_stat_statements.track = 'all'" \
	"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"
psql -X -q -d jobflow -c "CREATE EXTENSION pg_stat_statements" >/dev/null
start_nginx

export CLUSTER_LOG="$CLUSTER_DIR/postgres.log"
"$PYTHON" "$REPO/bench/dispatcher.py"
