#include "runtime/rank_binding.h"

#include <dirent.h>
#include <sys/types.h>

#include <cstdlib>
#include <set>

namespace hbcore {
namespace {

cpu_set_t ToSet(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  return set;
}

struct DirCloser {
  void operator()(DIR* dir) const { closedir(dir); }
};

// Moves every thread of this process whose CPU set is `from` to `to`,
// except those in `keep`, and adds the threads it left (on another set)
// to `left` when given; returns how many moved. Two passes: a thread that
// an unmoved thread created during the first pass has `from` and is found
// by the second. A thread that ends meanwhile is skipped.
int MoveThreads(const cpu_set_t& from, const cpu_set_t& to,
                const std::set<pid_t>& keep, std::set<pid_t>* left) {
  std::set<pid_t> seen(keep);
  int moved = 0;
  for (int pass = 0; pass < 2; ++pass) {
    std::unique_ptr<DIR, DirCloser> dir(opendir("/proc/self/task"));
    if (!dir) return moved;
    while (const dirent* entry = readdir(dir.get())) {
      const pid_t tid = static_cast<pid_t>(std::atoi(entry->d_name));
      if (tid <= 0) continue;  // "." and ".."
      if (!seen.insert(tid).second) continue;
      cpu_set_t current;
      if (sched_getaffinity(tid, sizeof(current), &current) != 0) continue;
      if (!CPU_EQUAL(&current, &from)) {
        if (left != nullptr) left->insert(tid);
        continue;
      }
      if (sched_setaffinity(tid, sizeof(to), &to) == 0) ++moved;
    }
  }
  return moved;
}

std::string Count(int n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

}  // namespace

uint64_t CpuListHash(const std::vector<int>& cpus) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (int cpu : cpus) {
    h ^= static_cast<uint64_t>(cpu) + 1;
    h *= 1099511628211ULL;
  }
  return h;
}

std::vector<int> RankCpuSlice(Choice choice, const std::vector<int>& cpus,
                              int local_rank, int local_size, bool same_sets,
                              bool thread_affinity_set, std::string* why) {
  const int n = static_cast<int>(cpus.size());
  const std::string layout =
      Count(n, "CPU") + " for " + Count(local_size, "local rank");
  if (choice == Choice::kOff) {
    *why = "off";
    return {};
  }
  if (n == 0 || local_size <= 0) {
    *why = "the CPU set could not be read";
    return {};
  }
  if (choice == Choice::kAuto) {
    if (thread_affinity_set) {
      *why = "HB_THREAD_AFFINITY places the background thread";
      return {};
    }
    if (n != local_size) {
      *why = layout + ", not one each";
      return {};
    }
    if (!same_sets) {
      *why = "the ranks' CPU sets differ, as the launcher or taskset "
             "set them";
      return {};
    }
  }
  // Local rank r's share of n CPUs: [r*n/L, (r+1)*n/L), at least one.
  const int64_t first = static_cast<int64_t>(local_rank) * n / local_size;
  int64_t end = static_cast<int64_t>(local_rank + 1) * n / local_size;
  if (end <= first) end = first + 1;
  *why = layout;
  return std::vector<int>(cpus.begin() + first, cpus.begin() + end);
}

RankBinding::RankBinding(const cpu_set_t& from, const cpu_set_t& to)
    : original_(from), bound_(to) {}

std::unique_ptr<RankBinding> RankBinding::Bind(const std::vector<int>& from,
                                               const std::vector<int>& to,
                                               int* bound) {
  std::unique_ptr<RankBinding> binding(
      new RankBinding(ToSet(from), ToSet(to)));
  *bound = MoveThreads(binding->original_, binding->bound_, {},
                       &binding->pinned_);
  return binding;
}

RankBinding::~RankBinding() {
  MoveThreads(bound_, original_, pinned_, nullptr);
}

}  // namespace hbcore
