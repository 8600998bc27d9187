"""When hbcore patches TensorFlow and Keras (hbcore_tf/_patches): nothing
at import or init, scope patches only while an hb.scope is open, the
others at the first moment they are needed. Every target is compared by
identity with the object TF/Keras defined, recorded before hbcore_tf was
imported. Run by tests/tf/test_patch_targets.py. Cases run in order, in
one process per rank:

- import_patches_nothing: after ``import hbcore_tf``, ``hbcore_tf.keras``,
  ``hbcore_tf.smddp`` and ``hvd.init()``, every entry of
  hbcore_tf._patches.internals is TF's own object;
- scope_patches_undone: inside hb.scope the scope's targets
  (MonitoredTrainingSession, Saver.__init__, the optimizer constructors,
  Model.__new__) are replaced and nothing else; after it exits every
  entry is TF's own again, also after a nested scope;
- first_table_installs: the first sharded get_variable table installs
  the Saver, tf.train.Checkpoint, slot_creator and Keras slot patches
  (and only those), which stay after its embedding_scope exits;
- distributed_optimizer_installs_jit: the first Keras 3
  DistributedOptimizer installs the model_supports_jit and the
  LossScaleOptimizer.apply patches;
- sharded_keras_layer_installs_save: the first built sharded
  ShardedEmbedding installs Keras 3's Model.save / save_weights patch and
  the optimizer's save_own_variables / load_own_variables patch;
- smddp_init_installs_variables: smddp.init() makes Keras 3's optimizer
  ``variables`` property callable (the value is the property's list).
"""
import importlib.util
import os

from train_common import Checker, check, report, run_table
from train_common import tf  # noqa: F401  (TensorFlow before Keras)

import keras  # noqa: E402
import tf_keras  # noqa: E402,F401  (its targets are recorded too)


def _standalone_internals():
    # hbcore_tf._patches.internals imports only the standard library: load
    # it without hbcore_tf's __init__, to record TF's objects first.
    package = os.path.dirname(importlib.util.find_spec("hbcore_tf").origin)
    spec = importlib.util.spec_from_file_location(
        "hb_internals_standalone",
        os.path.join(package, "_patches", "internals.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_INTERNALS = _standalone_internals()
ORIGINAL = {name: entry.load()
            for name, entry in _INTERNALS.all_internals()}

import hbcore_tf as hvd  # noqa: E402
import hbcore_tf.keras  # noqa: E402,F401
import hbcore_tf.smddp as sdp  # noqa: E402

CASES = ["import_patches_nothing", "scope_patches_undone",
         "first_table_installs", "distributed_optimizer_installs_jit",
         "sharded_keras_layer_installs_save",
         "smddp_init_installs_variables"]

SCOPE_TARGETS = {"SAVER_INIT", "PUBLIC_MONITORED_TRAINING_SESSION",
                 "V1_OPTIMIZER_INIT", "KERAS3_OPTIMIZER_INIT",
                 "TF_KERAS_OPTIMIZER_INIT", "TF_KERAS_OPTIMIZER_V2_INIT",
                 "KERAS3_MODEL_NEW", "TF_KERAS_MODEL_NEW"}
TABLE_TARGETS = {"SAVER_BUILD", "SAVER_SAVE", "SAVER_RESTORE",
                 "TRACKABLE_SAVER_SAVE",
                 "SLOT_CREATE_SLOT", "SLOT_CREATE_SLOT_WITH_INITIALIZER",
                 "SLOT_CREATE_ZEROS_SLOT",
                 "KERAS3_ADD_VARIABLE_FROM_REFERENCE",
                 "TF_KERAS_ADD_VARIABLE_FROM_REFERENCE", "TF_KERAS_ADD_SLOT"}
# Installed by the first collective built (test_patch_targets does not
# build one before the cases that compare everything else).
COLLECTIVE_TARGETS = {"UNORDERED_STATEFUL_OPS"}


def replaced() -> set:
    """The entries that are no longer TF's own object now."""
    return {name for name, entry in _INTERNALS.all_internals()
            if entry.load() is not ORIGINAL[name]}


def expect_replaced(expected: set, what: str) -> None:
    found = replaced() - COLLECTIVE_TARGETS
    check(found == expected, "%s: replaced %s, expected %s" % (
        what, sorted(found), sorted(expected)))


def import_patches_nothing() -> None:
    expect_replaced(set(), "after import hbcore_tf(.keras, .smddp), init()")
    check(tf.compat.v1.train.Saver._build is ORIGINAL["SAVER_BUILD"],
          "Saver._build was patched at import")


def scope_patches_undone() -> None:
    with hvd.scope():
        expect_replaced(SCOPE_TARGETS, "inside hb.scope")
        with hvd.scope():
            expect_replaced(SCOPE_TARGETS, "inside a nested hb.scope")
        expect_replaced(SCOPE_TARGETS, "after the nested hb.scope")
    expect_replaced(set(), "after hb.scope exited")


def first_table_installs() -> None:
    with tf.Graph().as_default():
        with hvd.embedding_scope():
            table = tf.compat.v1.get_variable(
                "patch_moments_table", shape=[4 * hvd.size(), 3])
        check(hvd.embedding.is_sharded(table), "the table is not sharded")
    expect_replaced(TABLE_TARGETS, "after the first sharded table")


def distributed_optimizer_installs_jit() -> None:
    hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    expect_replaced(TABLE_TARGETS | {"KERAS3_MODEL_SUPPORTS_JIT",
                                     "KERAS3_LOSS_SCALE_APPLY"},
                    "after a Keras 3 DistributedOptimizer")


def sharded_keras_layer_installs_save() -> None:
    before = replaced() - COLLECTIVE_TARGETS
    layer = hvd.keras.layers.ShardedEmbedding(4 * hvd.size(), 2)
    layer.build(None)
    check(layer.shard_info is not None, "the layer is not sharded")
    expect_replaced(before | {"KERAS3_MODEL_SAVE",
                              "KERAS3_MODEL_SAVE_WEIGHTS",
                              "KERAS3_OPTIMIZER_SAVE_OWN_VARIABLES",
                              "KERAS3_OPTIMIZER_LOAD_OWN_VARIABLES"},
                    "after the first sharded ShardedEmbedding")


def smddp_init_installs_variables() -> None:
    sdp.init()
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build([keras.Variable([1.0, 2.0])])
    check("KERAS3_OPTIMIZER_VARIABLES" in replaced(),
          "smddp.init() left Keras 3's optimizer variables alone")
    check(list(optimizer.variables()) == list(optimizer.variables),
          "opt.variables() differs from opt.variables")
    check(len(optimizer.variables) >= 1, "no optimizer variables")


def main() -> None:
    hvd.init()
    checker = Checker(hvd.rank())
    table = {"import_patches_nothing": import_patches_nothing,
             "scope_patches_undone": scope_patches_undone,
             "first_table_installs": first_table_installs,
             "distributed_optimizer_installs_jit":
                 distributed_optimizer_installs_jit,
             "sharded_keras_layer_installs_save":
                 sharded_keras_layer_installs_save,
             "smddp_init_installs_variables": smddp_init_installs_variables}
    run_table(checker, table, CASES)
    report({"rank": hvd.rank(), "size": hvd.size(), "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
