# bench/nginx.sh: the private nginx receiver of the benchmarks, sourced by
# bench/dispatcher.sh and bench/retention.sh after scripts/lib.sh.
#
# nginx_install installs nginx-light with apt-get when it is missing (with
# the packages scripts/lib.sh wants); start_nginx runs nginx on a free port
# of 127.0.0.1 from a private prefix under $TMPDIR (bench/nginx.conf.in: 200
# to any path, one access-log line per request with its arrival as $msec)
# and exports NGINX_PORT, NGINX_DIR and NGINX_PID; stop_nginx stops it and
# removes the prefix (kept with JOBFLOW_KEEP_CLUSTER=1).  The caller traps
# stop_nginx on EXIT.

NGINX=${NGINX:-/usr/sbin/nginx}
NGINX_DIR=""

nginx_install() {
	ensure_packages nginx-light
}

# A free TCP port on 127.0.0.1 for nginx (never 80).
free_port() {
	"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_nginx() {
	local port user_line=""
	NGINX_DIR=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-bench-nginx.XXXXXX")
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
	NGINX_PORT=$port
	NGINX_PID=$(cat "$NGINX_DIR/nginx.pid")
	export NGINX_PORT NGINX_DIR NGINX_PID
	log "nginx on 127.0.0.1:$port (prefix $NGINX_DIR)"
}

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
