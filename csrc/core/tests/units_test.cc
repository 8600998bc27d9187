// Small pure parts: response cache, fusion planning, half conversions,
// scaling.
#include <cmath>
#include <cstring>

#include "check.h"
#include "fusion.h"
#include "half.h"
#include "response_cache.h"
#include "scaling.h"

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

}  // namespace
}  // namespace hbcore
