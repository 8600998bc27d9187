"""Test helper: one rank fails, the others block forever.

Usage: fail_rank.py PID_DIR FAILING_RANK MODE
  MODE "exit3":     the failing rank exits with code 3; others sleep
  MODE "sigkill":   the failing rank SIGKILLs itself; others sleep
  MODE "mpi-exit1": all ranks initialise MPI (mpi4py); the failing rank
                    then exits with code 1, the others wait in a barrier
Every rank first writes its pid to PID_DIR/pid.<rank>, so the test can
check that no rank process is left afterwards.
"""
import os
import signal
import sys
import time

pid_dir, failing, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rank = int(os.environ["PMI_RANK"])
size = int(os.environ["PMI_SIZE"])
# Written under a temporary name, then renamed: whoever lists pid.* (the
# test, the failing rank) never reads a half-written file.
partial = os.path.join(pid_dir, "partial.%d" % rank)
with open(partial, "w") as f:
    f.write(str(os.getpid()))
os.replace(partial, os.path.join(pid_dir, "pid.%d" % rank))
print("rank %d started" % rank, flush=True)

if mode == "mpi-exit1":
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()  # every rank is up
    if rank == failing:
        # os._exit: sys.exit would run MPI_Finalize (mpi4py's atexit), which
        # waits for the ranks stuck in the barrier below.
        os._exit(1)
    MPI.COMM_WORLD.Barrier()  # never completes
    sys.exit(0)

if rank == failing:
    # Fail only once every rank is up, so all of them must be stopped.
    deadline = time.monotonic() + 30
    while (len([n for n in os.listdir(pid_dir) if n.startswith("pid.")]) < size
           and time.monotonic() < deadline):
        time.sleep(0.05)
    if mode == "exit3":
        sys.exit(3)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(1000)
