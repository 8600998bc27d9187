"""The process launcher behind ``hbrun``, ``hbcore.run`` and
``python -m hbcore.run``.

Ranks are started through MPI's own launcher (hydra ``mpiexec``), each under
a small wrapper that prefixes its output with the rank and reports how it
ended, so the first failing rank stops the whole job within seconds.

The folders say where the code runs:

    (top)    the launcher process on the machine where a job is started
    rank/    the rank's machine, inside or beside each rank: scripts run by
             path, standard library only, and the protocols they share
             with the launcher (status lines, elastic variables, the wire)
    manual/  launchers started by someone else, one per machine or task
             (TF_CONFIG, Spark, Ray), meeting over the rendezvous
    elastic/ elastic jobs: the driver's generations, host discovery, the
             host-change notice

Modules at the top, one job each:
    cli          hbrun's flags, flags -> HB_* variables, main()
    job_spec     the one description of a job (JobSpec) every entry point
                 fills, and the rules between its settings
    command_job  runs a command's job (hbrun, a ps task) and reports it
    tf_config_launch  a TF_CONFIG machine's launcher (Kubernetes' TFJob,
                 PAI): the rendezvous of manual/, its ps/evaluator tasks
                 through command_job
    outcome      results and root failure of a job, report lines, the
                 launcher's stop signals
    mpiexec      finding hydra's mpiexec, building its command line
    hosts        -H / --hostfile parsing
    operator_hostfile  the MPI Operator's hostfile
    supervisor   running mpiexec, first-failure detection, teardown
    job_watchdog ends the job when a launcher with threads is killed
    output       hbrun-side relay of the ranks' output
    run_fn       hbcore.run(fn, ...); its rank side is rank/run_task
    devices      one worker per visible GPU for ``python -m hbcore.run``
    check_build  hbrun --check-build
    errors       LauncherError

Nothing here imports the native core: the launcher must work (and
--check-build must report) before and without a built core.
"""

__all__ = ["LauncherError", "LaunchResult", "launch"]

# Exported lazily: "import hbcore" imports hbcore.run, which imports this
# package; the supervisor (psutil, subprocess, ...) loads only when used.
_EXPORTS = {"LauncherError": "hbcore.launcher.errors",
            "LaunchResult": "hbcore.launcher.supervisor",
            "launch": "hbcore.launcher.supervisor"}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
