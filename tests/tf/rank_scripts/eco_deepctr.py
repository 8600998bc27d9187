"""DeepCTR's DeepFM and DCN (tf_keras: TF_USE_LEGACY_KERAS=1) trained
data-parallel under hbrun with the one line docs/ecosystem.md adds:
``hvd.DistributedOptimizer`` around the optimizer (and the broadcast
callback). Run by tests/tf/test_ecosystem.py at 2 and 3 ranks.

Each case builds the model as DeepCTR's examples do (a rank's Dense
layers without a seed start from its own random values: the broadcast
callback must fix them), trains STEPS steps with ``model.fit`` on this
rank's shard of a fixed global batch, and checks (eco_common) that the
weights are identical on every rank and equal to the same model trained
by rank 0 in plain tf_keras on the whole batch, from rank 0's initial
weights.
"""
import threading
from typing import Any, Callable, Dict, Tuple
from unittest import mock

import numpy as np

# train_common sets TF's thread pools (one thread each: 2-3 ranks share 2
# cores); named here because the warm worlds read a script's own imports
# for its thread pools (tests/support/warm_world.py).
import train_common  # noqa: F401
from eco_common import (PER_RANK, check_against_reference, global_rows,
                        reference_from_root, run_script, shard)

import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()

CASES = ["deepfm_momentum", "dcn_adagrad"]
VOCAB = 7       # rows of each sparse feature's table
SPARSE = 2      # sparse features
DENSE = 1       # dense features
EMB_DIM = 4


def import_deepctr() -> Any:
    """Imports deepctr without its version check: ``import deepctr``
    starts a thread that asks PyPI for the latest release (requests.get,
    no timeout). Here that request fails at once and the thread is
    joined, so no rank talks to the network or leaves a thread behind
    (docs/ecosystem.md, "DeepCTR", points users here)."""
    import requests

    before = set(threading.enumerate())
    with mock.patch.object(requests, "get",
                           side_effect=OSError("no network in the tests")):
        import deepctr
        for thread in set(threading.enumerate()) - before:
            target = getattr(thread, "_target", None)
            if getattr(target, "__module__", "").startswith("deepctr"):
                thread.join(timeout=30)
    return deepctr


import_deepctr()
from deepctr.feature_column import DenseFeat, SparseFeat  # noqa: E402
from deepctr.models import DCN, DeepFM  # noqa: E402


def feature_columns() -> list:
    return ([SparseFeat("c%d" % i, vocabulary_size=VOCAB,
                        embedding_dim=EMB_DIM) for i in range(SPARSE)]
            + [DenseFeat("d%d" % i, 1) for i in range(DENSE)])


def global_data(seed: int, size: int) -> Tuple[Dict[str, np.ndarray],
                                                np.ndarray]:
    """The features and click labels of every step's global batch (the
    same on every rank); each step repeats an id so that a table's
    gradient has duplicate rows."""
    rng = np.random.default_rng([seed, size])
    n = global_rows(size)
    x = {"c%d" % i: rng.integers(0, VOCAB, n).astype(np.int64)
         for i in range(SPARSE)}
    x["c0"][1::PER_RANK] = x["c0"][0::PER_RANK]
    x.update({"d%d" % i: rng.normal(size=n).astype(np.float32)
              for i in range(DENSE)})
    y = rng.integers(0, 2, n).astype(np.float32)
    return x, y


def train_case(build: Callable[[], Any], optimizer: Callable[[], Any],
               seed: int, what: str) -> None:
    rank, size = hvd.rank(), hvd.size()
    x, y = global_data(seed, size)

    model = build()
    initial = model.get_weights()   # rank 0's: the reference starts there
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer()),
                  loss="binary_crossentropy")
    model.fit({k: shard(v, rank, size) for k, v in x.items()},
              shard(y, rank, size), batch_size=PER_RANK, epochs=1,
              shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

    def one_process():
        ref = build()
        ref.set_weights(initial)
        ref.compile(optimizer=optimizer(), loss="binary_crossentropy",
                    run_eagerly=True)
        ref.fit(x, y, batch_size=size * PER_RANK, epochs=1, shuffle=False,
                verbose=0)
        return ref.get_weights()

    check_against_reference(model.get_weights(),
                            reference_from_root(one_process), what)


def cases(size: int) -> Dict[str, Callable[[], None]]:
    del size
    columns = feature_columns()
    return {
        # DeepCTR's defaults but smaller: l2 on embeddings and the linear
        # part (every rank adds the same regularisation loss), sigmoid
        # output, embeddings with sparse (IndexedSlices) gradients. Not
        # Adam: its step hardly depends on the gradient's scale, so it
        # would hide a sum taken for a mean; SGD with momentum and Adagrad
        # (accumulators start at 0.1) see it.
        "deepfm_momentum": lambda: train_case(
            lambda: DeepFM(columns, columns, dnn_hidden_units=(8,)),
            lambda: keras.optimizers.SGD(0.1, momentum=0.9), 1, "DeepFM"),
        "dcn_adagrad": lambda: train_case(
            lambda: DCN(columns, columns, cross_num=2,
                        dnn_hidden_units=(8,)),
            lambda: keras.optimizers.Adagrad(0.1), 2, "DCN"),
    }


if __name__ == "__main__":
    run_script(CASES, cases, keras.__name__)
