#include "check.h"
#include "coordinator.h"

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

}  // namespace
}  // namespace hbcore
