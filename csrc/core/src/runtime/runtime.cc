#include "runtime/runtime.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <sys/prctl.h>

#include "backends/nccl/nccl_backend.h"
#include "common/logging.h"
#include "negotiation/fusion.h"
#include "transport/thread_affinity.h"

namespace hbcore {
namespace {

// Control-plane waits inside a cycle sleep at most this long between polls:
// peers are mid-cycle, so they answer within microseconds.
constexpr double kCycleWaitMaxSleepUs = 50.0;
// While this rank has tensors waiting for peers, it polls at least this
// often for their wake-ups: that poll is on the critical path of a step.
constexpr double kPendingPollMaxUs = 100.0;
// A rank with nothing pending for this long polls only every
// kDormantPollUs: each poll is a timer wake-up (several microseconds of CPU
// on a VM), and a dormant rank delays nobody, because the work it submits
// itself wakes it at once. Peers wait on it only for asymmetric traffic.
constexpr auto kDormantAfter = std::chrono::seconds(1);
constexpr double kDormantPollUs = 10000.0;
// A front end submitting a step's tensors enqueues one every few
// microseconds. A cycle started on the first of them would negotiate and
// run it alone, and that collective would compete for the CPU with this
// rank's own submitting thread and wait for peers still submitting. So a
// cycle this rank starts waits until its queue stopped growing for
// kBurstQuietUs (at most kBurstMaxUs), unless a peer already asked for it
// or a front end flushed (hb_flush: one of its threads is about to wait for
// results, so the burst it was part of is over).
// Only a queue that grows within kBurstProbeUs (watched without sleeping)
// counts as a burst: a lone synchronous call starts its cycle at once.
constexpr auto kBurstProbe = std::chrono::microseconds(15);
constexpr double kBurstQuietUs = 100.0;
constexpr double kBurstMaxUs = 3000.0;
// After a cycle, a background thread allowed to spin (HB_IDLE_SPIN) watches
// its queue this long before it sleeps: a framework thread issuing one
// synchronous collective after another (an eager loop) then submits to a
// running thread, without the wake-up system calls on both sides.
constexpr auto kIdleSpin = std::chrono::microseconds(100);

// The key of an in-flight name (names are unique per process set): the
// name itself for the global set, so its hot path copies nothing; else the
// name and the set id, built in `scratch`.
const std::string& FlightKey(const std::string& name, int process_set_id,
                             std::string* scratch) {
  if (process_set_id == 0) return name;
  *scratch = name + '\x1f' + std::to_string(process_set_id);
  return *scratch;
}

}  // namespace

Runtime::Runtime(const Config& config) : config_(config) {}

Status Runtime::Create(int64_t comm, const Config& config,
                       std::unique_ptr<Runtime>* out) {
  SetLogContext(config.log_level, -1);
  std::unique_ptr<Runtime> runtime(new Runtime(config));
  Status s = runtime->Start(comm);
  if (!s.ok()) return s;
  *out = std::move(runtime);
  return Status::OK();
}

Status Runtime::GpuMalloc(int device, size_t bytes, void** ptr) {
  if (!gpu_) return Status::Unsupported("no GPU support: " + gpu_missing_);
  DeviceGuard on_device(*gpu_, device);
  if (!on_device.status().ok()) return on_device.status();
  cudaError_t e = gpu_->cuda().Malloc(ptr, bytes);
  if (e != kCudaSuccess) {
    return gpu_->CudaError("cudaMalloc of " + std::to_string(bytes) +
                               " bytes on GPU " + std::to_string(device),
                           e);
  }
  return Status::OK();
}

void Runtime::GpuFree(int device, void* ptr) {
  if (!gpu_) return;
  DeviceGuard on_device(*gpu_, device);
  if (on_device.status().ok()) gpu_->cuda().Free(ptr);
}

Status Runtime::Start(int64_t comm) {
  // GPU support is optional: without the libraries the runtime serves CPU
  // requests as before, and a GPU request fails with gpu_missing_.
  Status gpu = GpuLibraries::Load(config_.nccl_library,
                                  config_.cuda_runtime_library, &gpu_);
  if (!gpu.ok()) gpu_missing_ = gpu.message();
  Status s = CreateMpiTransport(comm, kCycleWaitMaxSleepUs, config_,
                                &transport_);
  if (!s.ok()) return s;
  const Topology& topo = transport_->topology();
  SetLogContext(config_.log_level, topo.rank);
  HB_LOG(kDebug, "effective configuration:\n" << config_.ToString());
  HB_LOG(kDebug, "hosts: " << topo.cross_size << " x " << topo.local_size
                 << " ranks; hierarchical allreduce "
                 << (topo.hierarchical_allreduce ? "on" : "off"));
  HB_LOG(kDebug, "hierarchical allgather "
                 << (topo.hierarchical_allgather ? "on" : "off"));
  HB_LOG(kDebug, "ring allreduce " << (topo.ring_allreduce ? "on" : "off"));
  if (!topo.threads_multiple) {
    HB_LOG(kWarning, "MPI does not provide MPI_THREAD_MULTIPLE; calling MPI "
                     "from other threads while hbcore runs is unsafe");
  }
  Status timeline = Status::OK();
  if (!config_.timeline_path.empty() && config_.timeline_path != "DYNAMIC" &&
      topo.rank == 0) {
    timeline = timeline_.Open(config_.timeline_path,
                              config_.timeline_mark_cycles);
    if (!timeline.ok()) {
      timeline = Status(timeline.code(), timeline.message() + " (HB_TIMELINE)");
    }
  }
  const std::vector<int>& cpu_list = topo.cpus;
  spare_cpus_ = topo.spare_cpus;
  idle_spin_ = config_.idle_spin == Choice::kAuto
                   ? spare_cpus_
                   : config_.idle_spin == Choice::kOn;
  const WaitPolicy& wait = transport_->control_wait();
  HB_LOG(kDebug, "idle spin " << (idle_spin_ ? "on" : "off")
                 << " (HB_IDLE_SPIN=" << ChoiceName(config_.idle_spin)
                 << "), waiters spin " << (spare_cpus_ ? "on" : "off")
                 << ", control waits test " << wait.spin_us << " us"
                 << (wait.yield ? " yielding" : "") << " ("
                 << CpuCount(cpu_list) << " CPUs for " << topo.local_size
                 << " local ranks)");
  int background_cpu = -1;
  const Status affinity = BackgroundThreadCpu(
      config_.thread_affinity, topo.local_rank, topo.local_size, cpu_list,
      &background_cpu);
  bool same_cpu_sets = false;
  s = CheckSharedSettings(timeline.ok(), affinity.ok(),
                          CpuListHash(cpu_list), &same_cpu_sets);
  if (!timeline.ok()) return timeline;
  if (!affinity.ok()) return affinity;
  if (!s.ok()) return s;
  BindRank(cpu_list, same_cpu_sets);
  StartAutotune();
  auto global = std::make_unique<SetState>();
  global->info = ProcessSetInfo::Global(topo.size);
  global->controller = std::make_unique<Controller>(transport_->control(),
                                                    config_, global->info);
  CreateExecutor(global.get(), transport_->cpu_backend());
  TuneBackends(global.get());
  global_ = global.get();
  set_table_[0] = global->info;
  sets_[0] = std::move(global);
  thread_ = std::thread([this] {
    Loop();
    // A tuner waiting for a sample learns that none will come.
    if (autotune_) autotune_->Close();
  });
  // Validated above on every rank; a failure here is the kernel's.
  s = PinThread(thread_, background_cpu);
  if (!s.ok()) HB_LOG(kWarning, s.message());
  return Status::OK();
}

void Runtime::BindRank(const std::vector<int>& cpus, bool same_cpu_sets) {
  const Topology& topo = transport_->topology();
  std::string why;
  const std::vector<int> slice = RankCpuSlice(
      config_.bind_ranks, cpus, topo.local_rank, topo.local_size,
      same_cpu_sets, !config_.thread_affinity.empty(), &why);
  const std::string knob =
      std::string("HB_BIND_RANKS=") + ChoiceName(config_.bind_ranks);
  if (slice.empty()) {
    HB_LOG(kDebug, "rank not bound (" << knob << ": " << why << ")");
    return;
  }
  int moved = 0;
  binding_ = RankBinding::Bind(cpus, slice, &moved);
  std::string ids;
  for (int cpu : slice) ids += (ids.empty() ? "" : ",") + std::to_string(cpu);
  HB_LOG(kDebug, "rank bound to CPU " << ids << " (" << knob << ": " << why
                 << "; " << moved << " threads)");
}

Status Runtime::CheckSharedSettings(bool timeline_ok, bool affinity_ok,
                                    uint64_t cpu_set_hash,
                                    bool* same_cpu_sets) {
  // A different cache capacity changes the length of every cycle's
  // bit-vector, a different fusion threshold the fusion plan: either would
  // corrupt the collectives, so init fails on every rank instead. Equality
  // travels through the AND-allreduce as (v, ~v): all equal iff the results
  // are still complements.
  const uint64_t cache = static_cast<uint64_t>(config_.cache_capacity);
  const uint64_t fusion = static_cast<uint64_t>(config_.fusion_threshold_bytes);
  const uint64_t shm = static_cast<uint64_t>(config_.shm_allreduce_bytes);
  const uint64_t hier = static_cast<uint64_t>(config_.hierarchical_allreduce);
  const uint64_t gather =
      static_cast<uint64_t>(config_.hierarchical_allgather);
  const uint64_t ring = static_cast<uint64_t>(config_.ring_allreduce);
  // The allreduce pipeline splits batches by it on every rank alike.
  const uint64_t piece = static_cast<uint64_t>(config_.pipeline_piece_bytes);
  // The fast path's payload layout is derived from it (controller.h).
  const uint64_t fast = static_cast<uint64_t>(config_.fast_path_bytes);
  std::vector<uint64_t> words = {cache, ~cache, fusion, ~fusion, shm, ~shm,
                                 hier, ~hier, gather, ~gather,
                                 timeline_ok ? ~uint64_t{0} : 0,
                                 affinity_ok ? ~uint64_t{0} : 0,
                                 cpu_set_hash, ~cpu_set_hash, ring, ~ring,
                                 piece, ~piece, fast, ~fast};
  Status s = transport_->control()->AllreduceAnd(&words);
  if (!s.ok()) return s;
  // Not an error: ranks may run on different CPUs (rank_binding.h).
  *same_cpu_sets = words[12] == ~words[13];
  auto differs = [](const char* name, uint64_t mine) {
    return Status(HB_ERR_CONFIG, std::string(name) +
                                     " must be the same on every rank (this "
                                     "rank has " + std::to_string(mine) + ")");
  };
  if (words[0] != ~words[1]) return differs("HB_CACHE_CAPACITY", cache);
  if (words[2] != ~words[3]) return differs("HB_FUSION_THRESHOLD", fusion);
  if (words[4] != ~words[5]) return differs("HB_SHM_ALLREDUCE_THRESHOLD", shm);
  auto choice_differs = [](const char* name, Choice mine) {
    return Status(HB_ERR_CONFIG, std::string(name) +
                                     " must be the same on every rank (this "
                                     "rank has " + ChoiceName(mine) + ")");
  };
  if (words[6] != ~words[7]) {
    return choice_differs("HB_HIERARCHICAL_ALLREDUCE",
                          config_.hierarchical_allreduce);
  }
  if (words[8] != ~words[9]) {
    return choice_differs("HB_HIERARCHICAL_ALLGATHER",
                          config_.hierarchical_allgather);
  }
  if (words[14] != ~words[15]) {
    return choice_differs("HB_RING_ALLREDUCE", config_.ring_allreduce);
  }
  if (words[16] != ~words[17]) {
    return differs("HB_PIPELINE_PIECE_BYTES", piece);
  }
  if (words[18] != ~words[19]) {
    return differs("HB_FAST_PATH_THRESHOLD", fast);
  }
  if (words[11] == 0 && affinity_ok) {
    return Status(HB_ERR_CONFIG, "HB_THREAD_AFFINITY is invalid on another "
                                 "rank (that rank's error names why)");
  }
  if (words[10] == 0) {
    return Status(HB_ERR_CONFIG, "rank 0 could not open the timeline file '" +
                                     config_.timeline_path + "' (HB_TIMELINE)");
  }
  return Status::OK();
}

bool Runtime::stopped() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

Runtime::~Runtime() { Shutdown(); }

Status Runtime::Enqueue(const hb_request* requests, int count) {
  std::vector<TensorEntry> entries(count);
  // The global set needs no lookup (the common case takes no lock here).
  std::map<int, ProcessSetInfo> sets;
  for (int i = 0; i < count; ++i) {
    if (requests[i].process_set_id != 0) {
      Status s = SetsOf(requests, count, &sets);
      if (!s.ok()) return s;
      break;
    }
  }
  for (int i = 0; i < count; ++i) {
    const int id = requests[i].process_set_id;
    Status s = Validate(requests[i], id == 0 ? global_->info : sets[id],
                        &entries[i]);
    if (!s.ok()) return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || shutdown_requested_) {
    return Status::Shutdown("hbcore has shut down: " +
                            (stopped_ ? stop_reason_ : shutdown_reason_));
  }
  std::unordered_set<std::string> batch;  // duplicates within a group
  std::string scratch;
  for (const TensorEntry& e : entries) {
    const std::string& name = e.request.name;
    const std::string& key = FlightKey(name, e.process_set_id, &scratch);
    if (in_flight_.count(key) || (count > 1 && !batch.insert(key).second)) {
      return Status(HB_ERR_DUPLICATE_NAME,
                    "a tensor named '" + name + "' is already in flight on "
                    "rank " + std::to_string(topology().rank) +
                    (e.process_set_id ? " in process set " +
                                            std::to_string(e.process_set_id)
                                      : std::string()) +
                    "; names of outstanding operations must be unique");
    }
  }
  const auto now = Clock::now();
  for (TensorEntry& e : entries) {
    e.enqueued = now;
    in_flight_.insert(FlightKey(e.request.name, e.process_set_id, &scratch));
    queue_.push_back(std::move(e));
  }
  work_queued_.store(true, std::memory_order_release);
  // Only a sleeping background thread needs the (system-call) wake-up; a
  // busy one finds the queue when its cycle ends.
  if (loop_waiting_) cv_.notify_one();
  return Status::OK();
}

Status Runtime::SubmitProcessSetOp(OpType op, const std::vector<int>& ranks,
                                   int id, bool at_init, hb_done_fn done,
                                   void* user) {
  const bool add = op == OpType::kProcessSetAdd;
  if (!at_init && !config_.dynamic_process_sets) {
    return Status::InvalidArgument(
        std::string("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 (or "
                    "HB_DYNAMIC_PROCESS_SETS=1) to allow ") +
        (add ? "adding" : "removing") +
        " process sets after hbcore initialization.");
  }
  if (add && !ranks.empty()) {
    const std::string why = CheckMembers(ranks, topology().size);
    if (!why.empty()) return Status::InvalidArgument("add_process_set: " + why);
  }
  TensorEntry e;
  e.request.rank = topology().rank;
  e.request.op = op;
  e.request.dtype = DataType::kUInt8;
  e.request.splits.assign(ranks.begin(), ranks.end());
  e.request.root_rank = id;
  e.done = done;
  e.user = user;
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || shutdown_requested_) {
    return Status::Shutdown("hbcore has shut down: " +
                            (stopped_ ? stop_reason_ : shutdown_reason_));
  }
  // Every rank submits its set operations in the same order, so the k-th
  // one has the same name everywhere; an add against a remove is then a
  // mismatch of operations, reported to every rank.
  e.request.name = "hbcore.process_set." + std::to_string(set_ops_submitted_++);
  e.enqueued = Clock::now();
  in_flight_.insert(e.request.name);
  queue_.push_back(std::move(e));
  work_queued_.store(true, std::memory_order_release);
  flush_requested_ = true;
  cv_.notify_one();
  return Status::OK();
}

