#!/usr/bin/env bash
# bench/keys.sh: what flow keys and ordered delivery cost the dispatcher.
#
# Starts a private nginx on 127.0.0.1 (bench/nginx.sh) and a throwaway
# cluster with production-like settings (fsync on, shared_buffers 256MB),
# autovacuum off (each run starts after a VACUUM ANALYZE and a CHECKPOINT
# instead), then bench/keys.py runs W2 (20,000 due at once, default caps)
# without keys (the baseline, in the same run), over 1 key, 100 keys and
# 10,000 keys (no limit per key, then max_concurrent_per_key 1), and in an
# ordered queue over 100 keys, in rounds that alternate the order, and
# prints each run, the medians and each one's ratio to the baseline.
# Figures only; nginx and the cluster are always stopped on exit.
#
#   bench/keys.sh     KEYS_BENCH_PORT=54424 (default)  KEYS_ROUNDS=2
#                     SKIP_BUILD=1 (use the jobflow installed)
#                     JOBFLOW_KEEP_CLUSTER=1 (keep the cluster's and nginx's files)
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/nginx.sh"

PORT=${KEYS_BENCH_PORT:-54424}
bench_start keysbench "$PORT"

export CLUSTER_LOG="$CLUSTER_DIR/postgres.log"
"$PYTHON" "$REPO/bench/keys.py"
