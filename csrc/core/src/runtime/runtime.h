// The one runtime object of a process: created by hb_init, destroyed by
// hb_shutdown. It owns the queue, the background thread and everything the
// thread uses (transport, controller, executor, timeline).
//
// Wake-up protocol (why idle ranks neither spin nor miss a cycle):
//  1. Cycles are numbered; every rank runs every cycle, so all ranks agree
//     on the number of the next one.
//  2. A rank that has new work (a submitted tensor, a shutdown, a stall
//     check due) and was not already asked for the next cycle sends a
//     wake-up carrying that cycle's number to every peer, then runs it.
//  3. An idle rank sleeps on its queue's condition variable with a timeout
//     and, at each timeout, polls for wake-ups. A wake-up for a cycle it has
//     not run yet makes it run that cycle; older ones are stale duplicates.
//     Before it sleeps, a rank may first watch its queue and poll for
//     wake-ups for a moment (HB_IDLE_SPIN, SpinForWork): the same two
//     events end the wait, so the protocol is unchanged.
//  4. Several ranks may ask for the same cycle at once: the duplicates carry
//     the same number and cause one cycle, so the cycle count stays equal.
//  5. A wake-up must reach an idle peer while that peer only polls: it may
//     not depend on the peer entering a collective (MPICH delivered
//     any-source receives from other hosts only then, which stalled every
//     multi-host job until the stall check; mpi_control_comm.h says how the
//     MPI control plane keeps this).
//  6. At a negotiated shutdown every rank drains the wake-ups still in
//     flight (ControlComm::Drain), so nothing is left for MPI_Finalize.
//
// Process sets (one more step per cycle, so one background thread serves
// them all):
//  7. Each cycle a rank first negotiates and executes the global set (set
//     0, on the core's communicator), then every other set it belongs to,
//     in ascending set id, each on that set's own communicator with that
//     set's own controller (response cache, coordinator at the set's rank
//     0, stall inspector) and executor. Fusion never crosses sets. Members
//     of a set therefore run its cycles in lockstep (every rank runs every
//     cycle, item 1), and because every rank visits the sets in the same
//     order, a rank waiting in set B's collective never holds up a set A <
//     B that its peers still need: overlapping sets cannot deadlock. Wake-
//     ups stay global: work on any set wakes every rank.
//  8. Adding and removing a set is an internal operation negotiated on the
//     global set like a collective (every rank submits it, in the same
//     order), and performed by every rank at the same point: after the
//     global set's collectives of that cycle, before the other sets run.
//     So every rank holds the same table of sets, with the same ids, at
//     every cycle, and creating a set's communicator (collective over the
//     core's communicator) pairs up.
//  9. Shutdown and the stall shutdown travel in the global set's exchange.
//     A set's coordinator that judges a stall fatal tells its members,
//     which request a shutdown; the next global exchange carries it to
//     every rank, and pending requests of every set fail.
// While this rank waits for peers (it has tensors pending), the poll
// interval starts at a few microseconds after each cycle and grows to at
// most 100 us; with nothing pending it is HB_CYCLE_TIME.
#ifndef HBCORE_RUNTIME_RUNTIME_H_
#define HBCORE_RUNTIME_RUNTIME_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "backends/backend_registry.h"
#include "common/config.h"
#include "gpu/gpu_libraries.h"
#include "negotiation/controller.h"
#include "negotiation/process_set.h"
#include "negotiation/tensor_entry.h"
#include "runtime/autotune.h"
#include "runtime/executor.h"
#include "runtime/rank_binding.h"
#include "runtime/timeline.h"
#include "transport/transport.h"

namespace hbcore {

class Runtime {
 public:
  // `comm`: see hb_init. `config` was parsed by ReadConfig (config.h).
  static Status Create(int64_t comm, const Config& config,
                       std::unique_ptr<Runtime>* out);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Topology& topology() const { return transport_->topology(); }
  // Whether front-end threads waiting for a result may spin briefly before
  // they block (hb_spin_wait); fixed by Start.
  bool spin_wait() const { return spare_cpus_; }
  const Config& config() const { return config_; }
  // NCCL and the CUDA runtime when init found them (GPU requests are
  // served), else null; gpu_missing() then says why.
  const GpuLibraries* gpu_libraries() const { return gpu_.get(); }
  const std::string& gpu_missing() const { return gpu_missing_; }
  // Device memory through the loaded CUDA runtime (see hb_gpu_malloc).
  Status GpuMalloc(int device, size_t bytes, void** ptr);
  void GpuFree(int device, void* ptr);

