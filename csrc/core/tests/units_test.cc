// Small pure parts: response cache, fusion planning, half conversions,
// scaling, fused layouts, reduction kernels.
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/fused_layout.h"
#include "backends/half.h"
#include "backends/reduce_kernels.h"
#include "backends/scaling.h"
#include "check.h"
#include "negotiation/fusion.h"
#include "negotiation/response_cache.h"

namespace hbcore {
namespace {

Response AllreduceResponse(const std::string& name, int64_t n,
                           DataType dt = DataType::kFloat32) {
  Response r;
  r.name = name;
  r.op = OpType::kAllreduce;
  r.dtype = dt;
  r.shape = {n};
  return r;
}

TEST(CacheHitInvalidAndLruEviction) {
  ResponseCache cache(2);
  Request a;
  a.name = "a";
  a.shape = {4};
  cache.Put(AllreduceResponse("a", 4), &a);
  int slot = -1;
  CHECK(cache.Find(a, &slot) == ResponseCache::Lookup::kHit);
  CHECK_EQ(slot, 0);
  Request a2 = a;
  a2.shape = {5};
  CHECK(cache.Find(a2, &slot) == ResponseCache::Lookup::kInvalid);
  Request b = a, c = a;
  b.name = "b";
  c.name = "c";
  cache.Put(AllreduceResponse("b", 4), &b);
  cache.Touch(0);  // a is now more recent than b
  cache.Put(AllreduceResponse("c", 4), &c);
  CHECK(cache.Find(b, &slot) == ResponseCache::Lookup::kMiss);
  CHECK(cache.Find(a, &slot) == ResponseCache::Lookup::kHit);
  CHECK(cache.Find(c, &slot) == ResponseCache::Lookup::kHit);
  CHECK_EQ(slot, 1);
  cache.Erase(1);
  CHECK(cache.Find(c, &slot) == ResponseCache::Lookup::kMiss);
}

TEST(CacheEntryWithoutLocalRequestNeverHits) {
  ResponseCache cache(4);
  cache.Put(AllreduceResponse("j", 4), nullptr);
  Request r;
  r.name = "j";
  r.shape = {4};
  int slot;
  CHECK(cache.Find(r, &slot) == ResponseCache::Lookup::kInvalid);
}

TEST(FusionGroupsByKindUpToThreshold) {
  std::vector<Response> rs = {
      AllreduceResponse("a", 10), AllreduceResponse("b", 10, DataType::kFloat64),
      AllreduceResponse("c", 10), AllreduceResponse("d", 20)};
  rs.push_back(AllreduceResponse("e", 1));
  rs.back().op = OpType::kAllgather;
  // 40 bytes per float32 tensor of 10; threshold 100 bytes.
  std::vector<FusionBatch> plan = PlanFusion(rs, 100);
  CHECK_EQ(plan.size(), 4u);
  CHECK(plan[0] == FusionBatch({0, 2}));  // a + c = 80 bytes; d would exceed
  CHECK(plan[1] == FusionBatch({1}));
  CHECK(plan[2] == FusionBatch({3}));
  CHECK(plan[3] == FusionBatch({4}));
  CHECK_EQ(PlanFusion(rs, 0).size(), rs.size());
}

TEST(FusionKeepsLargeTensorsApart) {
  const int64_t large = kDirectTensorBytes / 4;  // float32 elements
  std::vector<Response> rs = {AllreduceResponse("a", 10),
                              AllreduceResponse("big", large),
                              AllreduceResponse("b", 10)};
  std::vector<FusionBatch> plan = PlanFusion(rs, int64_t{64} << 20);
  CHECK_EQ(plan.size(), 2u);
  CHECK(plan[0] == FusionBatch({0, 2}));
  CHECK(plan[1] == FusionBatch({1}));
}

// An alltoall response of `rows` rows of 4 float32 per (sender, receiver)
// pair at 2 ranks.
Response AlltoallResponse(const std::string& name, int64_t rows,
                          DataType dtype = DataType::kFloat32) {
  Response r = AllreduceResponse(name, 4, dtype);
  r.op = OpType::kAlltoall;
  r.shape = {2 * rows, 4};
  r.rank_dims = {rows, rows, rows, rows};
  return r;
}

TEST(FusionBatchesAlltoallsOfAnyDtype) {
  // 4 pairs x 2 rows x 16 bytes = 128 bytes each (int64 rows: 256).
  std::vector<Response> rs = {
      AlltoallResponse("ids", 2, DataType::kInt64), AllreduceResponse("g", 4),
      AlltoallResponse("rows", 2), AlltoallResponse("more", 2)};
  CHECK_EQ(ResponseBytes(rs[0]), 256);
  CHECK_EQ(ResponseBytes(rs[2]), 128);
  std::vector<FusionBatch> plan = PlanFusion(rs, 400);
  CHECK_EQ(plan.size(), 3u);
  CHECK(plan[0] == FusionBatch({0, 2}));  // 384 bytes; "more" would exceed
  CHECK(plan[1] == FusionBatch({1}));     // allreduces never join alltoalls
  CHECK(plan[2] == FusionBatch({3}));
  rs[2].device = HB_DEVICE_CPU + 1;       // another device: never fused
  plan = PlanFusion(rs, int64_t{1} << 20);
  CHECK_EQ(plan.size(), 3u);
  CHECK(plan[0] == FusionBatch({0, 3}));
  CHECK(plan[2] == FusionBatch({2}));
}

TEST(HalfConversionsRoundTrip) {
  const float values[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f,
                          5.9604645e-08f, 0.333251953125f};
  for (float v : values) {
    CHECK_EQ(Float16ToFloat(FloatToFloat16(v)), v);
  }
  CHECK_EQ(FloatToFloat16(1e6f), 0x7c00);  // overflow to +inf
  CHECK(std::isnan(Float16ToFloat(FloatToFloat16(std::nanf("")))));
  CHECK_EQ(BFloat16ToFloat(FloatToBFloat16(3.0f)), 3.0f);
  // Round to nearest even: 1 + 2^-8 is halfway between two bfloat16 values.
  CHECK_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 1.0f / 256)), 1.0f);
  CHECK_EQ(Float16ToFloat(FloatToFloat16(1.0f + 1.0f / 4096)), 1.0f);
}

