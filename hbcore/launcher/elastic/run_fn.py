"""``hbcore.run(fn, ..., min_np=, max_np=, host_discovery_script=)``: the
function launch as an elastic job (horovod.run's elastic arguments).

The ranks run run_task.py under hbrun's elastic driver
(elastic/driver.py), one generation after another; ``fn`` uses
``hvd.elastic.run`` and state objects as a script would.  Each rank's
result file is named after its generation (run_task.py), so the results
are those of the last generation whose ranks returned, in rank order:
the first ``min_np`` of them, as horovod.run returns.
"""

import glob
import os
import pickle
import re
from typing import Any, List

from hbcore.launcher.elastic.driver import run_elastic
from hbcore.launcher.job_spec import JobSpec
from hbcore.launcher.outcome import rank_error


def run_elastic_fn(job: JobSpec, workdir: str) -> List[Any]:
    """Runs the elastic job and returns its results (module comment).

    Args:
        job: The job (elastic), whose ranks run run_task.py on ``workdir``.
        workdir: Where the ranks write their result files.

    Raises:
        RuntimeError: If the job failed (the driver's report is on
            stderr; the message repeats the last error a rank raised).
    """
    code = run_elastic(job)
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
    return [found[last, r][1] for r in ranks][:job.elastic.min_np]
