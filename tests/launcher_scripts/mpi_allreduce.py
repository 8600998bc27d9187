"""Checks that MPI works through the rank wrapper (hydra's PMI fd must reach
the rank): sums the ranks with mpi4py and prints the result."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
print("rank %d sum %d" % (comm.Get_rank(), comm.allreduce(comm.Get_rank())))
