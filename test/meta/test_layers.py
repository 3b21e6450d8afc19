# -------------------------------------------------------------------------
#
# test_layers.py
#     src/ keeps the layers src/README.md describes: folders that use only
#     the folders below them (includes and calls, a call through an extern
#     declaration counting), no cycle between modules, hooks assigned in
#     src/jobflow.c alone, settings defined in src/base/settings.c alone,
#     no PostgreSQL in the plain-C folders, OBJS equal to the sources, the
#     jobflow_ and jf_ prefixes where they belong, and public types named
#     Jf.  The reading is layers.py's; each rule is also shown to catch
#     what it is for, on a copy of the tree with one fault planted.
#
# -------------------------------------------------------------------------

import os
import re
import shutil

import pytest

import layers

TREE = layers.Tree()


def test_the_reading_finds_what_it_must():
    # else every rule below would pass on nothing
    assert {"jf_xact_begin", "jf_xact_commit"} <= TREE.defines["worker/xact.c"]
    assert "jobflow_worker_main" in TREE.defines["worker/worker.c"]
    assert "jobflow_max_concurrent" in TREE.defines["base/settings.c"]
    assert "jf_now_ms" in TREE.defines["worker/state.h"]
    assert "worker/xact.c" in TREE.uses("worker/dispatch.c")
    assert ("http/http.h", "http/http.h") in TREE.includes("base/settings.c")
    graph = TREE.folder_graph()
    assert graph["worker"] >= {"core", "http", "base", "launcher"}, graph
    assert graph["api"] >= {"base", "launcher"}, graph
    assert graph["."] >= {"api", "base", "launcher"}, graph
    assert len([p for p in TREE.paths if p.endswith(".c")]) > 40


def test_every_folder_is_in_the_table():
    assert layers.unknown_folders(TREE) == []


def test_every_file_is_in_a_folder():
    assert layers.loose_files(TREE) == []


def test_folders_use_only_the_folders_below_them():
    assert layers.folder_rule(TREE) == []


def test_worker_and_api_never_use_each_other():
    graph = TREE.folder_graph()
    assert "api" not in graph["worker"] and "worker" not in graph["api"], graph


def test_no_cycle_between_folders():
    assert layers.find_cycle(TREE.folder_graph()) is None


def test_no_cycle_between_modules():
    assert layers.module_cycles(TREE) == []


def test_includes_name_their_folder():
    assert layers.unqualified_includes(TREE) == []


def test_only_jobflow_c_assigns_hooks():
    assert layers.hook_assignments(TREE) == []


def test_only_the_settings_module_defines_settings():
    assert layers.settings_outside_settings(TREE) == []


def test_plain_c_folders_include_no_postgresql():
    assert layers.postgres_in_plain_c(TREE) == []


def test_objs_are_exactly_the_sources():
    assert layers.objs_not_sources(TREE) == []


def test_prefixes():
    assert layers.misnamed(TREE) == []


def test_public_types_are_named_jf():
    assert layers.public_types(TREE) == []


def test_src_readme_names_every_module():
    """src/README.md has a paragraph for every module: each source file
    is named there by its path under src/."""
    with open(os.path.join(layers.REPO, "src", "README.md")) as f:
        readme = f.read()
    missing = [p for p in TREE.paths if p.endswith(".c")
               and "`%s`" % p not in readme and "`src/%s`" % p not in readme]
    assert missing == [], "src/README.md does not describe %s" % missing


def test_src_readme_table_is_the_rule():
    """The folder table of src/README.md says what MAY_USE checks."""
    with open(os.path.join(layers.REPO, "src", "README.md")) as f:
        readme = f.read()
    table = {}
    for m in re.finditer(r"^\| `(\w+)/` \|[^|]*\| ([^|]*) \|", readme, re.M):
        table[m.group(1)] = {w for w in re.findall(r"`(\w+)/`", m.group(2))} | {m.group(1)}
    assert table == {f: u for f, u in layers.MAY_USE.items() if f != "."}, table


# -------------------------------------------------------------------------
# The worker's loop and the modules below it (issue 12, part 5)
# -------------------------------------------------------------------------

BELOW_THE_LOOP = ["feed", "dispatch", "log_writer", "prune", "queues", "guard", "xact", "cron"]


def test_worker_loop_is_called_by_none_of_its_modules():
    assert TREE.defines["worker/worker.c"] == {"jobflow_worker_main"}
    for module in BELOW_THE_LOOP:
        assert "worker/worker.c" not in TREE.uses("worker/%s.c" % module), module


def test_xact_uses_no_module_above_it():
    used = {p for p in TREE.uses("worker/xact.c") if layers.Tree.folder(p) == "worker"}
    assert used <= {"worker/state.h"}, used


# file-scope variables: "static <type> name[...] [= ...];" at the start of a line
FILE_STATIC = re.compile(r"^static\s+(?!const\b)(?!inline\b)[\w\t \*]+?\b(\w+)\s*(\[[^\]]*\])?\s*(=[^;]*)?;",
                         re.M)


