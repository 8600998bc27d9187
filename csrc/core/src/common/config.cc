#include "common/config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace hbcore {
namespace {

constexpr double kUnbounded = std::numeric_limits<double>::infinity();
// Set by the elastic driver in every rank's environment (hbcore/launcher/
// elastic_protocol.py, TIMEOUT_VAR): hbrun's --elastic-timeout in seconds.
constexpr const char* kElasticTimeoutVariable = "HB_ELASTIC_TIMEOUT_SECONDS";

// The one table of knobs. The parser below reads exactly these; the core
// module exports it (hbcore._core.knobs()); hbcore/knobs.py mirrors it for
// the launcher, which must work without loading the core, and
// tests/test_knobs.py checks that the two agree field by field. The name is
// the variable's suffix in lower case.
const hb_knob kKnobs[] = {
    {"fusion_threshold", "HB_FUSION_THRESHOLD", HB_KNOB_INTEGER, "134217728",
     0, 1099511627776.0, "bytes"},
    {"shm_allreduce_threshold", "HB_SHM_ALLREDUCE_THRESHOLD", HB_KNOB_INTEGER,
     "4194304", 0, 1073741824.0, "bytes"},
    {"hierarchical_allreduce", "HB_HIERARCHICAL_ALLREDUCE", HB_KNOB_CHOICE,
     "auto", 0, 0, "choice"},
    {"hierarchical_allgather", "HB_HIERARCHICAL_ALLGATHER", HB_KNOB_CHOICE,
     "auto", 0, 0, "choice"},
    {"ring_allreduce", "HB_RING_ALLREDUCE", HB_KNOB_CHOICE, "auto", 0, 0,
     "choice"},
    {"cycle_time", "HB_CYCLE_TIME", HB_KNOB_NUMBER, "1", 0, 10000,
     "milliseconds"},
    {"idle_spin", "HB_IDLE_SPIN", HB_KNOB_CHOICE, "auto", 0, 0, "choice"},
    {"bind_ranks", "HB_BIND_RANKS", HB_KNOB_CHOICE, "auto", 0, 0, "choice"},
    {"cache_capacity", "HB_CACHE_CAPACITY", HB_KNOB_INTEGER, "1024", 0,
     1048576, "slots"},
    // Cached small Sum/Average allreduces ride the negotiation's collective
    // (controller.h, "The fast path"): their total payload; 0: off.
    {"fast_path_threshold", "HB_FAST_PATH_THRESHOLD", HB_KNOB_INTEGER,
     "8192", 0, 65536, "bytes"},
    {"timeline", "HB_TIMELINE", HB_KNOB_STRING, "", 0, 0, "path"},
    {"timeline_mark_cycles", "HB_TIMELINE_MARK_CYCLES", HB_KNOB_BOOL, "0", 0,
     0, "flag"},
    {"stall_check_time_seconds", "HB_STALL_CHECK_TIME_SECONDS",
     HB_KNOB_NUMBER, "60", 0, kUnbounded, "seconds"},
    // After stall_check_time_seconds: when true it overrides that knob.
    {"stall_check_disable", "HB_STALL_CHECK_DISABLE", HB_KNOB_BOOL, "0", 0, 0,
     "flag"},
    {"stall_shutdown_time_seconds", "HB_STALL_SHUTDOWN_TIME_SECONDS",
     HB_KNOB_NUMBER, "0", 0, kUnbounded, "seconds"},
    {"log_level", "HB_LOG_LEVEL", HB_KNOB_LOG_LEVEL, "WARNING", 0, 0,
     "level"},
    {"dynamic_process_sets", "HB_DYNAMIC_PROCESS_SETS", HB_KNOB_BOOL, "0", 0,
     0, "flag"},
    {"thread_affinity", "HB_THREAD_AFFINITY", HB_KNOB_STRING, "", 0, 0,
     "cpus"},
    // GPU support (see gpu_libraries.h): empty means the default soname.
    {"nccl_library", "HB_NCCL_LIBRARY", HB_KNOB_STRING, "", 0, 0, "path"},
    {"cuda_runtime_library", "HB_CUDA_RUNTIME_LIBRARY", HB_KNOB_STRING, "", 0,
     0, "path"},
    // Read by the Python front end after init (hbcore/job_environment.py):
    // the check that a world of one is not a job its environment
    // (TF_CONFIG, Slurm, another MPI's launcher) says has several tasks.
    {"ignore_tf_config", "HB_IGNORE_TF_CONFIG", HB_KNOB_BOOL, "0", 0, 0,
     "flag"},
    // The allreduce pipeline's piece (Backend::PieceBytes); 0: the
    // backend's own. One of the parameters autotune may change.
    {"pipeline_piece_bytes", "HB_PIPELINE_PIECE_BYTES", HB_KNOB_INTEGER, "0",
     0, 1099511627776.0, "bytes"},
    // Autotune (autotune.h), with Horovod's names and defaults; the tuner
    // itself is the Python front end's (hbcore/autotune/).
    {"autotune", "HB_AUTOTUNE", HB_KNOB_BOOL, "0", 0, 0, "flag"},
    {"autotune_log", "HB_AUTOTUNE_LOG", HB_KNOB_STRING, "", 0, 0, "path"},
    {"autotune_warmup_samples", "HB_AUTOTUNE_WARMUP_SAMPLES", HB_KNOB_INTEGER,
     "3", 0, 1000000, "samples"},
    {"autotune_steps_per_sample", "HB_AUTOTUNE_STEPS_PER_SAMPLE",
     HB_KNOB_INTEGER, "10", 1, 1000000, "steps"},
    {"autotune_bayes_opt_max_samples", "HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
     HB_KNOB_INTEGER, "20", 1, 1000000, "samples"},
    {"autotune_gaussian_process_noise", "HB_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
     HB_KNOB_NUMBER, "0.8", 0, kUnbounded, "noise"},
};
constexpr int kNumKnobs = sizeof(kKnobs) / sizeof(kKnobs[0]);

// A knob's value once parsed; the field its type uses is set.
struct Value {
  int64_t integer = 0;
  double number = 0;
  std::string text;
  bool flag = false;
  LogLevel level = LogLevel::kWarning;
  Choice choice = Choice::kAuto;
};

// Where each knob's value goes, in table order.
using Apply = void (*)(const Value&, Config*);
const Apply kApply[] = {
    [](const Value& v, Config* c) { c->fusion_threshold_bytes = v.integer; },
    [](const Value& v, Config* c) { c->shm_allreduce_bytes = v.integer; },
    [](const Value& v, Config* c) { c->hierarchical_allreduce = v.choice; },
    [](const Value& v, Config* c) { c->hierarchical_allgather = v.choice; },
    [](const Value& v, Config* c) { c->ring_allreduce = v.choice; },
    [](const Value& v, Config* c) { c->cycle_time_ms = v.number; },
    [](const Value& v, Config* c) { c->idle_spin = v.choice; },
    [](const Value& v, Config* c) { c->bind_ranks = v.choice; },
    [](const Value& v, Config* c) {
      c->cache_capacity = static_cast<int>(v.integer);
    },
    [](const Value& v, Config* c) { c->fast_path_bytes = v.integer; },
    [](const Value& v, Config* c) { c->timeline_path = v.text; },
    [](const Value& v, Config* c) { c->timeline_mark_cycles = v.flag; },
    [](const Value& v, Config* c) { c->stall_check_seconds = v.number; },
    [](const Value& v, Config* c) {
      if (v.flag) c->stall_check_seconds = 0;
    },
    [](const Value& v, Config* c) { c->stall_shutdown_seconds = v.number; },
    [](const Value& v, Config* c) { c->log_level = v.level; },
    [](const Value& v, Config* c) { c->dynamic_process_sets = v.flag; },
    [](const Value& v, Config* c) { c->thread_affinity = v.text; },
    [](const Value& v, Config* c) { c->nccl_library = v.text; },
    [](const Value& v, Config* c) { c->cuda_runtime_library = v.text; },
    [](const Value& v, Config* c) { c->ignore_tf_config = v.flag; },
    [](const Value& v, Config* c) { c->pipeline_piece_bytes = v.integer; },
    [](const Value& v, Config* c) { c->autotune = v.flag; },
    [](const Value& v, Config* c) { c->autotune_log = v.text; },
    [](const Value& v, Config* c) {
      c->autotune_warmup_samples = static_cast<int>(v.integer);
    },
    [](const Value& v, Config* c) {
      c->autotune_steps_per_sample = static_cast<int>(v.integer);
    },
    [](const Value& v, Config* c) {
      c->autotune_max_samples = static_cast<int>(v.integer);
    },
    [](const Value& v, Config* c) { c->autotune_noise = v.number; },
};
static_assert(sizeof(kApply) / sizeof(kApply[0]) == kNumKnobs,
              "one setter per knob");

// Where a knob's value came from, for messages.
struct Source {
  std::string what;  // "HB_CYCLE_TIME", "config key 'cycle_time' (...)"
  std::string value;
  bool present = false;
};

// The override wins; then the HB_ variable; then the HOROVOD_ alias, read
// only when the HB_ name is unset, so a job can migrate one variable at a
// time. Empty variables count as unset; an empty override is a value.
Source Find(const hb_knob& knob, const EnvLookup& getenv,
            const ConfigOverrides& overrides) {
  Source s;
  for (const auto& o : overrides) {
    if (o.first == knob.name) {
      s.what = "config key '" + o.first + "' (" + knob.env + ")";
      s.value = o.second;
      s.present = true;
      return s;
    }
  }
  const std::string env = knob.env;
  for (const std::string& name : {env, "HOROVOD_" + env.substr(3)}) {
    const char* raw = getenv(name.c_str());
    if (raw != nullptr && raw[0] != '\0') {
      s.what = name;
      s.value = raw;
      s.present = true;
      return s;
    }
  }
  return s;
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

// The words every hbcore setting accepts for a bool: 1/true/yes/on and
// 0/false/no/off in any case (HybridBackend's words and hbcore_tf's), or a
// whole number >= 0, true when greater than 0 (Horovod's rule). Surrounding
// spaces are ignored. hbcore/setting_values.py is the Python side;
// tests/test_setting_values.py checks both against one table.
bool ParseBool(const std::string& text, bool* out) {
  const size_t first = text.find_first_not_of(" \t\n");
  const size_t last = text.find_last_not_of(" \t\n");
  std::string word =
      first == std::string::npos ? "" : text.substr(first, last - first + 1);
  for (auto& c : word) c = static_cast<char>(std::tolower(c));
  if (word == "1" || word == "true" || word == "yes" || word == "on") {
    *out = true;
    return true;
  }
  if (word == "0" || word == "false" || word == "no" || word == "off") {
    *out = false;
    return true;
  }
  int64_t number = 0;
  if (word.empty() || !std::isdigit(static_cast<unsigned char>(word[0])) ||
      !ParseInt(word, &number)) {
    return false;
  }
  *out = number > 0;
  return true;
}

std::string FormatBound(double v) {
  std::ostringstream out;
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) {
    out << static_cast<int64_t>(v);
  } else {
    out << v;
  }
  return out.str();
}

// What a knob accepts, in words, for messages.
std::string Expected(const hb_knob& k) {
  switch (k.type) {
    case HB_KNOB_INTEGER:
      return "an integer in [" + FormatBound(k.min) + ", " +
             FormatBound(k.max) + "]";
    case HB_KNOB_NUMBER:
      if (std::isinf(k.max)) {
        return (k.min == 0 ? std::string("a non-negative number")
                           : "a number >= " + FormatBound(k.min)) +
               " of " + k.unit;
      }
      return std::string("a number of ") + k.unit + " in [" +
             FormatBound(k.min) + ", " + FormatBound(k.max) + "]";
    case HB_KNOB_BOOL:
      return "a bool (1, true, yes, on, 0, false, no, off, or a whole "
             "number >= 0)";
    case HB_KNOB_LOG_LEVEL:
      return "one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL";
    case HB_KNOB_CHOICE:
      return "auto or a bool (1, true, yes, on, 0, false, no, off, or a "
             "whole number >= 0)";
    default:
      return "text";
  }
}

// Parses `text` as knob `k`'s type; false when it does not parse or is out
// of range.
bool ParseValue(const hb_knob& k, const std::string& text, Value* v) {
  switch (k.type) {
    case HB_KNOB_INTEGER:
      return ParseInt(text, &v->integer) && v->integer >= k.min &&
             v->integer <= k.max;
    case HB_KNOB_NUMBER:
      return ParseDouble(text, &v->number) && v->number >= k.min &&
             v->number <= k.max;
    case HB_KNOB_BOOL:
      return ParseBool(text, &v->flag);
    case HB_KNOB_LOG_LEVEL:
      return ParseLogLevel(text, &v->level);
    case HB_KNOB_CHOICE: {
      bool on = false;
      if (text == "auto") {
        v->choice = Choice::kAuto;
      } else if (ParseBool(text, &on)) {
        v->choice = on ? Choice::kOn : Choice::kOff;
      } else {
        return false;
      }
      return true;
    }
    default:
      v->text = text;
      return true;
  }
}

// Unknown or repeated override names are errors, so a typo never passes
// silently.
Status CheckOverrideNames(const ConfigOverrides& overrides) {
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string& name = overrides[i].first;
    bool known = false;
    for (const hb_knob& k : kKnobs) known = known || name == k.name;
    if (!known) {
      std::string names;
      for (const hb_knob& k : kKnobs) {
        names += names.empty() ? "" : ", ";
        names += k.name;
      }
      return Status(HB_ERR_CONFIG, "unknown configuration knob '" + name +
                                       "' (known: " + names + ")");
    }
    for (size_t j = 0; j < i; ++j) {
      if (overrides[j].first == name) {
        return Status(HB_ERR_CONFIG, "configuration knob '" + name +
                                         "' given more than once");
      }
    }
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

const hb_knob* Knobs(int* count) {
  if (count != nullptr) *count = kNumKnobs;
  return kKnobs;
}

Status ParseConfig(const EnvLookup& getenv, const ConfigOverrides& overrides,
                   Config* config) {
  Status s = CheckOverrideNames(overrides);
  if (!s.ok()) return s;
  Config c;
  for (int i = 0; i < kNumKnobs; ++i) {
    const hb_knob& knob = kKnobs[i];
    Source source = Find(knob, getenv, overrides);
    if (source.present) c.explicit_knobs.insert(knob.name);
    if (!source.present && knob.default_value[0] == '\0') continue;
    const std::string text = source.present ? source.value
                                            : knob.default_value;
    Value value;
    if (!ParseValue(knob, text, &value)) {
      return Status(HB_ERR_CONFIG, "invalid value for " + source.what +
                                       ": '" + text + "' (expected " +
                                       Expected(knob) + ")");
    }
    kApply[i](value, &c);
  }
  // An elastic rank (its driver passes --elastic-timeout as
  // kElasticTimeoutVariable) whose job set no stall shutdown time treats a
  // stall that long as a hung rank: the stall shutdown fails every rank,
  // and the survivors re-form the world from the last commit
  // (docs/elastic.md, "Hung ranks"). It is the limit the rank wrapper
  // applies to a stopped rank. An explicit 0 keeps the job waiting.
  if (c.explicit_knobs.count("stall_shutdown_time_seconds") == 0) {
    const char* elastic = getenv(kElasticTimeoutVariable);
    double seconds = 0;
    if (elastic != nullptr && ParseDouble(elastic, &seconds) && seconds > 0) {
      c.stall_shutdown_seconds = seconds;
      c.stall_shutdown_setting = kElasticTimeoutVariable;
    }
  }
  *config = c;
  return Status::OK();
}

Status ReadConfig(const ConfigOverrides& overrides, Config* config) {
  return ParseConfig([](const char* name) { return std::getenv(name); },
                     overrides, config);
}

std::string Config::ToString() const {
  std::ostringstream out;
  out << "HB_FUSION_THRESHOLD=" << fusion_threshold_bytes << "\n"
      << "HB_SHM_ALLREDUCE_THRESHOLD=" << shm_allreduce_bytes << "\n"
      << "HB_HIERARCHICAL_ALLREDUCE=" << ChoiceName(hierarchical_allreduce)
      << "\n"
      << "HB_HIERARCHICAL_ALLGATHER=" << ChoiceName(hierarchical_allgather)
      << "\n"
      << "HB_RING_ALLREDUCE=" << ChoiceName(ring_allreduce) << "\n"
      << "HB_CYCLE_TIME=" << cycle_time_ms << "\n"
      << "HB_IDLE_SPIN=" << ChoiceName(idle_spin) << "\n"
      << "HB_BIND_RANKS=" << ChoiceName(bind_ranks) << "\n"
      << "HB_CACHE_CAPACITY=" << cache_capacity << "\n"
      << "HB_FAST_PATH_THRESHOLD=" << fast_path_bytes << "\n"
      << "HB_TIMELINE=" << timeline_path << "\n"
      << "HB_TIMELINE_MARK_CYCLES=" << (timeline_mark_cycles ? 1 : 0) << "\n"
      << "HB_STALL_CHECK_TIME_SECONDS=" << stall_check_seconds << "\n"
      << "HB_STALL_SHUTDOWN_TIME_SECONDS=" << stall_shutdown_seconds << "\n"
      << "HB_LOG_LEVEL=" << LogLevelName(log_level) << "\n"
      << "HB_DYNAMIC_PROCESS_SETS=" << (dynamic_process_sets ? 1 : 0) << "\n"
      << "HB_THREAD_AFFINITY=" << thread_affinity << "\n"
      << "HB_NCCL_LIBRARY=" << nccl_library << "\n"
      << "HB_CUDA_RUNTIME_LIBRARY=" << cuda_runtime_library << "\n"
      << "HB_IGNORE_TF_CONFIG=" << (ignore_tf_config ? 1 : 0) << "\n"
      << "HB_PIPELINE_PIECE_BYTES=" << pipeline_piece_bytes << "\n"
      << "HB_AUTOTUNE=" << (autotune ? 1 : 0) << "\n"
      << "HB_AUTOTUNE_LOG=" << autotune_log << "\n"
      << "HB_AUTOTUNE_WARMUP_SAMPLES=" << autotune_warmup_samples << "\n"
      << "HB_AUTOTUNE_STEPS_PER_SAMPLE=" << autotune_steps_per_sample << "\n"
      << "HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=" << autotune_max_samples << "\n"
      << "HB_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=" << autotune_noise << "\n";
  return out.str();
}

}  // namespace hbcore
