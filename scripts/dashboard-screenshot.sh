#!/usr/bin/env bash
# scripts/dashboard-screenshot.sh: renders docs/images/dashboard.png, the
# picture of prometheus/jobflow-dashboard.json in docs/operations.md.
#
# Runs test/integration/test_dashboard.py (through scripts/test.sh, on one
# server: PostgreSQL 15 unless PG_CONFIG or JOBFLOW_SERVERS says otherwise)
# with JOBFLOW_DASHBOARD_SCREENSHOT set: 90 s of load instead of 8, then
# every panel drawn from Prometheus' query_range into a static HTML page
# (test/integration/dashboard_render.py) and photographed by headless
# chromium (Debian package chromium, which the test suite never needs).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v chromium >/dev/null; then
	echo "chromium is missing: apt-get install --no-install-recommends chromium" >&2
	exit 1
fi
mkdir -p "$REPO/docs/images"
export JOBFLOW_DASHBOARD_SCREENSHOT="$REPO/docs/images/dashboard.png"
export JOBFLOW_SERVERS=${JOBFLOW_SERVERS:-15}
JOBFLOW_SUITES=integration JOBFLOW_PYTEST_ARGS="test/integration/test_dashboard.py" \
	"$REPO/scripts/test.sh"
ls -l "$JOBFLOW_DASHBOARD_SCREENSHOT"
