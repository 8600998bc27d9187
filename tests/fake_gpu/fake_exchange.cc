// See fake_exchange.h, and the protocol at the top of fake_nccl.cc.
#include "fake_exchange.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "fake_reduce.h"
#include "fake_shm.h"

namespace fakegpu {
namespace {

// One task: phases 1-3 of the exchange protocol.
class Exchange {
 public:
  explicit Exchange(Comm& comm)
      : comm_(comm), deadline_(&comm.aborted, comm.timeout_s) {}

  ncclResult_t Run(const std::vector<Op>& ops) {
    std::vector<uint64_t> scalars(ops.size(), 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      scalars[i] = LocalScalar(ops[i]);
      ncclResult_t rc = Publish(ops[i], scalars[i]);
      if (rc != kSuccess) return rc;
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      ncclResult_t rc = Consume(ops[i], scalars[i]);
      if (rc != kSuccess) return rc;
    }
    for (auto& segment : published_) {
      ShmStatus::Code code = segment->WaitRetired(deadline_);
      if (code != ShmStatus::kOk) {
        return Stopped(code, "its peers to read its data");
      }
    }
    return kSuccess;
  }

 private:
  static size_t Bytes(const Op& op, size_t count) {
    return count * DtypeSize(op.dtype);
  }

  // The PreMulSum scalar of this rank, read now for a device-resident one.
  static uint64_t LocalScalar(const Op& op) {
    if (op.red.kind != kRedPreMulSum) return 0;
    if (!op.red.scalar_on_device) return op.red.scalar;
    uint64_t value = 0;
    std::memcpy(&value, op.red.scalar_ptr, DtypeSize(op.dtype));
    return value;
  }

  std::string SegmentName(const Op& op) const {
    if (op.kind == kSend) {
      return "p" + std::to_string(op.root) + "-" + std::to_string(op.seq);
    }
    return "c" + std::to_string(op.seq);
  }

  SegmentHeader Header(const Op& op, int owner, uint64_t payload_bytes,
                       uint32_t readers, uint64_t scalar) const {
    SegmentHeader h{};
    h.magic = kSegmentMagic;
    h.owner_pid = static_cast<int32_t>(::getpid());
    h.owner_rank = owner;
    h.nranks = comm_.nranks;
    h.kind = op.kind;
    h.dtype = op.dtype;
    h.redop = IsReduction(op.kind) ? op.red.kind : -1;
    h.root = op.root;
    h.count = op.count;
    h.seq = op.seq;
    h.payload_bytes = payload_bytes;
    h.scalar = scalar;
    h.expected_readers = readers;
    h.readers_done = 0;
    return h;
  }

  ncclResult_t Publish(const Op& op, uint64_t scalar) {
    const int n = comm_.nranks;
    const bool is_root = comm_.rank == op.root;
    uint32_t readers = 0;
    size_t bytes = Bytes(op, op.count);
    switch (op.kind) {
      case kAllReduce:
      case kAllGather: readers = n - 1; break;
      case kReduceScatter:
        readers = n - 1;
        bytes = Bytes(op, op.count * n);
        break;
      case kBroadcast: readers = is_root ? n - 1 : 0; break;
      case kReduce: readers = is_root ? 0 : 1; break;
      case kSend: readers = op.count == 0 ? 0 : 1; break;
      default: break;  // kRecv
    }
    if (readers == 0) return kSuccess;
    std::unique_ptr<OwnedSegment> segment;
    ShmStatus st = OwnedSegment::Publish(
        comm_.Path(comm_.rank, SegmentName(op)),
        Header(op, comm_.rank, bytes, readers, scalar), op.send,
        /*exclusive=*/false, &segment);
    if (!st.ok()) {
      comm_.Log("%s #%llu: %s", OpName(op.kind),
                static_cast<unsigned long long>(op.seq), st.message.c_str());
      return kSystemError;
    }
    published_.push_back(std::move(segment));
    return kSuccess;
  }

