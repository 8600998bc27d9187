"""The Python front end of the GPU data plane, as far as it works without a
GPU: where NCCL and the CUDA runtime are looked for (hbcore/_gpu_libs.py),
the probes (nccl_built, cuda_built, gpu_info, hbrun --check-build), the
DLPack parsing of CUDA tensors (hbcore/_dlpack.py, csrc/python/
gpu_arrays.cc) and its errors, and, at 2 and 3 ranks, host DLPack tensors
through every collective and CUDA tensors refused by a runtime without GPU
support (tests/rank_scripts/gpu_frontend.py).

CUDA tensors come from tests/rank_scripts/dlpack_producers.py: DLPack
capsules built with ctypes, which count their deleter calls.
"""
import gc
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from support.harness import base_env, cached_ranks, run_python, script_path
from rank_scripts.dlpack_producers import (FLAG_IS_COPIED, FLAG_READ_ONLY,
                                           FakeDeviceTensor, NoKeywordsTensor,
                                           NoMaxVersionTensor, capsule_name)
from support.under_test import ROOT

import hbcore
from hbcore import _gpu_libs, gpu_probe
from hbcore._native import core
from hbcore.exceptions import (InvalidArgumentError, NotInitializedError,
                               UnsupportedError)
from hbcore.launcher import check_build

NCCL, CUDART = _gpu_libs.NCCL, _gpu_libs.CUDA_RUNTIME


def fake_site(tmp_path, libraries=(NCCL, CUDART)):
    """A site-packages directory laid out like the nvidia wheels, with
    empty files named like their libraries."""
    site = tmp_path / "site-packages"
    for library in libraries:
        path = site / library.wheel_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    return str(site)


# ------------------------------------------------------- library discovery

def test_wheel_layout_is_found(tmp_path):
    site = fake_site(tmp_path)
    for library in (NCCL, CUDART):
        expected = os.path.join(site, library.wheel_path)
        assert _gpu_libs.find_in_wheel(library, [site]) == expected
        found = _gpu_libs.resolve(library, {}, {}, [site])
        assert found.override == expected
        assert found.source == "from the %s wheel" % library.distribution
    assert _gpu_libs.init_overrides({}, {}, [site]) == {
        "nccl_library": os.path.join(site, NCCL.wheel_path),
        "cuda_runtime_library": os.path.join(site, CUDART.wheel_path)}


def test_without_a_wheel_the_core_uses_the_soname(tmp_path):
    site = fake_site(tmp_path, libraries=(NCCL,))
    found = _gpu_libs.resolve(CUDART, {}, {}, [site])
    assert found.override is None
    assert found.source == ("default soname libcudart.so.12 (no "
                            "nvidia-cuda-runtime-cu12 wheel installed)")
    assert _gpu_libs.init_overrides({}, {}, [site]) == {
        "nccl_library": os.path.join(site, NCCL.wheel_path)}


@pytest.mark.parametrize("config,environ,described", [
    ({"nccl_library": "/opt/a.so"}, {}, "config nccl_library=/opt/a.so"),
    ({}, {"HB_NCCL_LIBRARY": "/opt/b.so"}, "HB_NCCL_LIBRARY=/opt/b.so"),
    ({}, {"HOROVOD_NCCL_LIBRARY": "/opt/c.so"},
     "HOROVOD_NCCL_LIBRARY=/opt/c.so"),
    # The core's precedence: config, then HB_, then the HOROVOD_ alias.
    ({"nccl_library": "/opt/a.so"}, {"HB_NCCL_LIBRARY": "/opt/b.so"},
     "config nccl_library=/opt/a.so"),
    ({}, {"HB_NCCL_LIBRARY": "/opt/b.so",
          "HOROVOD_NCCL_LIBRARY": "/opt/c.so"}, "HB_NCCL_LIBRARY=/opt/b.so"),
])
def test_explicit_settings_win_over_the_wheel(tmp_path, config, environ,
                                              described):
    site = fake_site(tmp_path)
    found = _gpu_libs.resolve(NCCL, config, environ, [site])
    assert found.override is None  # the core applies the user's setting
    assert found.source == "set by " + described
    # The other library still comes from its wheel.
    assert _gpu_libs.init_overrides(config, environ, [site]) == {
        "cuda_runtime_library": os.path.join(site, CUDART.wheel_path)}


