"""Training with N ranks on N shards matches one process on the whole batch
(same initial weights, SGD; Adam too) to float tolerance, for every path:
Keras model.fit, a custom loop with DistributedOptimizer,
DistributedGradientTape eager and in tf.function, tf.compat.v1 graphs, and
local aggregation (backward_passes_per_step=2). Keras 3 at 2 and 3 ranks;
tf_keras (current and legacy optimizers) at 2 ranks.
"""
from support.tf_launch import REQUIRES_TF, case_names, rank_script_tests

pytestmark = REQUIRES_TF

SCRIPT = "train_equivalence.py"
CASES = case_names(SCRIPT)
LEGACY_ONLY = case_names(SCRIPT, "LEGACY_ONLY")

# Keras 3 at 2 and 3 ranks, tf_keras at 2; the LEGACY_ONLY cases
# (tf_keras.optimizers.legacy) exist only under tf_keras.
test_launch_is_clean, test_matches_single_process, _ = rank_script_tests(
    SCRIPT, runs=[(2, "keras3"), (3, "keras3"), (2, "tf_keras")],
    timeout=240, cases={
        "keras3": [c for c in CASES if c not in LEGACY_ONLY],
        "tf_keras": CASES})
