# scripts/pgcron.sh: pg_cron for the test of jobflow.import_pg_cron()
# (test/integration/test_import_pg_cron.py).
#
# Sourced by test.sh after lib.sh and pgsrc.sh (it uses PGSRC_CACHE_ROOT).
# On Debian's PostgreSQL 15 the package postgresql-15-cron (1.4.2) is
# used as installed.  For every other installation pg_cron is built from
# the source archive in ../shared/peers/ beside the clone
# (JOBFLOW_PEER_SOURCES overrides the directory), once per installation,
# into a cache directory outside the clone keyed by the archive's
# checksum, the major version and the pg_config, and installed from
# there (with $SUDO where the installation's directories are not ours).
#
#   pgcron_install PG_CONFIG   make pg_cron available to the installation
#                              of that pg_config; exports JOBFLOW_PG_CRON=1,
#                              which makes the test fail rather than skip
#                              when pg_cron is missing

PEER_SOURCES=${JOBFLOW_PEER_SOURCES:-$REPO/../shared/peers}

# pgcron_tarball: the pg_cron source archive, or nothing
pgcron_tarball() {
	local t
	for t in "$PEER_SOURCES"/pg_cron-*.tar.gz; do
		[ -f "$t" ] && { echo "$t"; return 0; }
	done
	return 1
}

# pgcron_install PG_CONFIG
pgcron_install() {
	local pgc=$1 tarball major sum dir start sudo
	if [ -f "$("$pgc" --sharedir)/extension/pg_cron.control" ] \
		&& [ "$("$pgc" --bindir)" = /usr/lib/postgresql/15/bin ]; then
		export JOBFLOW_PG_CRON=1		# Debian's postgresql-15-cron
		return 0
	fi
	tarball=$(pgcron_tarball) || { echo "pg_cron: no pg_cron-*.tar.gz in $PEER_SOURCES"; return 1; }
	major=$("$pgc" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
	sum=$(sha256sum "$tarball" | cut -c1-16)
	dir="$PGSRC_CACHE_ROOT/pg_cron-$major-$sum-$(echo "$pgc" | sha256sum | cut -c1-8)"
	if [ ! -f "$dir/.complete" ]; then
		start=$(date +%s)
		echo "pg_cron: building $(basename "$tarball") for PostgreSQL $major into $dir"
		rm -rf "$dir"
		mkdir -p "$dir"
		tar -xzf "$tarball" -C "$dir" --strip-components=1
		make -s -C "$dir" PG_CONFIG="$pgc" >"$dir/build.log" 2>&1 \
			|| { tail -40 "$dir/build.log"; rm -rf "$dir"; return 1; }
		touch "$dir/.complete"
		echo "pg_cron: built in $(( $(date +%s) - start ))s"
	fi
	sudo=${SUDO:-}
	[ -w "$("$pgc" --pkglibdir)" ] && sudo=""
	$sudo make -s -C "$dir" PG_CONFIG="$pgc" install >>"$dir/build.log" 2>&1 \
		|| { tail -40 "$dir/build.log"; return 1; }
	export JOBFLOW_PG_CRON=1
}
