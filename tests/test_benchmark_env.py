"""The benchmarks' workers run against a built hbcore: the installed
package (the README's ``pip install .``) or an in-place build, never the
checkout's unbuilt ``hbcore/`` (benchmarks/autotune.py once put an empty
PYTHONPATH entry, the working directory, in front of it).

Every driver builds its workers' environment with benchmarks/_launch.py's
worker_env() and starts them in WORKER_CWD; these tests hold that."""
import ast
import glob
import os
import subprocess
import sys

import pytest

from support.harness import ROOT

BENCHMARKS = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCHMARKS)

import _launch  # noqa: E402


def _drivers():
    return sorted(p for p in glob.glob(os.path.join(BENCHMARKS, "*.py"))
                  if os.path.basename(p) != "_launch.py")


def test_worker_path_has_no_empty_entry(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["", ROOT, "/x"]))
    env = _launch.worker_env(paths=[BENCHMARKS, ""])
    entries = env["PYTHONPATH"].split(os.pathsep)
    assert "" not in entries, env["PYTHONPATH"]
    assert entries[0] == BENCHMARKS, entries
    assert "/x" in entries, entries


def test_worker_env_refuses_pythonpath_in_extra():
    with pytest.raises(ValueError, match="paths="):
        _launch.worker_env({"PYTHONPATH": "/somewhere"})


def test_workers_import_a_built_hbcore():
    """A worker started as the drivers start them (their environment with
    benchmarks/ first, their working directory, ``python -m``) imports an
    hbcore whose native module loads."""
    env = _launch.worker_env(paths=[BENCHMARKS])
    done = subprocess.run(
        [sys.executable, "-c",
         "import hbcore, hbcore._core; print(hbcore.__file__)"],
        env=env, cwd=_launch.WORKER_CWD, capture_output=True, text=True,
        timeout=60)
    assert done.returncode == 0, done.stderr
    imported_from = os.path.dirname(done.stdout.strip())
    if not glob.glob(os.path.join(ROOT, "hbcore", "_core*.so")):
        assert imported_from != os.path.join(ROOT, "hbcore"), imported_from


@pytest.mark.parametrize("path", _drivers(), ids=os.path.basename)
def test_only_launch_sets_worker_path_and_cwd(path):
    """No driver writes PYTHONPATH or a working directory of its own: one
    place (_launch.worker_env, WORKER_CWD) decides where workers import
    hbcore from."""
    with open(path) as f:
        tree = ast.parse(f.read())
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "PYTHONPATH":
            problems.append("line %d: PYTHONPATH" % node.lineno)
        if isinstance(node, ast.keyword) and node.arg == "cwd":
            value = ast.unparse(node.value)
            if value != "WORKER_CWD":
                problems.append("line %d: cwd=%s" % (node.lineno, value))
    assert not problems, problems
