# -------------------------------------------------------------------------
#
# layers.py
#     A reading of src/ by folder, for test_layers.py: which file includes
#     which, which file uses a name another defines (a call, or a variable
#     read or written through its extern declaration), and the rules of
#     src/README.md that these must keep.
#
# PostgreSQL's style makes the reading simple: a function's name starts
# the line after its return type, file-scope variables start a line, and
# comments and string literals are blanked before names are looked for
# (a name in a comment, or a function named in a string, as bgw_function_name
# is, is no use).
#
# -------------------------------------------------------------------------

import glob
import os
import re

from csource import blank_comments

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# which folder may use which (src/README.md); "." is src/jobflow.c
FOLDERS = ["core", "http", "base", "launcher", "worker", "api"]
MAY_USE = {
    "core": {"core"},
    "http": {"core", "http"},
    "base": {"core", "http", "base"},
    "launcher": {"core", "http", "base", "launcher"},
    "worker": {"core", "http", "base", "launcher", "worker"},
    "api": {"core", "http", "base", "launcher", "api"},
    ".": {"core", "http", "base", "launcher", "worker", "api", "."},
}
PLAIN_C = {"core", "http"}

# a definition: the return type on its own line, the name, the parameters
# (no braces nor semicolons in them) and the body's brace alone on a line
FUNCTION = re.compile(r"^(static\s+)?(?:inline\s+)?(?:PGDLLEXPORT\s+)?[\w \t\*]*\w[\w \t\*]*\n(\w+)\([^;{]*\)\s*\n\{", re.M)
INLINE = re.compile(r"^static\s+inline\s+[\w \t\*]+\n(\w+)\([^;{]*\)\s*\n\{", re.M)
MACRO = re.compile(r"^#define\s+(\w+)", re.M)
TYPEDEF = re.compile(r"\}\s*(\w+)\s*;|^typedef\s+(?:struct|enum|union)?\s*[\w \t\*]*?\b(\w+)\s*;", re.M)
INCLUDE = re.compile(r'^#include\s+"([^"]+)"', re.M)
SYSTEM_INCLUDE = re.compile(r"^#include\s+<([^>]+)>", re.M)
NAME = re.compile(r"\b[A-Za-z_]\w*\b")
# a string or character literal on one line (comments are blanked first)
LITERAL = re.compile(r"([\"'])(?:[^\"'\\\n]|\\.|(?!\1)[\"'])*\1")


def blank(text):
    """text with comments and the contents of string and character
    literals replaced by spaces (newlines kept)."""
    return LITERAL.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - 2) + m.group(1),
                       blank_comments(text))


def file_scope_variables(text):
    """Names of the non-static variables a .c file defines at file scope."""
    names = set()
    depth = 0
    for line in text.split("\n"):
        if depth == 0 and line and line[0].isalpha() and not line.startswith(
                ("static", "extern", "typedef", "struct", "enum", "union")):
            m = re.match(r"^(?:PGDLLEXPORT\s+)?[A-Za-z_][\w \t\*]*?\b(\w+)\s*(\[[^\]]*\])?\s*(=.*)?;\s*$", line)
            if m and "(" not in line.split("=")[0]:
                names.add(m.group(1))
        depth += line.count("{") - line.count("}")
    return names


