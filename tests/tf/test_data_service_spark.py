"""The tf.data service compute job on Spark, as Horovod's TF guide runs it
(``spark-submit --master local[2] .../hbcore_tf/spark/compute_worker.py
CONFIG``): a 2-rank training job launched by hbrun reads every element
once per epoch from it, exactly as from the hbrun-launched compute job;
the map function runs in the Spark tasks' ranks; spark-submit exits 0 when
the training job stops it, leaving no process."""
import os
import shutil
import subprocess
import sys

import pytest

from support.data_service import base_env, run_check
from support.tf_launch import tensorflow_missing

pytestmark = [pytest.mark.skipif(tensorflow_missing() is not None,
                                 reason=str(tensorflow_missing())),
              pytest.mark.timeout(400)]
pyspark = pytest.importorskip("pyspark", reason="needs hbcore[spark]")

N = 40


def start_on_spark(config, args=()):
    """spark-submit --master local[2] compute_worker.py ARGS CONFIG, from
    CONFIG's directory (never the checkout's: see start_compute_job)."""
    import hbcore_tf.spark.compute_worker as worker
    submit = shutil.which("spark-submit",
                          path=os.path.dirname(sys.executable)) \
        or shutil.which("spark-submit")
    command = [submit, "--master", "local[2]",
               "--conf", "spark.ui.enabled=false",
               "--conf", "spark.driver.host=127.0.0.1",
               worker.__file__] + list(args) + [str(config)]
    env = base_env({"TF_CPP_MIN_LOG_LEVEL": "2",
                    "PYSPARK_PYTHON": sys.executable,
                    "PYSPARK_DRIVER_PYTHON": sys.executable})
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace",
                            start_new_session=True,
                            cwd=os.path.dirname(str(config)))


def test_training_reads_every_element_from_the_spark_compute_job(tmp_path):
    result = run_check(tmp_path, "shared", N, start=start_on_spark)
    for epoch, elements in enumerate(result["elements"]):
        assert elements == list(range(N)), (epoch, elements)
    assert len(result["elements"]) == 2, result["elements"]
