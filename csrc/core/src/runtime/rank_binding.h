// HB_BIND_RANKS: on a host that runs one rank per CPU, each rank binds
// its threads to a CPU of its own at init, and gives them their CPU set
// back at shutdown.
//
// Why. A rank's calling thread and its background thread hand every
// collective to each other (enqueue, then `done`), and while one works the
// other sleeps. With one CPU per rank the kernel places the four threads
// of two ranks as it likes: where it puts each rank's background thread on
// the other rank's CPU, every hand-off becomes a wake-up of another CPU
// (an inter-processor interrupt, slow on a VM), and a rank spinning in an
// MPI wait keeps the other rank's background thread off that CPU until
// its time slice ends. Measured on 2 CPUs, 2 ranks, 4 B eager allreduce
// in TensorFlow: 44-46 us with each rank's threads together, 69-72 us
// and up to 433 us in jobs where the kernel crossed them; the same jobs'
// gradient step in a tf.function took 1.01x the floor instead of 0.85x.
// The crossing happens in some jobs and not others, and lasts the job.
// Binding gives each rank the share of the host it has anyway (one CPU),
// so nothing is lost by it; MPI launchers bind ranks to cores for the
// same reason (mpiexec -bind-to core, hbrun --binding-args).
//
// Rule: `auto` binds when the ranks on this host number exactly the CPUs
// in the process's CPU set, every rank of the job has the same CPU set
// (nobody, neither taskset nor the launcher, divided the CPUs already),
// and HB_THREAD_AFFINITY is unset (the user places the threads). `1`
// always binds: local rank r of L takes CPUs [r*n/L, (r+1)*n/L) of the n
// in its set, at least one (with more ranks than CPUs, ranks share).
// `0` never binds.
//
// Which threads: every thread of the process whose CPU set at init is the
// process's own (the framework's thread pools, data loaders); a thread the
// program pinned elsewhere keeps its set. Threads created later inherit
// the binding from the thread that creates them. At shutdown every thread
// on the bound set, except those the program had pinned, gets the
// process's set back.
#ifndef HBCORE_RUNTIME_RANK_BINDING_H_
#define HBCORE_RUNTIME_RANK_BINDING_H_

#include <sched.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/config.h"

namespace hbcore {

// A hash of a sorted CPU list: ranks compare their CPU sets with it.
uint64_t CpuListHash(const std::vector<int>& cpus);

// What `choice` decides for local rank `local_rank` of `local_size`, whose
// CPU set is `cpus`. `same_sets`: every rank of the job has this set;
// `thread_affinity_set`: HB_THREAD_AFFINITY is given. Returns the CPUs to
// bind to, or an empty list for "do not bind"; `why` says which.
std::vector<int> RankCpuSlice(Choice choice, const std::vector<int>& cpus,
                              int local_rank, int local_size, bool same_sets,
                              bool thread_affinity_set, std::string* why);

// The binding of this process's threads; undone when destroyed.
class RankBinding {
 public:
  // Binds every thread whose CPU set is `from` to `to`. `bound` counts the
  // threads moved.
  static std::unique_ptr<RankBinding> Bind(const std::vector<int>& from,
                                           const std::vector<int>& to,
                                           int* bound);
  ~RankBinding();
  RankBinding(const RankBinding&) = delete;
  RankBinding& operator=(const RankBinding&) = delete;

 private:
  RankBinding(const cpu_set_t& from, const cpu_set_t& to);
  cpu_set_t original_;
  cpu_set_t bound_;
  // Threads on a set of their own at init (pinned by the program): never
  // moved, also where their set is the bound one.
  std::set<pid_t> pinned_;
};

}  // namespace hbcore

#endif  // HBCORE_RUNTIME_RANK_BINDING_H_
