#!/usr/bin/env bash
# bench/quiet.sh: what quiet logging (jobflow.log_attempts = failures)
# saves the worker's outcome writes.
#
# Starts a private nginx on 127.0.0.1 (bench/nginx.sh) and a throwaway
# cluster with production-like settings (fsync on, shared_buffers 256MB),
# autovacuum off (each run starts after a VACUUM ANALYZE and a CHECKPOINT
# instead, so that neither lands inside a run), then bench/quiet.py runs W2
# (20,000 due at once, default caps), all succeeding at their first attempt,
# and W2f (the same with every tenth answered 404, max_attempts 1) in rounds
# that alternate jobflow.log_attempts = all and failures, and prints each
# run, the medians side by side and failures / all.  Figures only; nginx
# and the cluster are always stopped on exit.
#
#   bench/quiet.sh    QUIET_BENCH_PORT=54423 (default)  QUIET_ROUNDS=4
#                     SKIP_BUILD=1 (use the jobflow installed)
#                     JOBFLOW_KEEP_CLUSTER=1 (keep the cluster's and nginx's files)
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/nginx.sh"

PORT=${QUIET_BENCH_PORT:-54423}
bench_start quietbench "$PORT"

export CLUSTER_LOG="$CLUSTER_DIR/postgres.log"
"$PYTHON" "$REPO/bench/quiet.py"
