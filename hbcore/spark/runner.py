"""``hbcore.spark.run``: a function on N Spark tasks as one hbcore job.

Like ``horovod.spark.run``: the driver starts ``num_proc`` Spark tasks in
one barrier stage; each task hosts one rank (hbcore/launcher/
hosted_rank.py) and the driver is the rendezvous' coordinator and runs
mpiexec (hosted_job.py), so the tasks form one MPI world over hydra's
manual launcher: no ssh, no command line shipped to an executor. Rank i is
task (partition) i. Each task returns its rank's outcome; the driver
returns the values in rank order or raises the first failing rank's
error. Every task ends only when the job has ended, with its proxy and
rank stopped, so nothing is left running on the executors.
"""

import os
import shlex
import socket
import sys
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, TextIO, Union)

import cloudpickle
import pyspark

from hbcore.launcher.manual.hosted_job import HostedJob
from hbcore.launcher.mpiexec import nic_env
from hbcore.spark.stage import BarrierStage
from hbcore.spark.task_errors import TaskFailure, task_failure, too_few_slots

PROGRAM = "hbcore.spark.run"
# horovod.spark.run's default start timeout and its variable.
DEFAULT_START_TIMEOUT_S = 600
START_TIMEOUT_VARS = ("HB_SPARK_START_TIMEOUT", "HOROVOD_SPARK_START_TIMEOUT")


def start_timeout_s(start_timeout: Optional[float]) -> float:
    if start_timeout is not None:
        value: Any = start_timeout
        name = "start_timeout"
    else:
        name = next((v for v in START_TIMEOUT_VARS if os.environ.get(v)),
                    None)
        value = (os.environ[name] if name is not None
                 else DEFAULT_START_TIMEOUT_S)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds > 0:
        raise ValueError("%s=%r: the start timeout must be a positive number "
                         "of seconds" % (name, value))
    return seconds


