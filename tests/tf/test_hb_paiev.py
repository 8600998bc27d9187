"""emb_backend='PAIEV' and DeepRec's hb.get_embedding_variable at 2 and 3
ranks (tests/tf/rank_scripts/hb_paiev.py, one hbrun launch per rank
count): HybridBackend's own PAIEV tests (its embedding/paiev/tests/
paiev_test.py) with the import swapped, each asserting what
HybridBackend's asserts, on every rank (dense lookups of
raw_categorical_column / identity columns of sys.maxsize buckets through
hb.keras.layers.DenseFeatures, a partitioner in the variable scope,
emb_enable_concat=False, num_groups, hb.function called eagerly,
emb_unique, emb_segment_rank, shared embedding columns, 100 steps of
tf.compat.v1 Adagrad in hb.train.monitored_session); hb.dense_features
under PAIEV trained by Adagrad, and an embedding variable with DeepRec's
CounterFilter read by tf.nn.embedding_lookup and trained by SGD, against
a numpy dict model (rows from the per-key formula, gradients averaged
over the ranks), with each rank holding exactly the keys it owns; TF's
default truncated-normal initializer per key; paiev_enabled per column;
DeepRec's categorical_column_with_embedding over strings with its own
CounterFilter; the checkpoints of hb.train.monitored_session(
checkpoint_dir=...)'s Saver for an embedding variable with Adagrad and
GlobalStepEvict against the dict model (keys in order after eviction,
rows, counts, versions, accumulators; one global batch split among the
ranks, so the same checkpoint at 2 and 3 ranks), restored in a fresh
graph (each rank holds its keys) and trained on;
bad input (float ids, unsupported paiev_* options and arguments, an
unknown backend, a full table, eager use, a Saver of embedding variables
alone) as errors naming the column or table, on every rank. Each launch
takes about 55 s on the shared 2-core machine (five of the cases train
100 steps)."""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_paiev.py", timeout=400, env=STALL_FAST_ENV)
