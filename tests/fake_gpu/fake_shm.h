// Shared-memory segments of the fake NCCL (libfakenccl only): files in a
// tmpfs directory (FAKE_NCCL_SHM_DIR, default /dev/shm), each written once
// by its owner rank and read by its peers. The exchange protocol built on
// them is described at the top of fake_nccl.cc; this file provides:
//
// - OwnedSegment (owner side): Publish writes the header and payload into
//   a staging file of its own, "<path>.tmp.<pid>.<thread>", then renames
//   it to <path> (or links it, when exclusive), so a reader that can open
//   <path> sees the complete segment.
//   WaitRetired waits until `expected_readers` readers have marked it read,
//   then unlinks it. The destructor unlinks it if that did not happen (an
//   aborted or failed task), so a rank never leaves its own segments
//   behind once its task has ended.
// - PeerSegment (reader side): Open polls until the file exists (or the
//   wait is aborted / times out), maps it; MarkRead atomically increments
//   the header's readers_done in the shared mapping (release order, after
//   every read of the payload).
// - Deadline / Backoff: every wait polls, yielding first and then sleeping
//   20 us doubling up to 1 ms, and stops when the communicator is aborted
//   or the deadline (FAKE_NCCL_TIMEOUT_S) passes.
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_SHM_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_SHM_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace fakegpu {

struct ShmStatus {
  enum Code { kOk, kAborted, kTimedOut, kExists, kError };
  Code code = kOk;
  std::string message;  // for kError
  bool ok() const { return code == kOk; }
};

class Deadline {
 public:
  Deadline(const std::atomic<bool>* aborted, double timeout_s);
  // kAborted, kTimedOut, or kOk to go on waiting.
  ShmStatus::Code Check() const;

 private:
  const std::atomic<bool>* aborted_;
  std::chrono::steady_clock::time_point end_;
};

class Backoff {
 public:
  void Pause();

 private:
  int rounds_ = 0;
};

// The first bytes of every segment, written by the owner before the
// segment is published and constant afterwards, except readers_done. The
// op fields let readers check that every rank issued the same operation.
struct SegmentHeader {
  uint64_t magic;
  int32_t owner_pid;
  int32_t owner_rank;
  int32_t nranks;
  int32_t kind;    // OpKind (fake_nccl.cc)
  int32_t dtype;
  int32_t redop;   // RedKind, or -1
  int32_t root;    // root, or the destination of a send
  int32_t unused;
  uint64_t count;  // elements, as the op was called
  uint64_t seq;
  uint64_t payload_bytes;
  uint64_t scalar;  // PreMulSum: the owner's scalar (dtype bits), else 0
  uint32_t expected_readers;
  uint32_t readers_done;  // shared counter: __atomic builtins only
};
constexpr uint64_t kSegmentMagic = 0x31474553434e4b46ull;  // "FKNCSEG1"
constexpr size_t kPayloadOffset = 128;                     // 64-aligned
static_assert(sizeof(SegmentHeader) <= kPayloadOffset, "header fits");
// tests/test_fake_gpu.py writes stale headers with struct.pack.
static_assert(sizeof(SegmentHeader) == 80 &&
                  offsetof(SegmentHeader, readers_done) == 76,
              "layout known to tests/test_fake_gpu.py");

// A mapped region, unmapped on destruction.
class Mapping {
 public:
  Mapping(void* addr, size_t length) : addr_(addr), length_(length) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  unsigned char* bytes() const { return static_cast<unsigned char*>(addr_); }
  size_t length() const { return length_; }

 private:
  void* addr_;
  size_t length_;
};

class OwnedSegment {
 public:
  // Publishes header + payload[0, header.payload_bytes) at `path`.
  // exclusive: fail with kExists if `path` exists instead of replacing it.
  static ShmStatus Publish(const std::string& path,
                           const SegmentHeader& header, const void* payload,
                           bool exclusive, std::unique_ptr<OwnedSegment>* out);
  ~OwnedSegment();
  OwnedSegment(const OwnedSegment&) = delete;
  OwnedSegment& operator=(const OwnedSegment&) = delete;

  // Use Publish.
  OwnedSegment(std::string path, std::unique_ptr<Mapping> mapping)
      : path_(std::move(path)), mapping_(std::move(mapping)) {}

  // Waits for the readers, then unlinks the segment.
  ShmStatus::Code WaitRetired(const Deadline& deadline);

 private:
  SegmentHeader* header() const {
    return reinterpret_cast<SegmentHeader*>(mapping_->bytes());
  }

  std::string path_;
  std::unique_ptr<Mapping> mapping_;
  bool linked_ = true;
};

class PeerSegment {
 public:
  // Waits for `path` to be published, then maps it.
  static ShmStatus Open(const std::string& path, const Deadline& deadline,
                        std::unique_ptr<PeerSegment>* out);
  // Use Open.
  explicit PeerSegment(std::unique_ptr<Mapping> mapping)
      : mapping_(std::move(mapping)) {}

  const SegmentHeader& header() const {
    return *reinterpret_cast<const SegmentHeader*>(mapping_->bytes());
  }
  const void* payload() const { return mapping_->bytes() + kPayloadOffset; }
  // Tells the owner this reader is done with the payload (once).
  void MarkRead();

 private:
  std::unique_ptr<Mapping> mapping_;
  bool marked_ = false;
};

// Unlinks every file in `dir` whose name starts with `prefix`.
void RemoveFilesWithPrefix(const std::string& dir, const std::string& prefix);

}  // namespace fakegpu

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_SHM_H_
