// Negotiation at several ranks in one process: one thread per rank, each
// with its own Controller over a FakeComm, all running cycles in lockstep.
#include <algorithm>
#include <functional>
#include <random>
#include <thread>

#include "check.h"
#include "fake_comm.h"
#include "negotiation/controller.h"

namespace hbcore {
namespace {

using testing::Exchange;
using testing::FakeComm;

TensorEntry Entry(int rank, const std::string& name, Shape shape,
                  OpType op = OpType::kAllreduce) {
  TensorEntry e;
  e.request.rank = rank;
  e.request.name = name;
  e.request.op = op;
  e.request.shape = std::move(shape);
  e.enqueued = Clock::now();
  return e;
}

// Runs `body(rank, controller)` on `size` threads.
void RunRanks(int size, Config config,
              const std::function<void(int, Controller*)>& body) {
  auto exchange = std::make_shared<Exchange>(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      FakeComm comm(exchange, rank, size);
      Controller controller(&comm, config);
      body(rank, &controller);
    });
  }
  for (std::thread& t : threads) t.join();
}

// One cycle; executed responses leave the table, as in the runtime.
CycleOutput Cycle(Controller* c, PendingTable* pending,
                  CycleInput input = CycleInput()) {
  CycleOutput out;
  Status s = c->RunCycle(pending, input, &out);
  CHECK(s.ok());
  for (size_t i = 0; i < out.responses.size(); ++i) {
    auto it = pending->find(out.responses[i].name);
    c->Commit(out, i, it == pending->end() ? nullptr : &it->second);
    if (it != pending->end()) pending->erase(it);
  }
  c->RevalidateSlots(pending);
  return out;
}

std::vector<std::string> Names(const CycleOutput& out) {
  std::vector<std::string> names;
  for (const Response& r : out.responses) names.push_back(r.name);
  return names;
}

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
