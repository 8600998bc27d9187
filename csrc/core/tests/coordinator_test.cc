#include "check.h"
#include "negotiation/coordinator.h"

namespace hbcore {
namespace {

Request Allreduce(int rank, const std::string& name, Shape shape) {
  Request r;
  r.rank = rank;
  r.name = name;
  r.op = OpType::kAllreduce;
  r.shape = shape;
  return r;
}

RequestList List(std::vector<Request> requests) {
  RequestList l;
  l.requests = std::move(requests);
  return l;
}

TEST(CoordinatorCompletesWhenEveryRankAsked) {
  Coordinator c(3);
  c.Add(List({Allreduce(0, "a", {2}), Allreduce(0, "b", {3})}), 0);
  c.Add(List({Allreduce(1, "b", {3}), Allreduce(1, "a", {2})}), 1);
  CHECK(c.TakeResponses().empty());
  c.Add(List({Allreduce(2, "b", {3})}), 2);
  std::vector<Response> r = c.TakeResponses();
  CHECK_EQ(r.size(), 1u);
  CHECK_EQ(r[0].name, std::string("b"));
  CHECK(!r[0].is_error());
  c.Add(List({Allreduce(2, "a", {2})}), 2);
  CHECK_EQ(c.TakeResponses()[0].name, std::string("a"));
}

TEST(CoordinatorNamesMismatchedShapeAndRanks) {
  Coordinator c(3);
  c.Add(List({Allreduce(0, "w", {2, 3})}), 0);
  c.Add(List({Allreduce(1, "w", {2, 4})}), 1);
  c.Add(List({Allreduce(2, "w", {2, 3})}), 2);
  std::vector<Response> r = c.TakeResponses();
  CHECK_EQ(r.size(), 1u);
  CHECK_EQ(r[0].error_code, HB_ERR_MISMATCH);
  CHECK_CONTAINS(r[0].error, "'w'");
  CHECK_CONTAINS(r[0].error, "shape");
  CHECK_CONTAINS(r[0].error, "ranks 0, 2 sent [2, 3]");
  CHECK_CONTAINS(r[0].error, "rank 1 sent [2, 4]");
}

TEST(CoordinatorChecksOpDtypeRootReduceScale) {
  struct Case {
    const char* what;
    void (*mutate)(Request*);
  };
  const Case cases[] = {
      {"operation", [](Request* r) { r->op = OpType::kBroadcast; }},
      {"data type", [](Request* r) { r->dtype = DataType::kFloat64; }},
      {"reduce op", [](Request* r) { r->reduce_op = ReduceOp::kMax; }},
      {"scale factors", [](Request* r) { r->prescale = 2.0; }},
  };
  for (const Case& k : cases) {
    Coordinator c(2);
    Request other = Allreduce(1, "t", {4});
    k.mutate(&other);
    c.Add(List({Allreduce(0, "t", {4})}), 0);
    c.Add(List({other}), 1);
    std::vector<Response> r = c.TakeResponses();
    CHECK_EQ(r.size(), 1u);
    CHECK_CONTAINS(r[0].error, k.what);
  }
  Coordinator c(2);
  Request a = Allreduce(0, "bc", {4}), b = Allreduce(1, "bc", {4});
  a.op = b.op = OpType::kBroadcast;
  b.root_rank = 1;
  c.Add(List({a}), 0);
  c.Add(List({b}), 1);
  CHECK_CONTAINS(c.TakeResponses()[0].error, "root rank");
}

TEST(CoordinatorAllgatherCollectsFirstDims) {
  Coordinator c(3);
  for (int rank = 0; rank < 3; ++rank) {
    Request r = Allreduce(rank, "g", {rank + 1, 5});
    r.op = OpType::kAllgather;
    c.Add(List({r}), rank);
  }
  Response r = c.TakeResponses()[0];
  CHECK(!r.is_error());
  CHECK(r.rank_dims == std::vector<int64_t>({1, 2, 3}));
}

TEST(CoordinatorJoinCompletesOthersAndReportsLast) {
  Coordinator c(3);
  Request join;
  join.op = OpType::kJoin;
  join.name = "hbcore.join";
  join.rank = 2;
  c.Add(List({join}), 2);
  c.Add(List({Allreduce(0, "x", {3})}), 0);
  CHECK(c.TakeResponses().empty());
  c.Add(List({Allreduce(1, "x", {3})}), 1);
  std::vector<Response> r = c.TakeResponses();
  CHECK_EQ(r.size(), 1u);
  CHECK_EQ(r[0].name, std::string("x"));
  join.rank = 0;
  c.Add(List({join}), 0);
  join.rank = 1;
  c.Add(List({join}), 1);
  r = c.TakeResponses();
  CHECK_EQ(r.size(), 1u);
  CHECK(r[0].op == OpType::kJoin);
  CHECK_EQ(r[0].root_rank, 1);
}

TEST(CoordinatorFindsStalls) {
  Coordinator c(3);
  std::vector<RequestList> lists(3);
  lists[0].pending_names = {"late", "everyone"};
  lists[0].pending_ages = {5.0, 1.0};
  lists[1].pending_names = {"everyone"};
  lists[1].pending_ages = {1.0};
  lists[2].pending_names = {"everyone", "late"};
  lists[2].pending_ages = {1.0, 7.0};
  std::vector<StallReport> s = c.FindStalls(lists);
  CHECK_EQ(s.size(), 1u);
  CHECK_EQ(s[0].name, std::string("late"));
  CHECK(s[0].missing_ranks == std::vector<int>({1}));
  CHECK(s[0].ready_ranks == std::vector<int>({0, 2}));
  CHECK_EQ(s[0].age_seconds, 7.0);
}

TEST(MessagesRoundTrip) {
  RequestList l;
  Request r = Allreduce(3, "name with spaces", {1, 2, 3});
  r.splits = {4, 5};
  r.prescale = 0.5;
  l.requests = {r, Allreduce(3, "b", {})};
  l.shutdown = true;
  l.shutdown_reason = "because";
  l.stall_check = true;
  l.pending_names = {"x"};
  l.pending_ages = {1.5};
  RequestList back;
  CHECK(Deserialize(Serialize(l), &back));
  CHECK_EQ(back.requests.size(), 2u);
  CHECK(back.requests[0].SameSignature(r));
  CHECK_EQ(back.shutdown_reason, std::string("because"));
  CHECK_EQ(back.pending_ages[0], 1.5);
  std::string bytes = Serialize(l);
  CHECK(!Deserialize(bytes.substr(0, bytes.size() - 1), &back));
}

// A process set's coordinator works in set ranks but names global ranks
// and the set; a broadcast root arrives global and leaves as a set rank.
ProcessSetInfo Set13() {
  ProcessSetInfo set;
  set.id = 2;
  set.ranks = {1, 3};
  return set;
}

TEST(ProcessSetInfoMapsRanks) {
  ProcessSetInfo set = Set13();
  CHECK_EQ(set.SetRank(3), 1);
  CHECK_EQ(set.SetRank(2), -1);
  CHECK_EQ(set.GlobalRank(0), 1);
  CHECK_EQ(set.Suffix(), std::string(" in process set 2 (ranks 1, 3)"));
  CHECK_EQ(ProcessSetInfo::Global(3).Suffix(), std::string(""));
  CHECK_EQ(CheckMembers({0, 2}, 3), std::string(""));
  CHECK_CONTAINS(CheckMembers({0, 3}, 3), "rank 3 is not in [0, 3)");
  CHECK_CONTAINS(CheckMembers({1, 1}, 3), "more than once");
  CHECK_CONTAINS(CheckMembers({}, 3), "at least one rank");
}

TEST(CoordinatorOfASetNamesGlobalRanksAndTheSet) {
  Coordinator c(Set13());
  c.Add(List({Allreduce(0, "w", {2})}), 0);
  c.Add(List({Allreduce(1, "w", {3})}), 1);
  std::vector<Response> r = c.TakeResponses();
  CHECK_EQ(r.size(), 1u);
  CHECK_EQ(r[0].error_code, HB_ERR_MISMATCH);
  CHECK_CONTAINS(r[0].error, "in process set 2 (ranks 1, 3)");
  CHECK_CONTAINS(r[0].error, "rank 1 sent [2]");
  CHECK_CONTAINS(r[0].error, "rank 3 sent [3]");
}

TEST(CoordinatorOfASetTranslatesTheRoot) {
  Coordinator c(Set13());
  for (int rank = 0; rank < 2; ++rank) {
    Request b = Allreduce(rank, "b", {4});
    b.op = OpType::kBroadcast;
    b.root_rank = 3;  // global
    c.Add(List({b}), rank);
  }
  std::vector<Response> r = c.TakeResponses();
  CHECK_EQ(r.size(), 1u);
  CHECK(!r[0].is_error());
  CHECK_EQ(r[0].root_rank, 1);  // set rank of global rank 3
}

TEST(CoordinatorOfASetReportsStallsByGlobalRank) {
  Coordinator c(Set13());
  RequestList have;
  have.pending_names = {"late"};
  have.pending_ages = {3.0};
  std::vector<StallReport> s = c.FindStalls({RequestList(), have});
  CHECK_EQ(s.size(), 1u);
  CHECK(s[0].missing_ranks == std::vector<int>({1}));
  CHECK(s[0].ready_ranks == std::vector<int>({3}));
}

Request AddSet(int rank, std::vector<int64_t> members) {
  Request r;
  r.rank = rank;
  r.name = "hbcore.process_set.0";
  r.op = OpType::kProcessSetAdd;
  r.dtype = DataType::kUInt8;
  r.splits = std::move(members);
  return r;
}

std::vector<Response> AddAll(const std::vector<std::vector<int64_t>>& lists) {
  Coordinator c(static_cast<int>(lists.size()));
  for (size_t rank = 0; rank < lists.size(); ++rank) {
    c.Add(List({AddSet(static_cast<int>(rank), lists[rank])}),
          static_cast<int>(rank));
  }
  return c.TakeResponses();
}

TEST(AddProcessSetTakesMembersFromTheRanksThatKnowThem) {
  // Rank 1 is outside a communicator-defined set and names no members.
  std::vector<Response> r = AddAll({{2, 0}, {}, {0, 2}});
  CHECK_EQ(r.size(), 1u);
  CHECK(!r[0].is_error());
  CHECK(r[0].rank_dims == std::vector<int64_t>({0, 2}));
  // Rank lists given everywhere (members or not) must agree.
  r = AddAll({{0, 1}, {0, 1}, {0, 1}});
  CHECK(!r[0].is_error());
  CHECK(r[0].rank_dims == std::vector<int64_t>({0, 1}));
}

TEST(AddProcessSetRefusesDisagreement) {
  std::vector<Response> r = AddAll({{0, 1}, {0, 2}, {0, 2}});
  CHECK_EQ(r[0].error_code, HB_ERR_MISMATCH);
  CHECK_CONTAINS(r[0].error, "disagree");
  CHECK_CONTAINS(r[0].error, "rank 0 sent members [0, 1]");
  // A member that did not name the members.
  r = AddAll({{0, 1}, {}, {0, 1}});
  CHECK_EQ(r[0].error_code, HB_ERR_MISMATCH);
  CHECK_CONTAINS(r[0].error, "rank 1 is one of the members");
  r = AddAll({{}, {}});
  CHECK_CONTAINS(r[0].error, "no rank named any member");
}

}  // namespace
}  // namespace hbcore
