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
# (perf-record the worker during the first burst and print its top symbols),
# BENCH_TASKS_1M (size of the memory/load phase, default 1000000),
# BENCH_PHASES (comma list of steady,burst,big,isolation), BENCH_BUILD=head
# (build and install the last commit instead of the working tree), BENCH_REV
# (build and install that commit instead: a baseline for the same machine),
# JOBFLOW_KEEP_CLUSTER=1 (keep the stopped cluster's files for a post-mortem).
source "$(dirname "$0")/../scripts/lib.sh"

BENCH_PORT=${BENCH_PORT:-54413}
NGINX=${NGINX:-/usr/sbin/nginx}

ensure_packages nginx-light
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

NGINX_DIR=""
stop_nginx() {
	if [ -n "$NGINX_DIR" ] && [ -f "$NGINX_DIR/nginx.pid" ]; then
		local pid
		pid=$(cat "$NGINX_DIR/nginx.pid")
		kill -QUIT "$pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	if [ -n "$NGINX_DIR" ] && [ -z "${JOBFLOW_KEEP_CLUSTER:-}" ]; then
		rm -rf "$NGINX_DIR"
	fi
}
cleanup() {
	stop_nginx
	cluster_remove
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free TCP port on 127.0.0.1 for nginx (never 80).
free_port() {
	"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_nginx() {
	local port user_line=""
	NGINX_DIR=$(mktemp -d /tmp/jobflow-bench-nginx.XXXXXX)
	mkdir -p "$NGINX_DIR/tmp"
	if [ "$(id -u)" = 0 ]; then
		# the master stays root (it opens the logs); workers run as nobody
		user_line="user nobody nogroup;"
		chmod 755 "$NGINX_DIR"
	fi
	port=$(free_port)
	sed -e "s|@PREFIX@|$NGINX_DIR|g" -e "s|@PORT@|$port|g" -e "s|@USER_LINE@|$user_line|" \
		"$REPO/bench/nginx.conf.in" >"$NGINX_DIR/nginx.conf"
	"$NGINX" -p "$NGINX_DIR" -e "$NGINX_DIR/error.log" -c "$NGINX_DIR/nginx.conf" -q
	for _ in $(seq 50); do
		[ -s "$NGINX_DIR/nginx.pid" ] && break
		sleep 0.1
	done
	export NGINX_PORT=$port NGINX_DIR
	export NGINX_PID=$(cat "$NGINX_DIR/nginx.pid")
	log "nginx on 127.0.0.1:$port (prefix $NGINX_DIR)"
}

cluster_start bench "$BENCH_PORT" \
	"fsync = on" \
	"synchronous_commit = on" \
	"shared_buffers = 256MB" \
	"max_wal_size = 4GB" \
	"checkpoint_timeout = 15min" \
	"log_timezone = 'UTC'" \
	"shared_preload_libraries = 'jobflow,pg_stat_statements'" \
	"pg_stat_statements.track = 'all'"
psql -X -q -d jobflow -c "CREATE EXTENSION pg_stat_statements" >/dev/null
start_nginx

export CLUSTER_LOG="$CLUSTER_DIR/postgres.log"
"$PYTHON" "$REPO/bench/dispatcher.py"