bool Runtime::ProcessSet(int id, ProcessSetInfo* info) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = set_table_.find(id);
  if (it == set_table_.end()) return false;
  *info = it->second;
  return true;
}

std::vector<int> Runtime::ProcessSetIds() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> ids;
  for (const auto& kv : set_table_) ids.push_back(kv.first);
  return ids;
}

void Runtime::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return;
  flush_requested_ = true;
  cv_.notify_one();
}

Status Runtime::StartTimeline(const std::string& path, bool mark_cycles) {
  if (path.empty()) {
    return Status::InvalidArgument("start_timeline: the file path is empty");
  }
  if (topology().rank != 0) return Status::OK();
  return timeline_.Open(path, mark_cycles);
}

void Runtime::StopTimeline() { timeline_.Close(); }

void Runtime::Shutdown() {
  // A runtime whose Start failed before the transport existed has nothing
  // to stop (and no rank to name).
  if (!transport_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_ && !shutdown_requested_) {
      shutdown_requested_ = true;
      shutdown_reason_ = "rank " + std::to_string(topology().rank) +
                         " shut down hbcore (hbcore.shutdown() or process "
                         "exit)";
    }
    cv_.notify_one();
  }
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) {
      // exit() called on the background thread itself (an MPI fatal error
      // handler does that): it cannot wait for itself.
      thread_.detach();
      return;
    }
    thread_.join();
  }
  binding_.reset();  // the threads get their CPU sets back
  timeline_.Close();
}

