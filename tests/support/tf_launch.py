"""pytest-side helpers of the training-layer tests (tests/tf/test_*.py).

- launch(): hbrun a rank script of tests/tf/rank_scripts with hbcore,
  tests/rank_scripts (common.py) and tests/tf/rank_scripts importable;
  launches are cached per (script, np, env, args, hbrun flags) for the
  test session (harness.cached_run), so several test functions can assert
  on one launch.
- rank_script_tests(): THE pytest driver of a rank script whose cases
  all run in one launch per (rank count, Keras flavour): the launch test
  and one test per case, parametrised over rank counts and Keras 3 /
  tf_keras, each launch under a hard timeout.
- REQUIRES_TF: the module mark of every test file that needs TensorFlow.
- tf_keras_path() / TF_KERAS_SKIP: where tf_keras comes from (installed,
  or a directory named by HB_TEST_TF_KERAS_PATH), and the skip reason when
  it is nowhere.
- collectives(): ALLREDUCE collectives of a Chrome-trace timeline, grouped
  by the phase markers the rank scripts emit.

Nothing here imports TensorFlow: the pytest process stays light.
"""
import collections
import importlib.util
import json
import os
import tempfile
from typing import (Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

import pytest

from support.harness import RankRun, cached_run, run_ranks
from support.under_test import import_paths
from support.warm_world import run_warm

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF_TESTS = os.path.join(TESTS, "tf")
ROOT = os.path.dirname(TESTS)
SCRIPTS = os.path.join(TF_TESTS, "rank_scripts")


def tensorflow_missing() -> Optional[str]:
    """The skip reason when TensorFlow or Keras 3 is not installed."""
    for module in ("tensorflow", "keras"):
        if importlib.util.find_spec(module) is None:
            return "%s is not installed (pip install '.[tensorflow]')" % module
    return None


# The module mark of a test file that needs TensorFlow (and Keras 3):
#     pytestmark = REQUIRES_TF
REQUIRES_TF = pytest.mark.skipif(tensorflow_missing() is not None,
                                 reason=str(tensorflow_missing()))


def tf_keras_path() -> Optional[str]:
    """'' when tf_keras is installed, a directory holding it when
    HB_TEST_TF_KERAS_PATH names one, else None."""
    if importlib.util.find_spec("tf_keras") is not None:
        return ""
    path = os.environ.get("HB_TEST_TF_KERAS_PATH", "")
    if path and os.path.isdir(os.path.join(path, "tf_keras")):
        return path
    return None


TF_KERAS_SKIP = (
    "tf_keras is not importable: install it without pulling the full "
    "tensorflow wheel (pip install --no-deps tf-keras==<your TF version>), "
    "or set HB_TEST_TF_KERAS_PATH to a directory containing the tf_keras "
    "package")


def tf_keras_env() -> Dict[str, str]:
    """Environment for a launch that uses tf_keras (TF_USE_LEGACY_KERAS=1)."""
    path = tf_keras_path()
    if path is None:
        raise RuntimeError(TF_KERAS_SKIP)
    env = {"TF_USE_LEGACY_KERAS": "1"}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(_pythonpath() + [path])
    return env


def _pythonpath() -> List[str]:
    paths = import_paths() + [os.path.join(TESTS, "rank_scripts"), SCRIPTS]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return paths


# Rank scripts whose subject is a fresh process: what importing hbcore_tf
# or its first use installs (patch_moments.py compares TF's objects before
# and after the import); what a process traces over its life
# (train_hooks_tape.py counts the eager reductions in the process-wide
# cache, which earlier scripts of a warm world fill). Every other script
# runs in a warm world
# (tests/support/warm_world.py), as a fresh process would run it, unless
# its launch asks for a fresh job (fresh=True: how hbrun ends a job whose
# rank failed, say).
FRESH_PROCESS_SCRIPTS = frozenset({"patch_moments.py",
                                   "train_hooks_tape.py"})


def launch(script: str, np: int, timeout: float = 180,
           env: Optional[Mapping[str, str]] = None,
           args: Sequence[str] = (), cache: bool = True,
           hbrun_args: Sequence[str] = (), fresh: bool = False) -> RankRun:
    """Runs tests/tf/rank_scripts/<script> on NP ranks (hard timeout) and
    returns the RankRun; cached per arguments. The ranks are those of a
    warm world of the same environment and hbrun flags, or of a fresh
    ``hbrun -np NP`` with ``fresh`` and for FRESH_PROCESS_SCRIPTS."""
    full_env = {"PYTHONPATH": os.pathsep.join(_pythonpath()),
                "TF_CPP_MIN_LOG_LEVEL": "2"}
    full_env.update(env or {})
    fresh = fresh or script in FRESH_PROCESS_SCRIPTS
    runner = run_ranks if fresh else run_warm

    def make_run() -> RankRun:
        return runner(os.path.join(SCRIPTS, script), np, timeout=timeout,
                      env=full_env, args=args, hbrun_args=hbrun_args)

    if not cache:
        return make_run()
    return cached_run(("tf_launch", script, np,
                       tuple(sorted(full_env.items())), tuple(args),
                       tuple(hbrun_args), fresh), make_run)


CaseList = Union[str, Sequence[str]]
LaunchSpec = Tuple[int, Optional[str]]  # (rank count, Keras flavour or None)


class RankScriptTests(NamedTuple):
    """What rank_script_tests() returns: the two test functions (assign
    them to module names starting with ``test_``) and the launch they
    share, ``run(np_, flavor)``, for further tests of the same launch."""
    test_launch_is_clean: Callable
    test_case: Callable
    run: Callable[..., RankRun]


def rank_script_tests(script: str, nps: Sequence[int] = (2, 3),
                      flavors: Optional[Sequence[str]] = None,
                      cases: Union[CaseList, Mapping[str, CaseList]] = "CASES",
                      timeout: float = 180,
                      env: Optional[Mapping[str, str]] = None,
                      args: Sequence[str] = (),
                      hbrun_args: Sequence[str] = (),
                      runs: Optional[Sequence[LaunchSpec]] = None,
                      check_launch: Optional[Callable[[RankRun], None]] = None
                      ) -> RankScriptTests:
    """The tests of a rank script whose cases all run in one launch per
    rank count and Keras flavour (launch() caches: every test of a launch
    reads the same one, also across test files). Use in a test module::

        test_launch_is_clean, test_case, run = rank_script_tests(
            "sync_batch_norm.py", flavors=("keras3", "tf_keras"))

    ``test_launch_is_clean`` asserts that every rank finished, exited 0 and
    reported (with flavours: under the intended Keras, the script's
    report() carrying "keras"), then ``check_launch(run)``;
    ``test_case`` asserts one case on every rank, for every run.

    Args:
        script: a file of tests/tf/rank_scripts.
        nps: the rank counts.
        flavors: None for a script that does not choose Keras (a plain
            launch, no flavour in the test ids), else some of "keras3" and
            "tf_keras" (tf_keras runs are skipped, with the reason, when it
            is not importable).
        cases: the case names, or the name of the script's list variable
            holding them; with flavours also a mapping flavour -> either
            (a flavour missing from it runs no case tests).
        timeout: the hard timeout of each launch, seconds.
        env, args, hbrun_args: of every launch (see launch()).
        runs: (np, flavour) pairs to run instead of every rank count under
            every flavour.
        check_launch: further assertions on a clean launch.

    Returns:
        RankScriptTests(test_launch_is_clean, test_case, run).
    """
    if runs is None:
        runs = [(np_, flavor) for flavor in (flavors or [None])
                for np_ in nps]

    def run(np_: int, flavor: Optional[str] = None) -> RankRun:
        return flavor_launch(script, np_, flavor, timeout, env=env,
                             args=args, hbrun_args=hbrun_args)

    def cases_of(flavor: Optional[str]) -> List[str]:
        chosen = cases
        if isinstance(chosen, Mapping):
            chosen = chosen.get(flavor, [])
        if isinstance(chosen, str):
            return case_names(script, chosen)
        return list(chosen)

    def run_param(np_: int, flavor: Optional[str], *values: object,
                  prefix: str = "") -> object:
        run_id = "np%d" % np_ if flavor is None else "%s-np%d" % (flavor,
                                                                  np_)
        marks = ([pytest.mark.skipif(tf_keras_path() is None,
                                     reason=TF_KERAS_SKIP)]
                 if flavor == "tf_keras" else [])
        return pytest.param(np_, flavor, *values, marks=marks,
                            id=prefix + run_id)

    @pytest.mark.parametrize("np_,flavor", [run_param(n, f) for n, f in runs])
    def test_launch_is_clean(np_, flavor):
        result = run(np_, flavor)
        if flavor is None:
            result.assert_ok()
        else:
            assert_flavor_ran(result, flavor)
        if check_launch is not None:
            check_launch(result)

    @pytest.mark.parametrize("np_,flavor,case", [
        run_param(n, f, case, prefix=case + "-")
        for n, f in runs for case in cases_of(f)])
    def test_case(np_, flavor, case):
        run(np_, flavor).assert_cases([case])

    return RankScriptTests(test_launch_is_clean, test_case, run)


def keras_flavors() -> list:
    """pytest params for the two Keras flavours of a rank script: Keras 3,
    and tf_keras (skipped with the reason when it is not importable)."""
    return ["keras3", pytest.param("tf_keras", marks=pytest.mark.skipif(
        tf_keras_path() is None, reason=TF_KERAS_SKIP))]


def flavor_launch(script: str, np: int, flavor: Optional[str] = None,
                  timeout: float = 300,
                  env: Optional[Mapping[str, str]] = None,
                  args: Sequence[str] = (),
                  hbrun_args: Sequence[str] = ()) -> RankRun:
    """launch() with ``env`` and the environment of a Keras flavour
    ("tf_keras"; "keras3" and None add nothing); cached."""
    full_env = dict(env or {})
    if flavor == "tf_keras":
        full_env.update(tf_keras_env())
    return launch(script, np, env=full_env, timeout=timeout, args=args,
                  hbrun_args=hbrun_args)


def assert_flavor_ran(run: RankRun, flavor: str) -> None:
    """The launch is clean and rank 0 reported the intended Keras."""
    run.assert_ok()
    want = "tf_keras" if flavor == "tf_keras" else "keras"
    assert run.results[0]["keras"] == want, run.results[0]


# For launches of op-level rank scripts: a desynchronised case becomes an
# error within seconds instead of a hang that only the hard timeout ends.
STALL_FAST_ENV = {
    "HB_STALL_CHECK_TIME_SECONDS": "5",
    "HB_STALL_SHUTDOWN_TIME_SECONDS": "30",
}


def op_launch(script: str, np: int, timeout: float = 240) -> RankRun:
    """launch() of an op-level rank script with STALL_FAST_ENV; cached."""
    return launch(script, np, timeout=timeout, env=STALL_FAST_ENV)


# --- timeline -------------------------------------------------------------------

def load_trace(path: str) -> List[dict]:
    with open(path) as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def collectives(path: str, op: str = "ALLREDUCE"
                ) -> Dict[str, List[Tuple[float, List[str]]]]:
    """Groups the ``op`` events of a trace into collectives (events with
    the same start time are one fused collective; each event names one
    tensor) and the collectives into phases: a collective carrying a tensor
    named ``phase.<name>`` starts phase <name>.

    Returns:
        phase name -> [(start time, [tensor names])] in time order.
    """
    events = load_trace(path)
    names = {e["pid"]: e.get("args", {}).get("name", "")
             for e in events if e.get("ph") == "M"}
    by_start: Dict[float, List[str]] = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("name") == op:
            by_start[e["ts"]].append(names.get(e["pid"], "?"))
    phases: Dict[str, List[Tuple[float, List[str]]]] = collections.OrderedDict()
    current = "(before markers)"
    for start in sorted(by_start):
        tensors = by_start[start]
        marks = [t for t in tensors if t.startswith("phase.")]
        if marks:
            current = marks[0][len("phase."):]
            phases.setdefault(current, [])
            continue
        phases.setdefault(current, []).append((start, tensors))
    return phases


def fusion_copies(path: str) -> int:
    """Number of MEMCPY_IN_FUSION_BUFFER events (one per fused tensor)."""
    return sum(1 for e in load_trace(path)
               if e.get("name") == "MEMCPY_IN_FUSION_BUFFER")


def case_names(script: str, variable: str = "CASES") -> List[str]:
    """A list of case names (``CASES``) of a rank script, read from its
    source (the script imports TensorFlow; the pytest process does not)."""
    import ast

    with open(os.path.join(SCRIPTS, script)) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == variable):
            return list(ast.literal_eval(node.value))
    raise ValueError("%s has no %s list" % (script, variable))


