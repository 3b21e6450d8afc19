#!/usr/bin/env bash
# scripts/test.sh: jobflow's whole test suite, from a fresh machine.
#
# Installs what is missing, then for each server under test builds and
# installs jobflow, starts a throwaway cluster, runs the C unit tests,
# pg_regress (sql/, expected/), pgTAP (test/pgtap) and the integration
# tests (test/integration, real worker, real HTTP receiver on 127.0.0.1,
# including the upgrade from 0.1.0), and always stops the cluster.
#
# Servers: Debian's PostgreSQL 15 and PostgreSQL 18, built once from
# ../shared/postgres/postgresql-18.3.tar.gz into a cache (scripts/pg18.sh);
# without that tarball, 15 only.  An explicit PG_CONFIG tests that server
# only.  Once per run: the META.json check and, in CI (CI=true) or when
# JOBFLOW_SUITES names it, the Debian package test (test/package.sh).
# The last line is "suites: N passed, M failed" over every server.
EXPLICIT_PG_CONFIG=${PG_CONFIG:-}
source "$(dirname "$0")/lib.sh"
source "$REPO/scripts/pg18.sh"

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
	(cd "$REPO" && "$PYTHON" -m pytest -q -p no:cacheprovider ${JOBFLOW_PYTEST_ARGS:-test/integration}) || rc=$?
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
	local all="unit regress pgtap integration meta"
	[ "${CI:-}" = true ] && all="$all package"
	[[ " ${JOBFLOW_SUITES:-$all} " == *" $1 "* ]]
}

# test_server LABEL PG_CONFIG PORT: the per-server suites on one cluster
test_server() {
	local label=$1 port=$3
	PG_CONFIG=$2
	log "testing on $label ($("$PG_CONFIG" --version))"
	timed "$label build" build_and_install || {
		failed=$((failed + 1))
		failed_names+=("$label/build")
		return 0
	}
	trap cluster_remove EXIT
	cluster_start "test$label" "$port" \
		"fsync = off" \
		"max_prepared_transactions = 10" \
		"jobflow.retry_backoff_base = 200ms" \
		"jobflow.retry_backoff_max = 2s" \
		"jobflow.reconcile_interval = 1s" \
		"jobflow.allow_networks = '127.0.0.0/8, ::1/128'"
	# the unit tests need no server: once per run
	if wanted unit && [ -z "${UNIT_DONE:-}" ]; then
		suite unit make -C "$REPO/test/unit" -s check
		UNIT_DONE=1
	fi
	wanted regress && suite "$label/regress" regress
	wanted pgtap && suite "$label/pgtap" pgtap
	wanted integration && suite "$label/integration" integration
	cluster_remove
	CLUSTER_DIR=""
	trap - EXIT
}

ensure_packages prometheus-postgres-exporter python3-prometheus-client nginx-light openssl
PORT=${JOBFLOW_TEST_PORT:-54329}
if [ -n "$EXPLICIT_PG_CONFIG" ]; then
	test_server "pg$("$EXPLICIT_PG_CONFIG" --version | sed 's/[^0-9]*\([0-9]*\).*/\1/')" "$EXPLICIT_PG_CONFIG" "$PORT"
else
	test_server pg15 /usr/lib/postgresql/15/bin/pg_config "$PORT"
	if pg18_available; then
		timed "pg18 cache/build" ensure_pg18
		test_server pg18 "$PG18_CONFIG" "$((PORT + 1))"
	else
		echo "PostgreSQL 18: no source at $PG18_TARBALL, testing PostgreSQL 15 only"
	fi
fi
wanted meta && suite meta meta
wanted package && suite package "$REPO/test/package.sh"

log "summary"
printf '%s\n' "${timings[@]}"
echo "total                  $(($(date +%s) - RUN_START)) s"
[ ${#failed_names[@]} -gt 0 ] && echo "failed suites: ${failed_names[*]}"
echo "suites: $passed passed, $failed failed"
[ "$failed" = 0 ]