def test_empty_variable_counts_as_unset(tmp_path):
    site = fake_site(tmp_path)
    found = _gpu_libs.resolve(NCCL, {}, {"HB_NCCL_LIBRARY": ""}, [site])
    assert found.override == os.path.join(site, NCCL.wheel_path)


def test_gpu_extra_installs_the_wheels_searched():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the test extra installs tomli, tomllib's original, before 3.11
        import tomli as tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    extra = project["optional-dependencies"]["gpu"]
    assert sorted(extra) == sorted(lib.distribution
                                   for lib in _gpu_libs.LIBRARIES)
    assert not set(extra) & set(project["dependencies"])


# ------------------------------------------------------------------ probes

PROBE = """
import json
import hbcore
from hbcore._native import core
answer = {"before": [hbcore.nccl_built(), hbcore.cuda_built(),
                     hbcore.gpu_info()]}
hbcore.init()
answer["after"] = [hbcore.nccl_built(), hbcore.cuda_built()]
answer["config"] = core.config_string()
hbcore.shutdown()
print("ANSWER " + json.dumps(answer))
"""


def probe(env=None, pythonpath=None):
    """Runs PROBE in a fresh process; returns its answer."""
    env = dict(env or {})
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(
            [pythonpath, base_env()["PYTHONPATH"]])
    run = run_python(PROBE, env=env, timeout=120)
    assert run.returncode == 0, run.describe()
    line = [l for l in run.stdout.splitlines() if l.startswith("ANSWER ")]
    assert line, run.describe()
    return json.loads(line[0][len("ANSWER "):])


def test_probe_names_the_missing_library():
    missing = "/nonexistent/libcudart.so.12"
    answer = probe({"HB_CUDA_RUNTIME_LIBRARY": missing})
    nccl, cuda, info = answer["before"]
    assert (nccl, cuda) == (False, False)
    assert answer["after"] == [False, False]
    for fragment in ("cannot load the CUDA runtime library", missing,
                     "hbcore[gpu]", "HB_CUDA_RUNTIME_LIBRARY"):
        assert fragment in info["error"], info
    assert info["cuda_runtime_source"] == ("set by HB_CUDA_RUNTIME_LIBRARY="
                                           + missing)
    assert "nccl_library" not in info


def test_wheel_paths_reach_the_probe_and_init(tmp_path):
    """Empty files in the wheel layout: discovered, passed to the core's
    probe and to init (the effective configuration shows them), and
    refused by the dynamic linker with a message naming the file."""
    site = fake_site(tmp_path)
    cudart = os.path.join(site, CUDART.wheel_path)
    answer = probe(pythonpath=site)
    nccl, cuda, info = answer["before"]
    assert (nccl, cuda) == (False, False)
    assert cudart in info["error"], info
    assert info["nccl_source"] == "from the nvidia-nccl-cu12 wheel"
    assert info["cuda_runtime_source"] == (
        "from the nvidia-cuda-runtime-cu12 wheel")
    assert "HB_NCCL_LIBRARY=%s" % os.path.join(site, NCCL.wheel_path) in (
        answer["config"])
    assert "HB_CUDA_RUNTIME_LIBRARY=%s" % cudart in answer["config"]


def test_user_variable_wins_over_the_wheel_at_init(tmp_path):
    site = fake_site(tmp_path)
    answer = probe({"HB_NCCL_LIBRARY": "/opt/mine/libnccl.so.2"},
                   pythonpath=site)
    assert "HB_NCCL_LIBRARY=/opt/mine/libnccl.so.2" in answer["config"]
    assert "HB_CUDA_RUNTIME_LIBRARY=%s" % os.path.join(
        site, CUDART.wheel_path) in answer["config"]


def test_probe_answers_agree_on_this_machine():
    """Whatever this machine has: nccl_built() is True exactly when the
    probe loaded both libraries, and then cuda_built() is True too."""
    nccl, cuda, info = probe()["before"]
    assert nccl == ("error" not in info), info
    assert cuda or not nccl
    if nccl:
        assert int(info["cuda_devices"]) >= 0
        assert info["nccl_version"].count(".") == 2
    else:
        assert "library" in info["error"], info


