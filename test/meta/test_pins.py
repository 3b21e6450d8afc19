# -------------------------------------------------------------------------
#
# test_pins.py
#     C code that runs SQL with more privileges than its caller resolves
#     nothing the caller chose (issue 20, item 1): read from src/*.c, no
#     cluster needed.
#
# A function that switches to another user (SetUserIdAndSecContext or
# SetUserIdAndContext to anything but a saved user: switching back is no
# elevation) must also set search_path (set_config_option or
# SetConfigOption of "search_path", in its body or in a function it
# calls): the C functions and triggers that
# reach it run under the caller's search_path, and an operator or function
# the caller planted in a schema of its own would otherwise be resolved,
# and run, as the extension's owner.
#
# And the SQL that runs elevated qualifies its operators
# (OPERATOR(pg_catalog.=)), as the project's rules ask of code running with
# more privileges than its caller.  Which SQL that is, is a heuristic:
#
#   - the elevated functions are those that switch user, and those that
#     call jf_as_owner_begin, as_owner_begin or a function that switches;
#   - their SQL is every run of adjacent string literals in their bodies,
#     in the macros their bodies name, and in the arguments of every call
#     of an elevated function (write_queue("INSERT ..."),
#     update_tasks_as_owner("UPDATE ...")), that holds an SQL keyword in
#     upper case (error messages are lower case);
#   - in that SQL, after removing quoted literals and identifiers, casts
#     (::type), printf conversions of format strings (jobflow.%s),
#     OPERATOR(schema.op) and the assignments of SET lists
#     (col = value in UPDATE ... SET and ON CONFLICT ... DO UPDATE SET),
#     every operator character left (= < > ! ~ @ # % ^ & | ` ? + - /, and *
#     unless it is "*" of SELECT * or count(*)) is an unqualified operator,
#     and so are the constructs that call "=" or another operator by name
#     behind the scenes: IN (...), BETWEEN, IS [NOT] DISTINCT FROM, LIKE,
#     ILIKE, SIMILAR TO, NULLIF(...) and JOIN ... USING (...).
#
# Not seen by the heuristic: SQL built at run time, or held by a helper
# that an elevated function calls and that holds its own literals.
#
# -------------------------------------------------------------------------

import re

import csource

SWITCH = ("SetUserIdAndSecContext", "SetUserIdAndContext")
BEGIN_HELPERS = ("jf_as_owner_begin", "as_owner_begin")
PIN = re.compile(r'\b(set_config_option|SetConfigOption)\s*\(\s*"search_path"')

CONSTRUCTS = [
    (re.compile(r"\bIN\s*\(", re.I), "IN (...)"),
    (re.compile(r"\bBETWEEN\b", re.I), "BETWEEN"),
    (re.compile(r"\bIS\s+(NOT\s+)?DISTINCT\s+FROM\b", re.I), "IS DISTINCT FROM"),
    (re.compile(r"\bI?LIKE\b", re.I), "LIKE"),
    (re.compile(r"\bSIMILAR\s+TO\b", re.I), "SIMILAR TO"),
    (re.compile(r"\bNULLIF\s*\(", re.I), "NULLIF"),
    (re.compile(r"\bJOIN\b[^()]*?\bUSING\s*\(", re.I), "JOIN ... USING"),
]


def switches(f):
    """The first arguments of f's calls that switch user (not back)."""
    out = []
    for name in SWITCH:
        for m in re.finditer(r"\b%s\s*\(" % name, f.body):
            first = csource.balanced(f.body, m.end() - 1).split(",")[0]
            if "save" not in first:
                out.append(first.strip())
    return out


def elevated(src):
    switchers = {f.name for f in src.functions if switches(f)}
    return switchers | src.callers(switchers | set(BEGIN_HELPERS))


def elevated_sql(src):
    """(where, sql) of every SQL string the heuristic deems elevated."""
    names = elevated(src)
    found = []

    def collect(where, text):
        for sql in csource.sql_fragments(text):
            found.append((where, sql))
        for macro, fragments in src.macros.items():
            if re.search(r"\b%s\b" % macro, text):
                found.extend(("%s (macro %s)" % (where, macro), sql) for sql in fragments)

    for f in src.functions:
        if f.name in names:
            collect(repr(f), f.body)
    for name in names:
        for caller, args in src.call_arguments(name):
            if caller.name not in names:
                collect("%r, call of %s" % (caller, name), args)
    return found