TEST(ScaledCopyPerType) {
  int32_t ints[3] = {3, -3, 7};
  ScaledCopy(ints, ints, 3, DataType::kInt32, 0.5);
  CHECK_EQ(ints[0], 1);
  CHECK_EQ(ints[1], -1);  // truncation toward zero
  CHECK_EQ(ints[2], 3);
  uint16_t h[2] = {FloatToFloat16(3.0f), FloatToFloat16(-1.0f)};
  ScaledCopy(h, h, 2, DataType::kFloat16, 0.5);
  CHECK_EQ(Float16ToFloat(h[0]), 1.5f);
  CHECK_EQ(Float16ToFloat(h[1]), -0.5f);
  bool b[1] = {true};
  ScaledCopy(b, b, 1, DataType::kBool, 0.0);
  CHECK(b[0]);
}

// Three float tensors (5, 0 and 7 elements; the middle one absent on this
// rank) laid end to end: every range of the 12 fused elements must map onto
// the right pieces, with each tensor's scale factors.
TEST(FusedLayoutGathersAndScattersEveryRange) {
  std::vector<float> a(5), c(7), a_out(5, -1), c_out(7, -1);
  std::iota(a.begin(), a.end(), 1.0f);    // 1..5
  std::iota(c.begin(), c.end(), 100.0f);  // 100..106
  std::vector<FusedTensor> tensors(3);
  tensors[0] = {a.data(), a_out.data(), 5, 2.0, 0.5};
  tensors[1] = {nullptr, nullptr, 0, 1.0, 1.0};
  tensors[2] = {c.data(), c_out.data(), 7, 1.0, 3.0};
  FusedLayout layout(DataType::kFloat32, tensors);
  CHECK_EQ(layout.total(), 12);
  CHECK_EQ(layout.bytes(), 48);
  std::vector<float> fused(12);
  for (int i = 0; i < 5; ++i) fused[i] = 2.0f * a[i];
  for (int i = 0; i < 7; ++i) fused[5 + i] = c[i];
  for (int64_t begin = 0; begin <= 12; ++begin) {
    for (int64_t n = 0; begin + n <= 12; ++n) {
      std::vector<float> got(n + 1, -7.0f);
      layout.Gather(begin, n, got.data());
      for (int64_t i = 0; i < n; ++i) CHECK_EQ(got[i], fused[begin + i]);
      CHECK_EQ(got[n], -7.0f);  // nothing written past the range
    }
  }
  std::vector<float> scratch(5, -1);
  CHECK(layout.InputView(0, 5, scratch.data()) == scratch.data());  // prescaled
  for (int i = 0; i < 5; ++i) CHECK_EQ(scratch[i], fused[i]);
  CHECK(layout.InputView(6, 3, scratch.data()) == c.data() + 1);
  // Scatter in two ranges that split tensor c.
  std::vector<float> result(12);
  std::iota(result.begin(), result.end(), 0.0f);
  layout.Scatter(0, 8, result.data());
  layout.Scatter(8, 4, result.data() + 8);
  for (int i = 0; i < 5; ++i) CHECK_EQ(a_out[i], 0.5f * i);
  for (int i = 0; i < 7; ++i) CHECK_EQ(c_out[i], 3.0f * (5 + i));
}