bool Runtime::PeerAskedForCycle() {
  uint64_t asked = 0;
  if (transport_->control()->PollWake(&asked)) {
    woken_for_ = std::max<int64_t>(woken_for_, static_cast<int64_t>(asked));
  }
  return woken_for_ >= static_cast<int64_t>(next_cycle_);
}

void Runtime::AwaitEndOfBurst(std::unique_lock<std::mutex>& lock) {
  const auto start = Clock::now();
  size_t seen = queue_.size();
  while (queue_.size() == seen && !flush_requested_ &&
         Clock::now() - start < kBurstProbe) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  if (queue_.size() == seen || flush_requested_) return;
  seen = queue_.size();
  const auto deadline =
      start + std::chrono::duration<double, std::micro>(kBurstMaxUs);
  while (!shutdown_requested_ && Clock::now() < deadline) {
    // loop_waiting_ stays false: enqueues do not signal; flush and shutdown
    // do.
    cv_.wait_for(lock, std::chrono::duration<double, std::micro>(kBurstQuietUs));
    if (queue_.size() == seen || flush_requested_) return;
    seen = queue_.size();
    lock.unlock();
    const bool asked = PeerAskedForCycle();
    lock.lock();
    if (asked) return;
  }
}

bool Runtime::SpinForWork() {
  const auto until = Clock::now() + kIdleSpin;
  while (!work_queued_.load(std::memory_order_acquire)) {
    if (PeerAskedForCycle()) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return false;
}

void Runtime::WaitForCycle() {
  // A peer's wake-up seen while spinning: run the cycle. Submitted work is
  // taken below (as a burst), shutdown too.
  if (idle_spin_ && SpinForWork()) return;
  const double idle_cap_us = std::max(1.0, tuning_.cycle_time_ms * 1000.0);
  // A rank waiting for peers (tensors pending) polls every few microseconds
  // at first: that poll is on the critical path of a step. A rank with
  // nothing pending polls every HB_CYCLE_TIME from the start: its own
  // submissions wake it at once, so a peer's wake-up can only be for work
  // it has not submitted yet, and faster polls would take the CPU from the
  // framework thread collecting the cycle's results (on a 2-core host they
  // doubled the time to collect 200 finished handles).
  double interval_us = NothingPending() ? idle_cap_us : 2.0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (shutdown_requested_ || force_cycle_ || tuning_proposed_) return;
    if (!queue_.empty()) return AwaitEndOfBurst(lock);
    lock.unlock();
    const bool asked = PeerAskedForCycle();
    bool stall = false;
    const auto now = Clock::now();
    for (const auto& kv : sets_) {
      const SetState& set = *kv.second;
      stall = stall ||
              (set.member() && set.controller->StallCheckDue(set.pending, now));
    }
    lock.lock();
    if (asked || stall || shutdown_requested_) return;
    if (!queue_.empty()) return AwaitEndOfBurst(lock);
    loop_waiting_ = true;
    cv_.wait_for(lock, std::chrono::duration<double, std::micro>(interval_us));
    loop_waiting_ = false;
    double cap = std::min(idle_cap_us, kPendingPollMaxUs);
    if (NothingPending()) {
      cap = Clock::now() - last_cycle_ > kDormantAfter
                ? std::max(idle_cap_us, kDormantPollUs)
                : idle_cap_us;
    }
    interval_us = std::min(interval_us * 2, cap);
  }
}