@pytest.mark.parametrize("error,cuda", [
    ("cannot load the NCCL library 'libnccl.so.2' (no such file)", True),
    ("the library /x/libnccl.so.2 has no entry point ncclCommAbort", True),
    ("cannot load the CUDA runtime library 'libcudart.so.12' (no such "
     "file)", False),
    ("the library /x/libcudart.so.12 has no entry point cudaMalloc", False),
    ("HB_CYCLE_TIME: not a number", False),
])
def test_cuda_built_reads_which_library_failed(monkeypatch, error, cuda):
    """The core loads the CUDA runtime first: a failure about NCCL means
    the CUDA runtime loaded."""
    assert not core.is_initialized()
    monkeypatch.setattr(gpu_probe, "_probe",
                        lambda: (False, {"error": error}))
    assert hbcore.cuda_built() is cuda
    assert hbcore.nccl_built() is False


def test_build_info_has_the_gpu_probe(monkeypatch):
    from hbcore import tf_probe

    monkeypatch.setattr(tf_probe, "probe", lambda: {})  # no TF child here
    info = hbcore.build_info()
    assert info["gpu"] == hbcore.gpu_info()
    assert info["nccl_built"] is hbcore.nccl_built()


# ------------------------------------------------------------- check-build

def test_check_build_reports_what_is_missing(tmp_path):
    env = base_env({"HB_NCCL_LIBRARY": "/nonexistent/libnccl.so.2",
                    "HB_CUDA_RUNTIME_LIBRARY": "/nonexistent/libcudart.so.12"})
    # Not from the checkout's root: `python -m` puts the working directory
    # first on sys.path, and an unbuilt checkout would shadow the installed
    # hbcore (base_env's PYTHONPATH says which one is under test).
    proc = subprocess.run([sys.executable, "-m", "hbcore.launcher.cli",
                           "--check-build"], env=env, capture_output=True,
                          text=True, timeout=240, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = {l.split(":", 1)[0].strip(): l.split(":", 1)[1].strip()
             for l in proc.stdout.splitlines()[1:] if ":" in l}
    assert lines["NCCL built"] == "no"
    assert lines["GPU support"].startswith(
        "not available: cannot load the CUDA runtime library "
        "'/nonexistent/libcudart.so.12'")
    assert lines["NCCL library"] == (
        "set by HB_NCCL_LIBRARY=/nonexistent/libnccl.so.2")
    assert lines["CUDA runtime"] == (
        "set by HB_CUDA_RUNTIME_LIBRARY=/nonexistent/libcudart.so.12")


def test_check_build_gpu_lines_without_a_core():
    lines = dict(check_build._gpu_lines(None))
    assert set(lines) == {"NCCL library", "CUDA runtime"}
    for value in lines.values():
        assert value.endswith("; not probed (no core)"), lines


def test_check_build_gpu_lines_with_libraries():
    info = {"gpu": {"nccl_library": "/w/libnccl.so.2", "nccl_version": "2.23.4",
                    "cuda_runtime_library": "/w/libcudart.so.12",
                    "cuda_runtime_version": "12.4", "cuda_devices": "8",
                    "nccl_source": "from the nvidia-nccl-cu12 wheel",
                    "cuda_runtime_source": "set by HB_CUDA_RUNTIME_LIBRARY="
                                           "/w/libcudart.so.12"}}
    assert check_build._gpu_lines(info) == [
        ("NCCL library", "/w/libnccl.so.2 (version 2.23.4; from the "
                         "nvidia-nccl-cu12 wheel)"),
        ("CUDA runtime", "/w/libcudart.so.12 (version 12.4; set by "
                         "HB_CUDA_RUNTIME_LIBRARY=/w/libcudart.so.12)"),
        ("CUDA devices", "8")]


# ----------------------------------------------------- DLPack GPU tensors
#
# Before init: a tensor that passes validation fails only later, when its
# output is allocated or it is enqueued (NotInitializedError).

@pytest.mark.parametrize("kwargs,fragments", [
    ({"shape": [2, 3], "strides": [1, 2]},
     ["allreduce: hbcore needs a C-contiguous GPU tensor", "shape (2, 3)",
      "strides (1, 2)"]),
    ({"shape": [4], "strides": [2]},
     ["C-contiguous", "shape (4,)", "strides (2,)"]),
    ({"shape": [4], "dtype": (2, 32, 4)},
     ["unsupported DLPack dtype (code 2 (float), 32 bits, 4 lanes)",
      "lanes != 1"]),
    ({"shape": [4], "dtype": (5, 64, 1)},
     ["unsupported DLPack dtype (code 5 (complex), 64 bits, 1 lane)",
      "supported: int8"]),
    ({"shape": [4], "dtype": (1, 32, 1)},
     ["code 1 (uint), 32 bits"]),
    ({"shape": [4], "dtype": (9, 8, 1)},
     ["code 9 (unknown), 8 bits"]),
])
def test_unusable_gpu_tensor_is_invalid_argument(kwargs, fragments):
    tensor = FakeDeviceTensor(**kwargs)
    with pytest.raises(InvalidArgumentError) as info:
        hbcore.allreduce(tensor)
    for fragment in fragments:
        assert fragment in str(info.value)
    assert info.value.status == core.HB_ERR_INVALID_ARGUMENT
    del info
    gc.collect()
    # Not consumed: the producer's capsule destructor released it, once.
    assert tensor.deleter_calls == [1]
    assert tensor.calls == [{"stream": 1, "max_version": (1, 0)}]


@pytest.mark.parametrize("kwargs", [
    {"shape": [3, 1, 2], "strides": [2, 99, 1]},  # size-1 dims: any stride
    {"shape": [0, 3], "strides": [7, 7]},  # nothing to lay out
    {"shape": [2, 3], "strides": [3, 1]},  # compact, spelled out
    {"shape": [], "dtype": (4, 16, 1)},  # a bfloat16 scalar
    {"shape": [5], "dtype": (6, 8, 1), "device": (13, 1)},  # managed, bool
])
def test_usable_gpu_tensor_passes_validation(kwargs):
    tensor = FakeDeviceTensor(**kwargs)
    with pytest.raises(NotInitializedError):
        hbcore.allgather(tensor)
    gc.collect()
    assert tensor.deleter_calls == [1]


def test_gpu_tensor_is_consumed_and_released_once():
    tensor = FakeDeviceTensor([2, 2], versioned=True)
    capsule = tensor.__dlpack__(stream=1, max_version=(1, 0))
    taken = core.dlpack_input(capsule, False, "test")
    assert capsule_name(capsule) == "used_dltensor_versioned"
    assert (taken.shape, taken.device, taken.versioned) == ((2, 2), 0, True)
    assert taken.dtype == core.HB_FLOAT32 and taken.nbytes == 16
    del capsule
    gc.collect()
    assert tensor.deleter_calls == [0]  # ours now: the capsule let it be
    del taken
    gc.collect()
    assert tensor.deleter_calls == [1]


def test_consumed_capsule_cannot_be_taken_twice():
    capsule = FakeDeviceTensor([2]).__dlpack__()
    core.dlpack_input(capsule, False, "test")
    with pytest.raises(InvalidArgumentError, match="consumed only once"):
        core.dlpack_input(capsule, False, "test")
    with pytest.raises(TypeError, match="not a PyCapsule"):
        core.dlpack_input(object(), False, "test")


@pytest.mark.parametrize("cls,calls", [
    (NoMaxVersionTensor, [{"stream": 1}]),
    (NoKeywordsTensor, [{}]),
])
def test_producers_without_keywords_are_asked_without_them(cls, calls):
    tensor = cls([3])
    with pytest.raises(NotInitializedError):
        hbcore.allgather(tensor)
    gc.collect()
    assert tensor.calls == calls
    assert tensor.deleter_calls == [1]


class TfLikeTensor(FakeDeviceTensor):
    """Exports like a TensorFlow EagerTensor: refuses any stream."""

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None,
                   copy=None):
        if stream is not None:
            raise RuntimeError("tf.Tensor does not support DLPack export "
                               "with a non-None stream")
        self.events.append("export")
        return super().__dlpack__()


