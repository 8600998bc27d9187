"""Per-column embedding options at 2 and 3 ranks
(tests/tf/rank_scripts/hb_emb_options_per_column.py, one hbrun launch per
rank count): every HybridBackend option that takes a dict per column
(emb_unique, emb_wire_dtype, emb_device, emb_input_device, emb_dtype,
emb_input_dtype, emb_pad, emb_num_buckets_max, emb_segment_rank) accepts
``{column_name: value}`` in hb.scope, update and assignment, validated
value by value; a column reads its own entry, else the option's default
(HB_<NAME> or built-in); bad dicts are TypeError/ValueError naming the
option and column; in hb.dense_features each column's lookup uses its own
emb_unique and emb_wire_dtype (read from the graph), and lookups and SGD
training equal plain input_layer's."""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_emb_options_per_column.py", timeout=300, env=STALL_FAST_ENV)