bool Runtime::NothingPending() const {
  for (const auto& kv : sets_) {
    if (!kv.second->pending.empty()) return false;
  }
  return true;
}

void Runtime::Loop() {
  // Linux rounds every sleep of this thread up by its timer slack (50 us by
  // default), which would dominate the short sleeps of the polling backoff.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  // Named so that top -H, perf and gdb tell it from the framework's threads.
  prctl(PR_SET_NAME, "hbcore", 0UL, 0UL, 0UL);
  for (;;) {
    WaitForCycle();
    CycleInput input;
    std::vector<TensorEntry> orphans;  // their set is gone (removed)
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (TensorEntry& e : queue_) {
        auto it = sets_.find(e.process_set_id);
        if (it == sets_.end() || !it->second->member()) {
          std::string scratch;
          in_flight_.erase(FlightKey(e.request.name, e.process_set_id,
                                     &scratch));
          orphans.push_back(std::move(e));
          continue;
        }
        SetState& set = *it->second;
        if (e.request.op == OpType::kJoin) set.controller->Join();
        std::string name = e.request.name;
        set.pending.emplace(std::move(name), std::move(e));
      }
      queue_.clear();
      work_queued_.store(false, std::memory_order_relaxed);
      flush_requested_ = false;
      tuning_proposed_ = false;
      input.shutdown = shutdown_requested_;
      input.shutdown_reason = shutdown_reason_;
    }
    for (TensorEntry& e : orphans) {
      FailEntry(&e, Status::InvalidArgument(
                        "process set " + std::to_string(e.process_set_id) +
                        " was removed before tensor '" + e.request.name +
                        "' was negotiated"));
    }
    force_cycle_ = false;
    Tuning proposal;
    bool final = false;
    if (autotune_ && autotune_->TakeProposal(&proposal, &final)) {
      input.tuning = EncodeProposal(proposal, final);
    }
    if (woken_for_ < static_cast<int64_t>(next_cycle_)) {
      transport_->control()->SendWake(next_cycle_);
    }
    CycleOutput output;
    last_cycle_ = Clock::now();
    timeline_.MarkCycle(last_cycle_);
    const bool ok = RunSetCycle(global_, input, &output);
    ++next_cycle_;
    if (!ok) return;
    if (output.shutdown) {
      HB_LOG(kDebug, "shutting down: " << output.shutdown_reason);
      // Every rank leaves after this same cycle, so the collective drain
      // pairs up; a failed drain only leaves a message for MPI to report.
      Status drained = transport_->control()->Drain();
      if (!drained.ok()) {
        HB_LOG(kWarning, "draining wake-ups at shutdown: " << drained.message());
      }
      drained = transport_->alarm()->Drain();
      if (!drained.ok()) {
        HB_LOG(kWarning, "draining failure notices at shutdown: "
                             << drained.message());
      }
      FailEverything(Status::Shutdown(output.shutdown_reason));
      return;
    }
    if (!output.tuning.empty()) ApplyTuning(output.tuning, next_cycle_ - 1);
    // The other sets this rank belongs to, in ascending id (runtime.h, 7).
    for (auto& kv : sets_) {
      SetState& set = *kv.second;
      if (kv.first == 0 || !set.member()) continue;
      CycleOutput set_output;
      if (!RunSetCycle(&set, CycleInput(), &set_output)) return;
      if (set_output.shutdown) {
        // A stall judged fatal in this set: the next global exchange
        // carries the shutdown to every rank (runtime.h, 9).
        std::lock_guard<std::mutex> lock(mu_);
        if (!shutdown_requested_) {
          shutdown_requested_ = true;
          shutdown_reason_ = set_output.shutdown_reason;
        }
      }
    }
  }
}

