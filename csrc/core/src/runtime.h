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
//  4. Several ranks may ask for the same cycle at once: the duplicates carry
//     the same number and cause one cycle, so the cycle count stays equal.
//  5. A wake-up must reach an idle peer while that peer only polls: it may
//     not depend on the peer entering a collective (MPICH delivered
//     any-source receives from other hosts only then, which stalled every
//     multi-host job until the stall check; mpi_control_comm.h says how the
//     MPI control plane keeps this).
//  6. At a negotiated shutdown every rank drains the wake-ups still in
//     flight (ControlComm::Drain), so nothing is left for MPI_Finalize.
// While this rank waits for peers (it has tensors pending), the poll
// interval starts at a few microseconds after each cycle and grows to at
// most 100 us; with nothing pending it is HB_CYCLE_TIME.
#ifndef HBCORE_RUNTIME_H_
#define HBCORE_RUNTIME_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "config.h"
#include "controller.h"
#include "executor.h"
#include "tensor_entry.h"
#include "timeline.h"
#include "transport.h"

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
  const Config& config() const { return config_; }

  Status Enqueue(const hb_request* requests, int count);
  // Ends the current burst: what is queued is negotiated without waiting
  // for more submissions (a front-end thread is about to wait for results).
  void Flush();
  // True once the background loop ended (a shutdown anywhere, or a failure).
  bool stopped();
  // Negotiated shutdown: every pending request on every rank fails with a
  // message naming this rank. Blocks until the background thread ends.
  void Shutdown();

 private:
  explicit Runtime(const Config& config);
  Status Start(int64_t comm);
  Status CheckSharedSettings(bool timeline_ok);
  Status Validate(const hb_request& r, TensorEntry* entry) const;

  // Background thread.
  void Loop();
  // Returns once a cycle must run.
  void WaitForCycle();
  // Polls for peers' wake-ups; true if one asked for the next cycle.
  bool PeerAskedForCycle();
  // Holds the start of a cycle while this rank's queue is still growing.
  void AwaitEndOfBurst(std::unique_lock<std::mutex>& lock);
  void Execute(const CycleOutput& cycle);
  // Runs the completion callbacks of one executed batch (null entries:
  // tensors this rank did not submit, e.g. after join).
  void Finish(const std::vector<TensorEntry*>& entries,
              const std::vector<TensorResult>& results);
  void FailEverything(const Status& status);

  Config config_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Executor> executor_;
  Timeline timeline_;
  std::thread thread_;

  // Shared with front-end threads, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TensorEntry> queue_;
  std::unordered_set<std::string> in_flight_;
  bool loop_waiting_ = false;  // the background thread sleeps on cv_
  bool flush_requested_ = false;  // Flush() since the queue was last drained
  bool shutdown_requested_ = false;
  std::string shutdown_reason_;
  bool stopped_ = false;       // the loop ended; enqueue fails with:
  std::string stop_reason_;

  // Background thread only.
  PendingTable pending_;
  uint64_t next_cycle_ = 0;
  int64_t woken_for_ = -1;     // highest cycle a peer asked for
  bool force_cycle_ = false;
  Clock::time_point last_cycle_;
};

}  // namespace hbcore

#endif  // HBCORE_RUNTIME_H_
