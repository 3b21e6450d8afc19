# -------------------------------------------------------------------------
#
# test_starved.py
#     The integration tests' "timing" marker (test/integration/starved.py):
#     a timing test that failed while the host took the machine's CPUs is
#     run again and its last run decides; one that failed on a machine that
#     ran fails at once; unmarked tests are never run again.
#
# Each case runs pytest on a small test file in a temporary directory, with
# the steal figure read from a file the test itself raises (standing in for
# a host that takes the CPUs while the test runs).
#
# -------------------------------------------------------------------------

import os
import subprocess
import sys
import textwrap

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INTEGRATION = os.path.join(REPO, "test", "integration")

TESTS = textwrap.dedent('''
    import os

    import pytest

    STAT = os.environ["JOBFLOW_PROC_STAT"]
    RUNS = os.path.join(os.path.dirname(STAT), "runs")


    def runs():
        """Count this run; return how many there were."""
        with open(RUNS, "a") as f:
            f.write("x")
        return os.path.getsize(RUNS)


    def steal(seconds):
        """The host takes seconds of CPU time from the machine."""
        with open(STAT) as f:
            fields = f.readline().split()
        fields[8] = str(int(fields[8]) + int(seconds * os.sysconf("SC_CLK_TCK")))
        with open(STAT, "w") as f:
            f.write(" ".join(fields) + "\\n")


    @pytest.mark.timing
    def test_case():
        mode = os.environ["CASE"]
        if mode == "unmarked":
            return
        n = runs()
        if mode == "starved-once":
            if n == 1:
                steal(5)
                assert False, "late on a starved machine"
        elif mode == "starved-always":
            steal(5)
            assert False, "late on a starved machine"
        elif mode == "ran":
            assert False, "late on a machine that ran"


    def test_unmarked():
        if os.environ["CASE"] == "unmarked":
            runs()
            steal(5)
            assert False, "not a timing test"
''')


def run(tmp_path, case):
    (tmp_path / "conftest.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nimport starved\n"
        "pytest_configure = starved.pytest_configure\n"
        "pytest_runtest_protocol = starved.pytest_runtest_protocol\n"
        "pytest_terminal_summary = starved.pytest_terminal_summary\n" % INTEGRATION)
    (tmp_path / "test_cases.py").write_text(TESTS)
    (tmp_path / "stat").write_text("cpu 1 0 1 100 0 0 0 0 0 0\n")
    env = dict(os.environ, JOBFLOW_PROC_STAT=str(tmp_path / "stat"), CASE=case)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(tmp_path)], env=env, cwd=str(tmp_path),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = tmp_path / "runs"
    return p.returncode, p.stdout, runs.stat().st_size if runs.exists() else 0


def test_failure_on_a_starved_machine_is_run_again(tmp_path):
    rc, out, runs = run(tmp_path, "starved-once")
    assert rc == 0, out
    assert runs == 2, out
    assert "rerun 1 of test_cases.py::test_case: it failed while the host took 5.0 s" in out
    assert "timing tests run again on a starved machine" in out


def test_last_rerun_decides(tmp_path):
    rc, out, runs = run(tmp_path, "starved-always")
    assert rc == 1, out
    assert runs == 5, out
    assert "1 failed, 1 passed" in out, out


def test_failure_on_a_machine_that_ran_is_final(tmp_path):
    rc, out, runs = run(tmp_path, "ran")
    assert rc == 1, out
    assert runs == 1, out
    assert "rerun" not in out


def test_unmarked_tests_are_not_run_again(tmp_path):
    rc, out, runs = run(tmp_path, "unmarked")
    assert rc == 1, out
    assert runs == 1, out