bool Runtime::RunSetCycle(SetState* set, const CycleInput& input,
                          CycleOutput* output) {
  Status s = set->controller->RunCycle(&set->pending, input, output);
  if (!s.ok()) {
    FailEverything(Status::Shutdown(
        "hbcore negotiation failed on rank " +
        std::to_string(topology().rank) + set->info.Suffix() + ": " +
        s.message()));
    return false;
  }
  Execute(set, *output);
  if (set == global_) {
    // Set operations come after the global set's collectives of the cycle.
    std::vector<size_t> ops;
    for (size_t i = 0; i < output->responses.size(); ++i) {
      if (IsInternalOpType(static_cast<int>(output->responses[i].op))) {
        ops.push_back(i);
      }
    }
    if (!ops.empty()) s = ApplySetOps(*output, ops);
    if (!s.ok()) {
      FailEverything(Status::Shutdown("hbcore could not change the process "
                                      "sets on rank " +
                                      std::to_string(topology().rank) + ": " +
                                      s.message()));
      return false;
    }
  }
  if (set->controller->RevalidateSlots(&set->pending) || output->reannounce) {
    force_cycle_ = true;
  }
  return true;
}

void Runtime::FinishCarried(SetState* set, const CycleOutput& cycle,
                            Clock::time_point negotiated) {
  // In response order, before any batch runs: the same Commit order on
  // every rank.
  PendingTable& pending = set->pending;
  std::vector<TensorEntry*> entries;
  std::vector<TensorResult> results;
  std::vector<size_t> done;
  for (size_t i = 0; i < cycle.responses.size(); ++i) {
    if (cycle.carried[i] < 0) continue;
    const Response& r = cycle.responses[i];
    auto it = pending.find(r.name);
    TensorEntry* e = it == pending.end() ? nullptr : &it->second;
    if (e != nullptr && timeline_.enabled()) {
      timeline_.Event(r.name, "NEGOTIATE", e->enqueued, negotiated);
    }
    results.push_back(set->executor->FinishCarried(
        r, e, cycle.payload.data() + cycle.carried[i]));
    set->controller->Commit(cycle, i, e);
    if (sampler_ && set == global_) RecordForAutotune(r);
    entries.push_back(e);
    done.push_back(i);
  }
  if (entries.empty()) return;
  Finish(entries, results);
  for (size_t i : done) pending.erase(cycle.responses[i].name);
}

