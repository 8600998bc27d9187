"""Runs a command's job to its end and reports it on stderr: hbrun,
``python -m hbcore.run``, and a TF_CONFIG job's ps or evaluator task."""

import sys

from hbcore.launcher.elastic.driver import run_elastic
from hbcore.launcher.errors import LauncherError
from hbcore.launcher.job_spec import JobSpec
from hbcore.launcher.supervisor import launch


def run_command_job(job: JobSpec) -> int:
    """Runs ``job`` (elastic or fixed) and prints its failure report.

    Args:
        job: The job.

    Returns:
        The launcher's exit code: 0, the first failing rank's code, 128 +
        the signal that stopped the launcher, or 1 when the job could not
        be started (the error is printed).
    """
    if job.elastic is not None:
        return run_elastic(job)
    try:
        result = launch(job)
    except LauncherError as exc:
        sys.stderr.write("%s: error: %s\n" % (job.program, exc))
        return 1
    message = result.message(job.program)
    if message:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    return result.exit_code
