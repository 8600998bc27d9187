// See fake_shm.h.
#include "fake_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>

namespace fakegpu {
namespace {

// A file descriptor, closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

ShmStatus Error(const std::string& what, const std::string& path, int err) {
  ShmStatus status;
  status.code = ShmStatus::kError;
  status.message = what + " " + path + ": " + std::strerror(err);
  return status;
}

ShmStatus Status(ShmStatus::Code code) {
  ShmStatus status;
  status.code = code;
  return status;
}

std::unique_ptr<Mapping> Map(int fd, size_t length) {
  void* addr =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return nullptr;
  return std::make_unique<Mapping>(addr, length);
}

}  // namespace

Deadline::Deadline(const std::atomic<bool>* aborted, double timeout_s)
    : aborted_(aborted),
      end_(std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(timeout_s))) {}

ShmStatus::Code Deadline::Check() const {
  if (aborted_ != nullptr && aborted_->load(std::memory_order_acquire)) {
    return ShmStatus::kAborted;
  }
  if (std::chrono::steady_clock::now() >= end_) return ShmStatus::kTimedOut;
  return ShmStatus::kOk;
}

void Backoff::Pause() {
  constexpr int kYields = 64;
  if (rounds_ < kYields) {
    ++rounds_;
    std::this_thread::yield();
    return;
  }
  int doublings = rounds_ - kYields;
  if (doublings < 6) ++rounds_;  // 20 us * 2^6 > 1 ms: the cap
  long us = 20L << doublings;
  std::this_thread::sleep_for(std::chrono::microseconds(us > 1000 ? 1000 : us));
}

Mapping::~Mapping() { ::munmap(addr_, length_); }

ShmStatus OwnedSegment::Publish(const std::string& path,
                                const SegmentHeader& header,
                                const void* payload, bool exclusive,
                                std::unique_ptr<OwnedSegment>* out) {
  // A name of this writer's own: two writers racing for one path (the
  // same rank claimed twice) must not share, or truncate, a staging file,
  // and a reader waiting for `path` must never see it half-written.
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." +
      std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  size_t length = kPayloadOffset + header.payload_bytes;
  std::unique_ptr<Mapping> mapping;
  {
    Fd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd.get() < 0) return Error("cannot create", tmp, errno);
    // Reserve the pages now: on a full tmpfs this fails cleanly, where
    // writing through the mapping would raise SIGBUS.
    int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(length));
    if (err == 0) {
      mapping = Map(fd.get(), length);
      if (!mapping) err = errno;
    }
    if (err != 0) {
      ::unlink(tmp.c_str());
      return Error("cannot allocate " + std::to_string(length) + " bytes for",
                   tmp, err);
    }
  }
  std::memcpy(mapping->bytes(), &header, sizeof(header));
  if (header.payload_bytes != 0) {
    std::memcpy(mapping->bytes() + kPayloadOffset, payload,
                header.payload_bytes);
  }
  if (exclusive) {
    int rc = ::link(tmp.c_str(), path.c_str());
    int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0) {
      return err == EEXIST ? Status(ShmStatus::kExists)
                           : Error("cannot publish", path, err);
    }
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Error("cannot publish", path, err);
  }
  *out = std::make_unique<OwnedSegment>(path, std::move(mapping));
  return ShmStatus();
}

OwnedSegment::~OwnedSegment() {
  if (linked_) ::unlink(path_.c_str());
}

ShmStatus::Code OwnedSegment::WaitRetired(const Deadline& deadline) {
  const uint32_t expected = header()->expected_readers;
  Backoff backoff;
  while (__atomic_load_n(&header()->readers_done, __ATOMIC_ACQUIRE) <
         expected) {
    ShmStatus::Code code = deadline.Check();
    if (code != ShmStatus::kOk) return code;
    backoff.Pause();
  }
  ::unlink(path_.c_str());
  linked_ = false;
  return ShmStatus::kOk;
}

ShmStatus PeerSegment::Open(const std::string& path, const Deadline& deadline,
                            std::unique_ptr<PeerSegment>* out) {
  Backoff backoff;
  int raw = -1;
  for (;;) {
    raw = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (raw >= 0) break;
    if (errno != ENOENT) return Error("cannot open", path, errno);
    ShmStatus::Code code = deadline.Check();
    if (code != ShmStatus::kOk) return Status(code);
    backoff.Pause();
  }
  Fd fd(raw);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Error("cannot stat", path, errno);
  size_t length = static_cast<size_t>(st.st_size);
  if (length < kPayloadOffset) return Error("truncated", path, EINVAL);
  std::unique_ptr<Mapping> mapping = Map(fd.get(), length);
  if (!mapping) return Error("cannot map", path, errno);
  const auto* header = reinterpret_cast<const SegmentHeader*>(mapping->bytes());
  if (header->magic != kSegmentMagic ||
      header->payload_bytes > length - kPayloadOffset) {
    return Error("not a fake NCCL segment:", path, EINVAL);
  }
  *out = std::make_unique<PeerSegment>(std::move(mapping));
  return ShmStatus();
}

void PeerSegment::MarkRead() {
  if (marked_) return;
  marked_ = true;
  auto* header = reinterpret_cast<SegmentHeader*>(mapping_->bytes());
  __atomic_fetch_add(&header->readers_done, 1u, __ATOMIC_RELEASE);
}

void RemoveFilesWithPrefix(const std::string& dir, const std::string& prefix) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return;
  while (struct dirent* entry = ::readdir(d.get())) {
    if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) == 0) {
      ::unlink((dir + "/" + entry->d_name).c_str());
    }
  }
}

}  // namespace fakegpu