void Runtime::Execute(SetState* set, const CycleOutput& cycle) {
  if (cycle.responses.empty()) return;
  const auto negotiated = Clock::now();
  FinishCarried(set, cycle, negotiated);
  std::vector<FusionBatch> plan =
      PlanFusion(cycle.responses, tuning_.fusion_threshold_bytes);
  // Carried allreduces are done (FinishCarried).
  for (FusionBatch& b : plan) {
    b.erase(std::remove_if(b.begin(), b.end(),
                           [&](size_t i) { return cycle.carried[i] >= 0; }),
            b.end());
  }
  // Process-set operations run alone (fusion.h) and are performed by the
  // runtime (ApplySetOps), not by the executor.
  plan.erase(std::remove_if(plan.begin(), plan.end(),
                            [&](const FusionBatch& b) {
                              return b.empty() ||
                                     IsInternalOpType(static_cast<int>(
                                         cycle.responses[b.front()].op));
                            }),
             plan.end());
  PendingTable& pending = set->pending;
  std::vector<Executor::Batch> batches(plan.size());
  for (size_t b = 0; b < plan.size(); ++b) {
    for (size_t i : plan[b]) {
      const Response& r = cycle.responses[i];
      batches[b].responses.push_back(&r);
      auto it = pending.find(r.name);
      TensorEntry* e = it == pending.end() ? nullptr : &it->second;
      batches[b].entries.push_back(e);
      if (e != nullptr && timeline_.enabled()) {
        timeline_.Event(r.name, "NEGOTIATE", e->enqueued, negotiated);
      }
    }
  }
  // Batches finish in plan order, so the response cache changes in the
  // same order on every rank.
  set->executor->Run(batches, [&](size_t b,
                                  std::vector<TensorResult>* results) {
    const Executor::Batch& batch = batches[b];
    for (size_t k = 0; k < batch.responses.size(); ++k) {
      set->controller->Commit(cycle, plan[b][k], batch.entries[k]);
      if (sampler_ && set == global_) RecordForAutotune(*batch.responses[k]);
    }
    Finish(batch.entries, *results);
    for (size_t k = 0; k < batch.responses.size(); ++k) {
      if (batch.entries[k] != nullptr) pending.erase(batch.responses[k]->name);
    }
  });
}

