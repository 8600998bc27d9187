"""BroadcastGlobalVariablesCallback when the variables do not exist yet at
train begin (a Sequential without an input shape, whose weights the first
batch creates) or exist on some ranks only: every rank ends the first
batch with the root's initial weights. Keras 3 and tf_keras
(TF_USE_LEGACY_KERAS=1), at 2 and 3 ranks
(tests/tf/rank_scripts/keras_broadcast.py).
"""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

# A rank left out of a broadcast becomes failed cases within seconds.
test_launch_is_clean, test_case, _ = rank_script_tests(
    "keras_broadcast.py", flavors=("keras3", "tf_keras"), timeout=240,
    env=STALL_FAST_ENV)
