"""``hbcore.spark.run_elastic``: an elastic hbcore job on Spark tasks.

Like ``horovod.spark.run_elastic``: every Spark task slot is a host of
one slot (Horovod names each task a host of its own), ``spark-slot-0``
... ``spark-slot-<n-1>`` for the context's ``defaultParallelism`` n
(Spark's count of the live executors' task slots), asked again every
second while the job runs. Each generation is one barrier stage
(stage.py) of one task per slot in use, each hosting its rank for one
call of ``fn`` (hbcore/launcher/elastic/hosted.py, whose generations are
hbrun's elastic driver's). A rank killed or lost ends its generation; the
next stage goes on from the last commit.
"""

import sys
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, TextIO)

from hbcore.launcher.elastic.hosted import (HostedElasticJob, Outcomes,
                                            elastic_limits, horovod_counts)
from hbcore.launcher.hosts import Host, total_slots
from hbcore.launcher.manual.hosted_rank import MemberSpec
from hbcore.launcher.mpiexec import nic_env
from hbcore.spark.runner import (active_context, default_local_python,
                                 driver_host, stage_failure, start_timeout_s)
from hbcore.spark.stage import BarrierStage

PROGRAM = "hbcore.spark.run_elastic"
# The name of Spark task slot i as the elastic driver's host.
SLOT_NAME = "spark-slot-%d"


def run_elastic(fn: Callable[..., Any], args: Sequence[Any] = (),
                kwargs: Mapping[str, Any] = {},
                num_proc: Optional[int] = None,
                min_num_proc: Optional[int] = None,
                max_num_proc: Optional[int] = None,
                start_timeout: Optional[float] = None,
                elastic_timeout: Optional[float] = None,
                reset_limit: Optional[int] = None,
                env: Optional[Mapping[str, str]] = None,
                stdout: Optional[TextIO] = None,
                stderr: Optional[TextIO] = None, verbose: int = 1,
                nics: Optional[Iterable[str]] = None,
                prefix_output_with_timestamp: bool = False,
                min_np: Optional[int] = None,
                max_np: Optional[int] = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` as an elastic job on Spark tasks
    (horovod.spark.run_elastic's arguments and defaults); ``fn`` calls
    ``hbcore.init()`` and trains under ``hvd.elastic.run``.

    Args:
        fn: The function every rank runs (cloudpickled to the tasks).
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        num_proc: Ranks to start with; default ``defaultParallelism``.
        min_num_proc: Fewest ranks to go on with; default num_proc.
        max_num_proc: Most ranks; default num_proc.
        start_timeout: Seconds for a generation's tasks to start and join;
            default HB_SPARK_START_TIMEOUT / HOROVOD_SPARK_START_TIMEOUT,
            else 600.
        elastic_timeout: Seconds to wait for ``min_num_proc`` slots;
            default HOROVOD_ELASTIC_TIMEOUT, else 600.
        reset_limit: Most re-formations (None: unlimited).
        env: Variables for every rank.
        stdout: Stream for the ranks' stdout (default: sys.stdout).
        stderr: Stream for the ranks' stderr (default: sys.stderr).
        verbose: 0-2; at 2 the mpiexec command lines are printed.
        nics: Network interfaces for NCCL's sockets.
        prefix_output_with_timestamp: Prefix output lines with the time.
        min_np: Deprecated name of min_num_proc (DeprecationWarning).
        max_np: Deprecated name of max_num_proc (DeprecationWarning).

    Returns:
        The values ``fn`` returned on the last generation's ranks, in
        rank order.

    Raises:
        ValueError: A count, limit or timeout that is wrong (named).
        RuntimeError: No active SparkContext; a rank raised (its error
            and traceback); the job ended otherwise (the driver's report:
            too few slots for elastic_timeout, the reset limit).
    """
    min_num_proc, max_num_proc = horovod_counts(min_num_proc, max_num_proc,
                                                min_np, max_np)
    context = active_context()
    if num_proc is None:
        num_proc = context.defaultParallelism
    if min_num_proc is None:
        min_num_proc = num_proc
    if max_num_proc is None:
        max_num_proc = num_proc
    settings = elastic_limits(num_proc, min_num_proc, max_num_proc,
                              reset_limit, elastic_timeout)
    timeout = start_timeout_s(start_timeout)
    default_local_python(context)
    rank_env: Dict[str, str] = {str(k): str(v)
                                for k, v in (env or {}).items()}
    rank_env.update(nic_env(list(nics) if nics else None))

    def discover() -> List[Host]:
        return [Host(SLOT_NAME % i, 1)
                for i in range(context.defaultParallelism)]

    def place(spec: MemberSpec, hosts: List[Host], payload: bytes,
              abort: Callable[[str], None]) -> Callable[[bool], Outcomes]:
        # Rank i is task i, on host spark-slot-i of the generation. A
        # failed stage stops the generation: a task that failed before
        # the job formed (its Python cannot import hbcore) ends the job
        # with its error, one that failed later is a lost worker.
        stage = BarrierStage(context, spec, payload, total_slots(hosts),
                             PROGRAM, lambda exc: abort(stage_failure(exc)))
        return stage.finish

    job = HostedElasticJob(
        settings, discover, place, driver_host(context), "Spark task",
        PROGRAM, timeout,
        {"env": rank_env, "verbose": verbose >= 2, "stdout": stdout,
         "stderr": stderr, "timestamp": prefix_output_with_timestamp})
    return job.run(fn, tuple(args), dict(kwargs), list(sys.path))