TEST(FusedLayoutAbsentInputsGatherAsZeros) {
  std::vector<FusedTensor> tensors(2);
  std::vector<int32_t> b = {7, 8};
  tensors[0] = {nullptr, nullptr, 3, 1.0, 1.0};
  tensors[1] = {b.data(), nullptr, 2, 1.0, 1.0};
  FusedLayout layout(DataType::kInt32, tensors);
  std::vector<int32_t> got(5, -1);
  layout.Gather(0, 5, got.data());
  CHECK(got == std::vector<int32_t>({0, 0, 0, 7, 8}));
  layout.Scatter(0, 5, got.data());  // outputs absent: nothing to write
  std::vector<int32_t> scratch(2, -1);
  CHECK(layout.InputView(0, 2, scratch.data()) == scratch.data());  // absent
  CHECK(scratch == std::vector<int32_t>({0, 0}));
  CHECK(layout.InputView(3, 2, scratch.data()) == b.data());
  CHECK(layout.InputView(4, 1, scratch.data()) == b.data() + 1);
  // Spans two tensors: gathered.
  CHECK(layout.InputView(2, 2, scratch.data()) == scratch.data());
  CHECK(scratch == std::vector<int32_t>({0, 7}));
}

TEST(FusedLayoutReduceIntoEqualsGatherThenReduce) {
  // A prescaled tensor, an absent input (zeros), an empty tensor and a
  // plain one; every range, Sum and Min, against Gather then Reduce.
  std::vector<float> a = {1, -2, 3}, d = {4, 5, -6, 7};
  std::vector<FusedTensor> tensors(4);
  tensors[0] = {a.data(), nullptr, 3, 0.5, 1.0};
  tensors[1] = {nullptr, nullptr, 2, 1.0, 1.0};
  tensors[2] = {nullptr, nullptr, 0, 1.0, 1.0};
  tensors[3] = {d.data(), nullptr, 4, 1.0, 1.0};
  FusedLayout layout(DataType::kFloat32, tensors);
  std::vector<float> other(9);
  for (int i = 0; i < 9; ++i) other[i] = 10.0f - 3.0f * i;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin}) {
    for (int64_t begin = 0; begin <= 9; ++begin) {
      for (int64_t n = 0; begin + n <= 9; ++n) {
        std::vector<float> want(n), got(n + 1, -99.0f);
        layout.Gather(begin, n, want.data());
        Reduce(want.data(), want.data(), other.data(), n,
               DataType::kFloat32, op);
        CHECK(layout.ReduceInto(begin, n, got.data(), other.data(), op));
        for (int64_t i = 0; i < n; ++i) CHECK_EQ(got[i], want[i]);
        CHECK_EQ(got[n], -99.0f);  // nothing written past the range
      }
    }
  }
  CHECK_EQ(a[1], -2.0f);  // inputs are read, never written
  // With scatter: the outputs also get what Scatter of the result gives
  // (postscaled; an absent output skipped; outside the range untouched).
  std::vector<float> a_out(3, -1), d_out(4, -1);
  tensors[0].output = a_out.data();
  tensors[3].output = d_out.data();
  tensors[3].postscale = 2.0;
  FusedLayout with_outputs(DataType::kFloat32, tensors);
  std::vector<float> result(7), expected(7);
  CHECK(with_outputs.ReduceInto(2, 7, result.data(), other.data(),
                                ReduceOp::kSum, /*scatter=*/true));
  layout.Gather(2, 7, expected.data());
  Reduce(expected.data(), expected.data(), other.data(), 7,
         DataType::kFloat32, ReduceOp::kSum);
  CHECK(result == expected);
  CHECK(a_out == std::vector<float>({-1, -1, expected[0]}));
  for (int i = 0; i < 4; ++i) CHECK_EQ(d_out[i], 2.0f * expected[3 + i]);
  std::vector<float> out(9);
  CHECK(!layout.ReduceInto(0, 9, out.data(), other.data(),
                           ReduceOp::kAverage));
}

