"""Helpers of the ecosystem rank scripts (eco_*.py: DeepCTR, keras-rs,
TensorFlow Recommenders trained under hbrun; tests/tf/test_ecosystem.py).

Every case of those scripts has the same shape:

1. a fixed global batch per step (the same arrays whatever the rank; its
   size is ranks x PER_RANK rows), of which rank r trains on rows
   [r * PER_RANK, (r + 1) * PER_RANK) of every step (``shard``);
2. the library's model trained on that shard with hbcore's
   DistributedOptimizer or DistributedGradientTape;
3. ``check_against_reference``: the trained weights are bit-identical on
   every rank (an allgather), and equal to the weights of the same model
   trained by rank 0 alone, without hbcore, on the whole global batch of
   every step (``reference_from_root`` runs it and broadcasts the
   result; the reference runs eagerly: for a few steps tracing would cost
   more than it saves).

The reference runs on rank 0 only: 3 ranks share 2 cores in CI, and a
model trained three times over costs the suite its time. A reference that
fails on rank 0 fails the case on every rank (the error is broadcast), so
no rank waits for a broadcast that never comes.
"""
import traceback
from typing import Callable, Dict, List, Sequence

import numpy as np

from train_common import (CaseFailure, Checker, identical_on_all_ranks,
                          report, run_table)

import hbcore  # noqa: E402
import hbcore_tf  # noqa: E402

# Rows of the global batch each rank trains on per step, and steps per
# case: a few steps of small models keep every case near a second.
PER_RANK = 4
STEPS = 3

# float32 weights after STEPS steps: data-parallel training sums the same
# per-example gradient terms as one process on the whole batch, only
# grouped differently (a mean per rank, then the mean over ranks) and in
# another order, so each step differs by float32 rounding (a few ulp,
# ~1e-7 relative). Measured after STEPS steps of SGD with momentum or
# Adagrad: every array within 1/4 of this tolerance, most within 1/20;
# the largest difference, 1.3e-6 on weights up to 2.7, is the FeatureCross
# model's at 3 ranks (its products of features amplify rounding). A wrong
# scaling (a sum for a mean, a rank's gradient left out, a gathered
# candidate's gradient averaged) is off by 1e-2 or more at the learning
# rates used here. Not Adam: its step barely depends on the gradient's
# scale, so it would hide such errors, and it turns rounding in a
# near-zero gradient into a step of ~lr.
RTOL = 1e-5
ATOL = 1e-6


def global_rows(size: int) -> int:
    """Rows of the global data of a case at ``size`` ranks: STEPS global
    batches of ``size`` x PER_RANK rows."""
    return STEPS * size * PER_RANK


def shard(array: np.ndarray, rank: int, size: int) -> np.ndarray:
    """Rank ``rank``'s rows of ``array``, whose first dimension holds
    STEPS global batches of ``size`` x PER_RANK rows: PER_RANK rows of each
    step, in step order.

    Args:
        array: the global data, STEPS x size x PER_RANK rows.
        rank: the rank whose shard to take.
        size: the number of ranks.

    Returns:
        STEPS x PER_RANK rows.

    Raises:
        ValueError: the first dimension is not STEPS x size x PER_RANK.
    """
    array = np.asarray(array)
    if array.shape[0] != STEPS * size * PER_RANK:
        raise ValueError("%d rows, expected %d steps x %d ranks x %d" % (
            array.shape[0], STEPS, size, PER_RANK))
    steps = array.reshape((STEPS, size, PER_RANK) + array.shape[1:])
    return steps[:, rank].reshape((STEPS * PER_RANK,) + array.shape[1:])


def reference_from_root(compute: Callable[[], Sequence[np.ndarray]]
                        ) -> List[np.ndarray]:
    """Runs ``compute`` (the one-process reference: no hbcore inside) on
    rank 0 and gives every rank its arrays.

    Args:
        compute: returns the reference's arrays.

    Returns:
        The arrays ``compute`` returned on rank 0, on every rank.

    Raises:
        CaseFailure: ``compute`` raised on rank 0 (on every rank, naming
            the error).
    """
    result, error = None, ""
    if hbcore.rank() == 0:
        try:
            result = [np.asarray(a) for a in compute()]
        except Exception as exc:  # noqa: BLE001 - sent to every rank
            error = "%s: %s\n%s" % (type(exc).__name__, exc,
                                    traceback.format_exc(limit=6))
    result, error = hbcore.broadcast_object((result, error), 0)
    if error:
        raise CaseFailure("the one-process reference failed on rank 0: "
                          + error)
    return result


def check_against_reference(weights: Sequence[np.ndarray],
                            reference: Sequence[np.ndarray], what: str,
                            rtol: float = RTOL, atol: float = ATOL) -> None:
    """Asserts that ``weights`` are bit-identical on every rank and close
    to ``reference`` (see RTOL for the tolerance).

    Args:
        weights: this rank's trained arrays.
        reference: the one-process reference's arrays, in the same order.
        what: names the model in messages.
        rtol, atol: of np.testing.assert_allclose.

    Raises:
        CaseFailure: the ranks differ, or the counts differ.
        AssertionError: an array is not close to the reference.
    """
    weights = [np.asarray(w) for w in weights]
    identical_on_all_ranks(weights, what)
    if len(weights) != len(reference):
        raise CaseFailure("%s: %d arrays, the reference has %d" % (
            what, len(weights), len(reference)))
    for i, (mine, ref) in enumerate(zip(weights, reference)):
        np.testing.assert_allclose(
            mine, ref, rtol=rtol, atol=atol,
            err_msg="%s: array %d (shape %s) differs from one process on "
            "the whole batch" % (what, i, ref.shape))


def run_script(cases: Sequence[str],
               make_table: Callable[[int], Dict[str, Callable[[], None]]],
               keras_name: str) -> None:
    """The main() of an eco_*.py script: initialises hbcore, runs every
    case of ``make_table(size)`` in the order of ``cases``, reports (with
    the Keras in use, which the test checks) and shuts down.

    Args:
        cases: the script's CASES list.
        make_table: the number of ranks -> case name -> function.
        keras_name: the name of the Keras module the script uses.
    """
    hbcore_tf.init()
    rank, size = hbcore_tf.rank(), hbcore_tf.size()
    checker = Checker(rank)
    run_table(checker, make_table(size), cases)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras_name})
    hbcore_tf.shutdown()