def bare_operators(sql):
    """The operators of sql that are not qualified (see the header)."""
    s = re.sub(r"'(?:[^']|'')*'", "''", sql)
    s = re.sub(r'"(?:[^"]|"")*"', "x", s)
    s = re.sub(r"OPERATOR\s*\(\s*[\w.]+\s*\.\s*[^\s)]+\s*\)", " OP ", s, flags=re.I)
    s = re.sub(r"::\s*[\w.]+(\s*\[\s*\])*", " ", s)
    # printf conversions of a format string (jobflow.%s) stand for names
    s = re.sub(r"%[-+ 0-9.]*(?:ll|l|z)?[sdu]\b", "x", s)

    def no_assignments(m):
        return re.sub(r"(\bSET\b|,)(\s*[\w.]+\s*)=", r"\1\2:=:", m.group(0), flags=re.I)
    s = re.sub(r"\bSET\b.*?(?=\bWHERE\b|\bFROM\b|\bRETURNING\b|$)", no_assignments, s,
               flags=re.I | re.S)
    s = s.replace(":=:", " ")
    found = []
    for m in re.finditer(r"[<>=!~@#%^&|`?+\-*/]+", s):
        op = m.group(0)
        if op == "*" and re.search(r"(\(|,|\.|\bSELECT)\s*$", s[:m.start()], re.I):
            continue
        found.append(op)
    for pattern, name in CONSTRUCTS:
        if pattern.search(s):
            found.append(name)
    return found


def test_the_sources_are_read():
    """The reading finds what it must, else the tests below prove nothing."""
    src = csource.Source()
    names = {f.name for f in src.functions}
    assert {"jf_as_owner_begin", "jf_check_secret_refs", "jobflow_task_check"} <= names
    assert {f.name for f in src.functions if switches(f)}, "no function switches user"
    assert {"jf_check_secret_refs", "write_queue", "jobflow_replace_task"} <= elevated(src)
    sql = [s for _, s in elevated_sql(src)]
    assert any("jobflow.secrets" in s for s in sql)
    assert any("jobflow.queues" in s for s in sql)     # given to write_queue by its callers


def test_the_heuristic_sees_what_it_must():
    assert bare_operators("SELECT 1 FROM t WHERE owner = $1 AND name = $2") == ["=", "="]
    assert bare_operators("SELECT 1 FROM t WHERE a OPERATOR(pg_catalog.=) $1") == []
    assert bare_operators("UPDATE t SET a = $2, b = pg_catalog.now() WHERE id OPERATOR(pg_catalog.=) $1") == []
    assert bare_operators("UPDATE t SET a = pg_catalog.now() + $2 WHERE x") == ["+"]
    assert bare_operators("UPDATE t SET state = 'x' WHERE state IN ('a', 'b')") == ["IN (...)"]
    assert bare_operators("INSERT INTO t (a) VALUES ($1) ON CONFLICT (a) DO UPDATE SET a = excluded.a") == []
    assert bare_operators("SELECT pg_catalog.count(*), t.* FROM t WHERE t.s::pg_catalog.text <> 'a'") == ["<>"]
    assert bare_operators("SELECT h.value OPERATOR(pg_catalog.->>) 'secret' = $2") == ["="]
    assert bare_operators("LOCK TABLE jobflow.signing_secrets IN SHARE ROW EXCLUSIVE MODE") == []


def pins(src, f):
    """Whether f sets search_path, itself or through a function it calls."""
    if PIN.search(f.body):
        return True
    calls = f.calls()
    return any(PIN.search(g.body) for g in src.functions if g.name in calls)


def test_every_switch_of_user_pins_search_path():
    src = csource.Source()
    unpinned = ["%r switches to %s" % (f, ", ".join(switches(f)))
                for f in src.functions if switches(f) and not pins(src, f)]
    assert not unpinned, "functions that switch user without setting search_path:\n" + \
        "\n".join(unpinned)


def test_sql_run_as_the_owner_qualifies_its_operators():
    src = csource.Source()
    bad = []
    seen = set()
    for where, sql in elevated_sql(src):
        ops = bare_operators(sql)
        if ops and (where, sql) not in seen:
            seen.add((where, sql))
            bad.append("%s: %s in: %s" % (where, ", ".join(ops), re.sub(r"\s+", " ", sql)))
    assert not bad, "%d elevated SQL string(s) with unqualified operators:\n%s" % (
        len(bad), "\n".join(bad))
