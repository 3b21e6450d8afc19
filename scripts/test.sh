#!/usr/bin/env bash
# scripts/test.sh: jobflow's whole test suite, from a fresh machine.
#
# Installs what is missing, builds, installs, starts a throwaway cluster,
# runs the C unit tests, pg_regress (sql/, expected/), pgTAP (test/pgtap)
# and the integration tests (test/integration, real worker, real HTTP
# receiver on 127.0.0.1), and always stops the cluster.
source "$(dirname "$0")/lib.sh"

ensure_packages
build_and_install

trap cluster_remove EXIT
cluster_start test "${JOBFLOW_TEST_PORT:-54329}" \
	"fsync = off" \
	"jobflow.retry_backoff_base = 200ms" \
	"jobflow.retry_backoff_max = 2s" \
	"jobflow.reconcile_interval = 1s"

passed=0
failed=0
failed_names=()
suite() {
	local name=$1
	shift
	log "suite: $name"
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failed_names+=("$name")
	fi
}

regress() {
	make -C "$REPO" -s installcheck PG_CONFIG="$PG_CONFIG" || {
		cat "$REPO/regression.diffs" 2>/dev/null | head -200
		return 1
	}
}

pgtap() {
	psql -X -q -d jobflow -c "CREATE EXTENSION IF NOT EXISTS pgtap" >/dev/null
	pg_prove -d jobflow "$REPO"/test/pgtap/*.sql
}

# JOBFLOW_PYTEST_ARGS narrows the integration tests while developing,
# e.g. "test/integration/test_hosts.py -k slow"
integration() {
	# shellcheck disable=SC2086
	(cd "$REPO" && "$PYTHON" -m pytest -q -p no:cacheprovider ${JOBFLOW_PYTEST_ARGS:-test/integration})
}

# JOBFLOW_SUITES picks suites while developing (default: all of them)
wanted() { [[ " ${JOBFLOW_SUITES:-unit regress pgtap integration} " == *" $1 "* ]]; }

wanted unit && suite unit make -C "$REPO/test/unit" -s check
wanted regress && suite regress regress
wanted pgtap && suite pgtap pgtap
wanted integration && suite integration integration

log "summary"
[ ${#failed_names[@]} -gt 0 ] && echo "failed suites: ${failed_names[*]}"
echo "suites: $passed passed, $failed failed"
[ "$failed" = 0 ]
