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
import pytest

from train_util import case_names, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPTS = ["train_hooks_eval.py", "train_hooks_tape.py"]
NPS = [2, 3]


def _run(script, np_):
    return launch(script, np_, timeout=240)


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("script", SCRIPTS)
def test_launch_is_clean(script, np_):
    _run(script, np_).assert_ok()


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("script,case", [
    (script, case) for script in SCRIPTS for case in case_names(script)])
def test_case(script, case, np_):
    _run(script, np_).assert_cases([case])
