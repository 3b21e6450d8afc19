# scripts/pgnet.sh: pg_net built from source, for the tests that run the
# same application code against pg_net and against jobflow_net
# (test/integration/test_pg_net_compat.py).
#
# Sourced by test.sh after lib.sh and pgsrc.sh (it uses PGSRC_CACHE_ROOT).
# The source archive comes from ../shared/peers/ beside the clone
# (JOBFLOW_PEER_SOURCES overrides the directory); it needs libcurl's
# headers (libcurl4-openssl-dev), which jobflow's own build needs too.
# pg_net is built once per PostgreSQL installation into a cache directory
# outside the clone, keyed by the archive's checksum and the major version,
# and installed from there into the installation the tests run (as jobflow
# is, with $SUDO where its directories are not ours, as for Debian's 15):
# installing again is a copy.
#
#   pgnet_install PG_CONFIG   build (unless cached) and install pg_net into
#                             the installation of that pg_config; exports
#                             JOBFLOW_PG_NET=1, which makes the test fail
#                             rather than skip when pg_net is missing

PEER_SOURCES=${JOBFLOW_PEER_SOURCES:-$REPO/../shared/peers}

# pgnet_tarball: the pg_net source archive, or nothing
pgnet_tarball() {
	local t
	for t in "$PEER_SOURCES"/pg_net-*.tar.gz; do
		[ -f "$t" ] && { echo "$t"; return 0; }
	done
	return 1
}

# pgnet_install PG_CONFIG
pgnet_install() {
	local pgc=$1 tarball major sum dir start sudo
	tarball=$(pgnet_tarball) || { echo "pg_net: no pg_net-*.tar.gz in $PEER_SOURCES"; return 1; }
	major=$("$pgc" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
	sum=$(sha256sum "$tarball" | cut -c1-16)
	# the same major of another installation (Debian's, a cached build)
	# has other paths in its Makefile.global: key the build by both
	dir="$PGSRC_CACHE_ROOT/pg_net-$major-$sum-$(echo "$pgc" | sha256sum | cut -c1-8)"
	if [ ! -f "$dir/.complete" ]; then
		start=$(date +%s)
		echo "pg_net: building $(basename "$tarball") for PostgreSQL $major into $dir"
		rm -rf "$dir"
		mkdir -p "$dir"
		tar -xzf "$tarball" -C "$dir" --strip-components=1
		make -s -C "$dir" PG_CONFIG="$pgc" >"$dir/build.log" 2>&1 \
			|| { tail -40 "$dir/build.log"; rm -rf "$dir"; return 1; }
		touch "$dir/.complete"
		echo "pg_net: built in $(( $(date +%s) - start ))s"
	fi
	# as build_and_install (lib.sh): a private installation needs no sudo
	sudo=${SUDO:-}
	[ -w "$("$pgc" --pkglibdir)" ] && sudo=""
	$sudo make -s -C "$dir" PG_CONFIG="$pgc" install >>"$dir/build.log" 2>&1 \
		|| { tail -40 "$dir/build.log"; return 1; }
	export JOBFLOW_PG_NET=1
}
