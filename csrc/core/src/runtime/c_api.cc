// The C API: a thin shell over the one Runtime of the process.
#include "hbcore/c_api.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/memory.h"
#include "common/config.h"
#include "gpu/gpu_libraries.h"
#include "runtime/runtime.h"
#include "transport/transport.h"

#ifndef HBCORE_VERSION
#define HBCORE_VERSION "0.0.0"
#endif

namespace {

// The one runtime object (docs/architecture.md, "The one runtime object"):
// created by hb_init, destroyed by hb_shutdown. The mutex orders init/shutdown against each other and
// against readers of the pointer.
std::mutex g_mu;
std::unique_ptr<hbcore::Runtime> g_runtime;

// Autotune's record of the last runtime, kept at hb_shutdown (its loop has
// ended, so the record is complete and the same on every rank), for
// hb_autotune_state / hb_autotune_history until the next hb_init.
struct TuningRecord {
  std::vector<std::pair<uint64_t, hbcore::Tuning>> history;
  hbcore::Tuning current;
  unsigned tunable = 0;
  bool valid = false;
};
TuningRecord g_last_tuning;

void CopyError(const std::string& text, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  size_t n = std::min(text.size(), err_len - 1);
  std::memcpy(err, text.data(), n);
  err[n] = '\0';
}

hb_tuning ToCTuning(const hbcore::Tuning& t) {
  hb_tuning c;
  c.fusion_threshold = t.fusion_threshold_bytes;
  c.cycle_time = t.cycle_time_ms;
  c.cache_enabled = t.cache_enabled ? 1 : 0;
  c.hierarchical_allreduce = t.hierarchical_allreduce ? 1 : 0;
  c.hierarchical_allgather = t.hierarchical_allgather ? 1 : 0;
  c.ring_allreduce = t.ring_allreduce ? 1 : 0;
  c.pipeline_piece_bytes = t.pipeline_piece_bytes;
  return c;
}

int NotInitialized(char* err, size_t err_len) {
  CopyError("hbcore has not been initialized; call hbcore.init() first", err,
            err_len);
  return HB_ERR_NOT_INITIALIZED;
}

// Copies hb_init's or hb_check_config's entries; false (with `err` set)
// for a null name or value.
bool ToOverrides(const hb_config_entry* config, int count,
                 hbcore::ConfigOverrides* out, char* err, size_t err_len) {
  for (int i = 0; i < count; ++i) {
    if (config == nullptr || config[i].name == nullptr ||
        config[i].value == nullptr) {
      CopyError("configuration entry " + std::to_string(i) +
                    " has no name or no value",
                err, err_len);
      return false;
    }
    out->emplace_back(config[i].name, config[i].value);
  }
  return true;
}

// A process-set operation's result, waited for by the calling thread
// without holding g_mu (the background thread completes it, or fails it
// at shutdown, before the runtime is destroyed).
struct SetOpWaiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int code = HB_OK;
  std::string message;
  int value = -1;

  static void Done(void* user, int status, const char* message,
                   const hb_result* result) {
    SetOpWaiter& w = *static_cast<SetOpWaiter*>(user);
    std::lock_guard<std::mutex> lock(w.mu);
    w.code = status;
    if (message != nullptr) w.message = message;
    if (result != nullptr) w.value = result->last_joined_rank;
    w.done = true;
    w.cv.notify_all();
  }

  int Wait(char* err, size_t err_len) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return done; });
    if (code != HB_OK) CopyError(message, err, err_len);
    return code;
  }
};

// Submits one process-set operation on `runtime` (g_mu held by the
// caller); the caller then waits on `waiter` with g_mu released.
int SubmitSetOp(hbcore::Runtime* runtime, hbcore::OpType op,
                const std::vector<int>& ranks, int id, bool at_init,
                SetOpWaiter* waiter, char* err, size_t err_len) {
  hbcore::Status s = runtime->SubmitProcessSetOp(
      op, ranks, id, at_init, &SetOpWaiter::Done, waiter);
  if (!s.ok()) CopyError(s.message(), err, err_len);
  return s.code();
}

// A process-set operation after init: submitted under g_mu, waited for
// without it; `*value` gets its result.
int RunSetOp(hbcore::OpType op, const std::vector<int>& ranks, int id,
             int* value, char* err, size_t err_len) {
  SetOpWaiter waiter;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_runtime) {
      return NotInitialized(err, err_len);
    }
    const int code = SubmitSetOp(g_runtime.get(), op, ranks, id, false,
                                 &waiter, err, err_len);
    if (code != HB_OK) return code;
  }
  const int code = waiter.Wait(err, err_len);
  if (code == HB_OK && value != nullptr) *value = waiter.value;
  return code;
}

