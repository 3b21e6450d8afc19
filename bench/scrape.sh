#!/usr/bin/env bash
# bench/scrape.sh: what a scrape of jobflow's figures costs as the tables
# grow (issue 24, item 2).
#
# Starts a throwaway cluster (scripts/lib.sh) and times SELECT
# jobflow.metrics() and a read of jobflow.stats (median and p99 of
# SCRAPE_REPEAT scrapes, default 50) on an empty database, the baseline,
# then with 1,000,000 finished tasks kept, then with pending backlogs of
# 10,000 and 100,000 tasks over 50 queues of 5 owners, then with 10,000
# dead letters.  Finished tasks must not change the cost (the figures
# read the partial indexes of pending and failed tasks only); the backlog
# and dead letters do, linearly.  Rows are inserted with triggers off: no
# worker is told, and the pending ones are due in a day.
#
#   bench/scrape.sh     SCRAPE_BENCH_PORT=54420 (default)   SKIP_BUILD=1
source "$(dirname "$0")/../scripts/lib.sh"

PORT=${SCRAPE_BENCH_PORT:-54420}

trap cluster_remove EXIT
trap 'exit 130' INT TERM

[ -n "${SKIP_BUILD:-}" ] || build_and_install
set_pgbin
cluster_start scrapebench "$PORT" "shared_buffers = 256MB" "max_wal_size = 4GB"

"$PYTHON" "$REPO/bench/scrape.py"
