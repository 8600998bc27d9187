"""hb.data.ParquetDataset at 2 and 3 ranks (each rank runs every case of
tests/tf/rank_scripts/hb_parquet.py on its own copy of the files; the
"distributed" case splits the files over the ranks), the ImportError
that names the extra when pyarrow is missing, and (in the launch of
test_hb_train_monitored_session.py) ParquetDataset.read_schema,
ds.apply(hb.data.to_sparse()) and hb.data.make_one_shot_iterator before
init().
"""
import subprocess
import sys

from support.harness import base_env
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests("hb_parquet.py")

# hb.data.make_one_shot_iterator in a script that never called init(),
# ParquetDataset.read_schema and ds.apply(hb.data.to_sparse()): cases of
# the launch of test_hb_train_monitored_session.py (cached per session).
_, test_data_api_case, _ = rank_script_tests(
    "hb_monitored_session_data.py", timeout=240, cases=[
        "data/iterator-initializes-hbcore", "parquet/read-schema",
        "parquet/to-sparse-transformation"])


def test_missing_pyarrow_names_the_extra(tmp_path):
    """Importing hbcore_tf.data works without pyarrow; building a
    ParquetDataset raises ImportError naming the extra to install."""
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "import hbcore_tf.data as d\n"
        "try:\n"
        "    d.ParquetDataset('x.parquet', 2)\n"
        "except ImportError as e:\n"
        "    print('IMPORT-ERROR:', e)\n")
    # The hbcore under test (see tests/support/under_test.py), run outside
    # the checkout so that its unbuilt packages never shadow an installed
    # one.
    env = base_env({"TF_CPP_MIN_LOG_LEVEL": "3"})
    out = subprocess.run([sys.executable, "-c", code], env=env, timeout=120,
                         capture_output=True, text=True, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "IMPORT-ERROR:" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "hbcore[parquet]" in out.stdout, out.stdout


def test_pyarrow_that_cannot_import_is_named(tmp_path):
    """A pyarrow that is installed but refuses to import (pyarrow 26 and
    later next to numpy 1.x, which TensorFlow 2.16 and 2.17 need) gives an
    ImportError with pyarrow's own reason and the version to install, not
    the hint to install the extra."""
    fake = tmp_path / "site" / "pyarrow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        'raise ImportError("pyarrow requires NumPy 2.0 or newer, found '
        '1.26.4")\n')
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import hbcore_tf.data as d\n"
        "try:\n"
        "    d.ParquetDataset('x.parquet', 2)\n"
        "except ImportError as e:\n"
        "    print('IMPORT-ERROR:', e)\n" % str(tmp_path / "site"))
    env = base_env({"TF_CPP_MIN_LOG_LEVEL": "3"})
    out = subprocess.run([sys.executable, "-c", code], env=env, timeout=120,
                         capture_output=True, text=True, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "IMPORT-ERROR:" in out.stdout, out.stdout + out.stderr[-2000:]
    assert ("cannot import pyarrow: pyarrow requires NumPy 2.0 or newer, "
            "found 1.26.4") in out.stdout, out.stdout
    assert 'pip install "pyarrow<26"' in out.stdout, out.stdout
    assert "hbcore[parquet]" not in out.stdout, out.stdout
