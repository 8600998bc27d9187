"""The training-loop helpers at 2 and 3 ranks; each case is a test.

- tests/tf/rank_scripts/train_hooks_eval.py: hb.train.EvaluationHook and
  MonitoredTrainingSession(eval_fn=..., keep_checkpoint_max=...): eval_fn
  reusing the trained model's variables, metric state kept apart from
  training's, steps=None, array-valued metrics, a hook used by two
  sessions, checkpoints kept, variables made by hooks broadcast;
- tests/tf/rank_scripts/train_hooks_tape.py: DistributedGradientTape
  wrapped anew every eager step (traced once), local sources per tape,
  tensor sources and None gradients.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

test_eval_launch_is_clean, test_eval_case, _ = rank_script_tests(
    "train_hooks_eval.py", timeout=240)
test_tape_launch_is_clean, test_tape_case, _ = rank_script_tests(
    "train_hooks_tape.py", timeout=240)