  Status Enqueue(const hb_request* requests, int count);
  // Submits a process-set operation (see hb_add_process_set): kProcessSetAdd
  // of `ranks` (empty: this rank is not a member and does not know them) or
  // kProcessSetRemove of set `id`. `done` gets the result (TensorResult's
  // last_joined_rank) once every rank submitted it. Without
  // HB_DYNAMIC_PROCESS_SETS only `at_init` adds are allowed.
  Status SubmitProcessSetOp(OpType op, const std::vector<int>& ranks, int id,
                            bool at_init, hb_done_fn done, void* user);
  // This rank's view of the sets (front-end threads; see hb_process_set_info).
  bool ProcessSet(int id, ProcessSetInfo* info);
  std::vector<int> ProcessSetIds();
  // Ends the current burst: what is queued is negotiated without waiting
  // for more submissions (a front-end thread is about to wait for results).
  void Flush();
  // Starts (or switches to) a timeline file on rank 0; other ranks keep no
  // timeline and return OK. Callable from any thread (Timeline locks).
  Status StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();
  // True once the background loop ended (a shutdown anywhere, or a failure).
  bool stopped();

  // Autotune (autotune.h; runtime_autotune.cc). The parameters in force
  // (background thread's copy, as of the last applied proposal), and which
  // of them the tuner may change: the hb_tuning bits (c_api.h) of those
  // that apply to this job's layout and were not set explicitly.
  Tuning CurrentTuning();
  unsigned TunableMask() const { return tunable_mask_; }
  // Rank 0 with HB_AUTOTUNE=1: the mailbox of its tuner; else null.
  std::shared_ptr<AutotuneChannel> autotune_channel() const {
    return autotune_;
  }
  // Rank 0: hands the next parameters to the background thread, which
  // carries them to every rank in its next cycle.
  Status ProposeTuning(const Tuning& tuning, bool final);
  // Every proposal this rank applied: (cycle number, parameters), in order.
  std::vector<std::pair<uint64_t, Tuning>> TuningHistory();
  // Negotiated shutdown: every pending request on every rank fails with a
  // message naming this rank. Blocks until the background thread ends.
  void Shutdown();

 private:
  explicit Runtime(const Config& config);
  Status Start(int64_t comm);
  // Compares the settings every rank must share (an error names the one
  // that differs); `same_cpu_sets`: every rank has the CPU set whose hash
  // is `cpu_set_hash` (not an error when not).
  Status CheckSharedSettings(bool timeline_ok, bool affinity_ok,
                             uint64_t cpu_set_hash, bool* same_cpu_sets);
  // HB_BIND_RANKS (rank_binding.h): binds this rank's threads, whose CPU
  // set is `cpus`, when the rule says so, and logs the decision.
  void BindRank(const std::vector<int>& cpus, bool same_cpu_sets);
  // `set`: the request's process set (checked to contain this rank).
  Status Validate(const hb_request& r, const ProcessSetInfo& set,
                  TensorEntry* entry) const;
  // The GPU part of Validate: libraries present, a type NCCL has, and the
  // entry's ready event (the front end's, or one recorded on its stream).
  Status ValidateGpu(const hb_request& r, const std::string& name,
                     TensorEntry* entry) const;
  // The sets of `requests` (front-end view); an error for an unknown set
  // or one this rank is not a member of.
  Status SetsOf(const hb_request* requests, int count,
                std::map<int, ProcessSetInfo>* sets);

  // One process set as the background thread sees it. Only members have a
  // controller and an executor; set 0 uses the transport's communicator,
  // the others their own Group.
  struct SetState {
    ProcessSetInfo info;
    std::unique_ptr<Group> group;
    std::unique_ptr<Controller> controller;
    // The data plane by device (backend_registry.h); the GPU backend goes
    // after the executor, whose scratch buffers live in its memory.
    std::unique_ptr<Backend> gpu_backend;
    BackendRegistry backends;
    std::unique_ptr<Executor> executor;
    PendingTable pending;
    bool member() const { return controller != nullptr; }
  };
  // Background thread: creates a set (collective, in lockstep).
  Status CreateSet(int id, const std::vector<int>& ranks);
  // Fills a member's backend registry and creates its executor: `cpu`
  // for host buffers, NCCL for GPU buffers when the libraries were loaded.
  void CreateExecutor(SetState* set, Backend* cpu);

  // Autotune: the starting parameters and mask (Start, after the
  // transport); applying an agreed proposal after cycle `cycle` (item 5 of
  // autotune.h); the sampler's bookkeeping of one executed response.
  void StartAutotune();
  void ApplyTuning(const std::string& proposal, uint64_t cycle);
  void TuneBackends(SetState* set);
  void RecordForAutotune(const Response& response);

