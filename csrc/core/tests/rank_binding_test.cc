// HB_BIND_RANKS: the rule that picks a rank's CPUs, and the binding of a
// live thread and its restoration.
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "check.h"
#include "runtime/rank_binding.h"
#include "transport/thread_affinity.h"

namespace hbcore {

TEST(AutoBindsOnlyOneRankPerCpuOnSharedSets) {
  const std::vector<int> cpus = {2, 5, 7};
  std::string why;
  for (int r = 0; r < 3; ++r) {
    CHECK(RankCpuSlice(Choice::kAuto, cpus, r, 3, true, false, &why) ==
          std::vector<int>{cpus[r]});
    CHECK(why == "3 CPUs for 3 local ranks");
  }
  CHECK(RankCpuSlice(Choice::kAuto, cpus, 0, 2, true, false, &why).empty());
  CHECK(why == "3 CPUs for 2 local ranks, not one each");
  CHECK(RankCpuSlice(Choice::kAuto, {4}, 0, 2, true, false, &why).empty());
  CHECK(why == "1 CPU for 2 local ranks, not one each");
  CHECK(RankCpuSlice(Choice::kAuto, cpus, 1, 3, false, false, &why).empty());
  CHECK(why.find("CPU sets differ") != std::string::npos);
  CHECK(RankCpuSlice(Choice::kAuto, cpus, 1, 3, true, true, &why).empty());
  CHECK(why.find("HB_THREAD_AFFINITY") != std::string::npos);
  CHECK(RankCpuSlice(Choice::kOff, cpus, 1, 3, true, false, &why).empty());
  CHECK(why == "off");
  CHECK(RankCpuSlice(Choice::kAuto, {}, 0, 1, true, false, &why).empty());
}

TEST(ForcedBindingSplitsTheCpusEvenly) {
  const std::vector<int> five = {0, 1, 2, 3, 4};
  std::string why;
  // 5 CPUs, 2 ranks: [0, 2) and [2, 5).
  CHECK(RankCpuSlice(Choice::kOn, five, 0, 2, false, true, &why) ==
        (std::vector<int>{0, 1}));
  CHECK(RankCpuSlice(Choice::kOn, five, 1, 2, false, true, &why) ==
        (std::vector<int>{2, 3, 4}));
  // 2 CPUs, 3 ranks: each rank at least one CPU, shared.
  const std::vector<int> two = {6, 9};
  CHECK(RankCpuSlice(Choice::kOn, two, 0, 3, true, false, &why) ==
        std::vector<int>{6});
  CHECK(RankCpuSlice(Choice::kOn, two, 1, 3, true, false, &why) ==
        std::vector<int>{6});
  CHECK(RankCpuSlice(Choice::kOn, two, 2, 3, true, false, &why) ==
        std::vector<int>{9});
  // Every CPU goes to some rank when there are at least as many CPUs.
  for (int ranks = 1; ranks <= 5; ++ranks) {
    std::vector<int> all;
    for (int r = 0; r < ranks; ++r) {
      for (int cpu : RankCpuSlice(Choice::kOn, five, r, ranks, true, false,
                                  &why)) {
        all.push_back(cpu);
      }
    }
    CHECK(all == five);
  }
}

TEST(CpuListHashTellsSetsApart) {
  CHECK(CpuListHash({0, 1}) == CpuListHash({0, 1}));
  CHECK(CpuListHash({0, 1}) != CpuListHash({1}));
  CHECK(CpuListHash({0, 1}) != CpuListHash({0, 2}));
  CHECK(CpuListHash({}) != CpuListHash({0}));
}

TEST(BindingMovesThreadsOnTheProcessSetAndRestoresThem) {
  const std::vector<int> all = ThreadCpus();
  CHECK(!all.empty());
  if (all.empty()) return;
  std::atomic<pid_t> tid{0};
  std::atomic<bool> release{false};
  std::thread waiter([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    while (!release) std::this_thread::yield();
  });
  while (tid == 0) std::this_thread::yield();
  const std::vector<int> last = {all.back()};
  {
    int moved = 0;
    std::unique_ptr<RankBinding> binding = RankBinding::Bind(all, last, &moved);
    CHECK(moved >= 2);  // this thread and the waiter
    CHECK(ThreadCpus() == last);
    CHECK(ThreadCpus(tid) == last);
    // A thread started while bound inherits the binding.
    std::vector<int> inherited;
    std::thread([&] { inherited = ThreadCpus(); }).join();
    CHECK(inherited == last);
  }
  CHECK(ThreadCpus() == all);
  CHECK(ThreadCpus(tid) == all);
  release = true;
  waiter.join();
}

}  // namespace hbcore
