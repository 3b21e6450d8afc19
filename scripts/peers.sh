# scripts/peers.sh: pg_net and pg_cron built from source, for the tests that
# run jobflow beside them: the same application code against pg_net and
# against jobflow_net (test/integration/test_pg_net_compat.py), and
# jobflow.import_pg_cron() over pg_cron's jobs
# (test/integration/test_import_pg_cron.py).
#
# Sourced by test.sh after lib.sh and pgsrc.sh (it uses PGSRC_CACHE_ROOT).
# The source archives come from ../shared/peers/ beside the clone
# (JOBFLOW_PEER_SOURCES overrides the directory); pg_net needs libcurl's
# headers (libcurl4-openssl-dev), which jobflow's own build needs too.  Each
# is built once per PostgreSQL installation into a cache directory outside
# the clone, keyed by the archive's checksum, the major version and the
# pg_config (the same major of another installation has other paths in its
# Makefile.global), and installed from there into the installation the
# tests run (as jobflow is, with $SUDO where its directories are not ours,
# as for Debian's 15): installing again is a copy.  On Debian's 15 pg_cron
# is the package postgresql-15-cron (1.4.2), as installed.
#
#   pgnet_install PG_CONFIG    pg_net into that installation; exports
#                              JOBFLOW_PG_NET=1
#   pgcron_install PG_CONFIG   pg_cron into it; exports JOBFLOW_PG_CRON=1
#
# The exported variables make the tests fail rather than skip when the
# extension is missing.

PEER_SOURCES=${JOBFLOW_PEER_SOURCES:-$REPO/../shared/peers}

# peer_install NAME PG_CONFIG: build NAME-*.tar.gz (unless cached) and
# install it into the installation of that pg_config
peer_install() {
	local name=$1 pgc=$2 tarball="" t major sum dir start sudo
	for t in "$PEER_SOURCES/$name"-*.tar.gz; do
		[ -f "$t" ] && tarball=$t
	done
	[ -n "$tarball" ] || { echo "$name: no $name-*.tar.gz in $PEER_SOURCES"; return 1; }
	major=$("$pgc" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
	sum=$(sha256sum "$tarball" | cut -c1-16)
	dir="$PGSRC_CACHE_ROOT/$name-$major-$sum-$(echo "$pgc" | sha256sum | cut -c1-8)"
	if [ ! -f "$dir/.complete" ]; then
		start=$(date +%s)
		echo "$name: building $(basename "$tarball") for PostgreSQL $major into $dir"
		rm -rf "$dir"
		mkdir -p "$dir"
		tar -xzf "$tarball" -C "$dir" --strip-components=1
		make -s -C "$dir" PG_CONFIG="$pgc" >"$dir/build.log" 2>&1 \
			|| { tail -40 "$dir/build.log"; rm -rf "$dir"; return 1; }
		touch "$dir/.complete"
		echo "$name: built in $(( $(date +%s) - start ))s"
	fi
	# as build_and_install (lib.sh): a private installation needs no sudo
	sudo=${SUDO:-}
	[ -w "$("$pgc" --pkglibdir)" ] && sudo=""
	$sudo make -s -C "$dir" PG_CONFIG="$pgc" install >>"$dir/build.log" 2>&1 \
		|| { tail -40 "$dir/build.log"; return 1; }
}

# pgnet_install PG_CONFIG
pgnet_install() {
	peer_install pg_net "$1" || return 1
	export JOBFLOW_PG_NET=1
}

# pgcron_install PG_CONFIG
pgcron_install() {
	local pgc=$1
	if [ -f "$("$pgc" --sharedir)/extension/pg_cron.control" ] \
		&& [ "$("$pgc" --bindir)" = /usr/lib/postgresql/15/bin ]; then
		export JOBFLOW_PG_CRON=1		# Debian's postgresql-15-cron
		return 0
	fi
	peer_install pg_cron "$pgc" || return 1
	export JOBFLOW_PG_CRON=1
}