TfLikeTensor.__module__ = "tensorflow.python.framework.ops"


def test_tensorflow_devices_are_synchronized_before_export(monkeypatch):
    """TensorFlow refuses a stream and writes on streams of its own: its
    devices are synchronized, then the tensor is exported."""
    events = []
    tf = types.SimpleNamespace(test=types.SimpleNamespace(
        experimental=types.SimpleNamespace(
            sync_devices=lambda: events.append("sync"))))
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    tensor = TfLikeTensor([2])
    tensor.events = events
    with pytest.raises(NotInitializedError):
        hbcore.allgather(tensor)
    assert events == ["sync", "export"]
    assert tensor.calls == [{"stream": None, "max_version": None}]


@pytest.mark.parametrize("flags,fragment", [
    (FLAG_READ_ONLY, "exported the tensor read-only"),
    (FLAG_IS_COPIED, "exported a copy of the tensor"),
])
def test_in_place_refuses_read_only_or_copied_tensors(flags, fragment):
    for fn in (hbcore.allreduce_, lambda t: hbcore.broadcast_(t, 0)):
        tensor = FakeDeviceTensor([3], versioned=True, flags=flags)
        with pytest.raises(InvalidArgumentError, match=fragment):
            fn(tensor)
        gc.collect()
        assert tensor.deleter_calls == [1]
    # Out of place, the same tensor is fine.
    tensor = FakeDeviceTensor([3], versioned=True, flags=flags)
    with pytest.raises(NotInitializedError):
        hbcore.allgather(tensor)


