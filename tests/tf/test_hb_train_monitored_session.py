"""hb.train.monitored_session and hb.train.Server.monitored_session, the
session HybridBackend's own tests and examples open, at 2 and 3 ranks,
with training values checked against numpy
(tests/tf/rank_scripts/hb_monitored_session_data.py). The same launch
runs hb.data cases (make_one_shot_iterator in a script that never called
init(), ParquetDataset.read_schema, ds.apply(hb.data.to_sparse())),
asserted by test_hb_parquet.py.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_monitored_session_data.py", timeout=240, cases=[
        "monitored_session/gradient-descent-in-scope",
        "monitored_session/adam-in-function",
        "monitored_session/arguments",
        "server/monitored_session",
        "monitored_session/eval-without-fn-raises",
    ])