template <typename F>
int WithTopology(F field) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime ? field(g_runtime->topology()) : -1;
}

}  // namespace

extern "C" {

const hb_knob* hb_knobs(int* count) { return hbcore::Knobs(count); }

int hb_check_config(const hb_config_entry* config, int count, char* err,
                    size_t err_len) {
  hbcore::ConfigOverrides overrides;
  if (!ToOverrides(config, count, &overrides, err, err_len)) {
    return HB_ERR_CONFIG;
  }
  hbcore::Config parsed;
  hbcore::Status s = hbcore::ParseConfig(
      [](const char*) -> const char* { return nullptr; }, overrides, &parsed);
  if (!s.ok()) CopyError(s.message(), err, err_len);
  return s.code();
}

int hb_init(int64_t comm, const hb_config_entry* config, int config_count,
            const int* set_ranks, const int* set_sizes, int num_sets,
            char* err, size_t err_len) {
  std::lock_guard<std::mutex> lock(g_mu);
  // A runtime stays until this rank's hb_shutdown, also once a peer's
  // shutdown (or a stall shutdown) stopped it: its requests then keep
  // failing with that shutdown's error, as in Horovod. Replacing it here
  // would enter MPI_Comm_dup, which a peer that already left never joins.
  if (g_runtime) return HB_OK;
  hbcore::ConfigOverrides overrides;
  if (!ToOverrides(config, config_count, &overrides, err, err_len)) {
    return HB_ERR_CONFIG;
  }
  hbcore::Config parsed;
  hbcore::Status s = hbcore::ReadConfig(overrides, &parsed);
  if (s.ok()) s = hbcore::Runtime::Create(comm, parsed, &g_runtime);
  if (!s.ok()) {
    CopyError(s.message(), err, err_len);
    return s.code();
  }
  // The process sets of init, added in order through the same negotiation
  // as later adds (so a rank outside a communicator-defined set learns its
  // members); they get ids 1, 2, ... On a failure every rank fails the same
  // way and shuts the runtime down.
  for (int i = 0, offset = 0; i < num_sets; offset += set_sizes[i], ++i) {
    std::vector<int> ranks(set_ranks + offset,
                           set_ranks + offset + set_sizes[i]);
    SetOpWaiter waiter;
    int code = SubmitSetOp(g_runtime.get(), hbcore::OpType::kProcessSetAdd,
                           ranks, 0, true, &waiter, err, err_len);
    if (code == HB_OK) code = waiter.Wait(err, err_len);
    if (code != HB_OK) {
      g_runtime.reset();
      return code;
    }
  }
  // A process that exits without hb_shutdown still tells its peers. This
  // handler is registered after MPI's finalizer, so it runs before it.
  static bool exit_handler_registered = false;
  if (!exit_handler_registered) {
    std::atexit([] { hb_shutdown(); });
    exit_handler_registered = true;
  }
  return HB_OK;
}

int hb_shutdown(void) {
  std::unique_ptr<hbcore::Runtime> runtime;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    runtime.swap(g_runtime);
  }
  // Stopped and destroyed outside the lock: the negotiated shutdown waits
  // for peers.
  if (runtime) {
    runtime->Shutdown();
    std::lock_guard<std::mutex> lock(g_mu);
    g_last_tuning.history = runtime->TuningHistory();
    g_last_tuning.current = runtime->CurrentTuning();
    g_last_tuning.tunable = runtime->TunableMask();
    g_last_tuning.valid = true;
  }
  runtime.reset();
  return HB_OK;
}

int hb_is_initialized(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime != nullptr;
}

int hb_rank(void) {
  return WithTopology([](const hbcore::Topology& t) { return t.rank; });
}
int hb_size(void) {
  return WithTopology([](const hbcore::Topology& t) { return t.size; });
}
int hb_local_rank(void) {
  return WithTopology([](const hbcore::Topology& t) { return t.local_rank; });
}
int hb_spin_wait(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime && g_runtime->spin_wait() ? 1 : 0;
}
int hb_local_size(void) {
  return WithTopology([](const hbcore::Topology& t) { return t.local_size; });
}
int hb_cross_rank(void) {
  return WithTopology([](const hbcore::Topology& t) { return t.cross_rank; });
}
int hb_cross_size(void) {
  return WithTopology([](const hbcore::Topology& t) { return t.cross_size; });
}
int hb_is_homogeneous(void) {
  return WithTopology(
      [](const hbcore::Topology& t) { return t.homogeneous ? 1 : 0; });
}
int hb_mpi_threads_supported(void) {
  return WithTopology(
      [](const hbcore::Topology& t) { return t.threads_multiple ? 1 : 0; });
}

