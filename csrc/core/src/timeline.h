// Chrome-trace timeline (chrome://tracing, Perfetto). Written by rank 0's
// background thread only, so it needs no lock. Each tensor gets its own
// track (a "process" named after the tensor, as Horovod's timeline does)
// with complete events for its phases: NEGOTIATE, MEMCPY_IN_FUSION_BUFFER,
// the collective (ALLREDUCE, ...), MEMCPY_OUT_FUSION_BUFFER.
#ifndef HBCORE_TIMELINE_H_
#define HBCORE_TIMELINE_H_

#include <chrono>
#include <fstream>
#include <string>
#include <unordered_map>

#include "status.h"

namespace hbcore {

class Timeline {
 public:
  using Time = std::chrono::steady_clock::time_point;

  Timeline() = default;
  ~Timeline() { Close(); }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  Status Open(const std::string& path);
  bool enabled() const { return out_.is_open(); }
  void Event(const std::string& tensor, const std::string& phase, Time start,
             Time end, const std::string& args = "");
  // Writes the closing bracket: the file is valid JSON from here on.
  void Close();

 private:
  int TrackOf(const std::string& tensor);
  void Write(const std::string& record);

  std::ofstream out_;
  Time origin_;
  bool first_ = true;
  std::unordered_map<std::string, int> tracks_;
};

std::string JsonEscape(const std::string& text);

}  // namespace hbcore

#endif  // HBCORE_TIMELINE_H_
