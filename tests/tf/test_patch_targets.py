"""hbcore_tf/_patches: the check of every private TF/Keras name hbcore
uses (``python -m hbcore_tf._patches.check``, also run by CI on TF 2.16),
that it fails loudly on a changed target, and when patches are installed
and undone (tests/tf/rank_scripts/patch_moments.py, at 2 ranks: a sharded
table needs more than one)."""
import os
import subprocess
import sys

import pytest

from support.tf_launch import (_pythonpath, rank_script_tests,
                               tensorflow_missing, tf_keras_path)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "patch_moments.py"


def _run_check(cwd: str) -> subprocess.CompletedProcess:
    # Run from outside the checkout: ``python -m`` puts the working
    # directory first on sys.path, where an unbuilt checkout (CI's) would
    # shadow the installed package.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(_pythonpath()),
               TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", "hbcore_tf._patches.check"], env=env,
        capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.skipif(tf_keras_path() != "", reason="tf_keras not installed")
def test_check_passes_and_prints_every_entry(tmp_path) -> None:
    from hbcore_tf._patches import internals

    done = _run_check(str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    entries = internals.all_internals()
    for name, entry in entries:
        assert any(line.startswith("ok") and " %s " % name in line
                   and entry.path in line for line in lines), name
    assert lines[-1] == ("all %d TensorFlow/Keras internals found as "
                         "expected" % len(entries)), lines[-1]
    # Where versions differ, the line names the variant found.
    variant = [line for line in lines
               if " KERAS3_ADD_VARIABLE_FROM_REFERENCE " in line][0]
    assert "(Keras 3.0)" in variant or "(Keras >= 3.2)" in variant, variant


def test_check_fails_loudly_naming_the_target(monkeypatch, capsys) -> None:
    from hbcore_tf._patches import check, internals

    renamed = internals.Internal("json:no_such_function", "a test")
    changed = internals.Internal("json:dumps", "a test", ("obj", "fp"))
    not_class = internals.Internal("json:dumps", "a test", None, "class")
    fine = internals.Internal("json:loads", "a test")
    assert check.check_entry(renamed) == (
        False, "missing: json:no_such_function: json has no attribute "
        "'no_such_function'")
    passed, what = check.check_entry(changed)
    assert not passed and what.startswith(
        "signature changed: found (obj, skipkeys, "), what
    assert what.endswith("expected (obj, fp)"), what
    assert check.check_entry(not_class)[0] is False
    assert check.check_entry(fine) == (True, "callable")
    monkeypatch.setattr(internals, "all_internals", lambda: [
        ("FINE", fine), ("RENAMED", renamed), ("CHANGED", changed)])
    assert check.main([]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("ok   FINE "), out
    assert out[2].startswith("FAIL RENAMED "), out
    assert out[3].startswith("FAIL CHANGED "), out
    assert out[-1] == ("FAILED: 2 of 3 TensorFlow/Keras internals changed: "
                       "RENAMED, CHANGED"), out


def test_load_of_a_missing_module_is_an_import_error() -> None:
    from hbcore_tf._patches import internals

    entry = internals.Internal("hb_no_such_module:x", "a test")
    with pytest.raises(ImportError, match="hb_no_such_module:x: cannot "
                                          "import hb_no_such_module"):
        entry.load()
    assert internals.loaded_or_none(entry) is None


def test_patch_restores_the_original_object() -> None:
    import types

    from hbcore_tf._patches import patch

    class Owner:
        @staticmethod
        def make(x):
            return x + 1

    module = types.SimpleNamespace(value=frozenset({1}))
    original = Owner.__dict__["make"]
    one = patch.Patch(lambda: Owner, "make")
    assert one.install(lambda f: staticmethod(lambda x: f.__func__(x) * 10))
    assert not one.install(lambda f: staticmethod(lambda x: 0))  # once
    assert Owner.make(1) == 20 and one.installed
    one.uninstall()
    assert Owner.__dict__["make"] is original and Owner.make(1) == 2
    value = patch.Patch(lambda: module, "value")
    value.install(lambda current: current | {2})
    assert module.value == frozenset({1, 2})
    value.uninstall()
    assert module.value == frozenset({1}) and not value.installed


test_launch_is_clean, test_case, _run = rank_script_tests(
    SCRIPT, nps=(2,), timeout=240)
