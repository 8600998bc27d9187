"""Helpers for the training-layer rank scripts (tests/tf/rank_scripts/train_*).

Imported by rank scripts run under hbrun; tests/rank_scripts (with
common.py) is on PYTHONPATH there. Sets TensorFlow to one intra-op and one
inter-op thread per rank before anything else touches TF: 2-4 ranks share
2 cores in CI.
"""
import os
from typing import Any, Callable, Dict, List, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

# expect_raises is common.py's (one helper for both trees: type and every
# message fragment checked); re-exported for the rank scripts here.
from common import (CaseFailure, Checker, env_rank, env_size,  # noqa: E402,F401
                    expect_raises, report)


def rank_values(seed: int, rank: int, shape: Sequence[int]) -> np.ndarray:
    """float32 data of ``rank`` for ``seed``; any rank can compute any
    rank's values."""
    rng = np.random.default_rng([seed, rank])
    return rng.uniform(-1.0, 1.0, size=tuple(shape)).astype(np.float32)


def all_ranks(fn: Callable[[int], np.ndarray], size: int) -> List[np.ndarray]:
    return [np.asarray(fn(r), np.float64) for r in range(size)]


def mean_over_ranks(fn: Callable[[int], np.ndarray], size: int) -> np.ndarray:
    return np.mean(all_ranks(fn, size), axis=0)


def list_rows(value: Any) -> list:
    """The rows of a list column's batch (an hb.data.DataFrame.Value of
    eager tensors or numpy arrays) as nested Python lists: row i of a level
    is items [splits[i], splits[i + 1]) of the level below."""
    items = np.asarray(value.values).tolist()
    for splits in reversed(value.nested_row_splits):
        splits = np.asarray(splits).tolist()
        items = [items[a:b] for a, b in zip(splits[:-1], splits[1:])]
    return items


def close(actual: Any, expected: Any, what: str, rtol: float = 1e-5,
          atol: float = 1e-6) -> None:
    """Asserts allclose with a message naming ``what``."""
    if hasattr(actual, "numpy"):
        actual = actual.numpy()
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise CaseFailure("%s: shape %s, expected %s" % (
            what, actual.shape, expected.shape))
    if not np.allclose(actual, expected, rtol=rtol, atol=atol):
        diff = np.max(np.abs(actual - expected))
        raise CaseFailure("%s: max abs diff %g (rtol %g, atol %g); got %s, "
                          "expected %s" % (what, diff, rtol, atol,
                                           actual.ravel()[:4],
                                           expected.ravel()[:4]))


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CaseFailure(message)


def identical_on_all_ranks(arrays: Sequence[np.ndarray], what: str) -> None:
    """Asserts every rank holds bit-identical arrays (gathered with
    hbcore's object allgather)."""
    import hbcore

    gathered = hbcore.allgather_object([np.asarray(a) for a in arrays])
    for rank, theirs in enumerate(gathered):
        for i, (mine, other) in enumerate(zip(gathered[0], theirs)):
            if not np.array_equal(mine, other):
                raise CaseFailure("%s: array %d differs between rank 0 and "
                                  "rank %d (max diff %g)" % (
                                      what, i, rank,
                                      np.max(np.abs(mine - other))))


def splitmix64(z: int) -> int:
    """The splitmix64 finalizer on a 64-bit word (Python ints, modulo
    2**64): the hash that places a dynamic table's keys, written from its
    definition, for the references of the rank scripts."""
    mask = (1 << 64) - 1
    z &= mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def dense_gradient_step(model: Any, optimizer: Any, x: Any, y: Any,
                        variables: Any = None, dense: bool = True) -> None:
    """One step of plain Keras on (x, y) with the mean squared error, each
    gradient made dense before the update (TensorFlow's sparse-update
    semantics: the gradient of duplicate ids summed first), as the
    references of the embedding rank scripts train. ``variables``: what
    the optimizer updates (the tf.Variables of a Keras 3 model for a
    tf.compat.v1 optimizer), by default the model's trainable ones.
    ``dense=False`` keeps a table's gradient an IndexedSlices (a
    tf.compat.v1 optimizer sums its duplicates and updates only its rows:
    Ftrl's dense update would also move rows without a gradient)."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    if variables is None:
        variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    if dense:
        grads = [tf.convert_to_tensor(g) for g in grads]
    optimizer.apply_gradients(zip(grads, variables))


def run_table(checker: Any, table: Dict[str, Callable[[], Any]],
              cases: Sequence[str], skip: Sequence[str] = ()) -> None:
    """Runs the cases of a rank script in order through ``checker``.

    Args:
        checker: the rank's Checker.
        table: case name -> function; its names must be exactly ``cases``,
            in order (the pytest side parametrizes over ``cases``).
        cases: the script's CASES list.
        skip: cases not to run in this launch (e.g. tf_keras-only ones).
    """
    assert list(table) == list(cases), (list(table), list(cases))
    for name in cases:
        if name not in skip:
            checker.run(name, table[name])
