#!/usr/bin/env bash
# scripts/test.sh: jobflow's whole test suite, from a fresh machine.
#
# Installs what is missing, then for each server under test builds and
# installs jobflow, starts a throwaway cluster, runs the C unit tests,
# pg_regress (sql/, expected/), pgTAP (test/pgtap) and the integration
# tests (test/integration, real worker, real HTTP receiver on 127.0.0.1,
# including the upgrade from 0.1.0), and always stops the cluster.
#
# Servers: Debian's PostgreSQL 15, and 18, 16, 17 and 14 built once each
# from the tarballs in ../shared/postgres/ into a cache (scripts/pgsrc.sh),
# in the background at idle priority while 15 is tested.  15 and 18 run
# every suite; 14, 16 and 17 run the unit, pg_regress and pgTAP suites
# and the smoke subset of the integration tests (pytest -m smoke).  Then
# the pg_upgrade tests between the built majors (test/majors), the HA test
# under Patroni on 15 (test/ha), and once per run the checks of test/meta
# and, in CI (CI=true) or when JOBFLOW_SUITES names it, the Debian package
# test (test/package.sh).  A major whose tarball is missing is said to be
# untested in one line.  An explicit PG_CONFIG tests that server only (every
# suite); JOBFLOW_SERVERS picks majors (default "15 18 16 17 14").
# The summary gives the time of each part; the last line is
# "suites: N passed, M failed" over every server.
EXPLICIT_PG_CONFIG=${PG_CONFIG:-}
source "$(dirname "$0")/lib.sh"
source "$REPO/scripts/pgsrc.sh"
source "$REPO/scripts/peers.sh"

RUN_START=$(date +%s)
passed=0
failed=0
failed_names=()
timings=()

# suite NAME COMMAND...: runs one suite, counts and times it
suite() {
	local name=$1 start rc=0
	shift
	log "suite: $name"
	start=$(date +%s)
	"$@" || rc=$?
	timings+=("$(printf '%-22s %4d s' "$name" $(($(date +%s) - start)))")
	if [ "$rc" = 0 ]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failed_names+=("$name")
	fi
}

# timed LABEL COMMAND...: times a step that is not a suite
timed() {
	local label=$1 start
	shift
	start=$(date +%s)
	"$@"
	timings+=("$(printf '%-22s %4d s' "$label" $(($(date +%s) - start)))")
}

# The regression tests expect no worker in their database (they stand in
# for it): a template database is never served, so they run in one.
regress() {
	local rc=0
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS contrib_regression" \
		-c "CREATE DATABASE contrib_regression IS_TEMPLATE true" >/dev/null || return 1
	psql -X -q -d contrib_regression -c "SET client_min_messages = error" \
		-c "CREATE EXTENSION jobflow" >/dev/null || return 1
	make -C "$REPO" -s installcheck PG_CONFIG="$PG_CONFIG" EXTRA_REGRESS_OPTS=--use-existing || {
		cat "$REPO/regression.diffs" 2>/dev/null | head -200
		rc=1
	}
	psql -X -q -d postgres -c "ALTER DATABASE contrib_regression IS_TEMPLATE false" \
		-c "DROP DATABASE contrib_regression" >/dev/null || rc=1
	return $rc
}

# pgTAP is plain SQL: Debian packages it for 15 only, so its files are
# copied into the share directory of any other server under test.
ensure_pgtap() {
	local dest
	dest="$("$PG_CONFIG" --sharedir)/extension"
	[ -f "$dest/pgtap.control" ] && return 0
	$SUDO cp /usr/share/postgresql/15/extension/pgtap* "$dest/"
}

