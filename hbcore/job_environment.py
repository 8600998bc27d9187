"""Never train apart silently: is a world of one really a job of one?

A process that finds itself alone in its MPI world while its environment
says the job has several tasks is almost always a launch mistake, and the
worst kind: every machine trains a model of its own, no error, wrong
result. Seen in practice:

- ``TF_CONFIG`` (Kubernetes TFJob, PAI) names several training tasks but
  each machine ran ``python train.py`` (or ``hbrun -np 1``) instead of
  ``python -m hbcore.run`` / ``hbrun --tf-config``;
- ``srun -n 4 python train.py`` with an MPI that does not speak Slurm's
  PMI: every task sees a world of one;
- Open MPI's ``mpirun`` (or MVAPICH's ``mpirun_rsh``) started the
  processes but hbcore loaded an MPICH-ABI library, which cannot read that
  launcher's wire-up;
- hydra's ``PMI_SIZE`` says N while the loaded MPI sees 1 (a second MPI
  library in the process).

``hbcore.init()`` asks :func:`lone_process_problem` when its world has one
rank and raises ``WorldMismatchError`` with the answer;
``HB_IGNORE_TF_CONFIG=1`` (the core's knob, parsed with the others)
switches the check off. Pure standard library.
"""

from typing import Mapping, Optional

from hbcore import tf_config

_HOW = ("set HB_IGNORE_TF_CONFIG=1 (or HOROVOD_IGNORE_TF_CONFIG=1) if this "
        "process is meant to run alone")


_SLURM_HOW = ("start one hbrun in the allocation instead (hbrun -np N python "
              "train.py: hydra starts the ranks through srun), or give srun "
              "a PMI this MPI library reads")


def _int(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def _tf_config_problem(environ: Mapping[str, str]) -> Optional[str]:
    text = environ.get("TF_CONFIG", "")
    try:
        config = tf_config.parse(text)
    except ValueError as exc:
        return ("TF_CONFIG is set but cannot be read (%s), so hbcore cannot "
                "tell whether this process belongs to a larger job; fix it, "
                "or %s" % (exc, _HOW))
    if config is None or not config.trains:
        return None  # ps and evaluator tasks run outside the training world
    tasks = config.training_tasks
    if len(tasks) < 2:
        return None
    return ("TF_CONFIG names %d training tasks (%s; this is %s), but this "
            "process is alone in its MPI world: started like this on every "
            "machine, each would train a model of its own. Start the same "
            "command on every machine under `python -m hbcore.run CMD` (or "
            "`hbrun --tf-config CMD`), which forms one job from TF_CONFIG; "
            "or %s" % (len(tasks), ", ".join(str(t) for t in tasks),
                       config.task, _HOW))


def lone_process_problem(environ: Mapping[str, str]) -> Optional[str]:
    """Why a process alone in its MPI world is probably part of a larger
    job, according to its environment.

    Args:
        environ: The process's environment.

    Returns:
        The explanation with how to launch instead, or None when nothing
        says the job has more than one process.
    """
    problem = _tf_config_problem(environ)
    if problem:
        return problem
    pmi_size = _int(environ, "PMI_SIZE")
    if pmi_size is not None:
        # Started by an MPICH-ABI launcher (hydra, srun --mpi=pmi2): its
        # count is the truth, and Slurm's or another MPI's variables
        # describe an allocation around it (hbrun -np 1 inside sbatch).
        if pmi_size > 1:
            return ("the MPI launcher started %d processes (PMI_SIZE=%d) but "
                    "the MPI library this process loaded sees a world of 1 "
                    "(is a second MPI library loaded? HB_MPI_LIBRARY selects "
                    "the one to use); or %s" % (pmi_size, pmi_size, _HOW))
        return None
    for name, who, how in (
            ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun",
             "hbcore uses an MPICH-ABI MPI: launch with hbrun -np N (or the "
             "hydra mpiexec of MPICH / Intel MPI)"),
            ("MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh",
             "launch with hbrun -np N (or MVAPICH's mpiexec, which is hydra)"),
            ("SLURM_STEP_NUM_TASKS", "srun", _SLURM_HOW),
            ("SLURM_NTASKS", "Slurm", _SLURM_HOW)):
        size = _int(environ, name)
        if size is None:
            continue
        if size > 1:
            return ("%s started this job with %d tasks (%s=%d) but this "
                    "process is alone in its MPI world, so each task would "
                    "train a model of its own: %s; or %s"
                    % (who, size, name, size, how, _HOW))
        return None
    return None
