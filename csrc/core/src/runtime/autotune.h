// Autotune (HB_AUTOTUNE, Horovod's HOROVOD_AUTOTUNE): the parameters the
// runtime may change while a job trains, how rank 0 measures them, and the
// mailbox through which rank 0's tuner (hbcore/autotune/, Python: the
// optimiser is scikit-learn's Gaussian process) reads scores and proposes
// the next parameters.
//
// Cross-rank contract (every rank applies the same parameters at the same
// cycle, with one extra message per sample):
//  1. Every rank starts from the same Tuning (Runtime::Start builds it from
//     the validated configuration and the layout's decisions, which init
//     checks are equal on every rank).
//  2. Rank 0 alone measures (AutotuneSampler::Record, after each executed
//     batch of the global set). A sample is steps_per_sample steps, by
//     Horovod's rule: a step ends when a tensor name comes round again, so
//     the sample closes at the first response whose name was already
//     executed steps_per_sample times since the sample began. Its score is
//     the bytes of the collectives executed in it per second of wall time
//     (bytes per step are fixed for a job, so the score is the inverse of
//     the step time, comparable across samples).
//  3. A closed sample goes to the tuner (AutotuneChannel::WaitSample); rank
//     0 measures nothing more until the tuner proposes the next Tuning
//     (AutotuneChannel::Propose), so every sample measures one Tuning only.
//  4. Rank 0 carries the proposal in the request list of its next cycle
//     (taking the slow path for it); the coordinator copies it into the
//     response list, whose broadcast brings it to every rank.
//  5. Every rank applies it after executing that cycle's responses of the
//     global set and its process-set operations, before the other sets'
//     cycles (Runtime::ApplyTuning): the same point of the same cycle on
//     every rank, with no collective in flight. Rank 0 then starts the next
//     sample.
//  6. A proposal marked final ends tuning: nothing is measured any more and
//     the parameters stay as they are for the rest of the job.
#ifndef HBCORE_AUTOTUNE_H_
#define HBCORE_AUTOTUNE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/message.h"

namespace hbcore {

// The tunable parameters, identical on every rank at every cycle.
struct Tuning {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 1.0;
  bool cache_enabled = true;
  // Data-plane switches, meaningful where the layout built the path
  // (Topology): turning one on where it was not built does nothing.
  bool hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  bool ring_allreduce = false;
  int64_t pipeline_piece_bytes = 0;  // 0: the backend's own

  // A compact text form for the response list ("key=value;" pairs).
  std::string Serialize() const;
  bool Parse(const std::string& text);
  // "fusion_threshold=... cycle_time=... ..." with the knobs' names, for
  // logs: the same names pin the values next time.
  std::string ToString() const;
  bool operator==(const Tuning& other) const {
    return Serialize() == other.Serialize();
  }
};

// One closed sample (rank 0).
struct AutotuneSample {
  Tuning tuning;
  double score = 0;    // bytes per second
  double seconds = 0;  // its wall time
  int64_t bytes = 0;
  int steps = 0;
};

// Rank 0's measurement (contract items 2 and 3); background thread only.
class AutotuneSampler {
 public:
  explicit AutotuneSampler(int steps_per_sample)
      : steps_per_sample_(steps_per_sample) {}
  // Starts a sample measuring `tuning` now.
  void Start(const Tuning& tuning);
  // Stops measuring for good (after a final proposal).
  void Stop() { measuring_ = false; }
  // Counts one executed response of `bytes`; returns true, with the sample
  // in `out`, when this response closed the sample (it is not counted: it
  // begins the step after the sample). Measuring then pauses until Start.
  bool Record(const Response& response, int64_t bytes, AutotuneSample* out);

 private:
  int steps_per_sample_;
  bool measuring_ = false;
  Tuning tuning_;
  std::chrono::steady_clock::time_point start_;
  int64_t bytes_ = 0;
  std::unordered_map<std::string, int> seen_;  // executions per name
};

// The mailbox between rank 0's background thread and its tuner thread.
// Shared (shared_ptr) by the runtime and a tuner waiting in the C API, so a
// waiter outlives neither: Close() at shutdown wakes it.
class AutotuneChannel {
 public:
  enum class Wait { kSample, kTimeout, kClosed };
  // Background thread: a closed sample for the tuner.
  void Publish(const AutotuneSample& sample);
  // Tuner thread: the next sample, waiting at most `timeout_s`.
  Wait WaitSample(double timeout_s, AutotuneSample* out);
  // Tuner thread: the Tuning to apply next; `final` ends tuning.
  void Propose(const Tuning& tuning, bool final);
  // Background thread: takes the proposal, if one is waiting.
  bool TakeProposal(Tuning* tuning, bool* final);
  bool HasProposal();
  void Close();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<AutotuneSample> samples_;
  bool proposed_ = false;
  bool final_ = false;
  Tuning proposal_;
  bool closed_ = false;
};

// A proposal as it travels in a cycle's request and response lists (item
// 4): its final flag ("F" or "N") and the Tuning's text. An empty text is
// no proposal.
std::string EncodeProposal(const Tuning& tuning, bool final);
bool DecodeProposal(const std::string& text, Tuning* tuning, bool* final);

}  // namespace hbcore

#endif  // HBCORE_AUTOTUNE_H_