int hb_enqueue(const hb_request* requests, int count, char* err,
               size_t err_len) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime) {
    return NotInitialized(err, err_len);
  }
  hbcore::Status s = g_runtime->Enqueue(requests, count);
  if (!s.ok()) CopyError(s.message(), err, err_len);
  return s.code();
}

int hb_add_process_set(const int* ranks, int n, int* id, char* err,
                       size_t err_len) {
  std::vector<int> members(ranks, ranks + (ranks ? n : 0));
  return RunSetOp(hbcore::OpType::kProcessSetAdd, members, 0, id, err,
                  err_len);
}

int hb_remove_process_set(int id, int* removed, char* err, size_t err_len) {
  return RunSetOp(hbcore::OpType::kProcessSetRemove, {}, id, removed, err,
                  err_len);
}

int hb_start_timeline(const char* path, int mark_cycles, char* err,
                      size_t err_len) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime) {
    return NotInitialized(err, err_len);
  }
  hbcore::Status s = g_runtime->StartTimeline(path != nullptr ? path : "",
                                              mark_cycles != 0);
  if (!s.ok()) CopyError(s.message(), err, err_len);
  return s.code();
}

int hb_stop_timeline(char* err, size_t err_len) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime) return NotInitialized(err, err_len);
  g_runtime->StopTimeline();
  return HB_OK;
}

int hb_process_set_info(int id, int* size, int* rank, int* ranks,
                        int max_ranks) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime) return HB_ERR_NOT_INITIALIZED;
  hbcore::ProcessSetInfo info;
  if (!g_runtime->ProcessSet(id, &info)) return HB_ERR_INVALID_ARGUMENT;
  if (size != nullptr) *size = info.size();
  if (rank != nullptr) *rank = info.SetRank(g_runtime->topology().rank);
  for (int i = 0; ranks != nullptr && i < max_ranks && i < info.size(); ++i) {
    ranks[i] = info.ranks[i];
  }
  return HB_OK;
}

int hb_process_set_ids(int* ids, int max_ids) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime) return -1;
  std::vector<int> all = g_runtime->ProcessSetIds();
  const int n = static_cast<int>(all.size());
  for (int i = 0; ids != nullptr && i < max_ids && i < n; ++i) ids[i] = all[i];
  return static_cast<int>(all.size());
}

void hb_flush(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime) g_runtime->Flush();
}

const char* hb_version(void) { return HBCORE_VERSION; }

const char* hb_mpi_library_version(void) {
  static const std::string version = hbcore::MpiLibraryVersion();
  return version.c_str();
}

int hb_nccl_built(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime && g_runtime->gpu_libraries() != nullptr ? 1 : 0;
}

int hb_probe_gpu(const char* nccl_library, const char* cuda_runtime_library,
                 int count_devices, char* buf, size_t buf_len) {
  // Paths: the arguments, else the knobs' environment variables (the one
  // reader of the environment, ReadConfig), else the default sonames.
  hbcore::Config config;
  hbcore::ConfigOverrides overrides;
  if (nccl_library != nullptr && nccl_library[0] != '\0') {
    overrides.emplace_back("nccl_library", nccl_library);
  }
  if (cuda_runtime_library != nullptr && cuda_runtime_library[0] != '\0') {
    overrides.emplace_back("cuda_runtime_library", cuda_runtime_library);
  }
  std::string text;
  std::unique_ptr<hbcore::GpuLibraries> libs;
  hbcore::Status s = hbcore::ReadConfig(overrides, &config);
  if (s.ok()) {
    s = hbcore::GpuLibraries::Load(config.nccl_library,
                                   config.cuda_runtime_library, &libs);
  }
  if (s.ok()) {
    text = "nccl_library=" + libs->nccl_path() + "\nnccl_version=" +
           libs->NcclVersion() + "\ncuda_runtime_library=" +
           libs->cuda_runtime_path() + "\ncuda_runtime_version=" +
           libs->CudaRuntimeVersion() + "\n";
    if (count_devices) {
      int devices = 0;
      if (libs->cuda().GetDeviceCount(&devices) != hbcore::kCudaSuccess) {
        devices = 0;
      }
      text += "cuda_devices=" + std::to_string(devices) + "\n";
    }
  } else {
    text = "error=" + s.message() + "\n";
  }
  CopyError(text, buf, buf_len);
  return s.ok() ? 1 : 0;
}

