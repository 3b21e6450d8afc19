# scripts/pg18.sh: PostgreSQL 18 from source, built once into a cache.
#
# Sourced by test.sh after lib.sh.  The source tarball sits in
# ../shared/postgres/ beside the clone (JOBFLOW_PG18_TARBALL overrides it);
# it is built once into a cache directory outside the clone, keyed by the
# tarball's checksum, and reused while that directory is there.

PG18_TARBALL=${JOBFLOW_PG18_TARBALL:-$REPO/../shared/postgres/postgresql-18.3.tar.gz}
if [ "$(id -u)" = 0 ]; then
	PG18_CACHE_ROOT=${JOBFLOW_CACHE:-/var/cache/jobflow}
else
	PG18_CACHE_ROOT=${JOBFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobflow}
fi

# pg18_available: true when the tarball is there
pg18_available() { [ -f "$PG18_TARBALL" ]; }

# ensure_pg18: sets PG18_CONFIG, building PostgreSQL 18 first when the cache
# holds no build of this tarball.  Build time goes to stdout.
ensure_pg18() {
	local sum dir src start
	sum=$(sha256sum "$PG18_TARBALL" | cut -c1-16)
	dir="$PG18_CACHE_ROOT/pg-18-$sum"
	PG18_CONFIG="$dir/bin/pg_config"
	if [ -x "$PG18_CONFIG" ] && [ -f "$dir/.complete" ]; then
		log "PostgreSQL 18: cached build in $dir"
		return 0
	fi
	ensure_packages bison flex libssl-dev zlib1g-dev pkg-config
	start=$(date +%s)
	log "PostgreSQL 18: building $(basename "$PG18_TARBALL") into $dir (once)"
	rm -rf "$dir"
	mkdir -p "$dir"
	src=$(mktemp -d "${TMPDIR:-/tmp}/jobflow-pg18-src.XXXXXX")
	tar -xzf "$PG18_TARBALL" -C "$src"
	(
		cd "$src"/postgresql-18*
		./configure --prefix="$dir" --without-icu --without-readline --with-openssl \
			>"$dir/configure.log" 2>&1 || { tail -40 "$dir/configure.log"; exit 1; }
		make -s -j"$(nproc)" >"$dir/build.log" 2>&1 || { tail -60 "$dir/build.log"; exit 1; }
		make -s install >>"$dir/build.log" 2>&1 || { tail -60 "$dir/build.log"; exit 1; }
	) || { rm -rf "$src"; return 1; }
	rm -rf "$src"
	touch "$dir/.complete"
	log "PostgreSQL 18: built in $(($(date +%s) - start)) s"
}
