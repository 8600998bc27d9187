"""hbcore.spark.run on a real local Spark (``local[3]``): the tasks form
one job whose results equal hbcore.run's and numpy's, a failing task fails
the call with its error (a worker Python that cannot import hbcore: its
ModuleNotFoundError and how to choose another), nothing is left running;
in local mode the workers run the driver's Python unless PYSPARK_PYTHON
is set. run_elastic: a task's Python worker killed by SIGKILL
mid-training, the job goes on from the last commit (weights equal a
replay, tests/test_elastic.py's); bad arguments are named."""
import os
import re
import subprocess
import sys
import venv

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "launcher_scripts"))
import hosted_fns  # noqa: E402
from support.hbcore_path import import_engine, rank_python_path  # noqa: E402
from support.procs import Watchdog, hosted_processes  # noqa: E402

pyspark = import_engine("pyspark")
import hbcore  # noqa: E402
import hbcore.spark  # noqa: E402
from test_elastic import first_steps, replay, step_sizes  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def spark():
    """One local Spark for the module (its start-up costs seconds)."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = rank_python_path()
    session = (pyspark.sql.SparkSession.builder.master("local[3]")
               .appName("hbcore-test").config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1").getOrCreate())
    yield session
    session.stop()
    stop_spark_jvm()
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


def stop_spark_jvm() -> None:
    """Ends the JVM that pyspark started, and waits for it.

    ``SparkSession.stop`` leaves the py4j gateway's JVM running for the
    next session of this process; it then winds down for seconds with a
    core busy, under the next module's timing-sensitive tests (a 1 s stall
    check saw its ranks 1 s apart).  The JVM exits when its stdin closes
    (Spark's PythonGatewayServer watches it for its parent's death)."""
    gateway = pyspark.SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    pyspark.SparkContext._gateway = None
    pyspark.SparkContext._jvm = None
    if proc is not None:
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A Python without the driver's packages (a virtual environment of
    the base interpreter, no pip): Spark's workers cannot run hbcore's
    tasks in it."""
    root = str(tmp_path_factory.mktemp("bare-venv"))
    venv.create(root, with_pip=False)
    return os.path.join(root, "bin", "python")


def _workers_run(monkeypatch, spark, python, chosen):
    """As a session created with PYSPARK_PYTHON=python (``chosen``) or
    without it where python3 on the PATH is ``python``: the context read
    the variable once, when it was created, into ``pythonExec``."""
    if chosen:
        monkeypatch.setenv("PYSPARK_PYTHON", python)
    else:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", python)


def test_workers_that_cannot_import_hbcore_fail_the_call_naming_why(
        spark, bare_python, monkeypatch):
    _workers_run(monkeypatch, spark, bare_python, chosen=True)
    with Watchdog():
        with pytest.raises(RuntimeError) as exc:
            hbcore.spark.run(hosted_fns.train_step, args=(1.0,), num_proc=2,
                             start_timeout=60)
    message = str(exc.value)
    first = re.match(r"hbcore\.spark\.run: Spark task [01] failed: "
                     r"ModuleNotFoundError: No module named '([\w.]+)'\n",
                     message)
    assert first, message
    # The module named is one the workers' Python lacks (hbcore where it is
    # installed, else the first package the checkout's hbcore imports).
    probe = subprocess.run([bare_python, "-c", "import " + first.group(1)],
                           capture_output=True, timeout=30)
    assert probe.returncode != 0, first.group(1)
    assert ("Spark's workers run %r (PYSPARK_PYTHON), which cannot import "
            "hbcore or a package it needs: set PYSPARK_PYTHON, before the "
            "SparkContext is created, to a Python that has hbcore (this "
            "driver's is %s)" % (bare_python, sys.executable)) in message
    # Then the task's own traceback, which ends with that exception.
    summary = message.splitlines()[0].split(" failed: ", 1)[1]
    assert "\n\nTraceback of Spark task " in message
    assert message.endswith("\n" + summary), message
    assert "free task slots" not in message
    assert hosted_processes() == []


