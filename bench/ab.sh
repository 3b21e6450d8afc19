#!/usr/bin/env bash
# bench/ab.sh: two builds of jobflow side by side, in one sitting.
#
# Starts a private nginx on 127.0.0.1 (bench/nginx.sh) and two throwaway
# clusters, one per server (AB_PG_CONFIG_A and AB_PG_CONFIG_B, each with
# its own build of jobflow installed, or built here from AB_REV_A and
# AB_REV_B), both with the settings of bench/indexes.sh (fsync on,
# shared_buffers 256MB, autovacuum off: a VACUUM ANALYZE and a CHECKPOINT
# before each run instead).  Both run for the whole sitting, so that each
# keeps its caches between its runs; bench/ab.py then runs W1 (100 tasks/s
# for 20 s), W2 (20,000 due at once, default caps) and W2f (W2 with every
# tenth answered 404, max_attempts 1) on one cluster after the other, in
# rounds that alternate the order (a b, then b a), and prints each run,
# the medians side by side and b / a.  Figures only; nginx and both
# clusters are always stopped on exit.
#
#   AB_PG_CONFIG_A, AB_PG_CONFIG_B   the two servers (required; may be two
#                                    copies of one installation)
#   AB_REV_A, AB_REV_B               build that commit and install it into
#                                    its server first (default: use the
#                                    jobflow installed there)
#   AB_LABEL_A, AB_LABEL_B           names in the tables (default a, b, or
#                                    the commits)
#   AB_PORT_A, AB_PORT_B             cluster ports (default 54425, 54426)
#   AB_ROUNDS                        rounds (default 3: a b, b a, a b)
#   AB_KINDS                         comma list of w1, w2, w2f, w2c (cron
#                                    occurrences; default w1,w2,w2f)
#   AB_SQL_A, AB_SQL_B               SQL run on that cluster before the runs
#                                    (a schema variant: an index dropped)
#   JOBFLOW_KEEP_CLUSTER=1           keep the clusters' and nginx's files
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/nginx.sh"

: "${AB_PG_CONFIG_A:?AB_PG_CONFIG_A: the pg_config of build a's server}"
: "${AB_PG_CONFIG_B:?AB_PG_CONFIG_B: the pg_config of build b's server}"
PORT_A=${AB_PORT_A:-54425}
PORT_B=${AB_PORT_B:-54426}
nginx_install

# build_rev REV PG_CONFIG: a snapshot of the commit (not the working tree,
# which others may be editing), built and installed into that server
build_rev() {
	local rev=$1 snap
	snap=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-ab-src.XXXXXX")
	git -C "$REPO" archive "$rev" | tar -x -C "$snap"
	PG_CONFIG=$2 REPO=$snap build_and_install
	rm -rf "$snap"
}
[ -z "${AB_REV_A:-}" ] || build_rev "$AB_REV_A" "$AB_PG_CONFIG_A"
[ -z "${AB_REV_B:-}" ] || build_rev "$AB_REV_B" "$AB_PG_CONFIG_B"
export AB_LABEL_A=${AB_LABEL_A:-${AB_REV_A:-a}} AB_LABEL_B=${AB_LABEL_B:-${AB_REV_B:-b}}

DIR_A="" DIR_B="" BIN_A="" BIN_B=""
cleanup() {
	stop_nginx
	if [ -n "$DIR_B" ]; then CLUSTER_DIR=$DIR_B PGBIN=$BIN_B cluster_remove; fi
	if [ -n "$DIR_A" ]; then CLUSTER_DIR=$DIR_A PGBIN=$BIN_A cluster_remove; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_nginx

# start NAME PORT PG_CONFIG: one cluster; sets CLUSTER_DIR and PGBIN
start() {
	local settings=(
		"fsync = on"
		"synchronous_commit = on"
		"shared_buffers = 256MB"
		"max_wal_size = 4GB"
		"checkpoint_timeout = 15min"
		"autovacuum = off"
		"log_timezone = 'UTC'"
		"max_worker_processes = 32"
		"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"
		"jobflow.database_name = 'jobflow'"
		"jobflow.max_timers_per_role = 0"	# W2c makes 20,000 timers
		"jobflow.tls_ca_file = '$NGINX_CA_FILE'")
	PG_CONFIG=$3
	set_pgbin
	# the statements of both builds, side by side, when the server has it
	if [ -f "$("$PG_CONFIG" --pkglibdir)/pg_stat_statements.so" ]; then
		settings+=("shared_preload_libraries = 'jobflow,pg_stat_statements'" "pg_stat_statements.track = 'all'")
	fi
	cluster_start "$1" "$2" "${settings[@]}"
	if [ -f "$("$PG_CONFIG" --pkglibdir)/pg_stat_statements.so" ]; then
		psql -X -q -d jobflow -c "CREATE EXTENSION pg_stat_statements" >/dev/null
	fi
}

start abbench-a "$PORT_A" "$AB_PG_CONFIG_A"
DIR_A=$CLUSTER_DIR BIN_A=$PGBIN
start abbench-b "$PORT_B" "$AB_PG_CONFIG_B"
DIR_B=$CLUSTER_DIR BIN_B=$PGBIN

export AB_DIR_A=$DIR_A AB_DIR_B=$DIR_B AB_BIN_A=$BIN_A AB_BIN_B=$BIN_B AB_PORT_A=$PORT_A AB_PORT_B=$PORT_B
# bench/dispatcher.py connects to a at import; ab.py switches between them
export PGHOST=$DIR_A/sock PGPORT=$PORT_A JOBFLOW_PGDATA=$DIR_A/data JOBFLOW_PGBIN=$BIN_A
export CLUSTER_LOG="$DIR_A/postgres.log"
"$PYTHON" "$REPO/bench/ab.py"
