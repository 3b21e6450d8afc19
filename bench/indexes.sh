#!/usr/bin/env bash
# bench/indexes.sh: what the partial indexes of running and failed tasks
# (tasks_running, tasks_failed_queue, issue 24) cost the dispatcher.
#
# Starts a private nginx on 127.0.0.1 (bench/nginx.sh) and a throwaway
# cluster with production-like settings (fsync on, shared_buffers 256MB),
# autovacuum off (each run starts after a VACUUM ANALYZE and a CHECKPOINT
# instead, so that neither lands inside a run), then bench/indexes.py runs
# W1 (100 tasks/s for 20 s), W2 (20,000 due at once, default caps) and W2
# with 10% of the callbacks answered 404 (max_attempts 1: dead letters) in
# rounds that alternate the schema as installed ("with"), the two indexes
# dropped ("without") and tasks_running as first written, WHERE state =
# 'running' alone, a predicate the worker's outcome write implies ("bare"),
# and prints each run, the medians side by side and each / without.
# Figures only; nginx and the cluster are always stopped on exit.
#
#   bench/indexes.sh    INDEXES_BENCH_PORT=54421 (default)  INDEXES_ROUNDS=4
#                       INDEXES_VARIANTS=with,without,bare
#                       SKIP_BUILD=1 (use the jobflow installed)
#                       JOBFLOW_KEEP_CLUSTER=1 (keep the cluster's and nginx's files)
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/nginx.sh"

PORT=${INDEXES_BENCH_PORT:-54421}
bench_start idxbench "$PORT"

export CLUSTER_LOG="$CLUSTER_DIR/postgres.log"
"$PYTHON" "$REPO/bench/indexes.py"
