"""hb.saved_model export cases: HybridBackend's export modes, local variables in the
serving graph, and hb.saved_model.export_all; run by
tests/tf/test_hb_export.py under hbrun at 2 and 3 ranks.

The checkpoint: a sharded table of B rows (uneven blocks at 2 and 3
ranks) initialized from TABLE0, and a dense [D, 1] kernel W0, saved
collectively. Every SavedModel is loaded and run by the job's plain
TensorFlow process (plain_tf.py: hbcore never imported there); expected
predictions come from numpy on TABLE0 and W0.
"""
import json
import os
import shutil
import tempfile

import numpy as np

from plain_tf import PlainTF, PlainTFError
from train_common import (CaseFailure, Checker, check, close, expect_raises,
                          report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402

CASES = ["save", "export/mode-test", "export/local-variables-initialized",
         "export_all/default-modes", "export_all/main-op", "export_all/errors"]
B, D = 11, 3
V1 = tf.compat.v1
TABLE0 = (np.arange(B * D, dtype=np.float32).reshape(B, D) - 15.0) / 20.0
W0 = np.array([[0.5], [-0.3], [0.2]], np.float32)
IDS = [0, 3, 10, 7, 7]
BIAS = 1.5
PLAIN_PROCESS = r"""
import json, sys
import tensorflow as tf
V1 = tf.compat.v1
path, tags, key, ids = sys.argv[1], sys.argv[2].split(","), sys.argv[3], \
    json.loads(sys.argv[4])
with tf.Graph().as_default() as graph, V1.Session(graph=graph) as sess:
    meta = V1.saved_model.load(sess, tags, path)
    sig = meta.signature_def[key]
    pred = sess.run(sig.outputs["pred"].name, {sig.inputs["ids"].name: ids})
    out = {"pred": pred.tolist(), "keys": sorted(meta.signature_def),
           "tags": sorted(meta.meta_info_def.tags)}
print("RESULT" + json.dumps(out))
"""
# The job's plain TensorFlow process (rank 0 uses it; closed by main).
PLAIN = PlainTF()


def run_plain_process(path: str, tags: str, key: str) -> dict:
    """Loads the SavedModel in plain TensorFlow and runs signature ``key``
    on IDS; returns the process's JSON result."""
    try:
        result = PLAIN.run(PLAIN_PROCESS, path, tags, key, json.dumps(IDS))
    except PlainTFError as e:
        raise CaseFailure(str(e)) from e
    check(not result["hbcore_imported"], "hbcore was imported")
    return result


def expected(bias: float = 0.0) -> np.ndarray:
    return TABLE0[IDS] @ W0 + bias


def model(with_bias: bool = False) -> dict:
    """The model in the default graph (the table sharded unless sharding
    is suspended, as it is while export builds the serving graph)."""
    with hb.scope():
        with hb.embedding_scope():
            emb = V1.get_variable("emb", shape=[B, D],
                                  initializer=V1.constant_initializer(TABLE0))
        w = V1.get_variable("w", initializer=tf.constant(W0))
    ids = V1.placeholder(tf.int64, [None], name="ids")
    pred = tf.matmul(tf.nn.embedding_lookup(emb, ids), w)
    out = dict(emb=emb, ids=ids, pred=pred)
    if with_bias:
        # A local variable: not in the checkpoint, initialized at load.
        out["bias"] = V1.get_local_variable(
            "bias", initializer=tf.constant(BIAS))
        out["pred"] = pred + out["bias"]
    return out


def signature(m: dict) -> object:
    return V1.saved_model.predict_signature_def(
        inputs={"ids": m["ids"]}, outputs={"pred": m["pred"]})


class Cases:
    def __init__(self, rank: int, size: int, shared: str) -> None:
        self.rank, self.size, self.shared = rank, size, shared
        self.ckpt = None

    def save(self) -> None:
        with tf.Graph().as_default():
            m = model()
            check(m["emb"].shape[0] < B, "emb is not sharded")
            saver = V1.train.Saver()
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                self.ckpt = saver.save(sess, os.path.join(self.shared, "ck"))
        close(tf.train.load_variable(self.ckpt, "emb"), TABLE0, "saved emb")

    def _plain(self, path: str, tags: str, key: str) -> dict:
        """Rank 0 checks the export in a plain process; the others
        return an empty result."""
        return run_plain_process(path, tags, key) if self.rank == 0 else {}

    def mode_test(self) -> None:
        """mode='test' (Keras' ModeKeys.TEST, HybridBackend's name for
        evaluation): tag 'eval', signature key 'eval'."""
        path = hb.saved_model.export(
            os.path.join(self.shared, "mode_test"), self.ckpt,
            lambda: signature(model()), mode="test")
        check(hbcore.allgather_object(path) == [path] * self.size,
              "ranks returned different paths")
        got = self._plain(path, "eval", "eval")
        if got:
            check(got["tags"] == ["eval"], "tags %s" % got["tags"])
            close(np.array(got["pred"]), expected(), "eval predictions")

    def local_variables(self) -> None:
        path = hb.train.export(os.path.join(self.shared, "local"), self.ckpt,
                               lambda: signature(model(with_bias=True)))
        got = self._plain(path, "serve", "serving_default")
        if got:
            close(np.array(got["pred"]), expected(BIAS),
                  "predictions with a local variable")

    def export_all_default_modes(self) -> None:
        """Signatures of the default modes are kept (one meta graph with
        their tags); other keys are dropped."""
        def fn():
            sig = signature(model())
            return {"serving_default": sig, "eval": sig, "other": sig}

        path = hb.saved_model.export_all(
            os.path.join(self.shared, "all"), self.ckpt, fn)
        check(hbcore.allgather_object(path) == [path] * self.size,
              "ranks returned different paths")
        got = self._plain(path, "serve,eval", "serving_default")
        if got:
            check(got["keys"] == ["eval", "serving_default"],
                  "signature keys %s" % got["keys"])
            check(got["tags"] == ["eval", "serve"], "tags %s" % got["tags"])
            close(np.array(got["pred"]), expected(), "export_all predictions")

    def export_all_main_op(self) -> None:
        """``(signatures, main_op)``: the main op runs at load."""
        def fn():
            m = model(with_bias=True)
            main_op = tf.group(m["bias"].assign(2.0 * BIAS))
            return {"serving_default": signature(m)}, main_op

        path = hb.saved_model.export_all(
            os.path.join(self.shared, "main_op"), self.ckpt, fn,
            modes=["predict"])
        got = self._plain(path, "serve", "serving_default")
        if got:
            close(np.array(got["pred"]), expected(2.0 * BIAS),
                  "predictions after the main op")

    def export_all_errors(self) -> None:
        base = os.path.join(self.shared, "errors")
        expect_raises(lambda: hb.saved_model.export_all(
            base, self.ckpt, lambda: {"serving_default": signature(model())},
            modes=["bogus"]), ValueError, "mode 'bogus'")
        expect_raises(lambda: hb.saved_model.export_all(
            base, self.ckpt, lambda: {"other": signature(model())}),
            ValueError, "no signature for modes")


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)
    shared = hbcore.broadcast_object(
        tempfile.mkdtemp(prefix="hb_export_") if rank == 0 else None, 0)
    c = Cases(rank, size, shared)
    run_table(checker, {
        "save": c.save,
        "export/mode-test": c.mode_test,
        "export/local-variables-initialized": c.local_variables,
        "export_all/default-modes": c.export_all_default_modes,
        "export_all/main-op": c.export_all_main_op,
        "export_all/errors": c.export_all_errors,
    }, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hbcore.barrier()
    if rank == 0:
        shutil.rmtree(shared, ignore_errors=True)
    hb.shutdown()


if __name__ == "__main__":
    with PLAIN:
        main()
