#include "common/logging.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace hbcore {
namespace {

// Logging context is process-wide by nature (stderr is); it is written once
// at init and read everywhere, so atomics are enough.
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kFatal: return "FATAL";
  }
  return "?";
}

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  const LogLevel all[] = {LogLevel::kTrace, LogLevel::kDebug,
                          LogLevel::kInfo,  LogLevel::kWarning,
                          LogLevel::kError, LogLevel::kFatal};
  for (LogLevel l : all) {
    if (t == LogLevelName(l)) {
      *level = l;
      return true;
    }
  }
  if (t == "WARN") {
    *level = LogLevel::kWarning;
    return true;
  }
  return false;
}

void SetLogContext(LogLevel level, int rank) {
  g_level = static_cast<int>(level);
  g_rank = rank;
}

void SetLogRank(int rank) { g_rank = rank; }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level; }

void LogLine(LogLevel level, const std::string& message) {
  int rank = g_rank;
  if (rank >= 0) {
    std::fprintf(stderr, "[hbcore %s rank %d] %s\n", LogLevelName(level), rank,
                 message.c_str());
  } else {
    std::fprintf(stderr, "[hbcore %s rank ?] %s\n", LogLevelName(level),
                 message.c_str());
  }
  std::fflush(stderr);
}

void CheckFailed(const char* file, int line, const char* cond,
                 const std::string& message) {
  std::fprintf(stderr, "[hbcore FATAL rank %d] %s:%d: check failed: %s: %s\n",
               g_rank.load(), file, line, cond, message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace hbcore
