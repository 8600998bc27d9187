"""hb.dense_features at 2 and 3 ranks (tests/tf/rank_scripts/
hb_dense_features.py, one hbrun launch per rank count, each rank checking
against plain tf.compat.v1.feature_column.input_layer on unsharded
tables): identity, hash-bucket and weighted embedding columns and a
numeric column give input_layer's values, one tensor per column in the
list's order, with the tables sharded under their own names; shared
embedding columns share one sharded table; a tf.compat.v1 Adagrad built in
hb.scope trains the tables and dense weights as plain TF does on the
whole batch; every rank builds the same graph whatever the list order;
bad arguments are ValueErrors and eager or tf.function use is a
RuntimeError. hb.keras.layers.DenseFeatures computes tf_keras.layers.
DenseFeatures' values (concatenated in name order, or a list with
enable_concat=False), reuses its tables on a second call, lists them as
its weights and trains as plain TF under tf.compat.v1 Adam; a function
initializer is called for the rank's round-robin rows (once per partition
under a partitioner) and the table still holds the whole table's rows in
id order (its checkpoint too, and its export is served by plain TF);
emb_segment_rank gives one row per segment; columns that cannot be
sharded are ValueErrors naming them; a v1 optimizer's
make_session_run_hook() broadcasts replicated variables."""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_dense_features.py", timeout=300, env=STALL_FAST_ENV)