@pytest.mark.parametrize("np_", [2, 3])
def test_training_step_equals_hbcore_run_and_numpy(spark, bare_python,
                                                   monkeypatch, np_):
    # Local mode without PYSPARK_PYTHON, where Spark's default worker
    # Python (python3 on the PATH) lacks hbcore: the workers run the
    # driver's.
    _workers_run(monkeypatch, spark, bare_python, chosen=False)
    with Watchdog():
        results = hbcore.spark.run(hosted_fns.train_step, args=(0.5,),
                                   num_proc=np_, start_timeout=120)
        reference = hbcore.run(hosted_fns.train_step, args=(0.5,), np=np_)
    expected = np.mean([hosted_fns.rank_data(r, 0.5) for r in range(np_)],
                       axis=0)
    assert [r["rank"] for r in results] == list(range(np_))
    assert all(r["size"] == np_ for r in results)
    for got, ref in zip(results, reference):
        np.testing.assert_allclose(got["average"], expected, rtol=1e-12)
        np.testing.assert_array_equal(got["average"], ref["average"])
        assert got["names"] == ["rank-%d" % r for r in range(np_)]
    assert len({r["pid"] for r in results}) == np_
    assert hosted_processes() == []
    # The session's later Python jobs run the driver's Python too.
    assert spark.sparkContext.parallelize([0], 1).map(
        lambda _: sys.executable).collect() == [sys.executable]


def test_failing_task_fails_the_call_with_its_error(spark):
    with Watchdog():
        with pytest.raises(RuntimeError) as exc:
            hbcore.spark.run(hosted_fns.fail_on_rank, args=(1,), num_proc=3,
                             start_timeout=120)
    message = str(exc.value)
    assert "hbcore.spark.run: rank 1 raised ValueError: bad shard on rank 1" \
        in message
    assert "Traceback" in message and "hosted_fns.py" in message
    assert hosted_processes() == []
    # The session is usable afterwards, and a later job forms again.
    with Watchdog():
        again = hbcore.spark.run(hosted_fns.train_step, args=(1.0,),
                                 num_proc=2, start_timeout=120)
    assert [r["size"] for r in again] == [2, 2]


def test_killed_rank_fails_the_call_naming_it(spark):
    with Watchdog():
        with pytest.raises(RuntimeError) as exc:
            hbcore.spark.run(hosted_fns.kill_rank, args=(0,), num_proc=2,
                             start_timeout=120)
    assert str(exc.value).startswith(
        "hbcore.spark.run: rank 0 (Spark task 0) failed first: killed by "
        "signal SIGKILL (9) [host ")
    assert hosted_processes() == []


def test_gloo_is_refused(spark):
    with pytest.raises(ValueError, match="use_gloo=True: hbcore has no Gloo "
                                         "controller"):
        hbcore.spark.run(hosted_fns.train_step, args=(1.0,), num_proc=2,
                         use_gloo=True)


def test_tasks_that_cannot_all_start_fail_the_call_in_time(spark):
    # local[3] has 3 task slots: a barrier stage of 4 never starts.
    with Watchdog(120):
        with pytest.raises(RuntimeError) as exc:
            hbcore.spark.run(hosted_fns.train_step, args=(1.0,), num_proc=4,
                             start_timeout=5)
    message = str(exc.value)
    assert "Spark task 0, Spark task 1, Spark task 2, Spark task 3 did not " \
           "arrive within --start-timeout 5s" in message
    assert "num_proc=4 needs as many free task slots" in message
    assert hosted_processes() == []


def test_start_timeout_comes_from_the_argument_or_horovods_variable(
        monkeypatch):
    from hbcore.spark.runner import start_timeout_s
    monkeypatch.delenv("HB_SPARK_START_TIMEOUT", raising=False)
    monkeypatch.delenv("HOROVOD_SPARK_START_TIMEOUT", raising=False)
    assert start_timeout_s(None) == 600
    monkeypatch.setenv("HOROVOD_SPARK_START_TIMEOUT", "45")
    assert start_timeout_s(None) == 45
    assert start_timeout_s(7) == 7
    monkeypatch.setenv("HB_SPARK_START_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="HB_SPARK_START_TIMEOUT='soon': the "
                                         "start timeout must be a positive"):
        start_timeout_s(None)
    with pytest.raises(ValueError, match="start_timeout=0: the start timeout"):
        start_timeout_s(0)


