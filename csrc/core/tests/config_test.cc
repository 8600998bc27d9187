#include <map>
#include <memory>

#include "check.h"
#include "config.h"

namespace hbcore {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(vars);
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(ConfigDefaults) {
  Config c;
  CHECK(ParseConfig(Env({}), &c).ok());
  CHECK_EQ(c.fusion_threshold_bytes, 128LL * 1024 * 1024);
  CHECK_EQ(c.cycle_time_ms, 1.0);
  CHECK_EQ(c.cache_capacity, 1024);
  CHECK_EQ(c.stall_check_seconds, 60.0);
  CHECK_EQ(c.stall_shutdown_seconds, 0.0);
}

TEST(ConfigHorovodAliasAndPrecedence) {
  Config c;
  CHECK(ParseConfig(Env({{"HOROVOD_FUSION_THRESHOLD", "1024"},
                         {"HOROVOD_CYCLE_TIME", "5"},
                         {"HB_CYCLE_TIME", "2.5"}}),
                    &c)
            .ok());
  CHECK_EQ(c.fusion_threshold_bytes, 1024);
  CHECK_EQ(c.cycle_time_ms, 2.5);  // HB_ wins over HOROVOD_
}

TEST(ConfigBadValuesNameTheVariable) {
  Config c;
  Status s = ParseConfig(Env({{"HB_FUSION_THRESHOLD", "abc"}}), &c);
  CHECK_EQ(s.code(), HB_ERR_CONFIG);
  CHECK_CONTAINS(s.message(), "HB_FUSION_THRESHOLD");
  CHECK_CONTAINS(s.message(), "abc");
  s = ParseConfig(Env({{"HOROVOD_CYCLE_TIME", "-1"}}), &c);
  CHECK_CONTAINS(s.message(), "HOROVOD_CYCLE_TIME");
  s = ParseConfig(Env({{"HB_CACHE_CAPACITY", "12x"}}), &c);
  CHECK_CONTAINS(s.message(), "HB_CACHE_CAPACITY");
  s = ParseConfig(Env({{"HB_LOG_LEVEL", "loud"}}), &c);
  CHECK_CONTAINS(s.message(), "HB_LOG_LEVEL");
  s = ParseConfig(Env({{"HB_STALL_CHECK_DISABLE", "maybe"}}), &c);
  CHECK_CONTAINS(s.message(), "HB_STALL_CHECK_DISABLE");
  s = ParseConfig(Env({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "yes"}}), &c);
  CHECK_EQ(s.code(), HB_ERR_CONFIG);
  CHECK_CONTAINS(s.message(), "HOROVOD_HIERARCHICAL_ALLREDUCE");
}

TEST(ConfigHierarchicalAllreduce) {
  Config c;
  CHECK(ParseConfig(Env({}), &c).ok());
  CHECK(c.hierarchical_allreduce == Choice::kAuto);
  CHECK(ParseConfig(Env({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}}), &c).ok());
  CHECK(c.hierarchical_allreduce == Choice::kOn);
  CHECK(ParseConfig(Env({{"HB_HIERARCHICAL_ALLREDUCE", "false"}}), &c).ok());
  CHECK(c.hierarchical_allreduce == Choice::kOff);
}

TEST(ConfigStallDisable) {
  Config c;
  CHECK(ParseConfig(Env({{"HB_STALL_CHECK_DISABLE", "1"}}), &c).ok());
  CHECK_EQ(c.stall_check_seconds, 0.0);
}

}  // namespace
}  // namespace hbcore
