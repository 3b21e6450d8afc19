# -------------------------------------------------------------------------
#
# test_layers.py
#     The worker's modules are layered (issue 12, part 5): the loop in
#     src/worker.c uses the feeder, dispatcher, log writer, pruner and guard,
#     and none of them calls back into it; their transactions and statement
#     counter come from src/xact.c, at the bottom, which uses none of them.
#     Read from the sources: PostgreSQL's style puts a function's name at
#     the start of the line after its return type.
#
# -------------------------------------------------------------------------

import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BELOW_THE_LOOP = ["feed", "dispatch", "log_writer", "prune", "guard", "xact"]
DEFINITION = re.compile(r"^(static\s+)?[\w \*]+\n(\w+)\(", re.M)


def source(name):
    with open(os.path.join(REPO, "src", name)) as f:
        return f.read()


def exported_functions(name):
    """Functions a .c file defines without static."""
    return {m.group(2) for m in DEFINITION.finditer(source(name)) if not m.group(1)}


def calls(text, names):
    return sorted(n for n in names if re.search(r"\b%s\s*\(" % re.escape(n), text))


def test_definitions_are_found():
    # the reading above finds the functions it must (else the checks below prove nothing)
    assert {"jf_xact_begin", "jf_xact_commit", "jf_xact_count_statements"} <= exported_functions("xact.c")
    assert "jf_feed_housekeeping" in exported_functions("feed.c")


def test_worker_loop_is_called_by_none_of_its_modules():
    loop = exported_functions("worker.c")
    assert loop == {"jobflow_worker_main"}, "worker.c exports more than its entry point: %s" % sorted(loop)
    for module in BELOW_THE_LOOP:
        assert calls(source(module + ".c"), loop) == [], module


def test_xact_uses_no_module_above_it():
    text = source("xact.c") + source("xact.h")
    includes = re.findall(r'^#include "([\w/]+)\.h"', text, re.M)
    assert set(includes) <= {"jobflow", "xact", "access/xact", "executor/spi", "pgstat",
                             "utils/guc", "utils/memutils", "utils/snapmgr"}, includes
    above = set()
    for module in BELOW_THE_LOOP[:-1] + ["worker"]:
        above |= exported_functions(module + ".c")
    assert calls(text, above) == []


# file-scope variables: "static <type> name[...] [= ...];" at the start of a line
FILE_STATIC = re.compile(r"^static\s+(?!const\b)(?!inline\b)[\w\t \*]+?\b(\w+)\s*(\[[^\]]*\])?\s*(=[^;]*)?;",
                         re.M)


def file_statics(name):
    return sorted(m.group(1) for m in FILE_STATIC.finditer(source(name)))


def test_statics_are_found():
    # the reading above finds what it must (else the check below proves nothing)
    assert "consecutive_errors" in file_statics("worker.c")
    assert "durable_commit" in file_statics("xact.c")


def test_modules_below_the_loop_keep_their_state_in_what_the_worker_holds():
    """The feeder, dispatcher, log writer, pruner and the queues' view keep
    no state of their own in file-level variables: it is in WorkerState or
    in a struct of the module that WorkerState points to, so the worker
    holds all of it (issue 12, part 5)."""
    for module in ["feed", "dispatch", "log_writer", "prune", "queues"]:
        assert file_statics(module + ".c") == [], module


def test_queues_and_pruner_are_not_a_circle():
    # the pruner asks the queues' view about retentions; the queues' view
    # tells the loop (not the pruner) that the pruner's mark must restart
    assert '#include "prune.h"' not in source("queues.c")


def test_modules_below_the_loop_form_no_circle():
    """Who calls whom among the modules below the loop, from the sources:
    the dispatcher uses the feeder and the log writer, the feeder the log
    writer, the pruner the queues' view; none calls back up (a circle
    would make them one module in all but name)."""
    modules = ["feed", "dispatch", "log_writer", "prune", "queues"]
    exported = {m: exported_functions(m + ".c") for m in modules}
    uses = {m: {o for o in modules if o != m and calls(source(m + ".c"), exported[o])}
            for m in modules}
    assert uses["dispatch"] >= {"feed", "log_writer"}, uses  # the reading finds calls
    state = {}

    def visit(m, path):
        assert state.get(m) != "open", "a circle: %s" % " -> ".join(path + [m])
        if state.get(m) == "done":
            return
        state[m] = "open"
        for o in sorted(uses[m]):
            visit(o, path + [m])
        state[m] = "done"

    for m in modules:
        visit(m, [])
