#include <cctype>
#include <map>
#include <memory>
#include <string>

#include "check.h"
#include "common/config.h"

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

// An elastic rank's stall shutdown time is its job's --elastic-timeout
// unless the job set one (an explicit 0 included); other ranks keep 0.
TEST(ConfigElasticTimeoutBoundsAStall) {
  Config c;
  CHECK(ParseConfig(Env({{"HB_ELASTIC_TIMEOUT_SECONDS", "600"}}), &c).ok());
  CHECK_EQ(c.stall_shutdown_seconds, 600.0);
  CHECK_EQ(c.stall_shutdown_setting,
           std::string("HB_ELASTIC_TIMEOUT_SECONDS"));
  CHECK(ParseConfig(Env({{"HB_ELASTIC_TIMEOUT_SECONDS", "600"},
                         {"HB_STALL_SHUTDOWN_TIME_SECONDS", "30"}}),
                    &c)
            .ok());
  CHECK_EQ(c.stall_shutdown_seconds, 30.0);
  CHECK_EQ(c.stall_shutdown_setting,
           std::string("HB_STALL_SHUTDOWN_TIME_SECONDS"));
  CHECK(ParseConfig(Env({{"HB_ELASTIC_TIMEOUT_SECONDS", "600"},
                         {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0"}}),
                    &c)
            .ok());
  CHECK_EQ(c.stall_shutdown_seconds, 0.0);
  CHECK(ParseConfig(Env({{"HB_ELASTIC_TIMEOUT_SECONDS", "soon"}}), &c).ok());
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
  s = ParseConfig(Env({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "maybe"}}), &c);
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

TEST(ConfigHierarchicalAllgather) {
  Config c;
  CHECK(ParseConfig(Env({}), &c).ok());
  CHECK(c.hierarchical_allgather == Choice::kAuto);
  CHECK(ParseConfig(Env({{"HOROVOD_HIERARCHICAL_ALLGATHER", "true"}}), &c)
            .ok());
  CHECK(c.hierarchical_allgather == Choice::kOn);
  CHECK(ParseConfig(Env({{"HB_HIERARCHICAL_ALLGATHER", "0"}}), &c).ok());
  CHECK(c.hierarchical_allgather == Choice::kOff);
  CHECK(c.hierarchical_allreduce == Choice::kAuto);
  // Horovod's rule: a whole number above 0 is on (issue 47's one parser).
  CHECK(ParseConfig(Env({{"HB_HIERARCHICAL_ALLGATHER", "2"}}), &c).ok());
  CHECK(c.hierarchical_allgather == Choice::kOn);
  Status s = ParseConfig(Env({{"HB_HIERARCHICAL_ALLGATHER", "-1"}}), &c);
  CHECK_EQ(s.code(), HB_ERR_CONFIG);
  CHECK_CONTAINS(s.message(), "HB_HIERARCHICAL_ALLGATHER");
}

TEST(ConfigStallDisable) {
  Config c;
  CHECK(ParseConfig(Env({{"HB_STALL_CHECK_DISABLE", "1"}}), &c).ok());
  CHECK_EQ(c.stall_check_seconds, 0.0);
}

TEST(ConfigDefaultsComeFromTheKnobTable) {
  // Parsing nothing applies every knob's table default, which must be what
  // a default-constructed Config holds.
  Config parsed;
  parsed.fusion_threshold_bytes = -1;
  parsed.cycle_time_ms = -1;
  CHECK(ParseConfig(Env({}), &parsed).ok());
  CHECK_EQ(parsed.ToString(), Config().ToString());
}

TEST(ConfigKnobNamesAreTheVariableSuffixInLowerCase) {
  int count = 0;
  const hb_knob* knobs = Knobs(&count);
  CHECK(count >= 9);
  for (int i = 0; i < count; ++i) {
    std::string env = knobs[i].env;
    CHECK_EQ(env.substr(0, 3), std::string("HB_"));
    std::string lower;
    for (char ch : env.substr(3)) {
      lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    CHECK_EQ(std::string(knobs[i].name), lower);
  }
}

TEST(ConfigOverridesWinOverEnvironment) {
  Config c;
  CHECK(ParseConfig(Env({{"HB_FUSION_THRESHOLD", "1024"},
                         {"HOROVOD_CYCLE_TIME", "5"}}),
                    {{"fusion_threshold", "2048"}, {"log_level", "debug"}},
                    &c)
            .ok());
  CHECK_EQ(c.fusion_threshold_bytes, 2048);
  CHECK_EQ(c.cycle_time_ms, 5.0);  // not overridden: the alias applies
  CHECK(c.log_level == LogLevel::kDebug);
  // An override is a value even when empty: it turns the timeline off.
  CHECK(ParseConfig(Env({{"HB_TIMELINE", "/tmp/x.json"}}), {{"timeline", ""}},
                    &c)
            .ok());
  CHECK_EQ(c.timeline_path, std::string());
}

TEST(ConfigBadOverridesNameTheKnob) {
  Config c;
  Status s = ParseConfig(Env({}), {{"cycle_time", "-1"}}, &c);
  CHECK_EQ(s.code(), HB_ERR_CONFIG);
  CHECK_CONTAINS(s.message(), "config key 'cycle_time' (HB_CYCLE_TIME)");
  CHECK_CONTAINS(s.message(), "'-1'");
  CHECK_CONTAINS(s.message(), "milliseconds in [0, 10000]");
  // A good environment does not hide a bad override, and vice versa.
  s = ParseConfig(Env({{"HB_CACHE_CAPACITY", "12x"}}),
                  {{"cache_capacity", "12"}}, &c);
  CHECK(s.ok());
  s = ParseConfig(Env({}), {{"stall_check_disable", "maybe"}}, &c);
  CHECK_CONTAINS(s.message(), "a bool (1, true, yes, on, 0, false, no, off");
  s = ParseConfig(Env({}), {{"fusion_treshold", "1"}}, &c);
  CHECK_EQ(s.code(), HB_ERR_CONFIG);
  CHECK_CONTAINS(s.message(), "unknown configuration knob 'fusion_treshold'");
  CHECK_CONTAINS(s.message(), "fusion_threshold");
  s = ParseConfig(Env({}), {{"cycle_time", "1"}, {"cycle_time", "2"}}, &c);
  CHECK_CONTAINS(s.message(), "'cycle_time' given more than once");
}

TEST(ConfigBoundsAreInclusive) {
  Config c;
  CHECK(ParseConfig(Env({{"HB_CYCLE_TIME", "10000"},
                         {"HB_CACHE_CAPACITY", "1048576"}}),
                    &c)
            .ok());
  Status s = ParseConfig(Env({{"HB_CACHE_CAPACITY", "1048577"}}), &c);
  CHECK_CONTAINS(s.message(), "an integer in [0, 1048576]");
  s = ParseConfig(Env({{"HB_STALL_CHECK_TIME_SECONDS", "inf"}}), &c);
  CHECK_CONTAINS(s.message(), "a non-negative number of seconds");
}

}  // namespace
}  // namespace hbcore