class Tree:
    """Every .c and .h file of src/ under root, read once."""

    def __init__(self, root=REPO):
        self.root = root
        self.src = os.path.join(root, "src")
        self.paths = sorted(os.path.relpath(p, self.src)
                            for p in glob.glob(os.path.join(self.src, "**", "*.[ch]"), recursive=True))
        self.raw = {}
        self.text = {}
        for p in self.paths:
            with open(os.path.join(self.src, p)) as f:
                self.raw[p] = f.read()
            self.text[p] = blank(self.raw[p])
        self.defines = {p: self._defines(p) for p in self.paths}
        self.owner = {}
        for p, names in self.defines.items():
            for name in names:
                self.owner.setdefault(name, set()).add(p)

    @staticmethod
    def folder(path):
        return path.split("/")[0] if "/" in path else "."

    def _defines(self, path):
        """The names a file gives others: exported functions and variables
        of a .c file; inline functions and macros of a header."""
        text = self.text[path]
        if path.endswith(".c"):
            names = {m.group(2) for m in FUNCTION.finditer(text) if not m.group(1)}
            return (names | file_scope_variables(text)) - {"PG_FUNCTION_INFO_V1", "PG_MODULE_MAGIC"}
        return set(INLINE.findall(text)) | {m for m in MACRO.findall(text)
                                            if not m.startswith("JOBFLOW_") or "_H" not in m}

    def includes(self, path):
        """The quoted includes of a file: (as written, the file of src/ it
        names or None for PostgreSQL's)."""
        out = []
        for name in INCLUDE.findall(self.raw[path]):
            local = name if name in self.paths else None
            out.append((name, local))
        return out

    def uses(self, path):
        """{file of src/: names} this file takes from other files."""
        words = set(NAME.findall(self.text[path]))
        out = {}
        for word in words:
            for other in self.owner.get(word, ()):
                if other != path and not (path.endswith(".h") and other == path[:-2] + ".c"):
                    out.setdefault(other, set()).add(word)
        return out

    def arrows(self):
        """(from, to, why) between files: includes and uses."""
        for p in self.paths:
            for name, local in self.includes(p):
                if local and local != p:
                    yield p, local, "#include \"%s\"" % name
            for other, names in self.uses(p).items():
                yield p, other, "uses " + ", ".join(sorted(names)[:4])

    def folder_graph(self):
        """{folder: {folder it uses}} from includes and uses."""
        graph = {f: set() for f in MAY_USE}
        for a, b, _ in self.arrows():
            fa, fb = self.folder(a), self.folder(b)
            if fa != fb:
                graph[fa].add(fb)
        return graph


def find_cycle(graph):
    """A cycle of graph ({node: {node}}) as a list, or None."""
    state = {}
    stack = []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = "done"
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


# -------------------------------------------------------------------------
# The rules, each returning what breaks it (empty: kept)
# -------------------------------------------------------------------------

def folder_rule(tree):
    """Arrows from a folder to one it may not use."""
    bad = []
    for a, b, why in tree.arrows():
        fa, fb = tree.folder(a), tree.folder(b)
        if fa in MAY_USE and fb not in MAY_USE[fa]:
            bad.append("%s -> %s (%s)" % (a, b, why))
    return sorted(set(bad))


def unknown_folders(tree):
    return sorted({tree.folder(p) for p in tree.paths} - set(MAY_USE))


def loose_files(tree):
    """Sources and headers in src/ itself, outside every layer's folder
    (only src/jobflow.c, the top, lives there)."""
    return [p for p in tree.paths if "/" not in p and p != "jobflow.c"]


def module_cycles(tree):
    """A cycle between modules, a module being a .c file with the header
    of its name: a source's include of another module's header, or its use
    of a name another module defines (an include of a header shared by a
    folder's files, such as http/internal.h, is no arrow between them)."""
    def module(p):
        return p[:-2] if p.endswith((".c", ".h")) else p
    graph = {}
    for a, b, _ in tree.arrows():
        # a header declares, a source calls: arrows start in sources
        if a.endswith(".h") or (b.endswith(".h") and b[:-2] + ".c" not in tree.paths):
            continue
        ma, mb = module(a), module(b)
        if ma != mb:
            graph.setdefault(ma, set()).add(mb)
    cycle = find_cycle(graph)
    return [" -> ".join(cycle)] if cycle else []


def unqualified_includes(tree):
    """Includes of jobflow's headers that do not name their folder."""
    bad = []
    basenames = {os.path.basename(p): p for p in tree.paths if "/" in p}
    for p in tree.paths:
        for name, local in tree.includes(p):
            if local is None and "/" not in name and name in basenames:
                bad.append("%s: #include \"%s\" (%s)" % (p, name, basenames[name]))
            elif local is None and name.split("/")[0] in FOLDERS:
                bad.append("%s: #include \"%s\" names no file" % (p, name))
    return bad


def outside(tree, home, pattern, verb):
    """Where pattern (its first group named) is found but in the file home."""
    return ["%s %s %s" % (p, verb, m.group(1))
            for p in tree.paths if p != home
            for m in re.finditer(pattern, tree.text[p])]


def hook_assignments(tree):
    """Hooks assigned anywhere but src/jobflow.c."""
    return outside(tree, "jobflow.c", r"\b(\w+_hook)\s*=(?!=)", "assigns")


