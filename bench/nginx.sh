# bench/nginx.sh: the private nginx receiver of the benchmarks, sourced by
# the bench/*.sh scripts after scripts/lib.sh; bench_start (at the end)
# also starts the cluster of the W2-style ones.
#
# nginx_install installs nginx-light with apt-get when it is missing (with
# the packages scripts/lib.sh wants); start_nginx runs nginx on free ports
# of 127.0.0.1 from a private prefix under $TMPDIR (bench/nginx.conf.in: 200
# to any path, one access-log line per request with its arrival as $msec),
# plain HTTP on NGINX_PORT, HTTPS on NGINX_TLS_PORT and HTTPS offering HTTP/2
# on NGINX_H2_PORT, with a certificate for 127.0.0.1 signed by a test CA made
# for the run (NGINX_CA_FILE, the PEM file a client trusts), and exports
# those with NGINX_DIR and NGINX_PID; stop_nginx stops it and removes the
# prefix (kept with JOBFLOW_KEEP_CLUSTER=1).  The caller traps stop_nginx on
# EXIT.

NGINX=${NGINX:-/usr/sbin/nginx}
NGINX_DIR=""

nginx_install() {
	ensure_packages nginx-light openssl
}

# A free TCP port on 127.0.0.1 for nginx (never 80).
free_port() {
	"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# make_test_ca DIR: a throwaway CA (DIR/ca.pem) and a certificate for
# 127.0.0.1 signed by it (DIR/server.pem, DIR/server.key), RSA 2048 as most
# receivers' certificates are, valid for two days.  Everyone may read the CA
# and the certificate (the cluster may run as another user); the keys stay
# private to the nginx master, which reads them before it drops privileges.
make_test_ca() {
	local d=$1
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=jobflow bench CA" \
		-keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
		-keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
	printf 'subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n' >"$d/server.ext"
	openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
		-CAcreateserial -days 2 -extfile "$d/server.ext" -out "$d/server.pem" 2>/dev/null
	chmod 755 "$d"
	chmod 644 "$d/ca.pem" "$d/server.pem"
	chmod 600 "$d/ca.key" "$d/server.key"
}

start_nginx() {
	local port tls_port h2_port user_line=""
	NGINX_DIR=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-bench-nginx.XXXXXX")
	mkdir -p "$NGINX_DIR/tmp"
	if [ "$(id -u)" = 0 ]; then
		# the master stays root (it opens the logs); workers run as nobody
		user_line="user nobody nogroup;"
	fi
	# the cluster's user reads the CA file in here
	chmod 755 "$NGINX_DIR"
	make_test_ca "$NGINX_DIR/tls"
	port=$(free_port)
	tls_port=$(free_port)
	h2_port=$(free_port)
	while [ "$tls_port" = "$port" ]; do tls_port=$(free_port); done
	while [ "$h2_port" = "$port" ] || [ "$h2_port" = "$tls_port" ]; do h2_port=$(free_port); done
	sed -e "s|@PREFIX@|$NGINX_DIR|g" -e "s|@PORT@|$port|g" -e "s|@TLS_PORT@|$tls_port|g" \
		-e "s|@H2_PORT@|$h2_port|g" -e "s|@USER_LINE@|$user_line|" \
		"$REPO/bench/nginx.conf.in" >"$NGINX_DIR/nginx.conf"
	"$NGINX" -p "$NGINX_DIR" -e "$NGINX_DIR/error.log" -c "$NGINX_DIR/nginx.conf" -q
	for _ in $(seq 50); do
		[ -s "$NGINX_DIR/nginx.pid" ] && break
		sleep 0.1
	done
	NGINX_PORT=$port
	NGINX_TLS_PORT=$tls_port
	NGINX_H2_PORT=$h2_port
	NGINX_CA_FILE=$NGINX_DIR/tls/ca.pem
	NGINX_PID=$(cat "$NGINX_DIR/nginx.pid")
	export NGINX_PORT NGINX_TLS_PORT NGINX_H2_PORT NGINX_CA_FILE NGINX_DIR NGINX_PID
	log "nginx on 127.0.0.1: http $port, https $tls_port, https+h2 $h2_port (prefix $NGINX_DIR)"
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

# bench_start NAME PORT: what the W2-style benchmarks (indexes.sh, quiet.sh,
# keys.sh) share: nginx and jobflow installed (unless SKIP_BUILD=1), both
# stopped on exit, nginx started, and a throwaway cluster NAME on PORT with
# production-like durability (fsync and synchronous_commit on) and
# autovacuum off, so that every run starts from the same point, trusting
# nginx's test CA
bench_start() {
	local name=$1 port=$2
	nginx_install
	[ -n "${SKIP_BUILD:-}" ] || build_and_install
	set_pgbin
	trap 'stop_nginx; cluster_remove' EXIT
	trap 'exit 130' INT TERM
	start_nginx
	cluster_start "$name" "$port" \
		"fsync = on" \
		"synchronous_commit = on" \
		"shared_buffers = 256MB" \
		"max_wal_size = 4GB" \
		"checkpoint_timeout = 15min" \
		"autovacuum = off" \
		"log_timezone = 'UTC'" \
		"max_worker_processes = 32" \
		"jobflow.allow_networks = '127.0.0.0/8, ::1/128'" \
		"jobflow.database_name = 'jobflow'" \
		"jobflow.tls_ca_file = '$NGINX_CA_FILE'"
}