int hb_gpu_malloc(int device, size_t bytes, void** ptr, char* err,
                  size_t err_len) {
  std::lock_guard<std::mutex> lock(g_mu);
  hbcore::Status s =
      g_runtime ? g_runtime->GpuMalloc(device, bytes, ptr)
                : hbcore::Status(HB_ERR_NOT_INITIALIZED,
                                 "hbcore is not initialized");
  if (!s.ok()) CopyError(s.message(), err, err_len);
  return s.code();
}

void hb_gpu_free(int device, void* ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime && ptr != nullptr) g_runtime->GpuFree(device, ptr);
}

void* hb_host_malloc(size_t bytes) {
  return hbcore::AllocateHost(static_cast<int64_t>(bytes));
}

void hb_host_free(void* ptr) { hbcore::FreeHost(ptr); }

int hb_autotune_state(hb_tuning* current, unsigned* tunable) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime && !g_last_tuning.valid) return HB_ERR_NOT_INITIALIZED;
  if (current != nullptr) {
    *current = ToCTuning(g_runtime ? g_runtime->CurrentTuning()
                                   : g_last_tuning.current);
  }
  if (tunable != nullptr) {
    *tunable = g_runtime ? g_runtime->TunableMask() : g_last_tuning.tunable;
  }
  return HB_OK;
}

int hb_autotune_wait_sample(double timeout_s, int* got, hb_tuning* params,
                            double* score, double* seconds, char* err,
                            size_t err_len) {
  std::shared_ptr<hbcore::AutotuneChannel> channel;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_runtime) return NotInitialized(err, err_len);
    channel = g_runtime->autotune_channel();
  }
  if (!channel) {
    CopyError("autotune samples are measured only on rank 0 with "
              "HB_AUTOTUNE=1", err, err_len);
    return HB_ERR_INVALID_ARGUMENT;
  }
  // Without g_mu: the channel outlives the runtime while we hold it.
  hbcore::AutotuneSample sample;
  *got = 0;
  switch (channel->WaitSample(timeout_s, &sample)) {
    case hbcore::AutotuneChannel::Wait::kClosed:
      CopyError("hbcore has shut down", err, err_len);
      return HB_ERR_SHUTDOWN;
    case hbcore::AutotuneChannel::Wait::kTimeout:
      return HB_OK;
    case hbcore::AutotuneChannel::Wait::kSample:
      break;
  }
  *got = 1;
  *params = ToCTuning(sample.tuning);
  *score = sample.score;
  *seconds = sample.seconds;
  return HB_OK;
}

int hb_autotune_propose(const hb_tuning* next, int final, char* err,
                        size_t err_len) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime) return NotInitialized(err, err_len);
  if (next->fusion_threshold < 0 || !(next->cycle_time > 0) ||
      next->pipeline_piece_bytes < 0) {
    CopyError("autotune proposal out of range: fusion threshold and "
              "pipeline piece must be >= 0, cycle time > 0", err, err_len);
    return HB_ERR_INVALID_ARGUMENT;
  }
  hbcore::Tuning t;
  t.fusion_threshold_bytes = next->fusion_threshold;
  t.cycle_time_ms = next->cycle_time;
  t.cache_enabled = next->cache_enabled != 0;
  t.hierarchical_allreduce = next->hierarchical_allreduce != 0;
  t.hierarchical_allgather = next->hierarchical_allgather != 0;
  t.ring_allreduce = next->ring_allreduce != 0;
  t.pipeline_piece_bytes = next->pipeline_piece_bytes;
  hbcore::Status s = g_runtime->ProposeTuning(t, final != 0);
  CopyError(s.message(), err, err_len);
  return s.code();
}

int hb_autotune_history(int64_t* cycles, hb_tuning* applied, int max) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_runtime && !g_last_tuning.valid) return 0;
  const auto history =
      g_runtime ? g_runtime->TuningHistory() : g_last_tuning.history;
  for (int i = 0; i < max && i < static_cast<int>(history.size()); ++i) {
    cycles[i] = static_cast<int64_t>(history[i].first);
    applied[i] = ToCTuning(history[i].second);
  }
  return static_cast<int>(history.size());
}

size_t hb_config_string(char* buf, size_t buf_len) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string text = g_runtime ? g_runtime->config().ToString() : "";
  CopyError(text, buf, buf_len);
  return text.size();
}

}  // extern "C"
