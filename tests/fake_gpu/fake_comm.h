// The state of one fake NCCL communicator and what its tasks carry
// (libfakenccl only): result codes, operation kinds, the settings read from
// the environment at ncclCommInitRank, Op and Comm. See fake_nccl.cc for
// the calls and fake_exchange.h for the shared-memory protocol.
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_COMM_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_COMM_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fake_reduce.h"
#include "gpu/gpu_abi.h"

namespace fakegpu {

using hbcore::ncclResult_t;

// ncclResult_t
constexpr ncclResult_t kSuccess = 0;
constexpr ncclResult_t kUnhandledCudaError = 1;
constexpr ncclResult_t kSystemError = 2;
constexpr ncclResult_t kInternalError = 3;
constexpr ncclResult_t kInvalidArgument = 4;
constexpr ncclResult_t kInvalidUsage = 5;
constexpr ncclResult_t kRemoteError = 6;
constexpr ncclResult_t kInProgress = 7;

constexpr double kDefaultTimeoutS = 120.0;

enum OpKind {
  kAllReduce = 1,
  kBroadcast = 2,
  kReduce = 3,
  kAllGather = 4,
  kReduceScatter = 5,
  kSend = 6,
  kRecv = 7,
  kInit = 8,
};

const char* OpName(int kind);
// AllReduce, Reduce, ReduceScatter.
bool IsReduction(int kind);

// The environment, read at ncclCommInitRank (see README.md).
struct Settings {
  std::string dir = "/dev/shm";
  double timeout_s = kDefaultTimeoutS;
  int fail_rank = -1;
  int fail_at = 0;  // 0: no injection
  bool fail_async = false;
  bool check_pointers = true;
};
Settings ReadSettings();
// An integer environment variable (`fallback` when unset or malformed).
long EnvLong(const char* name, long fallback);

// A reduction as resolved at call time.
struct Reduction {
  int kind = kRedSum;
  int dtype = 0;                       // PreMulSum: the op's dtype
  bool scalar_on_device = false;       // PreMulSum residence 0
  uint64_t scalar = 0;                 // host-immediate value (dtype bits)
  const void* scalar_ptr = nullptr;    // device-resident value
};

struct Op {
  int kind = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  int dtype = 0;
  int root = -1;  // Broadcast / Reduce root; Send / Recv peer
  Reduction red;
  uint64_t seq = 0;  // collective number, or the p2p count to / from peer
};

class Comm {
 public:
  Comm(int rank_in, int nranks_in, std::string prefix_in, Settings settings)
      : rank(rank_in),
        nranks(nranks_in),
        prefix(std::move(prefix_in)),
        dir(settings.dir),
        timeout_s(settings.timeout_s),
        check_pointers(settings.check_pointers),
        fail_at(nranks_in > 1 && settings.fail_rank == rank_in
                    ? settings.fail_at
                    : 0),
        fail_async(settings.fail_async),
        sends_to(nranks_in, 0),
        recvs_from(nranks_in, 0) {}

  const int rank;
  const int nranks;
  const std::string prefix;  // "fakenccl-<pid>-<random>-"
  const std::string dir;
  const double timeout_s;
  const bool check_pointers;
  const int fail_at;
  const bool fail_async;

  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{kSuccess};

  // The first error sticks.
  void SetAsyncError(ncclResult_t error) {
    int expected = kSuccess;
    async_error.compare_exchange_strong(expected, error);
  }

  // <dir>/<prefix>o<owner>-<what>
  std::string Path(int owner, const std::string& what) const {
    return dir + "/" + prefix + "o" + std::to_string(owner) + "-" + what;
  }
  std::string OwnPrefix() const {
    return prefix + "o" + std::to_string(rank) + "-";
  }

  void Log(const char* format, ...) const __attribute__((format(printf, 2, 3)));

  // Call-side state, under mu.
  std::mutex mu;
  uint64_t next_seq = 0;
  std::vector<uint64_t> sends_to;
  std::vector<uint64_t> recvs_from;
  int calls = 0;  // counted for injection
  std::map<int, Reduction> redops;

  // Task accounting, under task_mu: pending = enqueued and not finished,
  // running = started and not finished.
  std::mutex task_mu;
  std::condition_variable task_cv;
  int pending = 0;
  int running = 0;
};

}  // namespace fakegpu

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_COMM_H_
