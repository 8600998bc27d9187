"""docs/hybridbackend.md ("Every HybridBackend name") names every public
name of hybridbackend.tensorflow, and its statuses are true of hbcore_tf.

HB_NAMES is kept here by hand from HybridBackend's ``__init__.py`` files
(its last commit and its v0.6.0 release). The table must name exactly
these, one per row, each with a status; a name marked supported must
resolve in ``hbcore_tf`` (attribute by attribute), a name marked not
supported must not (AttributeError, or ImportError for hb.estimator's).
HybridBackend's second names (hb.layers.DenseFeatures, hb.feature_column's)
must be the same objects. The resolution runs in a subprocess, so the
pytest process does not import TensorFlow.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

from support.tf_launch import ROOT, tensorflow_missing
from support.under_test import import_paths

DOC = os.path.join(ROOT, "docs", "hybridbackend.md")
SECTION = "## Every HybridBackend name"
STATUSES = ("supported", "supported with differences", "not supported")

HB_NAMES = [
    # hybridbackend.tensorflow
    "hb.Context", "hb.context", "hb.context_scope", "hb.scope",
    "hb.function", "hb.wraps", "hb.embedding_scope", "hb.dense_features",
    "hb.buildinfo",
    # data
    "hb.data.DataFrame", "hb.data.DataFrame.Field", "hb.data.DataFrame.Value",
    "hb.data.DataFrame.to_sparse", "hb.data.DataFrame.unbatch_and_to_sparse",
    "hb.data.to_sparse", "hb.data.unbatch_and_to_sparse",
    "hb.data.ParquetDataset", "hb.data.read_parquet", "hb.data.rebatch",
    "hb.data.RebatchDataset", "hb.data.make_one_shot_iterator",
    "hb.data.make_initializable_iterator",
    # embedding
    "hb.embedding.Backend", "hb.embedding.EmbeddingBackendDefault",
    "hb.embedding.EmbeddingBackendPAIEV",
    # feature_column (v0.6.0 also held the embedding backends)
    "hb.feature_column.DenseFeatures", "hb.feature_column.embedding_column",
    "hb.feature_column.shared_embedding_columns",
    "hb.feature_column.raw_categorical_column",
    "hb.feature_column.EmbeddingBackend",
    "hb.feature_column.EmbeddingBackendDefault",
    # keras, layers
    "hb.keras.layers.DenseFeatures", "hb.layers.DenseFeatures",
    # metrics
    "hb.metrics.accuracy", "hb.metrics.auc", "hb.metrics.gauc",
    "hb.metrics.mean",
    # saved_model
    "hb.saved_model.export", "hb.saved_model.export_all",
    # train (hybridbackend.tensorflow.training)
    "hb.train.<Name>Optimizer", "hb.train.Saver",
    "hb.train.replace_default_saver", "hb.train.monitored_session",
    "hb.train.MonitoredTrainingSession", "hb.train.EvaluationHook",
    "hb.train.Server", "hb.train.wraps_server", "hb.train.device_setter",
    "hb.train.StepStatHook", "hb.train.wraps_optimizer", "hb.train.Policy",
    # estimator
    "hb.estimator.Estimator", "hb.estimator.RunConfig",
    "hb.estimator.EstimatorSpec", "hb.estimator.train_and_evaluate",
    # distribute (v0.6.0: hb.math held the floormod kernels)
    "hb.distribute.Communicator", "hb.distribute.CommunicatorPool",
    "hb.distribute.NcclCommunicator", "hb.distribute.ops",
    "hb.distribute.floormod_partition", "hb.distribute.floormod_shuffle",
    "hb.distribute.floormod_shuffle_n", "hb.math.floormod_partition",
    "hb.math.floormod_shuffle", "hb.math.group_floormod_shuffle",
    "hb.math.segment_combine",
]

# The generated optimizers stand for tf.compat.v1.train's optimizer classes.
OPTIMIZERS = "hb.train.<Name>Optimizer"

RESOLVE = r"""
import json, sys
import tensorflow as tf
import hbcore_tf