TEST(ReduceKernelsPerOp) {
  // Odd lengths reach the vectorised loops' remainders.
  for (int n : {1, 7, 33, 1000}) {
    std::vector<float> acc(n), in(n);
    for (int i = 0; i < n; ++i) {
      acc[i] = static_cast<float>(i % 5) - 2;
      in[i] = static_cast<float>(i % 3) - 1;
    }
    const std::vector<float> a0 = acc;
    struct Case { ReduceOp op; float (*f)(float, float); };
    const Case cases[] = {
        {ReduceOp::kSum, [](float x, float y) { return x + y; }},
        {ReduceOp::kMin, [](float x, float y) { return std::min(x, y); }},
        {ReduceOp::kMax, [](float x, float y) { return std::max(x, y); }},
        {ReduceOp::kProduct, [](float x, float y) { return x * y; }}};
    for (const Case& c : cases) {
      acc = a0;
      CHECK(ReduceSupported(DataType::kFloat32, c.op));
      CHECK(Reduce(acc.data(), acc.data(), in.data(), n, DataType::kFloat32,
                   c.op));
      for (int i = 0; i < n; ++i) CHECK_EQ(acc[i], c.f(a0[i], in[i]));
      std::vector<float> out(n, -9.0f);
      CHECK(Reduce(out.data(), a0.data(), in.data(), n, DataType::kFloat32,
                   c.op));
      CHECK(out == acc);
    }
  }
  uint8_t x[2] = {250, 1}, y[2] = {10, 2};
  CHECK(Reduce(x, x, y, 2, DataType::kUInt8, ReduceOp::kSum));
  CHECK_EQ(static_cast<int>(x[0]), 4);  // wraps, as MPI's sum does
  CHECK(!ReduceSupported(DataType::kFloat32, ReduceOp::kAverage));
  CHECK(!ReduceSupported(DataType::kFloat32, ReduceOp::kAdasum));
  CHECK(!Reduce(x, x, y, 2, DataType::kFloat32, ReduceOp::kAverage));
}

}  // namespace
}  // namespace hbcore