def run(fn: Callable[..., Any], args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] = {}, num_proc: Optional[int] = None,
        start_timeout: Optional[float] = None,
        use_mpi: Optional[bool] = None, use_gloo: Optional[bool] = None,
        extra_mpi_args: Union[str, Sequence[str], None] = None,
        env: Optional[Mapping[str, str]] = None,
        stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None,
        verbose: int = 1, nics: Optional[Iterable[str]] = None,
        prefix_output_with_timestamp: bool = False,
        executable: Optional[str] = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` in ``num_proc`` Spark tasks that form
    one hbcore job; ``fn`` calls ``hbcore.init()`` (or ``hvd.init()``)
    itself, as under ``horovod.spark.run``.

    Args:
        fn: The function every rank runs (cloudpickled to the tasks).
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        num_proc: Number of ranks (Spark tasks); default the context's
            ``defaultParallelism``. The cluster needs that many free task
            slots at once (barrier mode).
        start_timeout: Seconds for every task to start and join; default
            ``HB_SPARK_START_TIMEOUT`` / ``HOROVOD_SPARK_START_TIMEOUT``,
            else 600.
        use_mpi: Accepted; MPI is the only controller.
        use_gloo: Must not be true: hbcore has no Gloo controller.
        extra_mpi_args: Extra mpiexec arguments (a string is shlex-split).
        env: Variables for every rank, on top of its executor's
            environment.
        stdout: Stream for the ranks' stdout (default: sys.stdout).
        stderr: Stream for the ranks' stderr (default: sys.stderr).
        verbose: 0-2; at 2 the mpiexec command line is printed.
        nics: Network interfaces for NCCL's sockets.
        prefix_output_with_timestamp: Prefix output lines with the time.
        executable: The ranks' Python (default: sys.executable). The
            Spark tasks that host them run Spark's workers' Python
            (PYSPARK_PYTHON).

    Returns:
        The values ``fn`` returned, in rank order.

    Raises:
        ValueError: ``use_gloo`` is true, ``num_proc`` < 1, or the start
            timeout is not a positive number.
        RuntimeError: No active SparkContext; a rank raised (the message
            names the rank and holds its traceback); a Spark task failed
            before its rank ran (the message names the task, its exception
            and traceback, and for an import error which Python Spark's
            workers run and how to choose another); the job failed
            otherwise (a task lost, a task not started in time), named in
            the message.

    In local mode, when neither PYSPARK_PYTHON nor spark.pyspark.python
    is set, Spark's workers run this driver's Python (``sys.executable``)
    from this call on, instead of Spark's default ``python3`` from the
    PATH.
    """
    if use_gloo:
        raise ValueError("use_gloo=True: hbcore has no Gloo controller; "
                         "%s always forms the job over MPI" % PROGRAM)
    context = active_context()
    if num_proc is None:
        num_proc = context.defaultParallelism
    if not isinstance(num_proc, int) or isinstance(num_proc, bool) \
            or num_proc < 1:
        raise ValueError("num_proc must be an integer >= 1, got %r"
                         % (num_proc,))
    timeout = start_timeout_s(start_timeout)
    default_local_python(context)
    if isinstance(extra_mpi_args, str):
        extra_mpi_args = shlex.split(extra_mpi_args)
    rank_env: Dict[str, str] = dict(env or {})
    rank_env.update(nic_env(list(nics) if nics else None))
    # Pickled first: a function that cannot be pickled fails here, before
    # a job waits for tasks.
    payload = cloudpickle.dumps((list(sys.path), fn, tuple(args),
                                 dict(kwargs), "call"))
    job = HostedJob(num_proc, "Spark task", PROGRAM, timeout, rank_env,
                    executable, list(extra_mpi_args or ()), verbose >= 2,
                    stdout, stderr, prefix_output_with_timestamp)
    stage = BarrierStage(context, job.spec(driver_host(context)), payload,
                         num_proc, PROGRAM,
                         lambda exc: job.abort(stage_failure(exc)))
    try:
        code, _ = job.wait()
        outcomes = stage.finish(code == 0)
    except BaseException:
        stage.cancel()
        job.abort("%s was interrupted" % PROGRAM)
        raise
    if stage.error is not None and not outcomes:
        raise _spark_job_error(stage.error, job.wait()[1], num_proc,
                               stage.cancelled, context) from stage.error
    return job.results(outcomes)


def active_context() -> pyspark.SparkContext:
    """The active SparkContext.

    Raises:
        RuntimeError: There is none (horovod.spark's message).
    """
    context = pyspark.SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("Could not find an active SparkContext, are you "
                           "running in a PySpark session?")
    return context


def driver_host(context: pyspark.SparkContext) -> str:
    """This driver's address as Spark's executors reach it."""
    return context.getConf().get("spark.driver.host") or socket.gethostname()


def stage_failure(error: BaseException) -> str:
    """Why a job is aborted when its Spark stage failed."""
    failure = task_failure(error)
    return (_task_line(failure) if failure else
            "the Spark job failed: %s" % _first_line(error))


def default_local_python(context: pyspark.SparkContext) -> None:
    """In local mode, Spark's workers run the driver's Python unless the
    user chose one.

    Spark's own default is ``python3`` from the PATH, which is often not
    the driver's (a virtual environment run without activating it), and
    then the tasks cannot import hbcore. The context read PYSPARK_PYTHON
    when it was created (setting it later, or spark.pyspark.python outside
    spark-submit, changes nothing), and every Python RDD takes its
    workers' Python from the context's ``pythonExec`` when it runs, so
    that is the one place to set it for a context that already exists.
    """
    if not context.master.startswith("local"):
        return
    if os.environ.get("PYSPARK_PYTHON") \
            or context.getConf().get("spark.pyspark.python"):
        return
    context.pythonExec = sys.executable


def _spark_job_error(error: BaseException, job_message: str, num_proc: int,
                     cancelled: bool, context: pyspark.SparkContext
                     ) -> RuntimeError:
    """The caller's exception for a Spark job that failed before the
    ranks reported: the failed task's own exception when Spark carries
    one, the free slots when they are the cause, else the job's report.

    Args:
        error: What Spark's ``collect()`` raised.
        job_message: The hbcore job's report line ("" if none).
        num_proc: The number of tasks of the barrier stage.
        cancelled: Whether the stage was still waiting for its tasks when
            the job ended, and was cancelled.
        context: The SparkContext (for the workers' Python).

    Returns:
        A RuntimeError naming the cause.
    """
    failure = task_failure(error)
    if failure is not None:
        lines = ["%s: %s" % (PROGRAM, _task_line(failure))]
        if failure.is_import_error:
            lines.append(_import_hint(context))
        lines += ["", "Traceback of %s:" % _task_name(failure),
                  failure.traceback]
        return RuntimeError("\n".join(lines))
    message = job_message or "%s: the Spark job failed: %s" % (PROGRAM,
                                                               error)
    if cancelled or too_few_slots(error):
        message += (" (a barrier stage of num_proc=%d needs as many free "
                    "task slots at once)" % num_proc)
    return RuntimeError(message)


def _import_hint(context: pyspark.SparkContext) -> str:
    """Which Python Spark's workers run, and how to choose another."""
    python = context.pythonExec
    if python == sys.executable:
        root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        return ("Spark's workers run this driver's Python (%s) without the "
                "driver's sys.path, through which it finds hbcore (in %s) "
                "or a package it needs: install hbcore into that Python, or "
                "put %s on PYTHONPATH before the SparkContext is created"
                % (python, root, root))
    source = ("PYSPARK_PYTHON" if os.environ.get("PYSPARK_PYTHON")
              else "Spark's default; PYSPARK_PYTHON is unset")
    return ("Spark's workers run %r (%s), which cannot import hbcore or a "
            "package it needs: set PYSPARK_PYTHON, before the SparkContext "
            "is created, to a Python that has hbcore (this driver's is %s), "
            "or install hbcore on the executors"
            % (python, source, sys.executable))


def _task_name(failure: TaskFailure) -> str:
    return "a Spark task" if failure.task is None \
        else "Spark task %d" % failure.task


def _task_line(failure: TaskFailure) -> str:
    return "%s failed: %s" % (_task_name(failure), failure.summary)


def _first_line(exc: BaseException) -> str:
    """The first line of Spark's error that says something: py4j's
    "An error occurred while calling ..." line names only the JVM call."""
    lines = [line.lstrip(": ").strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line
             and not line.startswith("An error occurred while calling")]
    return lines[0] if lines else type(exc).__name__
