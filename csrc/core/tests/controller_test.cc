// Negotiation at several ranks in one process: one thread per rank, each
// with its own Controller over a FakeComm, all running cycles in lockstep.
#include <algorithm>
#include <random>

#include "negotiation_harness.h"

namespace hbcore {
namespace {

using testing::Cycle;
using testing::Entry;
using testing::Names;
using testing::RunRanks;

TEST(ControllerAgreesOnOrderAndUsesCacheSecondTime) {
  const int size = 3;
  std::vector<std::vector<std::string>> first(size), second(size);
  std::vector<bool> all_cached(size, false);
  RunRanks(size, Config(), [&](int rank, Controller* c) {
    for (int round = 0; round < 2; ++round) {
      PendingTable pending;
      std::vector<std::string> names;
      for (int i = 0; i < 20; ++i) names.push_back("t" + std::to_string(i));
      std::shuffle(names.begin(), names.end(), std::mt19937(rank * 7 + round));
      for (const std::string& n : names) pending[n] = Entry(rank, n, {4});
      CycleOutput out = Cycle(c, &pending);
      CHECK(pending.empty());
      (round == 0 ? first : second)[rank] = Names(out);
      if (round == 1) {
        all_cached[rank] = std::all_of(out.from_cache.begin(),
                                       out.from_cache.end(),
                                       [](bool b) { return b; });
      }
    }
  });
  for (int rank = 1; rank < size; ++rank) {
    CHECK(first[rank] == first[0]);
    CHECK(second[rank] == second[0]);
  }
  CHECK_EQ(first[0].size(), 20u);
  CHECK_EQ(second[0].size(), 20u);
  CHECK(all_cached[0] && all_cached[1] && all_cached[2]);
}

TEST(ControllerWaitsForLateRank) {
  RunRanks(2, Config(), [&](int rank, Controller* c) {
    PendingTable pending;
    if (rank == 0) pending["x"] = Entry(rank, "x", {2});
    CycleOutput out = Cycle(c, &pending);
    CHECK(out.responses.empty());
    if (rank == 1) pending["x"] = Entry(rank, "x", {2});
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
  });
}

TEST(ControllerMismatchIsErrorOnEveryRank) {
  RunRanks(3, Config(), [&](int rank, Controller* c) {
    PendingTable pending;
    pending["w"] = Entry(rank, "w", {rank == 1 ? 5 : 4});
    CycleOutput out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK_EQ(out.responses[0].error_code, HB_ERR_MISMATCH);
    CHECK_CONTAINS(out.responses[0].error, "rank 1 sent [5]");
  });
}

TEST(ControllerChangedSignatureInvalidatesCachedSlot) {
  RunRanks(3, Config(), [&](int rank, Controller* c) {
    PendingTable pending;
    pending["v"] = Entry(rank, "v", {4});
    CHECK_EQ(Cycle(c, &pending).responses.size(), 1u);
    // Rank 2 now sends another shape: the slot goes on every rank, the
    // others re-announce through the coordinator, which reports the error.
    pending["v"] = Entry(rank, "v", {rank == 2 ? 8 : 4});
    CycleOutput out = Cycle(c, &pending);
    CHECK(out.responses.empty());
    CHECK_EQ(out.reannounce, rank != 2);
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK_CONTAINS(out.responses[0].error, "rank 2 sent [8]");
    // And the same name with agreeing shapes works again afterwards.
    pending["v"] = Entry(rank, "v", {8});
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK(!out.responses[0].is_error());
  });
}

TEST(ControllerJoinedRankDoesNotBlockCachedTensors) {
  RunRanks(3, Config(), [&](int rank, Controller* c) {
    PendingTable pending;
    pending["g"] = Entry(rank, "g", {rank + 1, 2}, OpType::kAllgather);
    CHECK_EQ(Cycle(c, &pending).responses.size(), 1u);
    if (rank == 2) {
      pending["hbcore.join"] = Entry(rank, "hbcore.join", {}, OpType::kJoin);
      c->Join();
    } else {
      pending["g"] = Entry(rank, "g", {rank + 1, 2}, OpType::kAllgather);
    }
    CycleOutput out = Cycle(c, &pending);
    if (out.responses.empty()) {  // invalidated by the join: renegotiate
      out = Cycle(c, &pending);
    }
    CHECK_EQ(out.responses.size(), 1u);
    CHECK(out.responses[0].rank_dims == std::vector<int64_t>({1, 2, 0}));
  });
}

TEST(ControllerShutdownReachesEveryRank) {
  RunRanks(3, Config(), [&](int rank, Controller* c) {
    PendingTable pending;
    CycleInput in;
    if (rank == 1) {
      in.shutdown = true;
      in.shutdown_reason = "rank 1 is done";
    }
    CycleOutput out = Cycle(c, &pending, in);
    CHECK(out.shutdown);
    CHECK_EQ(out.shutdown_reason, std::string("rank 1 is done"));
  });
}

}  // namespace
}  // namespace hbcore