  // Opens the segment of `owner` for `op` and checks that it describes the
  // same operation.
  ncclResult_t OpenPeer(const Op& op, int owner,
                        std::unique_ptr<PeerSegment>* out) {
    std::string name =
        op.kind == kRecv
            ? "p" + std::to_string(comm_.rank) + "-" + std::to_string(op.seq)
            : SegmentName(op);
    ShmStatus st = PeerSegment::Open(comm_.Path(owner, name), deadline_, out);
    if (!st.ok()) {
      std::string what = "rank " + std::to_string(owner) + "'s part of " +
                         OpName(op.kind) + " #" + std::to_string(op.seq);
      if (st.code == ShmStatus::kError) {
        comm_.Log("%s: %s", what.c_str(), st.message.c_str());
        return kSystemError;
      }
      return Stopped(st.code, what.c_str());
    }
    const SegmentHeader& h = (*out)->header();
    int expected_kind = op.kind == kRecv ? kSend : op.kind;
    int expected_root = op.kind == kRecv ? comm_.rank : op.root;
    int expected_redop = IsReduction(op.kind) ? op.red.kind : -1;
    uint64_t expected_bytes =
        op.kind == kReduceScatter ? Bytes(op, op.count * comm_.nranks)
                                  : Bytes(op, op.count);
    if (h.kind != expected_kind || h.dtype != op.dtype ||
        h.count != op.count || h.root != expected_root ||
        h.redop != expected_redop || h.nranks != comm_.nranks ||
        h.payload_bytes != expected_bytes) {
      comm_.Log(
          "mismatched operations: this rank issued %s #%llu (count %zu, %s, "
          "op %s, root/peer %d) but rank %d issued %s #%llu (count %llu, %s, "
          "op %s, root/peer %d, nranks %d)",
          OpName(op.kind), static_cast<unsigned long long>(op.seq), op.count,
          DtypeName(op.dtype),
          expected_redop < 0 ? "-" : RedKindName(expected_redop),
          op.root, owner, OpName(h.kind),
          static_cast<unsigned long long>(h.seq),
          static_cast<unsigned long long>(h.count),
          DtypeName(h.dtype),
          h.redop < 0 ? "-" : RedKindName(h.redop), h.root,
          h.nranks);
      return kInvalidUsage;
    }
    return kSuccess;
  }

  // Reduces every rank's contribution (at byte `offset` of its buffer) into
  // op.recv, in rank order.
  ncclResult_t ReduceFromAll(const Op& op, uint64_t own_scalar,
                             size_t offset) {
    const int n = comm_.nranks;
    std::vector<std::unique_ptr<PeerSegment>> peers(n);
    std::vector<const void*> srcs(n);
    std::vector<uint64_t> scalars(n, 0);
    for (int r = 0; r < n; ++r) {
      if (r == comm_.rank) {
        srcs[r] = static_cast<const unsigned char*>(op.send) + offset;
        scalars[r] = own_scalar;
        continue;
      }
      ncclResult_t rc = OpenPeer(op, r, &peers[r]);
      if (rc != kSuccess) return rc;
      srcs[r] = static_cast<const unsigned char*>(peers[r]->payload()) + offset;
      scalars[r] = peers[r]->header().scalar;
    }
    std::vector<const void*> scalar_ptrs(n);
    for (int r = 0; r < n; ++r) scalar_ptrs[r] = &scalars[r];
    ReduceArrays(op.red.kind, op.dtype, scalar_ptrs.data(), n,
                          srcs.data(), n, op.recv, op.count);
    for (auto& peer : peers) {
      if (peer) peer->MarkRead();
    }
    return kSuccess;
  }

  ncclResult_t CopyFromPeer(const Op& op, int owner, void* dst, size_t bytes) {
    std::unique_ptr<PeerSegment> peer;
    ncclResult_t rc = OpenPeer(op, owner, &peer);
    if (rc != kSuccess) return rc;
    if (bytes != 0) std::memcpy(dst, peer->payload(), bytes);
    peer->MarkRead();
    return kSuccess;
  }

  ncclResult_t Consume(const Op& op, uint64_t scalar) {
    const int n = comm_.nranks;
    const int me = comm_.rank;
    const size_t bytes = Bytes(op, op.count);
    switch (op.kind) {
      case kAllReduce: return ReduceFromAll(op, scalar, 0);
      case kReduce:
        return me == op.root ? ReduceFromAll(op, scalar, 0) : kSuccess;
      case kReduceScatter: return ReduceFromAll(op, scalar, me * bytes);
      case kAllGather:
        for (int r = 0; r < n; ++r) {
          unsigned char* dst = static_cast<unsigned char*>(op.recv) + r * bytes;
          if (r == me) {
            if (bytes != 0 && dst != op.send) std::memmove(dst, op.send, bytes);
            continue;
          }
          ncclResult_t rc = CopyFromPeer(op, r, dst, bytes);
          if (rc != kSuccess) return rc;
        }
        return kSuccess;
      case kBroadcast:
        if (me == op.root) {
          if (bytes != 0 && op.recv != op.send) {
            std::memmove(op.recv, op.send, bytes);
          }
          return kSuccess;
        }
        return CopyFromPeer(op, op.root, op.recv, bytes);
      case kRecv:
        return op.count == 0 ? kSuccess
                             : CopyFromPeer(op, op.root, op.recv, bytes);
      default: return kSuccess;  // kSend: published in phase 1
    }
  }