  // Background thread.
  void Loop();
  // Returns once a cycle must run.
  void WaitForCycle();
  bool SpinForWork();
  // Polls for peers' wake-ups; true if one asked for the next cycle.
  bool PeerAskedForCycle();
  // Holds the start of a cycle while this rank's queue is still growing.
  void AwaitEndOfBurst(std::unique_lock<std::mutex>& lock);
  // Negotiates and executes one set's cycle; false when the loop must end
  // (after failing everything).
  bool RunSetCycle(SetState* set, const CycleInput& input,
                   CycleOutput* output);
  void Execute(SetState* set, const CycleOutput& cycle);
  // Delivers the allreduces the fast path carried (controller.h, step G).
  void FinishCarried(SetState* set, const CycleOutput& cycle,
                     Clock::time_point negotiated);
  // Performs the global set's process-set operations of a cycle, in order.
  Status ApplySetOps(const CycleOutput& cycle, const std::vector<size_t>& ops);
  // Fails one entry that never reached negotiation (its set is gone).
  void FailEntry(TensorEntry* e, const Status& status);
  bool NothingPending() const;
  // Runs the completion callbacks of one executed batch (null entries:
  // tensors this rank did not submit, e.g. after join).
  void Finish(const std::vector<TensorEntry*>& entries,
              const std::vector<TensorResult>& results);
  void FailEverything(const Status& status);

  Config config_;
  // Loaded before the transport and unloaded after it (the backends that
  // call into the libraries live in the sets, destroyed first).
  std::unique_ptr<GpuLibraries> gpu_;
  std::string gpu_missing_;
  std::unique_ptr<Transport> transport_;
  Timeline timeline_;
  // Background thread only (after Start): every set, by id; destroyed
  // before the transport whose communicator their groups came from.
  std::map<int, std::unique_ptr<SetState>> sets_;
  SetState* global_ = nullptr;  // sets_[0]
  int next_set_id_ = 1;
  std::thread thread_;
  // Fixed by Start, before any front end can see the runtime:
  // spare_cpus_: Topology::spare_cpus, kept here so front ends read it
  // without reaching into the transport. Only where it holds may a front
  // end spin while it waits for a result (hb_spin_wait): without spare
  // CPUs a spinning waiter takes the CPU from the threads it waits for.
  // idle_spin_ (HB_IDLE_SPIN): the background thread spins briefly after a
  // cycle instead of sleeping (SpinForWork); by default where the CPUs
  // are spare. (On 2 CPUs with 2 ranks it made a Python loop of 4 B
  // allreduces faster but not benchmarks/tf_ops.py, and its CPU time comes
  // from the work beside it.)
  bool spare_cpus_ = false;
  bool idle_spin_ = false;
  // Autotune: the parameters in force (background thread; read by front
  // ends under mu_ through CurrentTuning), the tunable mask, and on rank 0
  // with HB_AUTOTUNE the tuner's mailbox and the sampler.
  Tuning tuning_;
  Tuning start_tuning_;  // fixed by Start
  unsigned tunable_mask_ = 0;
  std::shared_ptr<AutotuneChannel> autotune_;
  std::unique_ptr<AutotuneSampler> sampler_;
  // HB_BIND_RANKS: set by Start when this rank bound its threads; reset
  // (the threads' CPU sets restored) once the background thread ended.
  std::unique_ptr<RankBinding> binding_;

  // Shared with front-end threads, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TensorEntry> queue_;
  // Names in flight, per set (FlightKey).
  std::unordered_set<std::string> in_flight_;
  // The front ends' copy of the set table (updated by the background thread
  // when a set op is performed), and how many set ops this rank submitted
  // (their names: every rank submits them in the same order).
  std::map<int, ProcessSetInfo> set_table_;
  uint64_t set_ops_submitted_ = 0;
  bool loop_waiting_ = false;  // the background thread sleeps on cv_
  // Set with every change of queue_ (under mu_), read without it by the
  // background thread's spin (SpinForWork).
  std::atomic<bool> work_queued_{false};
  bool flush_requested_ = false;  // Flush() since the queue was last drained
  bool tuning_proposed_ = false;  // ProposeTuning since the last cycle
  std::vector<std::pair<uint64_t, Tuning>> tuning_history_;
  bool shutdown_requested_ = false;
  std::string shutdown_reason_;
  bool stopped_ = false;       // the loop ended; enqueue fails with:
  std::string stop_reason_;

  // Background thread only.
  uint64_t next_cycle_ = 0;
  int64_t woken_for_ = -1;     // highest cycle a peer asked for
  bool force_cycle_ = false;
  Clock::time_point last_cycle_;
};

}  // namespace hbcore

#endif  // HBCORE_RUNTIME_RUNTIME_H_