pgtap() {
	ensure_pgtap
	psql -X -q -d jobflow -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
	pg_prove -d jobflow "$REPO"/test/pgtap/*.sql
}

# The signature tests verify callbacks with the standardwebhooks reference
# library (test/node/package.json, versions pinned by its lock file),
# installed once into test/node/node_modules (not in git).
ensure_node_modules() {
	[ -d "$REPO/test/node/node_modules/standardwebhooks" ] && return 0
	if ! command -v npm >/dev/null; then
		$SUDO apt-get update -q
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm
	fi
	log "installing test/node (npm ci)"
	(cd "$REPO/test/node" && npm ci --no-audit --no-fund --loglevel=error)
}

# JOBFLOW_PYTEST_ARGS narrows the integration tests while developing,
# e.g. "test/integration/test_hosts.py -k slow"
integration() {
	local rc=0 steal0 start
	ensure_node_modules || return 1
	steal0=$(steal_ms)
	start=$(date +%s)
	# shellcheck disable=SC2086
	(cd "$REPO" && "$PYTHON" -m pytest -q -p no:cacheprovider ${JOBFLOW_PYTEST_ARGS:-test/integration} "$@") || rc=$?
	[ "$rc" = 0 ] && return 0
	# what a red run needs to be read: how much CPU the host took away
	# from this machine (timing tests fail on a correct build when it is
	# starved), and what the server logged of jobflow and of errors
	echo "the host took $(( ($(steal_ms) - steal0) / 1000 )) s of CPU time (steal, all CPUs)" \
		"from this machine during the suite's $(( $(date +%s) - start )) s"
	if [ -f "$CLUSTER_DIR/postgres.log" ]; then
		echo "-- the server log's last lines about jobflow and errors:"
		grep -E "jobflow|ERROR|FATAL|PANIC" "$CLUSTER_DIR/postgres.log" | tail -60
	fi
	return "$rc"
}

# steal_ms: the CPU time the hypervisor gave to others, over all CPUs,
# since boot (0 where /proc/stat has no steal column)
steal_ms() {
	awk '/^cpu /{ print ($9 + 0) * 10; exit }' /proc/stat
}

meta() {
	(cd "$REPO" && "$PYTHON" -m pytest -q -p no:cacheprovider test/meta)
}

# JOBFLOW_SUITES picks suites while developing (default: all of them;
# "package" only in CI unless named)
wanted() {
	local all="unit regress pgtap integration ha majors meta"
	[ "${CI:-}" = true ] && all="$all package"
	[[ " ${JOBFLOW_SUITES:-$all} " == *" $1 "* ]]
}

# test_server LABEL PG_CONFIG PORT [smoke]: the per-server suites on one
# cluster; "smoke" runs the integration tests marked smoke only
test_server() {
	local label=$1 port=$3 smoke=${4:-}
	PG_CONFIG=$2
	log "testing on $label ($("$PG_CONFIG" --version))"
	timed "$label jobflow build" build_and_install || {
		failed=$((failed + 1))
		failed_names+=("$label/build")
		return 0
	}
	# pg_net beside jobflow_net (test_pg_net_compat.py) and pg_cron for the
	# importer (test_import_pg_cron.py), from ../shared/peers
	timed "$label pg_net build" pgnet_install "$PG_CONFIG" || {
		failed=$((failed + 1))
		failed_names+=("$label/pg_net")
		return 0
	}
	timed "$label pg_cron build" pgcron_install "$PG_CONFIG" || {
		failed=$((failed + 1))
		failed_names+=("$label/pg_cron")
		return 0
	}
	# circuits off: many tests fail requests on purpose, and a circuit opened
	# by one would hold the next one's tasks; test_circuits.py turns them on
	cluster_start "test$label" "$port" \
		"fsync = off" \
		"max_prepared_transactions = 10" \
		"jobflow.retry_backoff_base = 200ms" \
		"jobflow.retry_backoff_max = 2s" \
		"jobflow.reconcile_interval = 1s" \
		"jobflow.circuit_failures = 0" \
		"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"
	# the unit tests need no server: once per run
	if wanted unit && [ -z "${UNIT_DONE:-}" ]; then
		suite unit make -C "$REPO/test/unit" -s check
		UNIT_DONE=1
	fi
	wanted regress && suite "$label/regress" regress
	wanted pgtap && suite "$label/pgtap" pgtap
	if wanted integration; then
		if [ -n "$smoke" ]; then
			suite "$label/smoke" integration -m smoke
		else
			suite "$label/integration" integration
		fi
	fi
	cluster_remove
	CLUSTER_DIR=""
}

# kill_tree PID: that process and everything it started
kill_tree() {
	local c
	for c in $(pgrep -P "$1"); do kill_tree "$c"; done
	kill "$1" 2>/dev/null || true
}

# On any exit: the cluster under test stops, the background builds too.
cleanup() {
	cluster_remove
	[ -z "${BUILD_PID:-}" ] || kill_tree "$BUILD_PID"
}
trap cleanup EXIT

# The builds of 18, 16, 17 and 14 run in the background at idle priority
# (SCHED_IDLE: they get only what the tests leave of the CPUs), one after
# the other, while 15 is tested; each writes its exit status and duration
# to BUILD_DIR/pgN.done, its output to BUILD_DIR/pgN.log.
start_builds() {
	BUILD_DIR=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-builds.XXXXXX")
	(
		trap - EXIT
		for m in "$@"; do
			start=$(date +%s)
			rc=0
			chrt --idle 0 nice -n 19 bash -c "source '$REPO/scripts/lib.sh'; source '$REPO/scripts/pgsrc.sh'; pgsrc_build $m" \
				>"$BUILD_DIR/pg$m.log" 2>&1 || rc=$?
			echo "$rc $(($(date +%s) - start))" >"$BUILD_DIR/pg$m.done"
		done
	) &
	BUILD_PID=$!
}

# wait_build MAJOR: waits for that major's build; true when it succeeded
wait_build() {
	local m=$1 start rc secs
	start=$(date +%s)
	while [ ! -f "$BUILD_DIR/pg$m.done" ]; do
		kill -0 "$BUILD_PID" 2>/dev/null || break
		sleep 2
	done
	read -r rc secs <"$BUILD_DIR/pg$m.done" 2>/dev/null || { rc=1; secs=0; }
	cat "$BUILD_DIR/pg$m.log"
	timings+=("$(printf '%-22s %4d s' "pg$m server build" "$secs") (background; waited $(($(date +%s) - start)) s)")
	if [ "$rc" != 0 ]; then
		failed=$((failed + 1))
		failed_names+=("pg$m/server-build")
		return 1
	fi
}

# build_ok MAJOR: that major was built here in this run
build_ok() { [ "$(cut -d' ' -f1 "$BUILD_DIR/pg$1.done" 2>/dev/null)" = 0 ]; }

# The smoke subset, the pg_upgrade tests and the HA test (pytest suites
# of their own), with what they are run on.
majors_suite() {
	(cd "$REPO" && JOBFLOW_UPGRADE_PAIRS="$*" "$PYTHON" -m pytest -q -p no:cacheprovider test/majors)
}
ha_suite() {
	(cd "$REPO" && JOBFLOW_PGBIN="$1" JOBFLOW_RUN_USER="$RUN_USER" JOBFLOW_HA_PORT="$((PORT + 200))" \
		"$PYTHON" -m pytest -q -p no:cacheprovider test/ha)
}

# shellcheck disable=SC2046
timed "packages (apt-get)" ensure_packages prometheus prometheus-postgres-exporter python3-prometheus-client python3-yaml \
	postgresql-15-cron nginx-light openssl pgbouncer patroni etcd-server $(pgsrc_packages)
PORT=${JOBFLOW_TEST_PORT:-54329}
if [ -n "$EXPLICIT_PG_CONFIG" ]; then
	test_server "pg$("$EXPLICIT_PG_CONFIG" --version | sed 's/[^0-9]*\([0-9]*\).*/\1/')" "$EXPLICIT_PG_CONFIG" "$PORT"
else
	servers=" ${JOBFLOW_SERVERS:-15 18 16 17 14} "
	BUILD_DIR=""
	built=()
	for m in 18 16 17 14; do
		[[ "$servers" == *" $m "* ]] || continue
		if pgsrc_tarball "$m" >/dev/null; then
			built+=("$m")
		else
			echo "PostgreSQL $m: no source in $PG_SOURCES, not tested"
		fi
	done
	start_builds "${built[@]}"
	if [[ "$servers" == *" 15 "* ]]; then
		test_server pg15 /usr/lib/postgresql/15/bin/pg_config "$PORT"
		wanted ha && [ -d "$REPO/test/ha" ] && suite pg15/ha ha_suite /usr/lib/postgresql/15/bin
	fi
	offset=1
	for m in "${built[@]}"; do
		if wait_build "$m"; then
			if [ "$m" = 18 ]; then
				test_server pg18 "$(pgsrc_dir 18)/bin/pg_config" "$((PORT + offset))"
			else
				test_server "pg$m" "$(pgsrc_dir "$m")/bin/pg_config" "$((PORT + offset))" smoke
			fi
		fi
		offset=$((offset + 1))
	done
	# major upgrades between the source builds (Debian's 15 cannot be
	# upgraded to the 18.3 build: see docs/upgrading.md)
	pairs=()
	for p in "16 17 copy,link" "14 17 copy" "17 18 copy,link"; do
		# shellcheck disable=SC2086
		set -- $p
		build_ok "$1" && build_ok "$2" &&
			pairs+=("$(pgsrc_dir "$1")/bin/pg_config:$(pgsrc_dir "$2")/bin/pg_config:$3")
	done
	if wanted majors && [ ${#pairs[@]} -gt 0 ] && [ -d "$REPO/test/majors" ]; then
		suite pg_upgrade majors_suite "${pairs[@]}"
	fi
	rm -rf "$BUILD_DIR"
fi
wanted meta && suite meta meta
wanted package && suite package "$REPO/test/package.sh"

log "summary"
printf '%s\n' "${timings[@]}"
echo "total                  $(($(date +%s) - RUN_START)) s"
[ ${#failed_names[@]} -gt 0 ] && echo "failed suites: ${failed_names[*]}"
echo "suites: $passed passed, $failed failed"
[ "$failed" = 0 ]
