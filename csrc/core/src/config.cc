#include "config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace hbcore {
namespace {

// One knob: the HB_ name is primary; the HOROVOD_ alias is read only when
// the HB_ name is unset, so a job can migrate one variable at a time.
struct EnvValue {
  std::string name;   // the variable actually found, for messages
  std::string value;
  bool present = false;
};

EnvValue Lookup(const EnvLookup& getenv, const std::string& suffix) {
  EnvValue v;
  for (const char* prefix : {"HB_", "HOROVOD_"}) {
    std::string name = std::string(prefix) + suffix;
    const char* raw = getenv(name.c_str());
    if (raw != nullptr && raw[0] != '\0') {
      v.name = name;
      v.value = raw;
      v.present = true;
      return v;
    }
  }
  return v;
}

Status BadValue(const EnvValue& v, const std::string& expected) {
  return Status(HB_ERR_CONFIG, "invalid value for " + v.name + ": '" +
                                   v.value + "' (expected " + expected + ")");
}

bool ParseDouble(const std::string& text, double* out) {
  errno = 0;
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(d)) {
    return false;
  }
  *out = d;
  return true;
}

bool ParseInt(const std::string& text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

Status ReadNonNegativeInt(const EnvLookup& getenv, const char* suffix,
                          int64_t max, int64_t* out) {
  EnvValue v = Lookup(getenv, suffix);
  if (!v.present) return Status::OK();
  int64_t parsed = 0;
  if (!ParseInt(v.value, &parsed) || parsed < 0 || parsed > max) {
    return BadValue(v, "an integer in [0, " + std::to_string(max) + "]");
  }
  *out = parsed;
  return Status::OK();
}

Status ReadNonNegativeDouble(const EnvLookup& getenv, const char* suffix,
                             double* out) {
  EnvValue v = Lookup(getenv, suffix);
  if (!v.present) return Status::OK();
  double parsed = 0;
  if (!ParseDouble(v.value, &parsed) || parsed < 0) {
    return BadValue(v, "a non-negative number");
  }
  *out = parsed;
  return Status::OK();
}

Status ReadChoice(const EnvLookup& getenv, const char* suffix, Choice* out) {
  EnvValue v = Lookup(getenv, suffix);
  if (!v.present) return Status::OK();
  if (v.value == "1" || v.value == "true") {
    *out = Choice::kOn;
  } else if (v.value == "0" || v.value == "false") {
    *out = Choice::kOff;
  } else if (v.value == "auto") {
    *out = Choice::kAuto;
  } else {
    return BadValue(v, "0, 1, true, false or auto");
  }
  return Status::OK();
}

}  // namespace

const char* ChoiceName(Choice choice) {
  switch (choice) {
    case Choice::kAuto: return "auto";
    case Choice::kOff: return "0";
    case Choice::kOn: return "1";
  }
  return "auto";
}

Status ParseConfig(const EnvLookup& getenv, Config* config) {
  Config c;
  Status s = ReadNonNegativeInt(getenv, "FUSION_THRESHOLD", 1LL << 40,
                                &c.fusion_threshold_bytes);
  if (!s.ok()) return s;

  s = ReadNonNegativeInt(getenv, "SHM_ALLREDUCE_THRESHOLD", 1LL << 30,
                         &c.shm_allreduce_bytes);
  if (!s.ok()) return s;

  s = ReadChoice(getenv, "HIERARCHICAL_ALLREDUCE", &c.hierarchical_allreduce);
  if (!s.ok()) return s;

  s = ReadNonNegativeDouble(getenv, "CYCLE_TIME", &c.cycle_time_ms);
  if (!s.ok()) return s;
  if (c.cycle_time_ms > 10000) {
    return BadValue(Lookup(getenv, "CYCLE_TIME"),
                    "a number of milliseconds in [0, 10000]");
  }

  int64_t cache = c.cache_capacity;
  s = ReadNonNegativeInt(getenv, "CACHE_CAPACITY", 1 << 20, &cache);
  if (!s.ok()) return s;
  c.cache_capacity = static_cast<int>(cache);

  EnvValue timeline = Lookup(getenv, "TIMELINE");
  if (timeline.present) c.timeline_path = timeline.value;

  s = ReadNonNegativeDouble(getenv, "STALL_CHECK_TIME_SECONDS",
                            &c.stall_check_seconds);
  if (!s.ok()) return s;
  EnvValue disable = Lookup(getenv, "STALL_CHECK_DISABLE");
  if (disable.present) {
    if (disable.value == "1" || disable.value == "true") {
      c.stall_check_seconds = 0;
    } else if (disable.value != "0" && disable.value != "false") {
      return BadValue(disable, "0, 1, true or false");
    }
  }
  s = ReadNonNegativeDouble(getenv, "STALL_SHUTDOWN_TIME_SECONDS",
                            &c.stall_shutdown_seconds);
  if (!s.ok()) return s;

  EnvValue level = Lookup(getenv, "LOG_LEVEL");
  if (level.present && !ParseLogLevel(level.value, &c.log_level)) {
    return BadValue(level, "one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL");
  }
  *config = c;
  return Status::OK();
}

std::string Config::ToString() const {
  std::ostringstream out;
  out << "HB_FUSION_THRESHOLD=" << fusion_threshold_bytes << "\n"
      << "HB_SHM_ALLREDUCE_THRESHOLD=" << shm_allreduce_bytes << "\n"
      << "HB_HIERARCHICAL_ALLREDUCE=" << ChoiceName(hierarchical_allreduce)
      << "\n"
      << "HB_CYCLE_TIME=" << cycle_time_ms << "\n"
      << "HB_CACHE_CAPACITY=" << cache_capacity << "\n"
      << "HB_TIMELINE=" << timeline_path << "\n"
      << "HB_STALL_CHECK_TIME_SECONDS=" << stall_check_seconds << "\n"
      << "HB_STALL_SHUTDOWN_TIME_SECONDS=" << stall_shutdown_seconds << "\n"
      << "HB_LOG_LEVEL=" << LogLevelName(log_level) << "\n";
  return out.str();
}

}  // namespace hbcore
