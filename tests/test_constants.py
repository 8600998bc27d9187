"""The numbers that cross the core's boundary are defined once, in
csrc/core/include/hbcore/c_api.h: the core module exports every enumerator
under its C name, and the Python layers take them from there.

The header is parsed here independently of the build, so a constant the
module forgot to export, or exported with another value, fails.
"""
import os
import re
from typing import Dict

import pytest

from support.under_test import ROOT

HEADER = os.path.join(ROOT, "csrc", "core", "include", "hbcore", "c_api.h")
PY_SOURCES = ["hbcore/ops.py", "hbcore/basics.py", "hbcore/exceptions.py",
              "hbcore_tf/_ops/collectives.py",
              "hbcore_tf/_ops/collective_gradients.py"]


def header_enums() -> Dict[str, Dict[str, int]]:
    """typedef name -> {enumerator: value} for every enum in c_api.h."""
    text = open(HEADER).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    enums = {}
    for body, name in re.findall(r"typedef enum\s*\{(.*?)\}\s*(\w+);", text,
                                 flags=re.S):
        values = {}
        for item in body.split(","):
            item = item.strip()
            if item:
                key, _, value = item.partition("=")
                values[key.strip()] = int(value.strip(), 0)
        enums[name] = values
    return enums


@pytest.fixture(scope="module")
def core():
    from hbcore._native import core as module
    return module


def test_header_has_the_expected_enums():
    assert set(header_enums()) >= {"hb_status_code", "hb_dtype", "hb_op_type",
                                   "hb_reduce_op", "hb_knob_type"}


@pytest.mark.parametrize("enum", sorted(header_enums()))
def test_core_module_exports_every_enumerator(core, enum):
    for name, value in header_enums()[enum].items():
        assert getattr(core, name) == value, name


def test_reduce_op_is_the_core_numbering(core):
    import hbcore
    for op in hbcore.ReduceOp:
        assert op == getattr(core, "HB_REDUCE_" + op.name), op


def test_dtype_table_uses_core_codes(core):
    import numpy as np
    from hbcore import ops
    assert ops._DTYPE_CODES[np.dtype(np.float32)] == core.HB_FLOAT32
    assert ops._DTYPE_CODES[np.dtype(np.bool_)] == core.HB_BOOL
    codes = sorted(ops._DTYPE_CODES.values())
    assert codes == sorted(set(header_enums()["hb_dtype"].values()))


@pytest.mark.parametrize("path", PY_SOURCES)
def test_python_layers_do_not_repeat_core_numbers(path):
    """No tuple-unpacking of op codes from literals (the old
    ``_ALLREDUCE, _ALLGATHER, ... = 0, 1, 2, 3, 4``)."""
    text = open(os.path.join(ROOT, path)).read()
    assert not re.search(r"_ALLREDUCE\s*,.*=\s*(range\(|\d)", text), path
    assert not re.search(r"^\s*(AVERAGE|SUM|MIN|MAX)\s*=\s*\d", text,
                         flags=re.M), path


def test_errors_carry_the_core_status(core):
    """RaiseFor stores the code on the instance; the class matches it."""
    from hbcore import exceptions as hx
    table = {core.HB_ERR_INVALID_ARGUMENT: hx.InvalidArgumentError,
             core.HB_ERR_MISMATCH: hx.MismatchError,
             core.HB_ERR_NOT_INITIALIZED: hx.NotInitializedError,
             core.HB_ERR_SHUTDOWN: hx.ShutdownError,
             core.HB_ERR_DUPLICATE_NAME: hx.DuplicateNameError,
             core.HB_ERR_INTERNAL: hx.InternalError,
             core.HB_ERR_CONFIG: hx.ConfigError,
             core.HB_ERR_UNSUPPORTED: hx.UnsupportedError}
    assert sorted(table) == sorted(
        v for v in header_enums()["hb_status_code"].values() if v)
    for code, cls in table.items():
        with pytest.raises(cls, match="^boom %d$" % code) as info:
            core.raise_for(code, "boom %d" % code)
        assert type(info.value) is cls
        assert info.value.status == code
