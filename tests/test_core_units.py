"""Runs the C++ unit tests of the core's pure parts (config parsing, request
matching, response cache, fusion planning, fused layouts, reduction
kernels, serialization, half-precision conversion, the CPU binding rule,
autotune's parameter text and sampler) and of negotiation at 2-3 ranks
(with autotune's proposal and cache switch) over an in-process fake
communicator (csrc/core/tests). They need no MPI and run in about a second
once compiled."""
import glob
import os
import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The core files that do not touch MPI (transport, backend, runtime do).
PURE_SOURCES = ["types", "config", "logging", "message", "coordinator",
                "response_cache", "controller", "stall_inspector", "fusion",
                "process_set", "rank_binding", "thread_affinity",
                "scaling", "fused_layout", "reduce_kernels", "autotune"]


@pytest.fixture(scope="module")
def unit_binary(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("cpp") / "hbcore_unit_tests")
    src = os.path.join(ROOT, "csrc", "core")
    sources = sorted(glob.glob(os.path.join(src, "tests", "*.cc")))
    sources += [os.path.join(src, "src", name + ".cc") for name in PURE_SOURCES]
    cmd = shlex.split(os.environ.get("CXX", "g++")) + [
        "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread",
        "-I", os.path.join(src, "include"), "-I", os.path.join(src, "src"),
        *sources, "-o", out]
    subprocess.run(cmd, check=True, timeout=300)
    return out


def test_cpp_units(unit_binary):
    proc = subprocess.run([unit_binary], capture_output=True, text=True,
                          timeout=60)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failed checks" in proc.stdout
    assert "FAIL" not in proc.stdout
