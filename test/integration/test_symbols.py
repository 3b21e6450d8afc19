# -------------------------------------------------------------------------
#
# test_symbols.py
#     The library is loaded into every backend (shared_preload_libraries):
#     every symbol it exports carries the jf_ or jobflow_ prefix, but for
#     those PostgreSQL itself looks up (issue 12, part 5).
#
# -------------------------------------------------------------------------

import os
import re
import subprocess

from conftest import query

ALLOWED = re.compile(r"^(jf_|jobflow_|pg_finfo_)|^(Pg_magic_func|_PG_init)$")


def test_exported_symbols_carry_the_prefix(db):
    libdir = query(db, "SELECT setting FROM pg_catalog.pg_config WHERE name = 'PKGLIBDIR'")[0]["setting"]
    out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(libdir, "jobflow.so")],
                         capture_output=True, text=True, check=True).stdout
    names = [f[2] for f in (line.split() for line in out.splitlines())
             if len(f) == 3 and f[1] in "TDBRVW"]
    assert "jf_http_result_class" in names and "_PG_init" in names, names[:20]
    bad = sorted(n for n in names if not ALLOWED.search(n))
    assert bad == [], "exported without the prefix: %s" % " ".join(bad)