def settings_outside_settings(tree):
    """Settings defined anywhere but src/base/settings.c (compat.h may
    name, in a #define, what settings.c calls on each version)."""
    pattern = (r"\b(DefineCustom\w+Variable|MarkGUCPrefixReserved|EmitWarningsOnPlaceholders"
               r"|jf_reserve_guc_prefix)\s*\(")
    found = []
    for p in tree.paths:
        if p == "base/settings.c":
            continue
        for line in tree.text[p].splitlines():
            if p == "base/compat.h" and re.match(r"\s*#\s*define\b", line):
                continue
            found += ["%s calls %s" % (p, m.group(1)) for m in re.finditer(pattern, line)]
    return found


def postgres_in_plain_c(tree):
    """Includes of anything but jobflow's plain-C headers (and the
    system's) in core/ and http/."""
    bad = []
    for p in tree.paths:
        if tree.folder(p) not in PLAIN_C:
            continue
        for name, local in tree.includes(p):
            if local is None or tree.folder(local) not in PLAIN_C:
                bad.append("%s: #include \"%s\"" % (p, name))
        for name in SYSTEM_INCLUDE.findall(tree.raw[p]):
            if name.startswith(("postgres", "pg_", "utils/", "access/", "storage/")):
                bad.append("%s: #include <%s>" % (p, name))
    return bad


def objs_not_sources(tree):
    """Differences between the Makefile's OBJS and the sources of src/."""
    with open(os.path.join(tree.root, "Makefile")) as f:
        mk = f.read()
    m = re.search(r"^OBJS\s*=((?:.*\\\n)*.*)$", mk, re.M)
    objs = set(re.findall(r"(\S+)\.o\b", m.group(1))) if m else set()
    sources = {"src/" + p[:-2] for p in tree.paths if p.endswith(".c")}
    return ["in OBJS, no source: %s.o" % o for o in sorted(objs - sources)] + \
           ["a source not in OBJS: %s.c" % s for s in sorted(sources - objs)]


def sql_callable(tree):
    names = set()
    for p in tree.paths:
        names |= set(re.findall(r"PG_FUNCTION_INFO_V1\((\w+)\)", tree.raw[p]))
    return names


def guc_variables(tree):
    """The variables of the settings: those settings are defined on, and
    the values in effect of settings bound by rules (settings.c)."""
    names = set()
    if "base/settings.c" in tree.defines:
        names |= {n for n in tree.defines["base/settings.c"] if n.startswith("jobflow_")}
    for p in tree.paths:
        for m in re.finditer(r"DefineCustom\w+Variable\((.*?)\);", tree.raw[p], re.S):
            names |= set(re.findall(r"&(\w+)", m.group(1)))
    return names


def worker_entry_points(tree):
    names = set()
    for p in tree.paths:
        names |= set(re.findall(r'bgw_function_name,\s*\w+,\s*"(\w+)"', tree.raw[p]))
    return names


def misnamed(tree):
    """Exported names against the prefixes: jobflow_ for SQL-callable
    functions, settings' variables and background-worker entry points,
    jf_ for everything else (and _PG_init)."""
    allowed = sql_callable(tree) | guc_variables(tree) | worker_entry_points(tree)
    bad = []
    for p in tree.paths:
        if not p.endswith(".c"):
            continue
        for name in sorted(tree.defines[p]):
            if name == "_PG_init":
                continue
            if name.startswith("jobflow_"):
                if name not in allowed:
                    bad.append("%s: %s is neither SQL-callable, a setting nor an entry point" % (p, name))
            elif not name.startswith("jf_"):
                bad.append("%s: %s has no jf_ prefix" % (p, name))
    return bad


def public_types(tree):
    """Types that headers give other files: their names start with Jf."""
    bad = []
    for p in tree.paths:
        if not p.endswith(".h"):
            continue
        for m in TYPEDEF.finditer(tree.text[p]):
            name = m.group(1) or m.group(2)
            if name and not name.startswith("Jf"):
                bad.append("%s: type %s" % (p, name))
    return bad


ALL_RULES = [unknown_folders, loose_files, folder_rule, module_cycles, unqualified_includes,
             hook_assignments, settings_outside_settings, postgres_in_plain_c,
             objs_not_sources, misnamed, public_types]


def report(root=REPO):
    """{rule: what breaks it} over the tree at root."""
    tree = Tree(root)
    return {rule.__name__: rule(tree) for rule in ALL_RULES}


if __name__ == "__main__":
    import sys
    for rule, found in report(sys.argv[1] if len(sys.argv) > 1 else REPO).items():
        print("%s: %d" % (rule, len(found)))
        for line in found:
            print("    " + line)