def resolve(name):
    obj = hbcore_tf
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj

def status(name):
    try:
        resolve(name)
        return "found"
    except (AttributeError, ImportError) as exc:
        return "%s: %s" % (type(exc).__name__, str(exc)[:200])

v1 = tf.compat.v1.train
optimizers = sorted(
    "hb.train." + n for n, c in vars(v1).items() if isinstance(c, type)
    and issubclass(c, v1.Optimizer)
    and c not in (v1.Optimizer, v1.SyncReplicasOptimizer))
layer = hbcore_tf.keras.layers.DenseFeatures
aliases = {
    "hb.layers.DenseFeatures": hbcore_tf.layers.DenseFeatures is layer,
    "hb.feature_column.DenseFeatures":
        hbcore_tf.feature_column.DenseFeatures is layer,
    "hb.feature_column.embedding_column":
        hbcore_tf.feature_column.embedding_column
        is tf.feature_column.embedding_column,
    "hb.feature_column.shared_embedding_columns":
        hbcore_tf.feature_column.shared_embedding_columns
        is tf.compat.v1.feature_column.shared_embedding_columns}
print("RESULT " + json.dumps({
    "names": {n: status(n) for n in json.loads(sys.argv[1])},
    "optimizers": {n: status(n) for n in optimizers},
    "aliases": aliases}))
"""


def table():
    """{name: (status, notes)} from the section's table."""
    with open(DOC) as f:
        text = f.read()
    assert SECTION in text, "%s lacks the section %r" % (DOC, SECTION)
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in body.splitlines():
        match = re.match(r"\| `([^`]+)` \| ([^|]+) \|(.*)\|$", line)
        if match:
            name, status, notes = match.groups()
            assert name not in rows, "%s is listed twice" % name
            rows[name] = (status.strip(), notes.strip())
    return rows


def test_table_names_every_hybridbackend_name():
    rows = table()
    assert len(set(HB_NAMES)) == len(HB_NAMES)
    missing = [n for n in HB_NAMES if n not in rows]
    extra = [n for n in rows if n not in HB_NAMES]
    assert not missing, "not in the table: %s" % missing
    assert not extra, "in the table but not in HB_NAMES: %s" % extra
    for name, (status, notes) in rows.items():
        assert status in STATUSES, "%s: status %r" % (name, status)
        if status != "supported":
            assert notes, "%s is %s without saying why" % (name, status)


@pytest.mark.skipif(tensorflow_missing() is not None,
                    reason=str(tensorflow_missing()))
def test_statuses_are_true_of_hbcore_tf():
    rows = table()
    names = [n for n in HB_NAMES if n != OPTIMIZERS]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        import_paths() + [env.get("PYTHONPATH", "")])
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # Run from outside the checkout: ``python -c`` puts the working
    # directory first on sys.path, and an unbuilt checkout's hbcore/ would
    # shadow the installed package.
    proc = subprocess.run([sys.executable, "-c", RESOLVE, json.dumps(names)],
                          env=env, capture_output=True, text=True,
                          timeout=180, cwd=tempfile.gettempdir())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    result = json.loads(line[-1][len("RESULT "):])
    # One generated class per tf.compat.v1.train optimizer.
    optimizers = result["optimizers"]
    assert "hb.train.AdamOptimizer" in optimizers, optimizers
    assert all(v == "found" for v in optimizers.values()), optimizers
    # HybridBackend's second names are the same objects.
    assert all(result["aliases"].values()), result["aliases"]
    found = result["names"]
    wrong = []
    for name in names:
        supported = rows[name][0] != "not supported"
        if supported != (found[name] == "found"):
            wrong.append("%s is %r in the table, hbcore_tf: %s"
                         % (name, rows[name][0], found[name]))
    assert not wrong, "\n".join(wrong)
