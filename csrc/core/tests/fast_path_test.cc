// The controller's fast path (controller.h, steps E-G) at 2-3 ranks over
// the fake communicator: which responses are carried, the reduced payload
// they carry, and the collectives a cycle costs.
#include <cstring>

#include "backends/combined_buffer.h"
#include "negotiation_harness.h"

namespace hbcore {
namespace {

using testing::Cycle;
using testing::Entry;
using testing::RunRanks;

// A float32 allreduce entry reading `data`.
TensorEntry Small(int rank, const std::string& name,
                  const std::vector<float>& data,
                  ReduceOp op = ReduceOp::kSum) {
  TensorEntry e = Entry(rank, name, {static_cast<int64_t>(data.size())});
  e.request.reduce_op = op;
  e.input = data.data();
  return e;
}

// The carried result of response `i`, or empty when it was not carried.
std::vector<float> Carried(const CycleOutput& out, size_t i, size_t count) {
  if (out.carried[i] < 0) return {};
  std::vector<float> v(count);
  std::memcpy(v.data(), out.payload.data() + out.carried[i],
              count * sizeof(float));
  return v;
}

// Rank r's input: {r + 1, 10 (r + 1)}; the Sum over `size` ranks.
std::vector<float> Input(int rank) { return {rank + 1.0f, 10.0f * (rank + 1)}; }
std::vector<float> Sum(int size) {
  const float s = size * (size + 1) / 2.0f;
  return {s, 10 * s};
}

TEST(FastPathAllRanksCachedIsOneCollective) {
  const int size = 3;
  RunRanks(size, Config(), [&](int rank, Controller* c,
                               testing::FakeComm* comm) {
    const std::vector<float> in = Input(rank);
    PendingTable pending;
    pending["s"] = Small(rank, "s", in);
    CycleOutput out = Cycle(c, &pending);  // first time: slow path
    CHECK_EQ(out.responses.size(), 1u);
    CHECK_EQ(out.carried[0], -1);
    const int gathers = comm->gather_calls;
    const int combined = comm->combined_calls;
    pending["s"] = Small(rank, "s", in);
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK(out.from_cache[0]);
    CHECK(Carried(out, 0, 2) == Sum(size));
    // One round trip: the combined collective and nothing else.
    CHECK_EQ(comm->combined_calls, combined + 1);
    CHECK_EQ(comm->gather_calls, gathers);
  });
}

TEST(FastPathWaitsForRankNotReadyThenCarries) {
  RunRanks(2, Config(), [&](int rank, Controller* c) {
    const std::vector<float> in = Input(rank);
    PendingTable pending;
    pending["s"] = Small(rank, "s", in);
    Cycle(c, &pending);
    // Rank 1 is late: rank 0's contribution must not be used alone.
    if (rank == 0) pending["s"] = Small(rank, "s", in);
    CycleOutput out = Cycle(c, &pending);
    CHECK(out.responses.empty());
    if (rank == 1) pending["s"] = Small(rank, "s", in);
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK(Carried(out, 0, 2) == Sum(2));
  });
}

TEST(FastPathEvictionBetweenCyclesRenegotiates) {
  // Two slots: "a" is waiting on rank 0 when new tensors evict it; rank 0
  // announces it again, and it runs through the slow path, then is carried
  // again from its new slot.
  Config config;
  config.cache_capacity = 2;
  RunRanks(2, config, [&](int rank, Controller* c) {
    const std::vector<float> in = Input(rank);
    PendingTable pending;
    pending["a"] = Small(rank, "a", in);
    pending["x"] = Small(rank, "x", in);
    Cycle(c, &pending);
    if (rank == 0) pending["a"] = Small(rank, "a", in);
    pending["b"] = Small(rank, "b", in);
    pending["c"] = Small(rank, "c", in);
    CycleOutput out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 2u);  // b, c: slow path, they evict a, x
    CHECK(pending.count("a") == (rank == 0 ? 1u : 0u));
    if (rank == 0) CHECK(!pending["a"].announced);
    if (rank == 1) pending["a"] = Small(rank, "a", in);
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK_EQ(out.responses[0].name, std::string("a"));
    CHECK(!out.from_cache[0]);
    CHECK_EQ(out.carried[0], -1);
    pending["a"] = Small(rank, "a", in);
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK(Carried(out, 0, 2) == Sum(2));
  });
}

TEST(FastPathMismatchIsErrorOnEveryRank) {
  RunRanks(3, Config(), [&](int rank, Controller* c) {
    const std::vector<float> in = Input(rank);
    const std::vector<float> longer = {1, 2, 3, 4};
    PendingTable pending;
    pending["m"] = Small(rank, "m", in);
    Cycle(c, &pending);
    // Rank 2 now sends 4 elements under the cached name: nothing is
    // carried, the slot goes, and the coordinator names the tensor.
    pending["m"] = Small(rank, "m", rank == 2 ? longer : in);
    CycleOutput out = Cycle(c, &pending);
    CHECK(out.responses.empty());
    if (out.responses.empty()) out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK_EQ(out.carried[0], -1);
    CHECK_EQ(out.responses[0].error_code, HB_ERR_MISMATCH);
    CHECK_CONTAINS(out.responses[0].error, "'m'");
    CHECK_CONTAINS(out.responses[0].error, "rank 2 sent [4]");
  });
}

TEST(FastPathCarriesNothingAfterAJoin) {
  RunRanks(3, Config(), [&](int rank, Controller* c) {
    const std::vector<float> in = Input(rank);
    PendingTable pending;
    pending["s"] = Small(rank, "s", in);
    Cycle(c, &pending);
    if (rank == 2) {
      pending["hbcore.join"] = Entry(rank, "hbcore.join", {}, OpType::kJoin);
      c->Join();
    } else {
      pending["s"] = Small(rank, "s", in);
    }
    // The join invalidates every slot: "s" is renegotiated and cached
    // again while rank 2 stays joined.
    CycleOutput out = Cycle(c, &pending);
    if (out.responses.empty()) out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK_EQ(out.responses[0].name, std::string("s"));
    CHECK_EQ(out.carried[0], -1);
    // Now a cache hit on ranks 0 and 1, every bit set by rank 2: ready,
    // but rank 2 added no input, so the executor runs it (with zeros).
    if (rank != 2) pending["s"] = Small(rank, "s", in);
    out = Cycle(c, &pending);
    CHECK_EQ(out.responses.size(), 1u);
    CHECK(out.from_cache[0]);
    CHECK_EQ(out.carried[0], -1);
  });
}

TEST(FastPathLayoutTakesOnlySmallSumOrAverage) {
  // Threshold 16 bytes: "avg" (8 B) and "sum" (8 B) fit; "big" (24 B) does
  // not, nor does "min" (op) or "pre" (prescale); "off" with the path off.
  Config config;
  config.fast_path_bytes = 16;
  RunRanks(2, config, [&](int rank, Controller* c) {
    const std::vector<float> in = Input(rank);
    const std::vector<float> big(6, rank + 1.0f);
    for (int round = 0; round < 2; ++round) {
      PendingTable pending;
      pending["avg"] = Small(rank, "avg", in, ReduceOp::kAverage);
      pending["big"] = Small(rank, "big", big);
      pending["min"] = Small(rank, "min", in, ReduceOp::kMin);
      pending["pre"] = Small(rank, "pre", in);
      pending["pre"].request.prescale = 2.0;
      pending["sum"] = Small(rank, "sum", in);
      CycleOutput out = Cycle(c, &pending);
      CHECK_EQ(out.responses.size(), 5u);
      for (size_t i = 0; i < out.responses.size(); ++i) {
        const std::string& name = out.responses[i].name;
        const bool carried = round == 1 && (name == "avg" || name == "sum");
        CHECK_EQ(out.carried[i] >= 0, carried);
        // Average travels as a Sum; the executor divides.
        if (carried) CHECK(Carried(out, i, 2) == Sum(2));
      }
    }
  });
  config.fast_path_bytes = 0;
  RunRanks(2, config, [&](int rank, Controller* c, testing::FakeComm* comm) {
    const std::vector<float> in = Input(rank);
    for (int round = 0; round < 2; ++round) {
      PendingTable pending;
      pending["off"] = Small(rank, "off", in);
      CycleOutput out = Cycle(c, &pending);
      CHECK_EQ(out.carried[0], -1);
    }
    CHECK_EQ(comm->combined_calls, 0);
  });
}

// A layout full of responses cached earlier does not keep a recurring one
// out: the cycles that find it ready outside the layout (misses) recompute
// the layout by recent use, within kFastRelayoutCycles, the same on every
// rank, and from then on it is carried.
TEST(FastPathLayoutFollowsRecentUse) {
  Config config;
  config.fast_path_bytes = 16;  // two 8-byte tensors
  RunRanks(3, config, [&](int rank, Controller* c) {
    const std::vector<float> in = Input(rank);
    const std::vector<std::string> names = {"a", "b", "c"};
    std::string left_out;
    for (int round = 0; round < 2; ++round) {
      PendingTable pending;
      for (const std::string& n : names) pending[n] = Small(rank, n, in);
      CycleOutput out = Cycle(c, &pending);
      CHECK_EQ(out.responses.size(), 3u);
      int carried = 0;
      for (size_t i = 0; i < out.responses.size(); ++i) {
        if (out.carried[i] >= 0) {
          ++carried;
        } else if (round == 1) {
          left_out = out.responses[i].name;
        }
      }
      CHECK_EQ(carried, round == 0 ? 0 : 2);
    }
    CHECK(!left_out.empty());
    int first_carried = -1;
    const int cycles = static_cast<int>(Controller::kFastRelayoutCycles) + 3;
    for (int i = 0; i < cycles; ++i) {
      PendingTable pending;
      pending[left_out] = Small(rank, left_out, in);
      CycleOutput out = Cycle(c, &pending);
      CHECK_EQ(out.responses.size(), 1u);
      CHECK(out.from_cache[0]);
      if (out.carried[0] >= 0) {
        CHECK(Carried(out, 0, 2) == Sum(3));
        if (first_carried < 0) first_carried = i;
      } else {
        CHECK_EQ(first_carried, -1);  // once in the layout, it stays
      }
    }
    CHECK(first_carried >= 0);
    CHECK(first_carried <= static_cast<int>(Controller::kFastRelayoutCycles));
  });
}

// Buffers of two layouts combine into a result marked broken, and the mark
// survives a later combination, so every rank of the MPI operation sees it.
TEST(CombinedBuffersOfDifferentLayoutsAreMarkedBroken) {
  const std::vector<uint64_t> words = {~uint64_t{0}};
  const std::vector<uint8_t> payload(8, 0);
  std::vector<uint8_t> a = PackCombined(words, payload, {{DataType::kFloat32, 0, 2}});
  std::vector<uint8_t> b = PackCombined(words, payload, {{DataType::kInt32, 0, 2}});
  std::vector<uint8_t> same = a;
  CHECK(CombineBuffers(a.data(), same.data()));
  CHECK(!CombinedBroken(same.data()));
  CHECK(!CombineBuffers(a.data(), b.data()));
  CHECK(CombinedBroken(b.data()));
  std::vector<uint8_t> later = a;
  CHECK(!CombineBuffers(b.data(), later.data()));
  CHECK(CombinedBroken(later.data()));
}

}  // namespace
}  // namespace hbcore
