// See fake_comm.h.
#include "fake_comm.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fakegpu {

const char* OpName(int kind) {
  switch (kind) {
    case kAllReduce: return "AllReduce";
    case kBroadcast: return "Broadcast";
    case kReduce: return "Reduce";
    case kAllGather: return "AllGather";
    case kReduceScatter: return "ReduceScatter";
    case kSend: return "Send";
    case kRecv: return "Recv";
    case kInit: return "Init";
    default: return "unknown-op";
  }
}

bool IsReduction(int kind) {
  return kind == kAllReduce || kind == kReduce || kind == kReduceScatter;
}

long EnvLong(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0') {
    std::fprintf(stderr, "fake NCCL: ignoring %s=%s (not an integer)\n", name,
                 text);
    return fallback;
  }
  return value;
}

Settings ReadSettings() {
  Settings s;
  if (const char* dir = std::getenv("FAKE_NCCL_SHM_DIR"); dir && *dir) {
    s.dir = dir;
  }
  if (const char* t = std::getenv("FAKE_NCCL_TIMEOUT_S"); t && *t) {
    char* end = nullptr;
    double value = std::strtod(t, &end);
    if (*end == '\0' && value > 0) {
      s.timeout_s = value;
    } else {
      std::fprintf(stderr, "fake NCCL: ignoring FAKE_NCCL_TIMEOUT_S=%s\n", t);
    }
  }
  s.fail_rank = static_cast<int>(EnvLong("FAKE_NCCL_FAIL_RANK", -1));
  s.fail_at = static_cast<int>(EnvLong("FAKE_NCCL_FAIL_AT", 0));
  if (const char* mode = std::getenv("FAKE_NCCL_FAIL_MODE"); mode && *mode) {
    if (std::strcmp(mode, "async") == 0) {
      s.fail_async = true;
    } else if (std::strcmp(mode, "sync") != 0) {
      std::fprintf(stderr,
                   "fake NCCL: FAKE_NCCL_FAIL_MODE=%s is neither sync nor "
                   "async; using sync\n",
                   mode);
    }
  }
  s.check_pointers = EnvLong("FAKE_NCCL_CHECK_POINTERS", 1) != 0;
  return s;
}

void Comm::Log(const char* format, ...) const {
  char text[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  std::fprintf(stderr, "fake NCCL rank %d/%d (pid %d): %s\n", rank, nranks,
               static_cast<int>(::getpid()), text);
}

}  // namespace fakegpu