def test_modules_below_the_loop_keep_their_state_in_what_the_worker_holds():
    """The feeder, dispatcher, log writer, pruner and the queues' view keep
    no state of their own in file-level variables: it is in JfWorkerState
    or in a struct of the module that JfWorkerState points to."""
    assert FILE_STATIC.findall(TREE.text["worker/guard.c"])  # the reading finds some
    for module in ["feed", "dispatch", "log_writer", "prune", "queues"]:
        assert FILE_STATIC.findall(TREE.text["worker/%s.c" % module]) == [], module


# -------------------------------------------------------------------------
# Each rule catches what it is for: a copy of the tree, one fault planted
# -------------------------------------------------------------------------

def planted(tmp_path, path, old, new):
    """A copy of src/ and the Makefile under tmp_path with old replaced by
    new in src/path (or added at its end when old is None)."""
    root = str(tmp_path / "tree")
    shutil.copytree(os.path.join(layers.REPO, "src"), os.path.join(root, "src"),
                    ignore=shutil.ignore_patterns("*.o", "*.bc"))
    shutil.copy(os.path.join(layers.REPO, "Makefile"), root)
    target = os.path.join(root, path)
    with open(target) as f:
        text = f.read()
    if old is None:
        text += new
    else:
        assert old in text, (path, old)
        text = text.replace(old, new, 1)
    with open(target, "w") as f:
        f.write(text)
    return layers.Tree(root)


FAULTS = [
    # a plain-C module reaching up into the worker
    ("folder_rule", "src/core/wheel.c", None,
     "\nvoid jf_wheel_planted(void);\nvoid\njf_wheel_planted(void)\n{\n\tjf_xact_commit();\n}\n"),
    # the worker calling into the SQL side, through an extern declaration
    ("folder_rule", "src/worker/prune.c", None,
     "\nextern void jf_check_url(const char *url);\nvoid jf_prune_planted(void);\n"
     "void\njf_prune_planted(void)\n{\n\tjf_check_url(\"x\");\n}\n"),
    # the launcher including a worker header
    ("folder_rule", "src/launcher/wake.c", '#include "launcher/wake.h"\n',
     '#include "launcher/wake.h"\n#include "worker/xact.h"\n'),
    # two modules of one folder calling each other
    ("module_cycles", "src/worker/xact.c", None,
     "\nvoid jf_xact_planted(void);\nvoid\njf_xact_planted(void)\n{\n\tjf_feed_listen();\n}\n"),
    ("loose_files", "src/planted.c", None, "/* a source outside every folder */\n"),
    ("unqualified_includes", "src/worker/prune.c", '#include "worker/prune.h"', '#include "prune.h"'),
    ("hook_assignments", "src/worker/guard.c", None,
     "\nstatic void\nplanted_hook_install(void)\n{\n\temit_log_hook = NULL;\n}\n"),
    ("settings_outside_settings", "src/base/fault.c", None,
     "\nvoid\njf_fault_planted(void)\n{\n\tDefineCustomBoolVariable(\"jobflow.x\", \"\", NULL, NULL, false,"
     " PGC_SUSET, 0, NULL, NULL, NULL);\n}\n"),
    ("postgres_in_plain_c", "src/http/queue.c", '#include "http/internal.h"',
     '#include "http/internal.h"\n#include "utils/palloc.h"'),
    ("objs_not_sources", "src/api/planted.c", None, "/* a source the Makefile does not build */\n"),
    ("misnamed", "src/worker/prune.c", None,
     "\nvoid\njobflow_prune_planted(void)\n{\n}\n\nvoid\nprune_unprefixed(void)\n{\n}\n"),
    ("public_types", "src/worker/state.h", "#endif", "typedef struct Planted\n{\n\tint\t\t\tx;\n} Planted;\n\n#endif"),
]


@pytest.mark.parametrize("rule,path,old,new", FAULTS, ids=["%s:%s" % (f[0], f[1]) for f in FAULTS])
def test_each_rule_catches_a_planted_fault(tmp_path, rule, path, old, new):
    if path.endswith("planted.c"):
        os.makedirs(os.path.dirname(str(tmp_path / "tree" / path)), exist_ok=True)
        tree_root = str(tmp_path / "tree")
        shutil.copytree(os.path.join(layers.REPO, "src"), os.path.join(tree_root, "src"),
                        ignore=shutil.ignore_patterns("*.o", "*.bc"), dirs_exist_ok=True)
        shutil.copy(os.path.join(layers.REPO, "Makefile"), tree_root)
        with open(os.path.join(tree_root, path), "w") as f:
            f.write(new)
        tree = layers.Tree(tree_root)
    else:
        tree = planted(tmp_path, path, old, new)
    assert getattr(layers, rule)(TREE) == []
    assert getattr(layers, rule)(tree) != [], "%s did not see the fault planted in %s" % (rule, path)
