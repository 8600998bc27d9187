"""One Spark barrier stage whose tasks host the ranks of one hbcore job.

Rank i is task (partition) i; each task hosts its rank for one call
(hosted_rank.run_once) and returns its outcome, cloudpickled (Spark
pickles results with plain pickle, which cannot carry a lambda the
function may return). The stage runs on a thread of its own, in a job
group of its own, so that it can be cancelled; every task ends only when
the hbcore job has ended, with its proxy and rank stopped.
"""

import functools
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import cloudpickle
import pyspark

from hbcore.launcher.manual.hosted_rank import MemberSpec, run_once

# Seconds the Spark stage gets to finish after the job ended, or failed
# (its hosts stop their proxies within a few seconds).
_TASKS_END_S = 60.0
_FAILED_TASKS_END_S = 10.0


def _task(spec: MemberSpec, payload: bytes, _rows: Iterable[Any]
          ) -> Iterator[Tuple[int, bytes]]:
    """One Spark task: hosts rank <partition> for the call.

    Yields:
        (rank, cloudpickled outcome).
    """
    index = pyspark.BarrierTaskContext.get().partitionId()
    rank, outcome = run_once(spec, index, payload)
    yield rank, cloudpickle.dumps(outcome)


class BarrierStage:
    """Starts the stage of ``num_proc`` tasks at once.

    Args:
        context: The active SparkContext.
        spec: What every task needs to join the job.
        payload: The cloudpickled call.
        num_proc: Number of tasks (ranks).
        program: Name of the job group: ``<program>.<job id>``.
        on_error: Called with Spark's exception when the stage fails
            (the owner aborts its job with it).
    """

    def __init__(self, context: pyspark.SparkContext, spec: MemberSpec,
                 payload: bytes, num_proc: int, program: str,
                 on_error: Callable[[BaseException], None]) -> None:
        self._context = context
        self._group = "%s.%s" % (program, spec.job["id"])
        self._collected: List[Tuple[int, bytes]] = []
        self.error: Optional[BaseException] = None
        self.cancelled = False
        task = functools.partial(_task, spec, payload)

        def stage() -> None:
            context.setJobGroup(self._group, "hbcore job of %d ranks"
                                % num_proc, interruptOnCancel=True)
            try:
                rdd = context.parallelize(range(num_proc), num_proc)
                self._collected.extend(
                    rdd.barrier().mapPartitions(task).collect())
            except Exception as exc:  # the job's report is more precise
                self.error = exc
                on_error(exc)

        self._thread = threading.Thread(target=stage, daemon=True,
                                        name="hbcore-spark-job")
        self._thread.start()

    def finish(self, succeeded: bool) -> Dict[int, Tuple[str, Any]]:
        """Waits for the tasks after the job's end (cancels a stage still
        waiting for its tasks: too few free slots; Spark retries a
        barrier stage for minutes).

        Args:
            succeeded: Whether the job ended with exit code 0.

        Returns:
            Rank -> outcome of every task that returned.
        """
        self._thread.join(_TASKS_END_S if succeeded else _FAILED_TASKS_END_S)
        if self._thread.is_alive():
            self.cancelled = True
            self.cancel()
            self._thread.join()
        return {rank: cloudpickle.loads(data)
                for rank, data in self._collected}

    def cancel(self) -> None:
        """Cancels the stage's Spark job."""
        self._context.cancelJobGroup(self._group)

