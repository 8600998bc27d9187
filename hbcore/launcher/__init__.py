"""The process launcher behind ``hbrun``, ``hbcore.run`` and
``python -m hbcore.run``.

Ranks are started through MPI's own launcher (hydra ``mpiexec``), each under
a small wrapper that prefixes its output with the rank and reports how it
ended, so the first failing rank stops the whole job within seconds.

Modules, one job each:
    cli          hbrun's flags, flags -> HB_* variables, main()
    job_spec     the one description of a job (JobSpec) every entry point
                 fills, and the rules between its settings
    command_job  runs a command's job (hbrun, a ps task) and reports it
    outcome      results and root failure of a job, report lines, the
                 launcher's stop signals
    mpiexec      finding hydra's mpiexec, building its command line
    hosts        -H / --hostfile parsing
    supervisor   running mpiexec, first-failure detection, teardown
    job_watchdog ends the job when a launcher with threads is killed
    output       hbrun-side relay of the ranks' output
    rank_wrapper rank-side: runs the command, forwards signals, reports
    rank_status  the status line and parent-death signal that the rank
                 wrapper and the launcher share (standard library only)
    rank_output  rank-side: rank-prefixed output lines
    run_fn       hbcore.run(fn, ...) and its rank side run_task
    devices      one worker per visible GPU for ``python -m hbcore.run``
    wire         the one authenticated socket protocol (HMAC proofs both
                 ways, framed messages) every job-internal connection uses
    rendezvous   launchers started by an orchestrator meet and form one
                 MPI world (protocol in its module comment)
    hydra_manual hydra's manual launcher: proxy commands <-> data
    manual_job   running a placed rendezvous job: mpiexec, members' proxies
    tf_config_launch  the rendezvous' TF_CONFIG front end
    hosted_job   driver side of Spark/Ray jobs (coordinator, mpiexec)
    hosted_rank  a Spark task's / Ray actor's side: hosts one rank
    rank_server  rank side of a hosted rank: runs the host's calls
    hosted_elastic  elastic Spark/Ray jobs: the elastic driver's
                 generations as jobs of hosted ranks
    check_build  hbrun --check-build
    elastic_driver  hbrun's elastic jobs: one MPI world per generation
                 (protocol in its module comment; docs/elastic.md)
    elastic_protocol  the variables, exit code and files the elastic
                 driver and the ranks' hbcore.elastic share
    elastic_notice  the host-change notice, driver -> rank 0, over the wire
    discovery    --host-discovery-script and the host blacklist

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
