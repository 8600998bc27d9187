"""``hbcore.run(fn, ..., min_np=, max_np=, host_discovery_script=)``: the
function launch as an elastic job (horovod.run's elastic arguments).

The ranks run run_task.py under hbrun's elastic driver
(elastic_driver.py), one generation after another; ``fn`` uses
``hvd.elastic.run`` and state objects as a script would.  Each rank's
result file is named after its generation (run_task.py), so the results
are those of the last generation whose ranks returned, in rank order:
the first ``min_np`` of them, as horovod.run returns.
"""

import glob
import os
import pickle
import re
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from hbcore.launcher.elastic_driver import (DEFAULT_ELASTIC_TIMEOUT_S,
                                            ELASTIC_TIMEOUT_VAR,
                                            ElasticSettings, run_elastic)
from hbcore.launcher.hosts import Host, total_slots
from hbcore.launcher.run_task import rank_error


def elastic_settings(np: Optional[int], min_np: Optional[int],
                     max_np: Optional[int],
                     host_discovery_script: Optional[str],
                     hosts: Optional[List[Host]], slots: Optional[int],
                     reset_limit: Optional[int],
                     cooldown_range: Optional[Tuple[float, float]],
                     environ: Mapping[str, str]
                     ) -> Optional[ElasticSettings]:
    """The settings of an elastic ``hbcore.run``, or None if not elastic
    (no min_np, max_np or host_discovery_script).

    Args:
        np: Ranks to start with (None: min_np).
        min_np: Fewest ranks to go on with (None: np).
        max_np: Most ranks (None: unbounded).
        host_discovery_script: As hbrun's flag (not with ``hosts``).
        hosts: The fixed hosts, or None.
        slots: Slots of a discovered host printed without any.
        reset_limit: Most re-formations (None: unlimited).
        cooldown_range: Blacklist ``(MIN, MAX)`` seconds, or None.
        environ: Where HOROVOD_ELASTIC_TIMEOUT is read.

    Returns:
        The ElasticSettings, or None.

    Raises:
        ValueError: Naming the argument that is wrong.
    """
    if min_np is None and max_np is None and host_discovery_script is None:
        if reset_limit is not None or cooldown_range is not None:
            raise ValueError("reset_limit and cooldown_range are for an "
                             "elastic job: give min_np, max_np or "
                             "host_discovery_script")
        return None
    if host_discovery_script is not None and hosts is not None:
        raise ValueError("host_discovery_script: not with hosts or hostfile")
    np = np if np is not None else (min_np or 1)
    min_np = min_np if min_np is not None else np
    for name, value in (("np", np), ("min_np", min_np)):
        if not isinstance(value, int) or value < 1:
            raise ValueError("%s must be an integer >= 1, got %r"
                             % (name, value))
    if min_np > np:
        raise ValueError("min_np %d is more than np %d" % (min_np, np))
    if max_np is not None and max_np < np:
        raise ValueError("max_np %d is less than np %d" % (max_np, np))
    if hosts is not None and np > total_slots(hosts):
        raise ValueError("np: %d ranks do not fit in the %d slots of the "
                         "host list" % (np, total_slots(hosts)))
    if cooldown_range is not None:
        low, high = cooldown_range
        if not 0 <= low <= high:
            raise ValueError("cooldown_range must be (MIN, MAX) with "
                             "0 <= MIN <= MAX, got %r" % (cooldown_range,))
    text = environ.get(ELASTIC_TIMEOUT_VAR, str(DEFAULT_ELASTIC_TIMEOUT_S))
    if not text.isdigit() or int(text) < 1:
        raise ValueError("%s must be an integer >= 1, got %r"
                         % (ELASTIC_TIMEOUT_VAR, text))
    return ElasticSettings(
        np=np, min_np=min_np, max_np=max_np,
        discovery_script=host_discovery_script, fixed_hosts=hosts,
        slots_per_host=slots or 1, timeout_s=int(text),
        reset_limit=reset_limit,
        cooldown_range=None if cooldown_range is None else (
            float(cooldown_range[0]), float(cooldown_range[1])))


def run_elastic_fn(command: Sequence[str], settings: ElasticSettings,
                   workdir: str, env: Mapping[str, str],
                   launch_args: Mapping[str, Any]) -> List[Any]:
    """Runs the elastic job and returns its results (module comment).

    Raises:
        RuntimeError: If the job failed (the driver's report is on
            stderr; the message repeats the last error a rank raised).
    """
    code = run_elastic(command, settings, env, launch_args,
                       program="hbcore.run")
    found = {}
    for path in glob.glob(os.path.join(glob.escape(workdir), "result.*.*.pkl")):
        match = re.search(r"result\.(\d+)\.(\d+)\.pkl$", path)
        if match:
            with open(path, "rb") as f:
                found[int(match.group(1)), int(match.group(2))] = (
                    pickle.load(f))
    if code != 0:
        errors = sorted((g, r) for (g, r), o in found.items()
                        if o[0] == "error")
        if errors:
            g, r = errors[-1]
            raise RuntimeError("hbcore.run: the elastic job failed; last "
                               "error: %s" % rank_error(
                                   "generation %d" % g, r, found[g, r][1]))
        raise RuntimeError("hbcore.run: the elastic job failed (exit code "
                           "%d; the report is above)" % code)
    if not found:
        raise RuntimeError("hbcore.run: the elastic job ended without a "
                           "result from any rank")
    last = max(g for g, _ in found)
    ranks = sorted(r for g, r in found if g == last)
    return [found[last, r][1] for r in ranks][:settings.min_np]
