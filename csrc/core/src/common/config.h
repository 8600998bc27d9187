// Runtime configuration: every knob is defined once, in the table behind
// hb_knobs (config.cc), and read and validated here, once, at init, from
// programmatic overrides (hb_init's config), HB_* variables or their
// HOROVOD_* aliases. Nothing else in the core reads the environment.
#ifndef HBCORE_COMMON_CONFIG_H_
#define HBCORE_COMMON_CONFIG_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/status.h"

namespace hbcore {

// A knob that may be forced either way or left to the runtime.
enum class Choice { kAuto, kOff, kOn };
const char* ChoiceName(Choice choice);

struct Config {
  // Largest fused allreduce buffer; 0 disables fusion.
  int64_t fusion_threshold_bytes = 128LL * 1024 * 1024;
  // Single-node jobs: fused allreduces up to this size reduce through node
  // shared memory (this much per rank); 0 always uses MPI.
  int64_t shm_allreduce_bytes = 4LL * 1024 * 1024;
  // Jobs spanning hosts with the same number of ranks on each: fused
  // allreduces reduce within each host through its shared memory, then
  // across hosts between ranks of equal local rank (see
  // mpi_shm_allreduce.h). kAuto: whenever the layout allows it.
  Choice hierarchical_allreduce = Choice::kAuto;
  // Jobs spanning hosts with more than one rank on some host: allgathers
  // gather within each host, exchange host blocks between one leader per
  // host, then broadcast within the host (see mpi_hier_allgather.h).
  // kAuto: whenever the layout allows it.
  Choice hierarchical_allgather = Choice::kAuto;
  // Whether allreduces MPI would carry go around a ring of point-to-point
  // messages reduced by hbcore (mpi_ring_allreduce.h). kAuto: in jobs
  // across hosts.
  Choice ring_allreduce = Choice::kAuto;
  // Upper bound on how long an idle background thread sleeps between checks
  // for work announced by other ranks (milliseconds).
  double cycle_time_ms = 1.0;
  // Whether the background thread watches its queue for a moment after a
  // cycle before it sleeps (runtime.h, SpinForWork). kAuto: when the host
  // has a core for each local rank's background and calling threads.
  Choice idle_spin = Choice::kAuto;
  // Whether each rank binds its threads to a CPU of its own at init
  // (rank_binding.h). kAuto: when the host runs one rank per CPU.
  Choice bind_ranks = Choice::kAuto;
  // Response-cache slots; 0 disables the bit-vector fast path.
  int cache_capacity = 1024;
  // Bytes of cached small Sum/Average CPU allreduces whose payload travels
  // with the readiness bits (controller.h, the fast path); 0 disables it.
  int64_t fast_path_bytes = 8192;
  // Chrome-trace output path; empty disables the timeline, and so does
  // "DYNAMIC" (Horovod's value for "started later by hb_start_timeline",
  // which hbcore allows whatever the setting).
  std::string timeline_path;
  // CYCLE_START markers in the timeline.
  bool timeline_mark_cycles = false;
  // Report tensors submitted by only some ranks after this long; 0 disables.
  double stall_check_seconds = 60.0;
  // Shut the job down when a stall lasts this long; 0 disables.
  double stall_shutdown_seconds = 0.0;
  // The variable stall_shutdown_seconds came from, for messages: the knob,
  // or in an elastic rank without it the elastic timeout (ParseConfig).
  std::string stall_shutdown_setting = "HB_STALL_SHUTDOWN_TIME_SECONDS";
  LogLevel log_level = LogLevel::kWarning;
  // Process sets may be added and removed after init (collectively, see
  // hb_add_process_set); without it they can only be given to hb_init.
  bool dynamic_process_sets = false;
  // One CPU id per local rank for the background thread; empty: unpinned
  // (thread_affinity.h).
  std::string thread_affinity;
  // Where NCCL and the CUDA runtime are loaded from at init (empty: the
  // default sonames); GPU requests need both (see gpu_libraries.h).
  std::string nccl_library;
  std::string cuda_runtime_library;
  // The core does nothing with it: the Python front end reads it (through
  // hb_config_string) to skip its check that a world of one is not part of
  // a larger job (TF_CONFIG, Slurm, another MPI launcher's variables).
  bool ignore_tf_config = false;
  // The allreduce pipeline's piece size; 0: the backend's own.
  int64_t pipeline_piece_bytes = 0;
  // Autotune (autotune.h): whether rank 0's tuner runs, its CSV log, and
  // Horovod's sampling settings. The core measures and applies; the tuner
  // that chooses lives in the Python front end.
  bool autotune = false;
  std::string autotune_log;
  int autotune_warmup_samples = 3;
  int autotune_steps_per_sample = 10;
  int autotune_max_samples = 20;
  double autotune_noise = 0.8;
  // The knobs given explicitly (override or variable), by name: autotune
  // holds them fixed, as Horovod does.
  std::set<std::string> explicit_knobs;

  // "KEY=value" lines, one per knob, for logs and hb_config_string.
  std::string ToString() const;
};

// The knob table (hb_knobs): name, variable, type, default, bounds, unit.
const hb_knob* Knobs(int* count);

// Programmatic overrides: (knob name, value as text), as hb_init takes them.
using ConfigOverrides = std::vector<std::pair<std::string, std::string>>;

// Reads every knob from `overrides`, else the environment through `getenv`
// (injectable for tests; the HB_ name wins over the HOROVOD_ alias; an
// empty variable counts as unset), else the table's default. A value that
// does not parse or is out of range, or an unknown or repeated override
// name, yields HB_ERR_CONFIG naming the knob, where it came from and the
// value.
using EnvLookup = std::function<const char*(const char*)>;
Status ParseConfig(const EnvLookup& getenv, const ConfigOverrides& overrides,
                   Config* config);
inline Status ParseConfig(const EnvLookup& getenv, Config* config) {
  return ParseConfig(getenv, ConfigOverrides(), config);
}

// ParseConfig over the process environment: the core's only getenv.
Status ReadConfig(const ConfigOverrides& overrides, Config* config);

}  // namespace hbcore

#endif  // HBCORE_COMMON_CONFIG_H_
