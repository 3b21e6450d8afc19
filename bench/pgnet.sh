#!/usr/bin/env bash
# bench/pgnet.sh: the same application workload through pg_net and through
# jobflow_net (pg_net's interface backed by jobflow), in one run.
#
# Builds pg_net from the peers' source archive (scripts/peers.sh) and
# jobflow, starts a private nginx on 127.0.0.1 (bench/nginx.sh) and ONE
# throwaway cluster with shared_preload_libraries = 'jobflow,pg_net' and
# production-like settings (fsync on, shared_buffers 256MB, autovacuum off:
# each run starts after a VACUUM ANALYZE and a CHECKPOINT instead), with two
# databases: "pgnet" (pg_net, whose worker serves pg_net.database_name) and
# "jobflow" (jobflow and jobflow_net).  Both hold the same application
# code, and bench/pgnet.py runs, in rounds that alternate the order:
#   W1  100 net.http_post() calls/s for 20 s, each its own transaction;
#       lateness = arrival at nginx - the call's commit
#   W2  20,000 net.http_post() calls committed at once: one INSERT into a
#       table whose trigger calls net.http_post (a Supabase "database
#       webhook"); callbacks/s, time until every response is in
#       net._http_response, requests lost
# then (PGNET_CRASH=1, the default) a crash per interface: 20,000 orders by
# one INSERT, the postmaster killed with SIGKILL 200 ms after its commit,
# the server restarted, what reaches nginx counted.  pg_net runs with its defaults
# (pg_net.batch_size 200, pg_net.ttl 6 hours), jobflow and jobflow_net
# with theirs; both are printed.  About 10 minutes.  Figures only; nginx
# and the cluster are always stopped on exit.
#
#   bench/pgnet.sh    PGNET_BENCH_PORT=54427 (default)  PGNET_ROUNDS=3
#                     PGNET_CRASH=1  PGNET_W2_TASKS=20000  PGNET_CRASH_TASKS=20000
#                     SKIP_BUILD=1 (use the jobflow and pg_net installed)
#                     JOBFLOW_KEEP_CLUSTER=1 (keep the cluster's and nginx's files)
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/../scripts/pgsrc.sh"
source "$(dirname "$0")/../scripts/peers.sh"
source "$(dirname "$0")/nginx.sh"

PORT=${PGNET_BENCH_PORT:-54427}
nginx_install
if [ -z "${SKIP_BUILD:-}" ]; then
	build_and_install
	pgnet_install "$PG_CONFIG"
fi
set_pgbin
[ -f "$("$PG_CONFIG" --pkglibdir)/pg_net.so" ] ||
	{ echo "pg_net is not installed in $("$PG_CONFIG" --pkglibdir)"; exit 1; }

cleanup() {
	stop_nginx
	cluster_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_nginx
cluster_start pgnetbench "$PORT" \
	"shared_preload_libraries = 'jobflow,pg_net'" \
	"pg_net.database_name = 'pgnet'" \
	"fsync = on" \
	"synchronous_commit = on" \
	"shared_buffers = 256MB" \
	"max_wal_size = 4GB" \
	"checkpoint_timeout = 15min" \
	"autovacuum = off" \
	"log_timezone = 'UTC'" \
	"max_worker_processes = 32" \
	"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"

psql -X -q -d postgres -c "CREATE DATABASE pgnet"
psql -X -q -d pgnet -c "CREATE EXTENSION pg_net"
psql -X -q -d jobflow -c "CREATE EXTENSION jobflow_net"

export CLUSTER_LOG="$CLUSTER_DIR/postgres.log"
"$PYTHON" "$REPO/bench/pgnet.py"
