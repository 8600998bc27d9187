// Autotune's pure parts: the Tuning text form, the sampler's step rule, and
// the controller carrying rank 0's proposal to every rank (autotune.h,
// items 2 and 4) and switching the response cache at an agreed point.
#include <functional>

#include "negotiation_harness.h"
#include "runtime/autotune.h"

namespace hbcore {
namespace {

using testing::Cycle;

Tuning Sample() {
  Tuning t;
  t.fusion_threshold_bytes = 4194304;
  t.cycle_time_ms = 0.25;
  t.cache_enabled = false;
  t.hierarchical_allreduce = true;
  t.ring_allreduce = true;
  t.pipeline_piece_bytes = 1 << 20;
  return t;
}

TEST(TuningRoundTripsThroughItsTextAndProposals) {
  const Tuning t = Sample();
  Tuning back;
  CHECK(back.Parse(t.Serialize()));
  CHECK(back == t);
  CHECK(back.cycle_time_ms == 0.25 && !back.cache_enabled);
  bool final = false;
  CHECK(DecodeProposal(EncodeProposal(t, true), &back, &final));
  CHECK(final && back == t);
  CHECK(DecodeProposal(EncodeProposal(t, false), &back, &final));
  CHECK(!final);
  CHECK(!DecodeProposal("", &back, &final));
  CHECK(!back.Parse("fusion_threshold=1"));  // fields missing
  CHECK(!back.Parse(t.Serialize() + ";bogus=1"));
  CHECK(t.ToString().find("fusion_threshold=4194304 cycle_time=0.25") == 0);
}

Response Named(const std::string& name) {
  Response r;
  r.name = name;
  return r;
}

TEST(SamplerClosesAtTheFirstNameSeenStepsTimes) {
  AutotuneSampler sampler(2);
  const Tuning t = Sample();
  sampler.Start(t);
  AutotuneSample s;
  // Two steps of a and b; the third a begins the step after the sample.
  for (const char* n : {"a", "b", "a", "b"}) {
    CHECK(!sampler.Record(Named(n), 100, &s));
  }
  CHECK(sampler.Record(Named("a"), 100, &s));
  CHECK(s.bytes == 400 && s.steps == 2 && s.tuning == t);
  CHECK(s.seconds >= 0 && s.score >= 0);
  // Paused until the next Start; then a fresh count.
  CHECK(!sampler.Record(Named("a"), 100, &s));
  sampler.Start(t);
  CHECK(!sampler.Record(Named("a"), 100, &s));
  CHECK(!sampler.Record(Named("a"), 100, &s));
  CHECK(sampler.Record(Named("a"), 100, &s) && s.bytes == 200);
}

TensorEntry Entry(int rank, const std::string& name) {
  return testing::Entry(rank, name, {4});
}

void RunRanks(int size, const std::function<void(int, Controller*)>& body) {
  testing::RunRanks(size, Config(), body);
}

TEST(ControllerCarriesRankZerosProposalToEveryRank) {
  const int size = 3;
  const std::string proposal = EncodeProposal(Sample(), false);
  std::vector<std::string> got(size), idle(size, "unset");
  RunRanks(size, [&](int rank, Controller* c) {
    PendingTable pending;
    CycleInput input;
    // Only the coordinator's rank proposes; another rank's text is ignored.
    input.tuning = rank == 0 ? proposal : rank == 1 ? "Nbogus" : "";
    got[rank] = Cycle(c, &pending, input).tuning;
    idle[rank] = Cycle(c, &pending).tuning;
  });
  for (int rank = 0; rank < size; ++rank) {
    CHECK(got[rank] == proposal);
    CHECK(idle[rank].empty());
  }
}

TEST(ControllerCacheSwitchesAtAnAgreedPoint) {
  const int size = 2;
  std::vector<bool> cached(size), uncached(size), again(size);
  RunRanks(size, [&](int rank, Controller* c) {
    auto step = [&] {
      PendingTable pending;
      pending["t"] = Entry(rank, "t");
      CycleOutput out = Cycle(c, &pending);
      CHECK(pending.empty() && out.responses.size() == 1);
      return out.from_cache.size() == 1 && out.from_cache[0];
    };
    step();
    cached[rank] = step();
    PendingTable none;
    CHECK(!c->SetCacheEnabled(false, &none));
    uncached[rank] = step() || step();
    c->SetCacheEnabled(true, &none);
    step();
    again[rank] = step();
  });
  for (int rank = 0; rank < size; ++rank) {
    CHECK(cached[rank]);
    CHECK(!uncached[rank]);
    CHECK(again[rank]);
  }
}

}  // namespace
}  // namespace hbcore
