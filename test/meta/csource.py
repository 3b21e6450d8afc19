# -------------------------------------------------------------------------
#
# csource.py
#     A reading of jobflow's C sources good enough for the tests that check
#     them (test_pins.py here, test_privileges.py in test/integration): the
#     functions each file defines with their bodies, the functions a body
#     calls, and the SQL its string literals hold.
#
# PostgreSQL's style makes this simple: a definition puts the function's
# name at the start of the line after its return type, and its body opens
# and closes with a brace alone on a line.  Comments are blanked out first
# (string literals kept), so a name in a comment is no call.
#
# -------------------------------------------------------------------------

import glob
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFINITION = re.compile(r"^(?:static\s+)?[\w \*]+\n(\w+)\(", re.M)
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
# adjacent literals, which C joins into one
LITERALS = re.compile(r'"(?:[^"\\\n]|\\.)*"(?:\s*"(?:[^"\\\n]|\\.)*")*')
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
MACRO = re.compile(r"^#define\s+(\w+)(\([^)]*\))?((?:[^\n]*\\\n)*[^\n]*)", re.M)


def blank_comments(text):
    """text with every comment replaced by spaces (newlines kept)."""
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Function:
    def __init__(self, path, name, body):
        self.path = os.path.relpath(path, REPO)
        self.name = name
        self.body = body

    def calls(self):
        return set(CALL.findall(self.body))

    def __repr__(self):
        return "%s:%s" % (self.path, self.name)


class Source:
    """Every function (a list: static ones of two files may share a name)
    and every macro holding SQL of src/**/*.c, or of the files given."""

    def __init__(self, paths=None):
        self.functions = []
        self.macros = {}
        for path in paths or sorted(glob.glob(os.path.join(REPO, "src", "**", "*.c"), recursive=True)):
            with open(path) as f:
                text = blank_comments(f.read())
            for m in MACRO.finditer(text):
                literals = sql_fragments(m.group(3).replace("\\\n", " "))
                if literals:
                    self.macros[m.group(1)] = literals
            for m in DEFINITION.finditer(text):
                start = text.find("\n{\n", m.end())
                end = text.find("\n}\n", start)
                if start < 0 or end < 0:
                    continue
                if ";" in text[m.end():start]:
                    continue            # a prototype, not a definition
                self.functions.append(Function(path, m.group(1), text[start:end + 2]))

    def callers(self, names):
        """Functions that call one of names."""
        return {f.name for f in self.functions if f.calls() & set(names)}

    def call_arguments(self, name):
        """(caller, argument text) of every call of name in a body."""
        found = []
        pattern = re.compile(r"\b%s\s*\(" % re.escape(name))
        for f in self.functions:
            for m in pattern.finditer(f.body):
                found.append((f, balanced(f.body, m.end() - 1)))
        return found


def balanced(text, open_at):
    """The text between the parenthesis at open_at and its match."""
    depth = 0
    i = open_at
    while i < len(text):
        c = text[i]
        if c == '"':
            m = LITERAL.match(text, i)
            i = m.end() if m else i + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
        i += 1
    return text[open_at + 1:]


def unescape(literal):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), literal)


def sql_fragments(text):
    """The strings of text that are SQL: each run of adjacent literals,
    joined as C joins them, that holds an SQL keyword in upper case."""
    out = []
    for m in LITERALS.finditer(text):
        joined = "".join(unescape(s) for s in LITERAL.findall(m.group(0)))
        if re.search(r"\b(SELECT|INSERT|UPDATE|DELETE|WHERE|FROM|VALUES|AND|OR|SET|LOCK|JOIN|"
                     r"RETURNING)\b", joined):
            out.append(joined)
    return out
