"""hb.metrics at 2 and 3 ranks, each rank with a different number of
examples; values checked against TF's own single-process metrics and numpy
on all ranks' examples. One launch per rank count and Keras flavour
(tests/tf/rank_scripts/hb_metrics.py) runs:

- auc over every curve and summation method, accuracy, mean,
  hb.keras.metrics in model.evaluate / model.fit (Keras 3 and tf_keras)
  and hb.train.EvaluationHook;
- with Keras 3, the cases of tests/tf/rank_scripts/hb_metrics_gauc_weights.py:
  weights whose shape TF's metrics squeeze or expand ([n, 1] against [n]
  and back), and hb.metrics.gauc (HybridBackend's group AUC) against a
  numpy per-group rank-statistic AUC over every rank's examples, also
  with one rank's batch empty.
"""
from support.tf_launch import REQUIRES_TF, case_names, rank_script_tests

pytestmark = REQUIRES_TF

SCRIPT = "hb_metrics.py"

# Keras 3 runs every case, tf_keras the Keras ones.
test_launch_is_clean, test_case, _ = rank_script_tests(
    SCRIPT, flavors=("keras3", "tf_keras"), timeout=400, cases={
        "keras3": (case_names(SCRIPT)
                   + case_names("hb_metrics_gauc_weights.py")),
        "tf_keras": "KERAS_CASES"})