# --- the shared timeline launch ----------------------------------------------------

def timeline_run(legacy_keras: bool = False) -> Tuple[RankRun, str]:
    """Runs tests/tf/rank_scripts/train_timeline.py at 2 ranks under
    HB_TIMELINE once per session and Keras flavour (shared by
    test_keras.py and test_tape.py); returns (the launch, the trace path).
    """
    def make_run() -> Tuple[RankRun, str]:
        directory = tempfile.mkdtemp(prefix="hbtl_")
        path = os.path.join(directory, "timeline.json")
        env = tf_keras_env() if legacy_keras else {}
        env["HB_TIMELINE"] = path
        # What is checked is the fusion of a step's gradients into one
        # ALLREDUCE: small cached gradients and the phase markers would
        # otherwise ride the negotiation's collective (the fast path, whose
        # timeline events are per tensor: tests/test_fast_path.py).
        env["HB_FAST_PATH_THRESHOLD"] = "0"
        run = launch("train_timeline.py", 2, env=env)
        run.assert_ok()
        assert os.path.exists(path), "rank 0 wrote no timeline\n" + \
            run.describe()
        return run, path

    return cached_run(("tf_launch timeline",
                       "tf_keras" if legacy_keras else "keras3"), make_run)


def assert_one_collective_per_step(state: Tuple[RankRun, str],
                                   phase: str) -> None:
    """Asserts that in ``phase`` of the timeline launch every training
    step issued exactly one ALLREDUCE collective carrying one tensor per
    trainable variable (the gradients of a step fused)."""
    run, path = state
    expected = run.results[0]["phases"][phase]
    phases = collectives(path)
    assert phase in phases, "no marker for %s in the trace: %s" % (
        phase, list(phases))
    found = phases[phase]
    sizes = [len(tensors) for _, tensors in found]
    assert len(found) == expected["steps"], (
        "%s: %d ALLREDUCE collectives for %d steps (tensors per "
        "collective: %s)" % (phase, len(found), expected["steps"], sizes))
    assert sizes == [expected["tensors"]] * expected["steps"], (
        "%s: tensors per collective %s, expected %d (one per trainable "
        "variable)" % (phase, sizes, expected["tensors"]))
    assert fusion_copies(path) > 0, "no MEMCPY_IN_FUSION_BUFFER events"
