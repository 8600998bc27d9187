"""hbcore_tf's layers (docs/architecture.md, "hbcore_tf's layers"): the
import-linter contract in pyproject.toml holds for the checkout, and it
breaks when a module imports upward.

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


def test_an_upward_import_breaks_the_contract(tmp_path):
    """A copy of the sources where the base layer imports the embedding
    feature: lint-imports exits 1 and names the import and its line."""
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    shutil.copytree(os.path.join(ROOT, "hbcore_tf"), tmp_path / "hbcore_tf",
                    ignore=shutil.ignore_patterns("*.so", "_csrc",
                                                  "__pycache__"))
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
