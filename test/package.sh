#!/usr/bin/env bash
# test/package.sh: the Debian package, built and used as a user would.
#
# Copies the working tree to a scratch directory (dpkg-buildpackage writes
# its .deb beside the source tree, and build outputs stay out of the
# clone), builds it with dpkg-buildpackage -us -uc -b, installs the
# postgresql-15-jobflow package into Debian's PostgreSQL 15, starts a
# fresh cluster with it preloaded and runs CREATE EXTENSION, checks that
# the files come from the package and that the worker runs, then stops
# the cluster and removes the package.  Needs root (or sudo).
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
source "$(dirname "$0")/../scripts/lib.sh"

ensure_packages debhelper postgresql-server-dev-all build-essential dpkg-dev
set_pgbin

SCRATCH=$(mktemp -d /tmp/jobflow-deb.XXXXXX)
cleanup() {
	cluster_remove
	$SUDO dpkg -r postgresql-15-jobflow >/dev/null 2>&1 || true
	rm -rf "$SCRATCH"
}
trap cleanup EXIT

mkdir "$SCRATCH/jobflow"
(cd "$REPO" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$SCRATCH/jobflow")
log "dpkg-buildpackage -us -uc -b"
(cd "$SCRATCH/jobflow" && dpkg-buildpackage -us -uc -b >"$SCRATCH/build.log" 2>&1) ||
	{ tail -40 "$SCRATCH/build.log"; exit 1; }
deb=$(ls "$SCRATCH"/postgresql-15-jobflow_*.deb)
contents=$(dpkg-deb -c "$deb")
grep -q "usr/lib/postgresql/15/lib/jobflow.so" <<<"$contents" ||
	{ echo "FAIL: $deb has no jobflow.so"; exit 1; }
$SUDO dpkg -i "$deb" >/dev/null

for f in lib/jobflow.so; do
	dpkg -S "/usr/lib/postgresql/15/$f" | grep -q "^postgresql-15-jobflow:" ||
		{ echo "FAIL: /usr/lib/postgresql/15/$f is not the package's"; exit 1; }
done
dpkg -S /usr/share/postgresql/15/extension/jobflow.control | grep -q "^postgresql-15-jobflow:" ||
	{ echo "FAIL: jobflow.control is not the package's"; exit 1; }

cluster_start package "$((${JOBFLOW_TEST_PORT:-54329} + 3))"
got=$(psql -X -At -d jobflow -c "SELECT extversion FROM pg_extension WHERE extname = 'jobflow'")
want=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$REPO/jobflow.control")
[ "$got" = "$want" ] || { echo "FAIL: extension version '$got', expected '$want'"; exit 1; }
pid=$(psql -X -At -d jobflow -c "SELECT pid FROM jobflow.worker_status() WHERE horizon_end IS NOT NULL")
[ -n "$pid" ] || { echo "FAIL: no jobflow worker in the packaged server"; exit 1; }
echo "package: $(basename "$deb") installs; CREATE EXTENSION jobflow gives $got; worker $pid runs"
