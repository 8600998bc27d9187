"""``hbcore.spark``: hbcore jobs on Spark, as ``horovod.spark``.

``hbcore.spark.run(fn, num_proc=N)`` runs ``fn`` in N Spark tasks that
form one hbcore job (runner.py). Needs pyspark (``pip install
"hbcore[spark]"``) and an active SparkContext. ``run_elastic`` runs an
elastic job over Spark's task slots (elastic.py).
"""

from hbcore.spark.elastic import run_elastic
from hbcore.spark.runner import run

__all__ = ["run", "run_elastic"]
