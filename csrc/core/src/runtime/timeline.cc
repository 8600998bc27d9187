#include "runtime/timeline.h"

#include <cstdio>

namespace hbcore {

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

Status Timeline::Open(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mu_);
  CloseLocked();
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_.is_open()) {
    return Status(HB_ERR_CONFIG, "cannot open timeline file '" + path + "'");
  }
  origin_ = std::chrono::steady_clock::now();
  first_ = true;
  mark_cycles_ = mark_cycles;
  tracks_.clear();
  out_ << "[\n";
  enabled_.store(true, std::memory_order_relaxed);
  return Status::OK();
}

void Timeline::Write(const std::string& record) {
  if (!first_) out_ << ",\n";
  first_ = false;
  out_ << record;
}

int Timeline::TrackOf(const std::string& tensor) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  int id = static_cast<int>(tracks_.size()) + 1;
  tracks_[tensor] = id;
  Write("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " +
        std::to_string(id) + ", \"args\": {\"name\": \"" + JsonEscape(tensor) +
        "\"}}");
  return id;
}

void Timeline::Event(const std::string& tensor, const std::string& phase,
                     Time start, Time end, const std::string& args) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!out_.is_open()) return;
  using us = std::chrono::duration<double, std::micro>;
  int track = TrackOf(tensor);
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "\"ph\": \"X\", \"pid\": %d, \"tid\": 1, \"ts\": %.3f, "
                "\"dur\": %.3f",
                track, us(start - origin_).count(), us(end - start).count());
  std::string record = "{\"name\": \"" + JsonEscape(phase) + "\", " + buf;
  if (!args.empty()) record += ", \"args\": {" + args + "}";
  record += "}";
  Write(record);
}

void Timeline::MarkCycle(Time when) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!out_.is_open() || !mark_cycles_) return;
  using us = std::chrono::duration<double, std::micro>;
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "{\"name\": \"CYCLE_START\", \"ph\": \"i\", \"s\": \"g\", "
                "\"pid\": 0, \"tid\": 0, \"ts\": %.3f}",
                us(when - origin_).count());
  Write(buf);
}

void Timeline::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  CloseLocked();
}

void Timeline::CloseLocked() {
  enabled_.store(false, std::memory_order_relaxed);
  if (!out_.is_open()) return;
  out_ << "\n]\n";
  out_.close();
}

}  // namespace hbcore
