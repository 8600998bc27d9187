"""What TensorFlow and the hbcore_tf op library look like, asked without
importing TensorFlow into this process.

``hbrun --check-build`` and :func:`hbcore.build_info` need the installed
TensorFlow's version and whether the op library for it is compiled yet.
Importing TensorFlow to find out prints its start-up log (oneDNN, CPU
feature, CUDA lines) on this process's stderr, which TF_CPP_MIN_LOG_LEVEL
does not silence on TF 2.21 (absl writes those lines before any logging
is set up). So the question runs in a child Python whose stderr is
captured and dropped; the answer comes back as one JSON line on stdout.
When TensorFlow is already imported here (its log already printed), the
question is answered in this process instead, at no cost.

Nothing here compiles the op library: ``hbcore_tf/_ops/build.py`` is loaded by
file path, not through the hbcore_tf package (whose import compiles and
loads the library).

    python -m hbcore.tf_probe          # prints the JSON answer
"""
import functools
import importlib.util
import json
import os
import subprocess
import sys
from typing import Dict, Optional

# Marks the answer line among anything else the child prints on stdout.
_MARKER = "HBCORE_TF_PROBE "
# Seconds the child may take (importing TensorFlow on a loaded machine).
_TIMEOUT_S = 180


def _load_build_module() -> object:
    """hbcore_tf/_ops/build.py as a standalone module (the hbcore_tf package's
    __init__ is not run)."""
    spec = importlib.util.find_spec("hbcore_tf")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("hbcore_tf is not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], "_ops",
                        "build.py")
    module_spec = importlib.util.spec_from_file_location("_hbcore_tf_build",
                                                         path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def probe_here() -> Dict[str, Optional[str]]:
    """Answers in this process (imports TensorFlow).

    Returns:
        {"tensorflow": version or None when not installed,
         "tf_op_library": the compiled library's path or None when not
         compiled yet, "error": why the library could not be looked up, or
         None}.
    """
    answer: Dict[str, Optional[str]] = {"tensorflow": None,
                                        "tf_op_library": None, "error": None}
    if importlib.util.find_spec("tensorflow") is None:
        answer["error"] = "TensorFlow is not installed"
        return answer
    try:
        import tensorflow as tf

        answer["tensorflow"] = tf.__version__
        answer["tf_op_library"] = _load_build_module().cached_library_path()
    except Exception as exc:  # reported, never raised: see module docstring
        lines = str(exc).strip().splitlines()
        answer["error"] = lines[0] if lines else type(exc).__name__
    return answer


def _child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # The child must find the same hbcore and hbcore_tf as this process
    # (a source checkout on sys.path, not only an installed package).
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


@functools.lru_cache(maxsize=1)
def probe() -> Dict[str, Optional[str]]:
    """Answers without TensorFlow's start-up log reaching this process's
    output (see the module docstring); cached for the process.

    Returns:
        As :func:`probe_here`.
    """
    if "tensorflow" in sys.modules:
        return probe_here()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hbcore.tf_probe"], env=_child_env(),
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            errors="replace", timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"tensorflow": None, "tf_op_library": None,
                "error": "TensorFlow probe failed: %s" % exc}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_MARKER):
            return json.loads(line[len(_MARKER):])
    tail = [line for line in proc.stderr.splitlines() if line.strip()]
    return {"tensorflow": None, "tf_op_library": None,
            "error": "TensorFlow probe exited with code %d%s" % (
                proc.returncode, (": " + tail[-1].strip()) if tail else "")}


if __name__ == "__main__":
    print(_MARKER + json.dumps(probe_here()), flush=True)