void Runtime::CreateExecutor(SetState* set, Backend* cpu) {
  const int rank = set->info.SetRank(topology().rank);
  const int size = set->info.size();
  set->backends.Register(cpu);
  if (gpu_) {
    NcclBackendOptions o;
    o.gpu = gpu_.get();
    o.bootstrap = cpu;
    o.alarm = transport_->alarm();
    o.set_id = set->info.id;
    o.rank = rank;
    o.size = size;
    o.members = set->info.ranks;
    o.global_rank = topology().rank;
    o.local_rank = topology().local_rank;
    o.host_id = topology().host_id;
    o.fusion_bytes = config_.fusion_threshold_bytes;
    o.stop_requested = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return shutdown_requested_;
    };
    set->gpu_backend = std::make_unique<NcclBackend>(std::move(o));
    set->backends.Register(set->gpu_backend.get());
  } else {
    set->backends.SetGpuMissing("GPU tensors need NCCL and the CUDA runtime: " +
                                gpu_missing_);
  }
  set->executor =
      std::make_unique<Executor>(rank, size, &set->backends, &timeline_);
}

Status Runtime::CreateSet(int id, const std::vector<int>& ranks) {
  auto set = std::make_unique<SetState>();
  set->info.id = id;
  set->info.ranks = ranks;
  Status s = transport_->CreateGroup(ranks, &set->group);
  if (!s.ok()) return s;
  if (set->group) {
    HB_LOG(kDebug, "process set " << id << ": ring allreduce "
                   << (set->group->ring_allreduce() ? "on" : "off"));
    set->controller = std::make_unique<Controller>(set->group->control(),
                                                   config_, set->info);
    CreateExecutor(set.get(), set->group->cpu_backend());
    TuneBackends(set.get());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    set_table_[id] = set->info;
  }
  sets_[id] = std::move(set);
  return Status::OK();
}

