// How the control plane waits for its collectives (mpi_wait.h's
// WaitForRequest follows it), chosen per host at init.
#ifndef HBCORE_COMMON_WAIT_POLICY_H_
#define HBCORE_COMMON_WAIT_POLICY_H_

namespace hbcore {

// How long a wait tests before it sleeps, whether it yields the CPU
// between tests, and its longest sleep.
//
// While a cycle's peers are running, they answer within microseconds, so a
// wait first calls MPI_Test in a loop, for 30 us; then the peer is late,
// and sleeping costs nothing measurable. Not so where the host's CPUs are
// fewer than its ranks' threads (Topology::spare_cpus false: not one CPU
// for every local rank's background and calling thread): a peer that has
// yet to take its step of the collective may be waiting for this very
// CPU, a sleeping rank makes it wait for the scheduler and then waits in
// turn for its own wake-up, and each step of the collective pays that
// again. There the loop yields between tests, which hands the CPU over at
// once, and lasts 1 ms.
// Measured on 2 CPUs, a 4 B allreduce through the numpy API, alternating
// builds (2026-11-27): 3 ranks 339-576 us before, 138-157 us after (MPI
// alone 15-36 us); 4 ranks 574-720 against 113-203 us; 2 emulated hosts x
// 2 ranks 565-635 against 140-203 us; 2 + 1 ranks 469-539 against 102-223
// us. With a 30 us loop that yields, 3 ranks took 226-410 us. At 2 ranks
// on one host of 2 CPUs, where the CPUs are also short, the 1 ms loop read
// as the 30 us one (medians of 8 alternating jobs, each loop forced: 38
// against 37 us; on 2 emulated hosts x 1 rank, which keep the 30 us loop,
// 29 against 26 us, in jobs that swing by 3x).
struct WaitPolicy {
  double spin_us = 30.0;
  bool yield = false;
  double max_sleep_us = 50.0;
};

// The policy of control-plane waits on a host with or without spare CPUs;
// sleeps are capped at `max_sleep_us`.
WaitPolicy ControlWaitPolicy(bool spare_cpus, double max_sleep_us);

}  // namespace hbcore

#endif  // HBCORE_COMMON_WAIT_POLICY_H_