def test_in_place_needs_a_buffer():
    with pytest.raises(InvalidArgumentError,
                       match="allreduce_ works in place and needs a numpy "
                             "array or a DLPack tensor, got list"):
        hbcore.allreduce_([1.0, 2.0])


def test_other_devices_are_unsupported():
    tensor = FakeDeviceTensor([2], device=(10, 0))  # ROCm
    with pytest.raises(UnsupportedError,
                       match="allgather: tensors on DLPack device type 10"):
        hbcore.allgather(tensor)
    assert tensor.calls == []


@pytest.mark.parametrize("fn", [
    hbcore.grouped_allreduce, hbcore.grouped_allgather,
    hbcore.grouped_reducescatter, hbcore.grouped_allreduce_])
def test_grouped_calls_do_not_mix_host_and_gpu(fn):
    tensor = FakeDeviceTensor([2])
    with pytest.raises(InvalidArgumentError,
                       match="takes host tensors or GPU tensors, not both: "
                             "tensor 1 is in host memory, tensor 0 on a GPU"):
        fn([tensor, np.zeros(2, np.float32)])
    gc.collect()
    assert tensor.deleter_calls == [1]


def test_gpu_array_is_made_only_by_the_runtime():
    assert hbcore.GpuArray is core.GpuArray
    with pytest.raises(TypeError):
        hbcore.GpuArray()
    with pytest.raises(NotInitializedError):
        core.gpu_empty(0, [2], core.HB_FLOAT32)


# ------------------------------------------------------- 2 and 3 ranks

def launch(np_):
    # The front end's checks within a job: the warm world of np_ ranks
    # (harness.run_ranks' warm).
    return cached_ranks(script_path("gpu_frontend.py"), np_, timeout=180,
                        warm=True)


def cases(np_, prefix):
    run = launch(np_)
    run.assert_ok()
    names = [n for n in run.results[0]["cases"] if n.startswith(prefix)]
    return run, names


@pytest.mark.parametrize("np_", [2, 3])
def test_launch_is_clean(np_):
    launch(np_).assert_ok()


@pytest.mark.parametrize("np_", [2, 3])
def test_host_dlpack_tensors_take_the_numpy_path(np_):
    run, names = cases(np_, "host/")
    assert len(names) == 15
    run.assert_cases(names)


@pytest.mark.parametrize("np_", [2, 3])
def test_gpu_tensors_refused_without_gpu_support(np_):
    run, names = cases(np_, "gpu/")
    if run.results[0]["nccl_built"]:
        pytest.skip("this runtime has GPU support")
    assert len(names) == 4
    run.assert_cases(names)


@pytest.mark.parametrize("np_", [2, 3])
def test_runtime_after_refusals_and_dropped_handles(np_):
    run, names = cases(np_, "misc/")
    assert names == ["misc/still-works", "misc/dropped-handle"]
    run.assert_cases(names)


def test_writeable_alias_of_a_read_only_dlpack_import():
    """What in-place host calls use where numpy.from_dlpack marks every
    import read-only (numpy before 2.2.5): a writeable array over the same
    memory, which keeps the import (and so the producer's tensor) alive."""
    from hbcore import _dlpack

    class LegacyOnly:
        """A producer numpy imports through a legacy capsule, which numpy
        always marks read-only."""
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, stream=None):
            return self.array.__dlpack__()

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    imported = np.from_dlpack(LegacyOnly(source))
    assert not imported.flags.writeable
    alias = _dlpack._writeable_alias(imported)
    del imported
    gc.collect()
    assert alias.flags.writeable and alias.shape == (2, 3)
    assert alias.dtype == np.float32
    alias += 10
    np.testing.assert_array_equal(source, np.arange(6).reshape(2, 3) + 10)
    empty = _dlpack._writeable_alias(np.from_dlpack(LegacyOnly(
        np.zeros((0, 4), np.int64))))
    assert empty.shape == (0, 4) and empty.flags.writeable
