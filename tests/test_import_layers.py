"""hbcore_tf's layers (docs/architecture.md, "hbcore_tf's layers") and
hbcore's launcher rules: the import-linter contracts in pyproject.toml
hold for the checkout, and each breaks when a module imports what it must
not.

import-linter reads the sources (it imports nothing), so this test needs
neither a build nor TensorFlow; it is part of the ``test`` extra.
"""
import os
import re
import shutil
import subprocess
import sys
from typing import List

import pytest

from support.under_test import ROOT


def _lint_imports() -> str:
    """The ``lint-imports`` command of the Python running the tests."""
    found = (shutil.which("lint-imports",
                          path=os.path.dirname(sys.executable))
             or shutil.which("lint-imports"))
    if found is None:
        pytest.fail("lint-imports not found: install import-linter "
                    "(pip install '.[test]') to check hbcore_tf's layers")
    return found


def _run(cwd: str) -> subprocess.CompletedProcess:
    command: List[str] = [_lint_imports(), "--no-cache", "--config",
                          "pyproject.toml"]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_hbcore_tf_imports_only_downward():
    result = _run(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: [1-9][0-9]* kept, 0 broken", result.stdout), \
        result.stdout


def _copy_sources(tmp_path) -> None:
    """pyproject.toml and both packages' Python sources, into tmp_path."""
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    for package in ("hbcore_tf", "hbcore"):
        shutil.copytree(os.path.join(ROOT, package), tmp_path / package,
                        ignore=shutil.ignore_patterns("*.so", "_csrc",
                                                      "__pycache__"))


def _append(path, line: str) -> int:
    """Appends ``line`` to the file; returns its line number."""
    number = path.read_text().count("\n") + 1
    with open(path, "a") as f:
        f.write(line + "\n")
    return number


@pytest.mark.parametrize("module,line,contract,chain", [
    ("launcher/hosts.py", "from hbcore import basics",
     "hbcore's launcher never imports the native core",
     "hbcore.launcher.hosts -> hbcore.basics"),
    ("launcher/rank/rank_server.py", "from hbcore.launcher import supervisor",
     "hbcore's rank-side scripts import only each other",
     "hbcore.launcher.rank.rank_server -> hbcore.launcher.supervisor"),
    # A folder of the launcher is forbidden whole.
    ("launcher/rank/hang_watch.py",
     "from hbcore.launcher.elastic import driver",
     "hbcore's rank-side scripts import only each other",
     "hbcore.launcher.rank.hang_watch -> hbcore.launcher.elastic.driver"),
    ("launcher/rank/wire.py", "from hbcore import knobs",
     "hbcore's rank-side scripts import only each other",
     "hbcore.launcher.rank.wire -> hbcore.knobs"),
])
def test_a_forbidden_hbcore_import_breaks_its_contract(tmp_path, module,
                                                       line, contract,
                                                       chain):
    _copy_sources(tmp_path)
    number = _append(tmp_path / "hbcore" / module, line)
    result = _run(str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(re.escape(contract) + r"\s+BROKEN", result.stdout), \
        result.stdout
    assert "%s (l.%d)" % (chain, number) in result.stdout, result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """A copy of the sources where the base layer imports the embedding
    feature: lint-imports exits 1 and names the import and its line."""
    _copy_sources(tmp_path)
    options = tmp_path / "hbcore_tf" / "_base" / "options.py"
    lines = options.read_text().count("\n")
    with open(options, "a") as f:
        f.write("from hbcore_tf.embedding import table  # upward\n")

    result = _run(str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "hbcore_tf._base is not allowed to import hbcore_tf.embedding" \
        in result.stdout, result.stdout
    assert ("hbcore_tf._base.options -> hbcore_tf.embedding.table (l.%d)"
            % (lines + 1)) in result.stdout, result.stdout


def test_a_launcher_folder_importing_upward_breaks_the_layers(tmp_path):
    """A copy of the sources where manual/'s hosted job imports the
    command job (an entry point above it): lint-imports exits 1 naming the
    layers, the import and its line."""
    _copy_sources(tmp_path)
    number = _append(tmp_path / "hbcore" / "launcher" / "manual" /
                     "hosted_job.py", "from hbcore.launcher import command_job")
    result = _run(str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("hbcore.launcher.manual is not allowed to import "
            "hbcore.launcher.command_job") in result.stdout, result.stdout
    assert ("hbcore.launcher.manual.hosted_job -> "
            "hbcore.launcher.command_job (l.%d)" % number) in result.stdout, \
        result.stdout


def test_the_rank_side_contract_names_every_other_hbcore_module():
    """The rank-side contract lists hbcore's other modules by name (a
    wildcard would match the rank-side scripts too): a module added to
    hbcore must join one of its two lists, or the contract would not
    forbid importing it."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    rank_side = next(c for c in contracts
                     if c["name"] == "hbcore's rank-side scripts import "
                                     "only each other")
    listed = set(rank_side["source_modules"]) | set(
        rank_side["forbidden_modules"])
    modules = set()
    package = os.path.join(ROOT, "hbcore")
    for folder, _, files in os.walk(package):
        parts = os.path.relpath(folder, ROOT).split(os.sep)
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                modules.add(".".join(parts + [name[:-3]]))
    # A subpackage is forbidden whole (hbcore.elastic), so its modules are.
    unlisted = sorted(m for m in modules if m not in listed and not any(
        m.startswith(p + ".") for p in listed))
    assert unlisted == [], "add these to the rank-side contract: %s" % (
        unlisted,)
