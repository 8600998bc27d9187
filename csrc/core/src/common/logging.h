// Rank-prefixed logging to stderr, filtered by HB_LOG_LEVEL. The level and
// rank are set once by the runtime at init; before that, messages carry "?".
#ifndef HBCORE_COMMON_LOGGING_H_
#define HBCORE_COMMON_LOGGING_H_

#include <sstream>
#include <string>

namespace hbcore {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError, kFatal };

// Returns false when `text` names no level.
bool ParseLogLevel(const std::string& text, LogLevel* level);
const char* LogLevelName(LogLevel level);

void SetLogContext(LogLevel level, int rank);
// Sets the rank shown in log lines, keeping the level.
void SetLogRank(int rank);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const std::string& message);

// Aborts the process after logging: only for broken internal invariants.
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond,
                              const std::string& message);

}  // namespace hbcore

#define HB_LOG(level, expr)                                      \
  do {                                                           \
    if (::hbcore::LogEnabled(::hbcore::LogLevel::level)) {       \
      std::ostringstream hb_log_stream_;                         \
      hb_log_stream_ << expr;                                    \
      ::hbcore::LogLine(::hbcore::LogLevel::level,               \
                        hb_log_stream_.str());                   \
    }                                                            \
  } while (0)

// Internal invariant: names file, line and rank, then aborts.
#define HB_CHECK(cond, expr)                                         \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::ostringstream hb_check_stream_;                           \
      hb_check_stream_ << expr;                                      \
      ::hbcore::CheckFailed(__FILE__, __LINE__, #cond,               \
                            hb_check_stream_.str());                 \
    }                                                                \
  } while (0)

#endif  // HBCORE_COMMON_LOGGING_H_
