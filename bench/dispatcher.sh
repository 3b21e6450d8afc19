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
# BENCH_PHASES (comma list of steady,burst,schemes,ceiling,big,isolation,signing),
# BENCH_SCHEMES (the schemes of the schemes phase), BENCH_BUILD=head
# (build and install the last commit instead of the working tree), BENCH_REV
# (build and install that commit instead: a baseline for the same machine),
# JOBFLOW_KEEP_CLUSTER=1 (keep the stopped cluster's files for a post-mortem),
# BENCH_WORKERS (jobflow.workers_per_database, default 1; see bench/workers.sh),
# BENCH_JSON=FILE (the main figures as JSON too, for bench/versus.sh).
#
# Whatever the build, the scripts that run (this one, dispatcher.py and the
# nginx) are the current ones: a baseline is measured the same way.
source "$(dirname "$0")/../scripts/lib.sh"
source "$(dirname "$0")/nginx.sh"

BENCH_PORT=${BENCH_PORT:-54413}
nginx_install
# the baseline of the HTTP layer (bench/dispatcher.py's ceiling phase)
ensure_packages wrk

# snapshot_compat DIR: let a release older than the server build against it.
# 0.1.0 predates PostgreSQL 17, which moved PGPROC's local transaction id
# into vxid and made CreateWaitEventSet() take a resource owner; the calls
# are rewritten as src/base/compat.h writes them today, nothing else.
snapshot_compat() {
	local dir=$1 major files
	major=$("$PG_CONFIG" --version | awk '{ print int($2) }')
	[ "$major" -ge 17 ] || return 0
	files=$(grep -rlE 'MyProc->lxid|CreateWaitEventSet\(TopMemoryContext' --include='*.c' "$dir/src" || true)
	[ -n "$files" ] || return 0
	log "patching for PostgreSQL $major: ${files//$dir\//}"
	# shellcheck disable=SC2086
	sed -i -e 's/MyProc->lxid/MyProc->vxid.lxid/g' \
		-e 's/CreateWaitEventSet(TopMemoryContext,/CreateWaitEventSet(NULL,/g' $files
}

BUILT_SRC=$REPO
if [ "${BENCH_BUILD:-tree}" = head ] || [ -n "${BENCH_REV:-}" ]; then
	# a commit (the last one, or BENCH_REV: a baseline such as 0.1.0's), not
	# the working tree (which others may be editing)
	SNAPSHOT=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-bench-src.XXXXXX")
	BENCH_COMMIT=$(git -C "$REPO" log -1 --format='%h %s' "${BENCH_REV:-HEAD}")
	export BENCH_COMMIT
	git -C "$REPO" archive "${BENCH_COMMIT%% *}" | tar -x -C "$SNAPSHOT"
	snapshot_compat "$SNAPSHOT"
	REPO=$SNAPSHOT build_and_install
	BUILT_SRC=$SNAPSHOT
else
	build_and_install
fi
# settings of the build's own, left out for a build that predates them
# (0.1.0 has none but the first; it reserves its prefix and would warn)
knows() { grep -rqs "\"jobflow.$1\"" "$BUILT_SRC/src"; }
build_settings=()
if knows allow_networks; then
	build_settings+=("jobflow.allow_networks = '127.0.0.0/8, ::1/128'")
fi
if knows database_name; then
	# 0.1.0: one worker, in the database this names (default postgres)
	build_settings+=("jobflow.database_name = 'jobflow'")
fi
if knows workers_per_database; then
	build_settings+=("jobflow.workers_per_database = ${BENCH_WORKERS:-1}")
fi
TLS_CA_SETTING=""
if knows tls_ca_file; then
	TLS_CA_SETTING=yes
fi
[ "$BUILT_SRC" = "$REPO" ] || rm -rf "$BUILT_SRC"

# the same-run baseline of W2 (jobflow's HTTP layer alone, no database)
make -C "$REPO/bench" -s bench_http

cleanup() {
	stop_nginx
	cluster_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# nginx first: the cluster's settings name its test CA
start_nginx
[ -z "$TLS_CA_SETTING" ] || build_settings+=("jobflow.tls_ca_file = '$NGINX_CA_FILE'")
# pg_stat_statements cross-checks the worker's own statement count; a server
# built without contrib has none (its columns then print n/a)
PGSS=""
if [ -f "$("$PG_CONFIG" --pkglibdir)/pg_stat_statements.so" ]; then
	PGSS=yes
	build_settings+=("shared_preload_libraries = 'jobflow,pg_stat_statements'" "pg_stat_statements.track = 'all'")
else
	log "no pg_stat_statements in $("$PG_CONFIG" --pkglibdir): its figures print n/a"
fi
cluster_start bench "$BENCH_PORT" \
	"fsync = on" \
	"synchronous_commit = on" \
	"shared_buffers = 256MB" \
	"max_wal_size = 4GB" \
	"checkpoint_timeout = 15min" \
	"log_timezone = 'UTC'" \
	"max_worker_processes = 32" \
	"${build_settings[@]}"
[ -z "$PGSS" ] || psql -X -q -d jobflow -c "CREATE EXTENSION pg_stat_statements" >/dev/null

export CLUSTER_LOG="$CLUSTER_DIR/postgres.log"
"$PYTHON" "$REPO/bench/dispatcher.py"