def test_task_failure_reads_the_last_exception_of_a_chained_traceback():
    from hbcore.spark.task_errors import task_failure
    # Spark 3's form of a task failure: "Lost task", no SQLSTATE.
    text = (
        "Job aborted due to stage failure: Task 2 in stage 4.0 failed 1 "
        "times, most recent failure: Lost task 2.0 in stage 4.0 (TID 9): "
        "org.apache.spark.api.python.PythonException: Traceback (most "
        "recent call last):\n"
        '  File "/w/x.py", line 3, in f\n'
        "    import missing\n"
        "ModuleNotFoundError: No module named 'missing'\n\n"
        "During handling of the above exception, another exception "
        "occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/w/x.py", line 5, in f\n'
        "    raise RuntimeError('no fallback')\n"
        "RuntimeError: no fallback\n"
        "second line of the message\n\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.read(x.scala:1)\n")
    failure = task_failure(RuntimeError(text))
    assert failure.task == 2
    assert failure.summary == "RuntimeError: no fallback"
    assert not failure.is_import_error
    assert failure.traceback.startswith("Traceback (most recent call last):")
    assert failure.traceback.endswith("second line of the message")
    assert task_failure(RuntimeError("Job 3 cancelled")) is None


def test_run_elastic_goes_on_after_a_task_worker_is_killed(spark, tmp_path):
    """Two barrier stages of 2 tasks (about 25 s on 2 loaded cores: each
    generation's ranks start Python and hbcore)."""
    # The rank of slot 1 SIGKILLs its task's Python worker before step 3:
    # Spark fails that stage, and the next one goes back to the commit
    # after step 1.
    with Watchdog(120):
        results = hbcore.spark.run_elastic(
            hosted_fns.elastic_job, num_proc=2, start_timeout=60,
            elastic_timeout=60,
            env={"HB_TEST_OUT": str(tmp_path),
                 "HB_TEST_EVENTS": "killhosting:spark-slot-1:3"})
    assert step_sizes(str(tmp_path)) == [2] * 10
    assert first_steps(str(tmp_path)) == {0: 0, 1: 2}  # the commits'
    assert results == [dict(replay(str(tmp_path)), size=2, generation=1,
                            resets=[2])] * 2
    assert hosted_processes() == []


def test_run_elastic_workers_that_cannot_import_hbcore_end_the_job(
        spark, bare_python, monkeypatch):
    # Not a reset: the stage failed before its job formed.
    _workers_run(monkeypatch, spark, bare_python, chosen=True)
    with Watchdog(120):
        with pytest.raises(RuntimeError) as exc:
            hbcore.spark.run_elastic(hosted_fns.elastic_job, num_proc=2,
                                     start_timeout=60)
    message = str(exc.value)
    assert re.match(r"hbcore\.spark\.run_elastic: elastic job failed: "
                    r"hbcore\.spark\.run_elastic: error: Spark task [01] "
                    r"failed: ModuleNotFoundError: No module named ", message
                    ), message
    assert "generation 1" not in message
    assert hosted_processes() == []


def test_run_elastic_arguments_are_checked(spark):
    run_elastic = hbcore.spark.run_elastic
    with pytest.raises(ValueError, match="min_num_proc 3 is more than "
                       "num_proc 2"):
        run_elastic(hosted_fns.elastic_job, num_proc=2, min_num_proc=3)
    with pytest.raises(ValueError, match="max_num_proc 1 is less than "
                       "num_proc 2"):
        run_elastic(hosted_fns.elastic_job, num_proc=2, max_num_proc=1)
    with pytest.raises(ValueError, match="reset_limit must be an integer "
                       ">= 0"):
        run_elastic(hosted_fns.elastic_job, reset_limit=-1)
    with pytest.warns(DeprecationWarning, match="max_np is deprecated"), \
            pytest.raises(ValueError, match="max_num_proc 1 is less than "
                          "num_proc 3"):
        run_elastic(hosted_fns.elastic_job, max_np=1)
    # local[3] has 3 task slots: 4 never come.
    with Watchdog(60):
        with pytest.raises(RuntimeError, match=r"elastic job failed: fewer "
                           r"than 4 slots \(--min-np\) for 1 s"):
            run_elastic(hosted_fns.elastic_job, num_proc=4,
                        elastic_timeout=1)
