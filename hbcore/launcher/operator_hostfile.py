"""The hostfile an MPI job operator hands the launcher (Kubeflow's
mpi-operator, and any launcher environment that sets the same variables).

Kubeflow's MPIJob (kubeflow.org/v2beta1) mounts its ConfigMap at
/etc/mpi (``hostfile`` mode 0444, ``discover_hosts.sh`` mode 0555) and
points the launcher pod's MPI at the hostfile through one variable per
``mpiImplementation``:

    MPICH      HYDRA_HOST_FILE=/etc/mpi/hostfile   lines "host:slots"
    Intel      I_MPI_HYDRA_HOST_FILE=...           lines "host:slots"
    OpenMPI    OMPI_MCA_orte_default_hostfile=...  lines "host slots=N"

(hosts are ``<pod>.<job>.<namespace>.svc``, every one with
``slotsPerWorker`` slots).  hbrun reads that file when the command line
gives no -H/--hostfile, so ``hbrun python train.py`` in the launcher pod
runs on the job's workers.  Its ``discover_hosts.sh`` prints the running
workers one name per line, without slots; hbrun runs it as any
``--host-discovery-script``, and such hosts get the hostfile's slot count
when --slots-per-host is not given.
"""

from typing import List, Mapping, NamedTuple, Optional

from hbcore.launcher.hosts import Host, parse_hostfile

# The variables an operator sets, in the order hbrun looks at them (hbrun
# launches through hydra: MPICH's first).
HOSTFILE_VARS = ("HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE",
                 "OMPI_MCA_orte_default_hostfile")


class OperatorHostfile(NamedTuple):
    """The hostfile named by the environment, read."""
    variable: str
    path: str
    hosts: List[Host]


def operator_hostfile(environ: Mapping[str, str]
                      ) -> Optional[OperatorHostfile]:
    """Reads the hostfile the first set variable of HOSTFILE_VARS names.

    Args:
        environ: The launcher's environment.

    Returns:
        The variable, the path and its hosts; None when no variable is set.

    Raises:
        ValueError: The file cannot be read or parsed; the message names
            the variable and the file.
    """
    for variable in HOSTFILE_VARS:
        path = environ.get(variable, "").strip()
        if path:
            try:
                hosts = parse_hostfile(path)
            except (ValueError, OSError) as exc:
                raise ValueError("%s=%s: %s" % (variable, path, exc)) from None
            return OperatorHostfile(variable, path, hosts)
    return None


def uniform_slots(hosts: List[Host]) -> Optional[int]:
    """The slot count every host shares (the operator's slotsPerWorker),
    or None when the hosts differ.

    Args:
        hosts: A non-empty host list.

    Returns:
        The common slot count, or None.
    """
    counts = {host.slots for host in hosts}
    return counts.pop() if len(counts) == 1 else None
