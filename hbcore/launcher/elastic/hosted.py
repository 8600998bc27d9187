"""An elastic job of hosted ranks: ``hbcore.ray.ElasticRayExecutor`` and
``hbcore.spark.run_elastic``.

The generations, limits, resets, the host-change notice and the commit
store are hbrun's elastic driver's (elastic/driver.py); this module is
its ``GenerationBackend`` for workers that Ray or Spark start:

- hosts: the engine's answer (``discover``): Ray's live nodes and their
  slots, Spark's task slots;
- one generation: a HostedJob of ``sum(slots)`` ranks, whose hosts the
  engine starts on the generation's hosts (``place``: rank r on the host
  whose slot range holds r, as HB_ELASTIC_HOSTS says), each running the
  user's function once (hosted_rank.run_once) under the generation's
  HB_ELASTIC_* variables;
- a rank whose function raised ends the job with that error (a bug a
  restart would repeat, as hvd.elastic.run's module says); a rank that
  died or left the world is a reset, and its slot is not blacklisted:
  the engine reports lost machines itself.
The result is the values of the last generation's ranks, in rank order.
"""

import os
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import cloudpickle

from hbcore.launcher.elastic.driver import GenerationBackend, run_elastic
from hbcore.launcher.errors import LauncherError
from hbcore.launcher.hosts import Host, total_slots
from hbcore.launcher.job_spec import (HOROVOD_NAMES, ElasticSettings,
                                      JobSpec, elastic_settings)
from hbcore.launcher.manual.hosted_job import HostedJob
from hbcore.launcher.manual.hosted_rank import MemberSpec
from hbcore.launcher.outcome import rank_error, root_failure

# Outcomes of one generation's ranks: rank -> hosted_rank's outcome.
Outcomes = Dict[int, Tuple[str, Any]]
# Starts a generation's hosts: place(spec, hosts, payload, abort) returns
# a function that, once the job has ended (its argument: whether with
# exit code 0), waits for the hosts and returns their outcomes. abort(why)
# stops the generation's job (an engine that sees its hosts fail): before
# the job formed that ends the elastic job with ``why``, after it a host
# went away (a reset).
Place = Callable[[MemberSpec, List[Host], bytes, Callable[[str], None]],
                 Callable[[bool], Outcomes]]


def horovod_counts(min_num_proc: Optional[int],
                   max_num_proc: Optional[int], min_np: Optional[int],
                   max_np: Optional[int]
                   ) -> Tuple[Optional[int], Optional[int]]:
    """``(min_num_proc, max_num_proc)``, taking Horovod's deprecated
    ``min_np``/``max_np`` where given (with its DeprecationWarning)."""
    if min_np is not None:
        min_num_proc = min_np
        warnings.warn("min_np is deprecated, use min_num_proc instead",
                      DeprecationWarning, stacklevel=3)
    if max_np is not None:
        max_num_proc = max_np
        warnings.warn("max_np is deprecated, use max_num_proc instead",
                      DeprecationWarning, stacklevel=3)
    return min_num_proc, max_num_proc


def elastic_limits(num_proc: int, min_num_proc: int,
                   max_num_proc: Optional[int], reset_limit: Optional[int],
                   elastic_timeout: Optional[float],
                   cooldown_range: Optional[Tuple[float, float]] = None
                   ) -> ElasticSettings:
    """The elastic driver's settings from Ray's and Spark's arguments:
    job_spec.elastic_settings in Horovod's names.

    Args:
        num_proc, min_num_proc, max_num_proc, reset_limit: Horovod's.
        elastic_timeout: Seconds to wait for slots (None:
            HOROVOD_ELASTIC_TIMEOUT, else 600).
        cooldown_range: Checked, not used: hosted slots are not
            blacklisted.

    Returns:
        The settings.

    Raises:
        ValueError: Naming the argument that is wrong.
    """
    settings = elastic_settings(
        HOROVOD_NAMES, num_proc, min_num_proc, max_num_proc, None, None,
        reset_limit=reset_limit, cooldown_range=cooldown_range,
        timeout_s=elastic_timeout, environ=os.environ)
    assert settings is not None  # min_num_proc makes it elastic
    return settings


class HostedElasticJob:
    """One elastic job of hosted ranks (see the module comment).

    Args:
        settings: The elastic limits (``elastic_limits``).
        discover: The engine's hosts now.
        place: Starts a generation's hosts (``Place``).
        driver_host: This driver's address as the hosts reach it.
        what: What a host is, for messages: ``"Ray worker"``.
        program: Name starting report lines.
        start_timeout: Seconds for a generation's hosts to join.
        job_args: Further keyword arguments of HostedJob (env, streams).
    """

    def __init__(self, settings: ElasticSettings,
                 discover: Callable[[], List[Host]], place: Place,
                 driver_host: str, what: str, program: str,
                 start_timeout: float,
                 job_args: Optional[Mapping[str, Any]] = None) -> None:
        self._settings = settings
        self._discover = discover
        self._place = place
        self._driver_host = driver_host
        self._what = what
        self._program = program
        self._start_timeout = start_timeout
        self._job_args = dict(job_args or {})
        self._env: Dict[str, str] = dict(self._job_args.pop("env", {}) or {})
        self._payload = b""
        self._last: Outcomes = {}
        self._report: List[str] = []

    def run(self, fn: Callable[..., Any], args: Tuple[Any, ...],
            kwargs: Mapping[str, Any], sys_path: List[str]) -> List[Any]:
        """Runs ``fn(*args, **kwargs)`` on every rank of every generation
        until one generation finishes.

        Returns:
            The last generation's values, in rank order.

        Raises:
            RuntimeError: The job failed: a rank raised (its error and
                traceback), or a limit ended it (the driver's report).
        """
        self._payload = cloudpickle.dumps((list(sys_path), fn, tuple(args),
                                           dict(kwargs), "call"))
        backend = GenerationBackend(self._discover, self._launch, False,
                                    self._report.append)
        code = run_elastic(JobSpec(command=[], np=self._settings.np,
                                   env=self._env, elastic=self._settings,
                                   program=self._program), backend)
        if code != 0:
            raise RuntimeError("\n".join(self._report) or
                               "%s: the elastic job failed (exit code %d)"
                               % (self._program, code))
        return [self._last[r][1] for r in sorted(self._last)]

    def _launch(self, hosts: List[Host], rank_env: Dict[str, str],
                events: Any, seen: list, settle_for: Callable) -> Any:
        """One generation (GenerationBackend.launch)."""
        size = total_slots(hosts)
        job = HostedJob(size, self._what, self._program, self._start_timeout,
                        rank_env, events=events, seen=seen,
                        settle_for=settle_for, **self._job_args)
        try:
            collect = self._place(job.spec(self._driver_host), hosts,
                                  self._payload, job.abort)
            code, message = job.wait()
            outcomes = collect(code == 0)
        except BaseException:
            job.abort("%s was interrupted" % self._program)
            raise
        errors = {r: o[1] for r, o in outcomes.items() if o[0] == "error"}
        if errors:
            first = job.result.first_failure if job.result else None
            rank = root_failure(errors, first and first.rank)
            raise LauncherError(str(rank_error(self._program, rank,
                                               errors[rank])))
        if job.result is None:  # the generation never formed
            raise LauncherError(message)
        if job.result.exit_code == 0:
            self._last = outcomes
        return job.result

