"""``python -m hbcore_tf._patches.check``: does every private TF/Keras name
hbcore uses, patch targets included, still exist with the expected
signature?

Prints one line per entry of hbcore_tf._patches.internals (``ok``, the
version variant found where versions differ, or ``FAIL`` and why) and
exits non-zero naming the failed entries. Run by CI on the oldest and the
newest supported TensorFlow (tests/tf/test_patch_targets.py runs it too),
so a TensorFlow or Keras upgrade that renames a target fails here instead
of silently dropping a patch.
"""
import inspect
import sys
from typing import List, Optional, Tuple

from hbcore_tf._patches import internals


def _parameters(obj: object) -> Tuple[str, ...]:
    return tuple(inspect.signature(obj).parameters)


def check_entry(entry: internals.Internal) -> Tuple[bool, str]:
    """Checks one entry.

    Args:
        entry: an entry of internals.

    Returns:
        (passed, what was found).
    """
    try:
        obj = entry.load()
    except internals.InternalMissing as exc:
        return False, "missing: %s" % exc
    if entry.kind == "class" and not isinstance(obj, type):
        return False, "not a class: %r" % (obj,)
    if entry.kind == "property" and not isinstance(obj, property):
        return False, "not a property: %r" % (obj,)
    if entry.kind == "callable" and not callable(obj):
        return False, "not callable: %r" % (obj,)
    if entry.params is None:
        return True, entry.kind
    try:
        found = _parameters(obj)
    except (TypeError, ValueError) as exc:
        return False, "no signature: %s" % exc
    variants = (entry.params if isinstance(entry.params, dict)
                else {"": entry.params})
    for label, params in variants.items():
        if found == tuple(params):
            return True, "signature %s%s" % (
                ", ".join(found), " (%s)" % label if label else "")
    return False, "signature changed: found (%s), expected %s" % (
        ", ".join(found), " or ".join(
            "(%s)" % ", ".join(p) for p in variants.values()))


def versions() -> str:
    """The TensorFlow, Keras and tf_keras versions installed."""
    out = []
    for package in ("tensorflow", "keras", "tf_keras"):
        try:
            module = __import__(package)
            out.append("%s %s" % (package, getattr(module, "__version__",
                                                    "?")))
        except ImportError:
            out.append("%s not installed" % package)
    return ", ".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    """Checks every entry; prints a line each.

    Args:
        argv: unused (no options).

    Returns:
        0 when every entry passed, 1 otherwise.
    """
    del argv
    print("hbcore_tf._patches.check on %s" % versions())
    failed = []
    for name, entry in internals.all_internals():
        passed, what = check_entry(entry)
        print("%-4s %-38s %s: %s" % ("ok" if passed else "FAIL", name,
                                     entry.path, what))
        if not passed:
            failed.append(name)
    total = len(internals.all_internals())
    if failed:
        print("FAILED: %d of %d TensorFlow/Keras internals changed: %s" % (
            len(failed), total, ", ".join(failed)))
        return 1
    print("all %d TensorFlow/Keras internals found as expected" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
