"""hbcore_tf with process sets:

- at 3 and 4 ranks (tests/tf/rank_scripts/tf_process_sets.py): every
  collective on two overlapping sets eagerly, in tf.function and in a
  tf.compat.v1 graph, gradients over the op's set, broadcast_variables /
  objects, DistributedGradientTape and DistributedOptimizer on a set, the
  Keras callbacks on a set, and the errors of a non-member;
- at 2 and 3 ranks (tests/tf/rank_scripts/tf_process_sets_non_member.py):
  gradient reduction on a process set from ranks outside it: as in
  Horovod, DistributedGradientTape and DistributedOptimizer (Keras 3,
  tf.compat.v1, hbcore_tf.keras) on a set this rank is not in return the
  rank's own gradients instead of failing with InvalidArgumentError;
  members still average over the set. Checked eagerly, in tf.function and
  in a tf.compat.v1 graph.
"""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "tf_process_sets.py", nps=(3, 4), timeout=300)

(test_non_member_launch_is_clean, test_non_member_keeps_local_gradients,
 _) = rank_script_tests(
    "tf_process_sets_non_member.py", timeout=300, env=STALL_FAST_ENV)
