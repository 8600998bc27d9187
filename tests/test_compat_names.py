"""Build probes kept only for Horovod compatibility (gloo_built, ccl_built,
...) are defined in one module, hbcore/_compat_names.py, and re-exported
by hbcore and hbcore_tf."""
import os
import re

import pytest

from support.under_test import ROOT

import hbcore
from hbcore import _compat_names

NAMES = _compat_names.__all__


def test_answers():
    assert hbcore.mpi_built() and hbcore.mpi_enabled()
    assert not (hbcore.gloo_built() or hbcore.gloo_enabled()
                or hbcore.ccl_built() or hbcore.ddl_built()
                or hbcore.rocm_built())
    # GPU collectives need the CUDA runtime and NCCL; the CUDA runtime
    # alone may load (see tests/test_gpu_frontend.py).
    assert isinstance(hbcore.cuda_built(), bool)
    assert hbcore.cuda_built() or not hbcore.nccl_built()


@pytest.mark.parametrize("name", NAMES)
def test_hbcore_reexports_the_one_definition(name):
    assert getattr(hbcore, name) is getattr(_compat_names, name)
    assert name in hbcore.__all__


def test_defined_nowhere_else():
    pattern = re.compile(r"^\s*def (%s)\(" % "|".join(NAMES), re.M)
    found = []
    for package in ("hbcore", "hbcore_tf"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith(".py") and not path.endswith(
                        os.path.join("hbcore", "_compat_names.py")):
                    found += ["%s: %s" % (path, m) for m in
                              pattern.findall(open(path).read())]
    assert found == []


def test_hbcore_tf_takes_them_from_the_compat_module():
    text = open(os.path.join(ROOT, "hbcore_tf", "mpi_ops.py")).read()
    imported = re.search(r"from hbcore\._compat_names import \(([^)]*)\)",
                         text)
    assert imported, "hbcore_tf.mpi_ops does not import hbcore._compat_names"
    assert sorted(imported.group(1).replace(",", " ").split()) == sorted(NAMES)
    exported = open(os.path.join(ROOT, "hbcore_tf", "__init__.py")).read()
    for name in NAMES:
        assert re.search(r"\b%s\b" % name, exported), name
