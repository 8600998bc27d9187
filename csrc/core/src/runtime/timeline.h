// Chrome-trace timeline (chrome://tracing, Perfetto), written by rank 0.
// Each tensor gets its own track (a "process" named after the tensor, as
// Horovod's timeline does) with complete events for its phases: NEGOTIATE,
// MEMCPY_IN_FUSION_BUFFER, the collective (ALLREDUCE, ...),
// MEMCPY_OUT_FUSION_BUFFER; with cycle marking, a global instant event
// CYCLE_START as each background cycle begins.
//
// Threads: the background thread writes the events; the framework thread
// may open and close files at any time (hb_start_timeline /
// hb_stop_timeline). Every method takes the one mutex, so an event is
// written whole into the file that is open when it is written, and a
// closed file always ends with its closing bracket (valid JSON). enabled()
// reads an atomic flag without the lock: a fast check that skips building
// events while nothing records (an event that races with Close is dropped
// under the lock).
#ifndef HBCORE_RUNTIME_TIMELINE_H_
#define HBCORE_RUNTIME_TIMELINE_H_

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"

namespace hbcore {

class Timeline {
 public:
  using Time = std::chrono::steady_clock::time_point;

  Timeline() = default;
  ~Timeline() { Close(); }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts recording into `path` (truncated), ending a file already open
  // first. On failure nothing records.
  Status Open(const std::string& path, bool mark_cycles);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void Event(const std::string& tensor, const std::string& phase, Time start,
             Time end, const std::string& args = "");
  // CYCLE_START at `when`, if this file marks cycles.
  void MarkCycle(Time when);
  // Writes the closing bracket: the file is valid JSON from here on.
  void Close();

 private:
  // The caller holds mu_.
  int TrackOf(const std::string& tensor);
  void Write(const std::string& record);
  void CloseLocked();

  std::mutex mu_;
  std::atomic<bool> enabled_{false};
  std::ofstream out_;
  Time origin_;
  bool first_ = true;
  bool mark_cycles_ = false;
  std::unordered_map<std::string, int> tracks_;
};

std::string JsonEscape(const std::string& text);

}  // namespace hbcore

#endif  // HBCORE_RUNTIME_TIMELINE_H_
