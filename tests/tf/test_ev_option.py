"""DeepRec's embedding-variable options as a dynamic table reads them
(hbcore_tf/embedding/ev_option.py), in one process: which settings turn
eviction off, and the options' round trip through a Keras layer's config.
The errors of bad options, and eviction itself, are tested through the
layer at 1, 2 and 3 ranks (tests/tf/rank_scripts/dynamic_keras.py: the
bad_ids_and_arguments and eviction cases)."""
import json

import pytest

from support.tf_launch import REQUIRES_TF

pytestmark = REQUIRES_TF


@pytest.fixture(scope="module")
def hb():
    import hbcore_tf
    return hbcore_tf


def _eviction(hb, evict):
    from hbcore_tf.embedding import ev_option
    return ev_option.eviction(
        hb.EmbeddingVariableOption(evict_option=evict), "t")


def test_off_settings_are_deeprecs(hb):
    """None and 0 steps, and a threshold of 0 or below, mean no eviction
    (DeepRec's defaults); so does no evict_option or no ev_option."""
    from hbcore_tf.embedding import ev_option
    for evict in (None, hb.GlobalStepEvict(), hb.GlobalStepEvict(0),
                  hb.L2WeightEvict(), hb.L2WeightEvict(0.0)):
        assert _eviction(hb, evict) is None, evict
    assert ev_option.eviction(None, "t") is None
    assert _eviction(hb, hb.GlobalStepEvict(7)) == ev_option.Eviction(
        steps_to_live=7)
    assert _eviction(hb, hb.L2WeightEvict(1)) == ev_option.Eviction(
        l2_weight_threshold=1.0)


@pytest.mark.parametrize("filter_freq,evict", [
    (0, None), (3, None), (0, "step"), (2, "l2")])
def test_config_round_trip(hb, filter_freq, evict):
    """to_config is JSON and from_config gives back the same admission
    threshold and eviction policy."""
    from hbcore_tf.embedding import ev_option
    policy = {None: None, "step": ev_option.Eviction(steps_to_live=5),
              "l2": ev_option.Eviction(l2_weight_threshold=0.25)}[evict]
    config = ev_option.to_config(filter_freq, policy)
    if not filter_freq and policy is None:
        assert config is None
        return
    option = ev_option.from_config(json.loads(json.dumps(config)))
    assert ev_option.admission_threshold(option, "t") == filter_freq
    assert ev_option.eviction(option, "t") == policy
