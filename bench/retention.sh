#!/usr/bin/env bash
# bench/retention.sh: pruning under sustained load (issue 10, item 1).
#
# Starts a throwaway cluster (scripts/lib.sh, pg_stat_statements loaded)
# and a private nginx on 127.0.0.1 as the receiver (bench/nginx.sh, as in
# bench/dispatcher.sh), then bench/retention.py runs the same sustained
# load twice in one run: RETENTION_RATE callbacks/s (default 500) for
# RETENTION_SECONDS (default 90), first with jobflow.retention = 0 (the
# baseline: nothing is pruned), then with a short retention (RETENTION_KEEP,
# default 20 s) so that the worker prunes as fast as tasks finish.  Every
# 5 s it prints the sizes of jobflow.tasks and jobflow.task_log, the rows
# pruned and the callbacks that arrived in those 5 s with their lateness
# (nginx's arrival - due), and after each run what the generator achieved,
# the worker's and nginx's CPU time per callback (metrics on) and the top
# statements.  Last, it compares the cost of removing 10 s of the load by
# the worker's batched DELETE with dropping a time partition of the same
# rows.  The goal run (issue 10): RETENTION_RATE=10000 RETENTION_SECONDS=600.
#
#   bench/retention.sh        RETENTION_RATE=10000 RETENTION_SECONDS=600 bench/retention.sh
#   RETENTION_BENCH_PORT=54414 (default)   SKIP_BUILD=1 to use the installed build
#   RETENTION_AHEAD=2 (s: a batch of tasks is committed that long before it is due)
#   BENCH_WORKERS=2 (jobflow.workers_per_database; default 1)
#   JOBFLOW_KEEP_CLUSTER=1 keeps the server's log (lock waits over 1 s,
#   checkpoints, autovacuum runs) and nginx's access log for a post-mortem
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/nginx.sh"

PORT=${RETENTION_BENCH_PORT:-54414}

cleanup() {
	stop_nginx
	cluster_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nginx_install
[ -n "${SKIP_BUILD:-}" ] || build_and_install
set_pgbin
cluster_start retbench "$PORT" "shared_buffers = 256MB" "max_wal_size = 4GB" \
	"jobflow.reconcile_interval = 1s" \
	"max_worker_processes = 32" "jobflow.workers_per_database = ${BENCH_WORKERS:-1}" \
	"log_lock_waits = on" "log_checkpoints = on" "log_autovacuum_min_duration = 0" \
	"shared_preload_libraries = 'jobflow,pg_stat_statements'" \
	"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"
psql -X -q -d jobflow -c "CREATE EXTENSION pg_stat_statements" >/dev/null
start_nginx

"$PYTHON" "$REPO/bench/retention.py"
