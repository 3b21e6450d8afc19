# scripts/pgsrc.sh: PostgreSQL 14, 16, 17 and 18 from source, built once into a cache.
#
# Sourced by test.sh after lib.sh.  Debian 12 packages PostgreSQL 15 only;
# the other maintained majors come as source tarballs in ../shared/postgres/
# beside the clone (JOBFLOW_PG_SOURCES overrides the directory).  Each is
# built once into a cache directory outside the clone, keyed by the
# tarball's checksum, and reused while that directory is there.
#
# 18 runs the whole suite, timing tests included, so it is built as a
# release build is (-O2).  14, 16 and 17 run the unit, pg_regress and pgTAP
# suites, the smoke subset of the integration tests and the pg_upgrade
# tests: they are built without optimisation, which takes a quarter of the
# time on two cores.

PG_SOURCES=${JOBFLOW_PG_SOURCES:-$REPO/../shared/postgres}
if [ "$(id -u)" = 0 ]; then
	PGSRC_CACHE_ROOT=${JOBFLOW_CACHE:-/var/cache/jobflow}
else
	PGSRC_CACHE_ROOT=${JOBFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobflow}
fi

# pgsrc_tarball MAJOR: the source tarball of that major, or nothing
pgsrc_tarball() {
	local t
	for t in "$PG_SOURCES/postgresql-$1".*.tar.gz; do
		[ -f "$t" ] && { echo "$t"; return 0; }
	done
	return 1
}

# pgsrc_cflags MAJOR: the compiler flags of that major's build
pgsrc_cflags() {
	if [ "$1" = 18 ]; then echo "-O2"; else echo "-O0"; fi
}

# pgsrc_dir MAJOR: the cache directory of that major's build
pgsrc_dir() {
	local sum
	sum=$(sha256sum "$(pgsrc_tarball "$1")" | cut -c1-16)
	echo "$PGSRC_CACHE_ROOT/pg-$1-$sum"
}

# pgsrc_ready MAJOR: true when the cache holds a complete build of the
# tarball with today's flags (a build from before flags were recorded is
# the -O2 build)
pgsrc_ready() {
	local dir flags
	dir=$(pgsrc_dir "$1")
	[ -x "$dir/bin/pg_config" ] && [ -f "$dir/.complete" ] || return 1
	flags=$(cat "$dir/.flags" 2>/dev/null || echo "-O2")
	[ "$flags" = "$(pgsrc_cflags "$1")" ]
}

# pgsrc_build MAJOR: builds that major into its cache directory unless it
# is there; prints how long it took.  The packages it needs must be
# installed first (pgsrc_packages).
pgsrc_build() {
	local major=$1 dir src start cflags
	dir=$(pgsrc_dir "$major")
	if pgsrc_ready "$major"; then
		echo "PostgreSQL $major: cached build in $dir"
		return 0
	fi
	cflags=$(pgsrc_cflags "$major")
	start=$(date +%s)
	echo "PostgreSQL $major: building $(basename "$(pgsrc_tarball "$major")") with $cflags into $dir"
	rm -rf "$dir"
	mkdir -p "$dir"
	src=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-pg$major-src.XXXXXX")
	tar -xzf "$(pgsrc_tarball "$major")" -C "$src"
	(
		cd "$src/postgresql-$major".*
		CFLAGS="$cflags" ./configure --prefix="$dir" --without-icu --without-readline --with-openssl \
			>"$dir/configure.log" 2>&1 || { tail -40 "$dir/configure.log"; exit 1; }
		make -s -j"$(nproc)" >"$dir/build.log" 2>&1 || { tail -60 "$dir/build.log"; exit 1; }
		make -s install >>"$dir/build.log" 2>&1 || { tail -60 "$dir/build.log"; exit 1; }
	) || { rm -rf "$src"; return 1; }
	rm -rf "$src"
	echo "$cflags" >"$dir/.flags"
	touch "$dir/.complete"
	echo "PostgreSQL $major: built in $(($(date +%s) - start)) s"
}

# The packages the builds need (17 and 18 need bison and flex).
pgsrc_packages() { echo bison flex libssl-dev zlib1g-dev pkg-config; }
