"""Runs the C++ unit tests of the core's pure parts (config parsing, request
matching, response cache, fusion planning, fused layouts, reduction
kernels, serialization, half-precision conversion, the CPU binding rule,
autotune's parameter text and sampler) and of negotiation at 2-3 ranks
(with autotune's proposal and cache switch) over an in-process fake
communicator (csrc/core/tests). They need no MPI and run in about a second
once compiled."""
import glob
import os
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The core files that do not touch MPI (transport, backend, runtime do), by
# their path under csrc/core/src.
PURE_SOURCES = ["common/types", "common/config", "common/logging",
                "negotiation/message", "negotiation/coordinator",
                "negotiation/response_cache", "negotiation/controller",
                "negotiation/stall_inspector", "negotiation/fusion",
                "negotiation/process_set", "runtime/rank_binding",
                "transport/thread_affinity", "backends/scaling",
                "backends/fused_layout", "backends/reduce_kernels",
                "backends/combined_buffer",
                "runtime/autotune"]

# The folders of csrc/core/src from the bottom up (docs/architecture.md,
# "csrc/core/src by concern"): a file includes only from its own folder and
# the folders before it.
FOLDER_ORDER = ["common", "gpu", "negotiation", "backends", "transport",
                "runtime"]
INCLUDE = re.compile(r'^#include "([a-z_]+)/((?:[a-z_]+/)?[a-z_0-9]+\.h)"',
                     re.M)
# backends/ holds the data plane's interfaces and shared code, and one
# subfolder per implementation (mpi/, nccl/): the shared files include no
# implementation, and an implementation includes no other.
BACKEND_IMPLEMENTATIONS = ["mpi", "nccl"]


@pytest.fixture(scope="module")
def unit_binary(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("cpp") / "hbcore_unit_tests")
    src = os.path.join(ROOT, "csrc", "core")
    sources = sorted(glob.glob(os.path.join(src, "tests", "*.cc")))
    sources += [os.path.join(src, "src", name + ".cc") for name in PURE_SOURCES]
    cxx = shlex.split(os.environ.get("CXX", "g++")) + [
        "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread"]
    includes = ["-I", os.path.join(src, "include"),
                "-I", os.path.join(src, "src")]
    # One compiler per source file, as many at once as there are cores (the
    # suite runs one test at a time, so the other cores would idle), then
    # one link: about half the time of one g++ over every file on 2 cores.
    objects = [out + ".%d.o" % i for i in range(len(sources))]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for done in pool.map(
                lambda pair: subprocess.run(
                    cxx + includes + ["-c", pair[0], "-o", pair[1]],
                    capture_output=True, text=True, timeout=300),
                zip(sources, objects)):
            assert done.returncode == 0, done.args[-3] + "\n" + done.stderr
    subprocess.run(cxx + objects + ["-o", out], check=True, timeout=300)
    return out


def test_cpp_units(unit_binary):
    proc = subprocess.run([unit_binary], capture_output=True, text=True,
                          timeout=60)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failed checks" in proc.stdout
    assert "FAIL" not in proc.stdout


def test_src_folders_include_downward():
    src = os.path.join(ROOT, "csrc", "core", "src")
    folders = sorted(d for d in os.listdir(src)
                     if os.path.isdir(os.path.join(src, d)))
    assert folders == sorted(FOLDER_ORDER)
    assert not glob.glob(os.path.join(src, "*.*")), "a file outside a folder"
    upward = []
    for folder in FOLDER_ORDER:
        for path in sorted(glob.glob(os.path.join(src, folder, "**", "*.*"),
                                     recursive=True)):
            with open(path) as f:
                text = f.read()
            for target, header in INCLUDE.findall(text):
                if target == "hbcore":  # the public C API (csrc/core/include)
                    continue
                assert os.path.exists(os.path.join(src, target, header)), (
                    path, target, header)
                if FOLDER_ORDER.index(target) > FOLDER_ORDER.index(folder):
                    upward.append("%s/%s includes %s/%s" % (
                        folder, os.path.basename(path), target, header))
    assert upward == []


def test_backend_implementations_stay_in_their_folders():
    backends = os.path.join(ROOT, "csrc", "core", "src", "backends")
    assert sorted(d for d in os.listdir(backends) if os.path.isdir(
        os.path.join(backends, d))) == BACKEND_IMPLEMENTATIONS
    crossing = []
    for path in sorted(glob.glob(os.path.join(backends, "**", "*.*"),
                                 recursive=True)):
        own = os.path.relpath(os.path.dirname(path), backends)
        with open(path) as f:
            text = f.read()
        for target, header in INCLUDE.findall(text):
            sub = header.split("/")[0] if "/" in header else "."
            if target == "backends" and sub != "." and sub != own:
                crossing.append("%s includes backends/%s" % (
                    os.path.relpath(path, backends), header))
    assert crossing == []
