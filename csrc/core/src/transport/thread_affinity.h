// HB_THREAD_AFFINITY (Horovod's HOROVOD_THREAD_AFFINITY): pins each rank's
// background thread to one CPU. The value lists one CPU id per local rank,
// separated by commas ("0,2" on a host running 2 ranks); local rank r's
// thread runs on the r-th. The framework's threads are left alone.
#ifndef HBCORE_TRANSPORT_THREAD_AFFINITY_H_
#define HBCORE_TRANSPORT_THREAD_AFFINITY_H_

#include <sys/types.h>

#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace hbcore {

// The CPU for this local rank's background thread, or -1 when `list` is
// empty. `allowed`: the CPUs this process may run on (ThreadCpus()). A list
// that does not parse, names fewer CPUs than `local_size`, or names a CPU
// not in `allowed` is a HB_ERR_CONFIG status naming the variable.
Status BackgroundThreadCpu(const std::string& list, int local_rank,
                           int local_size, const std::vector<int>& allowed,
                           int* cpu);

// Restricts `thread` to `cpu` (no-op for -1).
Status PinThread(std::thread& thread, int cpu);

// The sorted ids of the CPUs thread `tid` of this process may run on (its
// affinity mask; 0: the calling thread; empty if that cannot be read).
std::vector<int> ThreadCpus(pid_t tid = 0);

// How many CPUs `allowed` (from ThreadCpus) names; the machine's count
// when it is empty.
int CpuCount(const std::vector<int>& allowed);

}  // namespace hbcore

#endif  // HBCORE_TRANSPORT_THREAD_AFFINITY_H_