  // A wait ended by abort (the error is already set) or timeout.
  ncclResult_t Stopped(ShmStatus::Code code, const char* waiting_for) {
    if (code == ShmStatus::kAborted) return kSystemError;
    comm_.Log("timed out after %g s (FAKE_NCCL_TIMEOUT_S) waiting for %s",
              comm_.timeout_s, waiting_for);
    return kRemoteError;
  }

  Comm& comm_;
  Deadline deadline_;
  std::vector<std::unique_ptr<OwnedSegment>> published_;  // unlinked at end
};

bool ProcessIsDead(int pid) {
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Unlinks this rank's own init segment at `path` if the process that wrote
// it is gone; true when the path may be published anew (also when the file
// is already gone). Only the rank that owns a path unlinks it: a peer that
// unlinked a stale file could remove the owner's fresh one published
// between the peer's read of the header and its unlink.
bool RemoveIfStale(const std::string& path) {
  std::unique_ptr<PeerSegment> old;
  Deadline now(nullptr, 0.0);
  ShmStatus st = PeerSegment::Open(path, now, &old);
  if (st.code == ShmStatus::kTimedOut) return true;  // gone already
  if (!st.ok()) return false;
  if (!ProcessIsDead(old->header().owner_pid)) return false;
  ::unlink(path.c_str());
  return true;
}

}  // namespace

ncclResult_t RunExchange(Comm& comm, const std::vector<Op>& ops) {
  Exchange exchange(comm);
  return exchange.Run(ops);
}

ncclResult_t Rendezvous(Comm& comm) {
  Deadline deadline(nullptr, comm.timeout_s);
  SegmentHeader h{};
  h.magic = kSegmentMagic;
  h.owner_pid = static_cast<int32_t>(::getpid());
  h.owner_rank = comm.rank;
  h.nranks = comm.nranks;
  h.kind = kInit;
  h.redop = -1;
  h.expected_readers = static_cast<uint32_t>(comm.nranks - 1);
  const std::string own_path = comm.Path(comm.rank, "init");
  std::unique_ptr<OwnedSegment> own;
  for (int attempt = 0;; ++attempt) {
    ShmStatus st = OwnedSegment::Publish(own_path, h, nullptr,
                                         /*exclusive=*/true, &own);
    if (st.ok()) break;
    if (st.code == ShmStatus::kExists && attempt == 0 &&
        RemoveIfStale(own_path)) {
      continue;
    }
    if (st.code == ShmStatus::kExists) {
      comm.Log("another live process already joined as rank %d (%s)",
               comm.rank, own_path.c_str());
      own.reset();
      return kInvalidArgument;
    }
    comm.Log("%s", st.message.c_str());
    return kSystemError;
  }
  for (int r = 0; r < comm.nranks; ++r) {
    if (r == comm.rank) continue;
    const std::string path = comm.Path(r, "init");
    std::unique_ptr<PeerSegment> peer;
    Backoff stale_backoff;
    for (;;) {
      ShmStatus st = PeerSegment::Open(path, deadline, &peer);
      if (st.code == ShmStatus::kTimedOut) {
        comm.Log("timed out after %g s (FAKE_NCCL_TIMEOUT_S) waiting for "
                 "rank %d to join",
                 comm.timeout_s, r);
        return kSystemError;
      }
      if (!st.ok()) {
        comm.Log("%s", st.message.c_str());
        return kSystemError;
      }
      if (!ProcessIsDead(peer->header().owner_pid)) break;
      // A leftover of a dead process: rank r replaces it when it joins.
      peer.reset();
      if (deadline.Check() != ShmStatus::kOk) {
        comm.Log("timed out after %g s (FAKE_NCCL_TIMEOUT_S) waiting for "
                 "rank %d to join (only a dead process's segment is there)",
                 comm.timeout_s, r);
        return kSystemError;
      }
      stale_backoff.Pause();
    }
    if (peer->header().kind != kInit || peer->header().nranks != comm.nranks) {
      comm.Log("rank %d joined with nranks %d, this rank with %d", r,
               peer->header().nranks, comm.nranks);
      return kInvalidArgument;
    }
    peer->MarkRead();
  }
  if (own->WaitRetired(deadline) != ShmStatus::kOk) {
    comm.Log("timed out after %g s (FAKE_NCCL_TIMEOUT_S) waiting for the "
             "other ranks to see this one",
             comm.timeout_s);
    return kSystemError;
  }
  return kSuccess;
}

}  // namespace fakegpu
