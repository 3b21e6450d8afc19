# scripts/lib.sh: shared by test.sh, demo.sh and the benchmarks.
#
# Installs what is missing, builds and installs jobflow, and runs a
# throwaway PostgreSQL cluster with jobflow preloaded.  PostgreSQL refuses
# to run as root, so when invoked as root the server runs as the "postgres"
# OS user from a private directory under /tmp; otherwise it runs as the
# invoking user from .run/ in the repository.  Clients connect over a unix
# socket in that directory, on a private port: nothing listens on TCP.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# PG_CONFIG selects the server to build and test against (default: Debian's 15)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
PYTHON=/usr/bin/python3

if [ "$(id -u)" = 0 ]; then
	SUDO=""
	RUN_USER=postgres
else
	SUDO="sudo"
	RUN_USER=$(id -un)
fi

log() { printf '\n== %s\n' "$*"; }

# Run a command as the user that owns the server.
as_server_user() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u "$RUN_USER" -- "$@"
	else
		"$@"
	fi
}

# Install, with apt-get, the Debian packages that are not there yet.
ensure_packages() {
	local wanted=(make gcc postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev
		postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
		python3 python3-psycopg2 python3-pytest libkrb5-dev "$@")
	local missing=()
	local p
	for p in "${wanted[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		$SUDO apt-get update -q
		# packages install services (nginx's on port 80, a cluster) that we
		# never use: keep them from starting, as in a container image
		local policy=""
		if [ ! -e /usr/sbin/policy-rc.d ]; then
			policy=/usr/sbin/policy-rc.d
			printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
			$SUDO chmod 755 "$policy"
		fi
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
			{ [ -z "$policy" ] || $SUDO rm -f "$policy"; return 1; }
		[ -z "$policy" ] || $SUDO rm -f "$policy"
	fi
	# Debian's postgresql package may start its own cluster; we never use it.
}

# The server's binaries, once PG_CONFIG's server is installed.
set_pgbin() {
	PGBIN=$("$PG_CONFIG" --bindir)
	export PG_CONFIG PGBIN
}

build_and_install() {
	local sudo=$SUDO
	set_pgbin
	log "building jobflow against $("$PG_CONFIG" --version)"
	make -C "$REPO" -s clean PG_CONFIG="$PG_CONFIG" >/dev/null
	make -C "$REPO" -s PG_CONFIG="$PG_CONFIG"
	# a private installation (PG_CONFIG in a directory of ours) needs no sudo
	[ -w "$("$PG_CONFIG" --pkglibdir)" ] && sudo=""
	$sudo make -C "$REPO" -s install PG_CONFIG="$PG_CONFIG" >/dev/null
}

# cluster_start NAME PORT [extra postgresql.conf lines...]
# Sets PGHOST, PGPORT, PGUSER, CLUSTER_DIR; the caller must trap cluster_stop.
cluster_start() {
	local name=$1 port=$2
	shift 2
	if [ "$(id -u)" = 0 ]; then
		CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-$name.XXXXXX")
		chown "$RUN_USER" "$CLUSTER_DIR"
	else
		CLUSTER_DIR="$REPO/.run/$name"
		rm -rf "$CLUSTER_DIR"
		mkdir -p "$CLUSTER_DIR"
	fi
	export CLUSTER_DIR
	as_server_user mkdir -p "$CLUSTER_DIR/sock"
	as_server_user "$PGBIN/initdb" -D "$CLUSTER_DIR/data" -U postgres -A trust \
		--no-sync -E UTF8 --locale=C.UTF-8 >"$CLUSTER_DIR/initdb.log" 2>&1 ||
		{ cat "$CLUSTER_DIR/initdb.log"; return 1; }
	{
		echo "port = $port"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$CLUSTER_DIR/sock'"
		echo "shared_preload_libraries = 'jobflow'"
		echo "max_connections = 50"
		# jobflow: a worker per database served, its launcher and a probe
		echo "max_worker_processes = 16"
		echo "log_line_prefix = '%m [%p] %q%a '"
		local line
		for line in "$@"; do echo "$line"; done
	} | as_server_user tee -a "$CLUSTER_DIR/data/postgresql.conf" >/dev/null
	export PGHOST="$CLUSTER_DIR/sock" PGPORT="$port" PGUSER=postgres PGDATABASE=jobflow
	# for tests that restart the server or kill its processes
	export JOBFLOW_PGDATA="$CLUSTER_DIR/data" JOBFLOW_PGBIN="$PGBIN" JOBFLOW_RUN_USER="$RUN_USER"
	as_server_user "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/postgres.log" -w -t 60 start >/dev/null
	psql -X -q -d postgres -c "CREATE DATABASE jobflow" >/dev/null
	psql -X -q -d jobflow -c "CREATE EXTENSION jobflow" >/dev/null
	# the launcher starts the database's worker at CREATE EXTENSION: wait for it
	local i
	for i in $(seq 100); do
		[ -n "$(psql -X -At -d jobflow -c "SELECT pid FROM jobflow.worker_status() WHERE horizon_end IS NOT NULL")" ] && break
		sleep 0.1
	done
	log "cluster $name running on port $port (socket $PGHOST)"
}

cluster_stop() {
	if [ -n "${CLUSTER_DIR:-}" ] && [ -f "$CLUSTER_DIR/data/postmaster.pid" ]; then
		as_server_user "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
			as_server_user "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate stop >/dev/null 2>&1 || true
	fi
}

# cluster_remove: stop and delete the cluster's files (keeps the log when asked).
cluster_remove() {
	cluster_stop
	if [ -n "${CLUSTER_DIR:-}" ] && [ -d "$CLUSTER_DIR" ] && [ -z "${JOBFLOW_KEEP_CLUSTER:-}" ]; then
		rm -rf "$CLUSTER_DIR"
	fi
}