Status Runtime::ApplySetOps(const CycleOutput& cycle,
                            const std::vector<size_t>& ops) {
  // Runs on every rank for the same responses in the same order, so the
  // set tables stay identical and CreateGroup's collectives pair up.
  for (size_t i : ops) {
    const Response& r = cycle.responses[i];
    auto it = global_->pending.find(r.name);
    TensorEntry* e = it == global_->pending.end() ? nullptr : &it->second;
    TensorResult result;
    if (r.is_error()) {
      result.status = Status(r.error_code, r.error);
    } else if (r.op == OpType::kProcessSetAdd) {
      std::vector<int> ranks(r.rank_dims.begin(), r.rank_dims.end());
      int existing = -1;
      for (const auto& kv : sets_) {
        if (kv.second->info.ranks == ranks) existing = kv.first;
      }
      if (existing >= 0) {
        result.status = Status::InvalidArgument(
            "Attempted to add a duplicate process set: process set " +
            std::to_string(existing) + " has the same " + RankList(ranks));
      } else {
        const int id = next_set_id_++;
        Status s = CreateSet(id, ranks);
        if (!s.ok()) return s;
        result.last_joined_rank = id;
        HB_LOG(kDebug, "added process set " << id << " (" << RankList(ranks)
                                            << ")");
      }
    } else {
      const int id = r.root_rank;
      auto found = sets_.find(id);
      result.last_joined_rank = 0;
      if (id != 0 && found != sets_.end()) {
        std::unique_ptr<SetState> set = std::move(found->second);
        sets_.erase(found);
        {
          std::lock_guard<std::mutex> lock(mu_);
          set_table_.erase(id);
        }
        const Status gone = Status::InvalidArgument(
            "process set " + std::to_string(id) + " (" +
            RankList(set->info.ranks) +
            ") was removed while this collective was pending");
        for (auto& kv : set->pending) FailEntry(&kv.second, gone);
        result.last_joined_rank = 1;
        HB_LOG(kDebug, "removed process set " << id);
      }
    }
    Finish({e}, {result});
    if (e != nullptr) global_->pending.erase(r.name);
  }
  return Status::OK();
}

void Runtime::FailEntry(TensorEntry* e, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string scratch;
    in_flight_.erase(FlightKey(e->request.name, e->process_set_id, &scratch));
  }
  hb_result out{nullptr, 0, -1};
  e->done(e->user, status.code(), status.message().c_str(), &out);
}

void Runtime::Finish(const std::vector<TensorEntry*>& entries,
                     const std::vector<TensorResult>& results) {
  // Names leave in_flight_ before any callback runs, so a front end may
  // resubmit a name as soon as it learns the tensor is done. The callbacks
  // then run back to back: a thread waiting on them in order finds each one
  // done instead of sleeping and being woken once per tensor.
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string scratch;
    for (TensorEntry* e : entries) {
      if (e != nullptr) {
        in_flight_.erase(
            FlightKey(e->request.name, e->process_set_id, &scratch));
      }
    }
  }
  for (size_t k = 0; k < entries.size(); ++k) {
    if (entries[k] == nullptr) continue;
    const TensorResult& result = results[k];
    hb_result out;
    out.received_splits = result.received_splits.data();
    out.num_received_splits = static_cast<int>(result.received_splits.size());
    out.last_joined_rank = result.last_joined_rank;
    entries[k]->done(entries[k]->user, result.status.code(),
                     result.status.message().c_str(), &out);
  }
}

void Runtime::FailEverything(const Status& status) {
  std::vector<TensorEntry> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_reason_ = status.message();
    queued.swap(queue_);
    in_flight_.clear();
  }
  hb_result out{nullptr, 0, -1};
  // Every set's pending requests, in ascending set id.
  for (auto& set : sets_) {
    for (auto& kv : set.second->pending) {
      kv.second.done(kv.second.user, status.code(), status.message().c_str(),
                     &out);
    }
    set.second->pending.clear();
  }
  for (TensorEntry& e : queued) {
    e.done(e.user, status.code(), status.message().c_str(), &out);
  }
}

}  // namespace hbcore
