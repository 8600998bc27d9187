// libfakenccl.so: a fake of the NCCL entry points hbcore loads
// (csrc/core/src/gpu/gpu_abi.h) for the processes of one machine, on host
// memory and the fake CUDA runtime's streams (libfakecudart.so, a NEEDED
// library found through rpath $ORIGIN, so a process has one instance of
// it). Built by tests/fake_gpu/build.py. This file holds the entry points
// (validation, groups, enqueueing); fake_comm.h the communicator state,
// fake_exchange.cc the protocol below, fake_shm.h its segments.
//
// ==== Calls and tasks ====
// A collective or point-to-point call only validates its arguments, takes
// its sequence number and enqueues a task on the given stream
// (fakeCudaLaunchHostFunc); the data moves when the stream reaches the
// task, so stream ordering is as real as on a GPU. Calls between
// ncclGroupStart and the matching outermost ncclGroupEnd (thread-local
// depth) are collected and enqueued as ONE task at ncclGroupEnd; all of
// them must use one communicator and one stream (a limitation of the fake).
// A lone ncclSend / ncclRecv is an implicit group of one.
//
// ==== Rendezvous (ncclCommInitRank) ====
// The unique id holds a magic, a random 64-bit number and the creator's
// pid; every file of the communicator is named
//   <dir>/fakenccl-<pid>-<random hex>-o<owner rank>-<what>
// in FAKE_NCCL_SHM_DIR (default /dev/shm). Each rank publishes
// "o<rank>-init" exclusively (link: a second live rank with the same
// number is ncclInvalidArgument; a leftover of a dead process is removed),
// reads every peer's init segment (its nranks must match:
// ncclInvalidArgument), marks it read, and waits until its own has been
// read by all peers, then unlinks it: init returns once all ranks joined.
// Timeout (FAKE_NCCL_TIMEOUT_S): ncclSystemError. nranks == 1 makes a
// local communicator without files.
//
// ==== The exchange protocol (one task) ====
// Collectives are matched across ranks by a per-communicator sequence
// number (every rank issues the same collectives in the same order);
// sends by a per (sender, receiver) count, so p2p between some ranks does
// not disturb the others. Zero-count sends and receives are no-ops on both
// sides (they take no number). A task runs its operations in 3 phases:
//  1. Publish: for each op, the rank writes what it contributes into a
//     segment (see fake_shm.h: written to a staging file, then renamed, so a
//     visible segment is complete):
//       AllReduce, AllGather  "o<rank>-c<seq>"  its send buffer
//       ReduceScatter         "o<rank>-c<seq>"  its whole send buffer
//       Broadcast (root only) "o<root>-c<seq>"  the root's send buffer
//       Reduce (non-roots)    "o<rank>-c<seq>"  its send buffer
//       Send to peer d        "o<rank>-p<d>-<k>" (k-th send to d)
//     with a header naming the op (kind, dtype, count, op, root, seq,
//     nranks, PreMulSum scalar) and the number of readers expected.
//     Publishing never waits, so no order of ops in a group can deadlock.
//  2. Consume: for each op, the rank opens the peers' segments it needs
//     (polling until they exist), checks that their headers describe the
//     same op (a mismatch is ncclInvalidUsage, with both sides printed),
//     computes its result from them and its own buffers (reductions run
//     in rank order, so all ranks get bit-identical results), and marks
//     each segment read (an atomic counter in the segment).
//  3. Retire: the rank waits until each of its segments has been read by
//     all its readers, then unlinks it. So once a task is done, its rank
//     has no file left, and a peer never loses a segment it still needs.
// Own data is read from the rank's own buffers (exact in-place aliasing is
// fine: reductions read a chunk of every source before writing it).
//
// ==== Errors, abort, injection ====
// Every wait polls (fake_shm.h: Backoff) and stops when the communicator
// is aborted, or after FAKE_NCCL_TIMEOUT_S (default 120), which sets the
// async error ncclRemoteError. A task that stops early unlinks its own
// segments; its peers keep waiting until they are aborted or time out
// (turning one rank's failure into an error everywhere is the host's job,
// as with real NCCL). A task on a communicator that already has an async
// error does nothing, and new calls on it return that error.
// ncclCommAbort is local: it sets the abort flag (and ncclSystemError if
// no error was set), waits for the tasks running on the communicator (they
// stop at their next poll and unlink their segments), removes whatever file
// of this rank is left and forgets the handle (later calls:
// ncclInvalidUsage). It never touches the peers' files: removing one a peer
// is still writing would turn that peer's wait into an error at random.
// ncclCommDestroy waits for the communicator's tasks to finish (as NCCL
// flushes them), then removes this rank's files likewise. Communicators
// still open at exit have their own rank's files removed. Only a killed
// process leaves files behind (their names are random per unique id).
// Injection (read at ncclCommInitRank, for communicators of more than one
// rank): on comm rank FAKE_NCCL_FAIL_RANK, the FAKE_NCCL_FAIL_AT-th
// collective or p2p call (a group counts once, at ncclGroupEnd) fails:
// FAKE_NCCL_FAIL_MODE=sync returns ncclSystemError and enqueues nothing;
// async returns ncclSuccess, and its task sets ncclSystemError and ends
// without taking part.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fake_comm.h"
#include "fake_exchange.h"
#include "fake_handles.h"
#include "fake_reduce.h"
#include "fake_shm.h"
#include "fake_stream.h"
#include "gpu/gpu_abi.h"

using hbcore::cudaStream_t;
using hbcore::ncclComm_t;
using hbcore::ncclDataType_t;
using hbcore::ncclRedOp_t;
using hbcore::ncclResult_t;
using hbcore::ncclUniqueId;

// The CUDA runtime entry points the fake NCCL uses itself.
extern "C" hbcore::cudaError_t cudaStreamQuery(cudaStream_t stream);
extern "C" hbcore::cudaError_t cudaGetDevice(int* device);

namespace {

using fakegpu::Comm;
using fakegpu::EnvLong;
using fakegpu::IsReduction;
using fakegpu::kAllGather;
using fakegpu::kAllReduce;
using fakegpu::kBroadcast;
using fakegpu::kInternalError;
using fakegpu::kInvalidArgument;
using fakegpu::kInvalidUsage;
using fakegpu::kInProgress;
using fakegpu::kRecv;
using fakegpu::kReduce;
using fakegpu::kReduceScatter;
using fakegpu::kRemoteError;
using fakegpu::kSend;
using fakegpu::kSuccess;
using fakegpu::kSystemError;
using fakegpu::kUnhandledCudaError;
using fakegpu::Op;
using fakegpu::OpName;
using fakegpu::Reduction;

constexpr int kDefaultVersion = 22304;
constexpr int kFirstUserRedOp = 5;
constexpr int kCudaErrorInvalidResourceHandle = 400;
constexpr char kIdMagic[8] = {'F', 'A', 'K', 'E', 'N', 'C', 'C', 'L'};

// The unique id's bytes (the rest of the 128 are zero).
struct IdLayout {
  char magic[8];
  uint64_t random;
  int32_t pid;
};
static_assert(sizeof(IdLayout) <= sizeof(ncclUniqueId), "id layout fits");

fakegpu::HandleTable<Comm>& Comms() {
  static fakegpu::NoDestructor<fakegpu::HandleTable<Comm>> table(
      uintptr_t{0x6c0000000000});
  return *table;
}

// At exit (also after an exit with communicators still open), every open
// communicator's own files go. The table is never destroyed (NoDestructor),
// so this is safe whatever order static destructors run in.
struct ExitCleanup {
  ~ExitCleanup() {
    for (const auto& comm : Comms().All()) {
      if (comm->nranks > 1) {
        fakegpu::RemoveFilesWithPrefix(comm->dir, comm->OwnPrefix());
      }
    }
  }
} g_exit_cleanup;

ncclResult_t FindComm(ncclComm_t handle, std::shared_ptr<Comm>* out) {
  if (handle == nullptr) return kInvalidArgument;
  *out = Comms().Find(reinterpret_cast<uintptr_t>(handle));
  return *out ? kSuccess : kInvalidUsage;  // destroyed, aborted or bogus
}

// ---- enqueueing ----

struct Batch {
  std::shared_ptr<Comm> comm;
  std::vector<Op> ops;
  bool inject_failure = false;
};

// Counts a task as running for its lifetime (ncclCommAbort waits for the
// running ones, ncclCommDestroy for the pending ones).
class RunningScope {
 public:
  explicit RunningScope(Comm& comm) : comm_(comm) {
    std::lock_guard<std::mutex> lock(comm_.task_mu);
    ++comm_.running;
  }
  ~RunningScope() {
    {
      std::lock_guard<std::mutex> lock(comm_.task_mu);
      --comm_.running;
      --comm_.pending;
    }
    comm_.task_cv.notify_all();
  }
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  Comm& comm_;
};

void RunBatch(const Batch& batch) {
  Comm& comm = *batch.comm;
  RunningScope scope(comm);
  if (comm.aborted.load(std::memory_order_acquire)) return;
  if (comm.async_error.load() != kSuccess) return;
  if (batch.inject_failure) {
    comm.Log("injected asynchronous failure (FAKE_NCCL_FAIL_MODE=async)");
    comm.SetAsyncError(kSystemError);
    return;
  }
  ncclResult_t rc = fakegpu::RunExchange(comm, batch.ops);
  if (rc != kSuccess) comm.SetAsyncError(rc);
}

// The host function of a task: owns its Batch.
void RunBatchHostFn(void* arg) {
  std::unique_ptr<Batch> batch(static_cast<Batch*>(arg));
  RunBatch(*batch);
}

ncclResult_t Launch(std::shared_ptr<Comm> comm, cudaStream_t stream,
                    std::vector<Op> ops, bool inject_failure) {
  auto batch = std::make_unique<Batch>();
  batch->comm = comm;
  batch->ops = std::move(ops);
  batch->inject_failure = inject_failure;
  {
    std::lock_guard<std::mutex> lock(comm->task_mu);
    ++comm->pending;
  }
  if (fakeCudaLaunchHostFunc(stream, RunBatchHostFn, batch.get()) != 0) {
    {
      std::lock_guard<std::mutex> lock(comm->task_mu);
      --comm->pending;
    }
    comm->task_cv.notify_all();
    return kUnhandledCudaError;
  }
  batch.release();  // RunBatchHostFn owns it now
  return kSuccess;
}

// ---- validation and submission ----

struct GroupState {
  int depth = 0;
  ncclResult_t error = kSuccess;
  std::shared_ptr<Comm> comm;
  cudaStream_t stream = nullptr;
  std::vector<Op> ops;
};
thread_local GroupState t_group;

ncclResult_t ResolveReduction(Comm& comm, ncclRedOp_t op, int dtype,
                              Reduction* out) {
  if (op >= 0 && op < kFirstUserRedOp) {
    out->kind = op;
    return kSuccess;
  }
  std::lock_guard<std::mutex> lock(comm.mu);
  auto it = comm.redops.find(op);
  if (it == comm.redops.end()) {
    comm.Log("unknown reduction op %d", op);
    return kInvalidArgument;
  }
  if (it->second.dtype != dtype) {
    comm.Log("PreMulSum op %d was made for %s, used with %s", op,
             fakegpu::DtypeName(it->second.dtype), fakegpu::DtypeName(dtype));
    return kInvalidArgument;
  }
  *out = it->second;
  return kSuccess;
}

ncclResult_t CheckBuffer(const Comm& comm, const Op& op, const char* which,
                         const void* ptr, size_t count) {
  size_t bytes = count * fakegpu::DtypeSize(op.dtype);
  if (bytes == 0) return kSuccess;
  if (ptr == nullptr ||
      (comm.check_pointers && !fakeCudaIsDevicePointer(ptr, bytes))) {
    comm.Log("%s: %s buffer %p (%zu bytes) is not inside a cudaMalloc "
             "allocation (FAKE_NCCL_CHECK_POINTERS=0 turns this check off)",
             OpName(op.kind), which, ptr, bytes);
    return kInvalidArgument;
  }
  return kSuccess;
}

ncclResult_t Validate(const Comm& comm, const Op& op, cudaStream_t stream) {
  if (fakegpu::DtypeSize(op.dtype) == 0) {
    comm.Log("%s: bad data type %d", OpName(op.kind), op.dtype);
    return kInvalidArgument;
  }
  const bool rooted = op.kind == kBroadcast || op.kind == kReduce ||
                      op.kind == kSend || op.kind == kRecv;
  if (rooted && (op.root < 0 || op.root >= comm.nranks)) {
    comm.Log("%s: root / peer %d out of range", OpName(op.kind), op.root);
    return kInvalidArgument;
  }
  if (cudaStreamQuery(stream) == kCudaErrorInvalidResourceHandle) {
    comm.Log("%s: invalid stream %p", OpName(op.kind),
             static_cast<void*>(stream));
    return kInvalidArgument;
  }
  const size_t n = static_cast<size_t>(comm.nranks);
  const bool root = comm.rank == op.root;
  ncclResult_t rc = kSuccess;
  switch (op.kind) {
    case kAllReduce:
      rc = CheckBuffer(comm, op, "send", op.send, op.count);
      if (rc == kSuccess) rc = CheckBuffer(comm, op, "recv", op.recv, op.count);
      break;
    case kBroadcast:
      if (root) rc = CheckBuffer(comm, op, "send", op.send, op.count);
      if (rc == kSuccess) rc = CheckBuffer(comm, op, "recv", op.recv, op.count);
      break;
    case kReduce:
      rc = CheckBuffer(comm, op, "send", op.send, op.count);
      if (rc == kSuccess && root) {
        rc = CheckBuffer(comm, op, "recv", op.recv, op.count);
      }
      break;
    case kAllGather:
      rc = CheckBuffer(comm, op, "send", op.send, op.count);
      if (rc == kSuccess) {
        rc = CheckBuffer(comm, op, "recv", op.recv, op.count * n);
      }
      break;
    case kReduceScatter:
      rc = CheckBuffer(comm, op, "send", op.send, op.count * n);
      if (rc == kSuccess) rc = CheckBuffer(comm, op, "recv", op.recv, op.count);
      break;
    case kSend: rc = CheckBuffer(comm, op, "send", op.send, op.count); break;
    case kRecv: rc = CheckBuffer(comm, op, "recv", op.recv, op.count); break;
    default: rc = kInternalError; break;
  }
  if (rc == kSuccess && op.red.kind == fakegpu::kRedPreMulSum &&
      op.red.scalar_on_device && comm.check_pointers &&
      !fakeCudaIsDevicePointer(op.red.scalar_ptr,
                               fakegpu::DtypeSize(op.dtype))) {
    comm.Log("PreMulSum scalar %p is not device memory", op.red.scalar_ptr);
    rc = kInvalidArgument;
  }
  return rc;
}

// Takes the op's sequence number (call order is the matching order).
void Number(Comm& comm, Op* op) {
  std::lock_guard<std::mutex> lock(comm.mu);
  if (op->kind == kSend) {
    if (op->count != 0) op->seq = comm.sends_to[op->root]++;
  } else if (op->kind == kRecv) {
    if (op->count != 0) op->seq = comm.recvs_from[op->root]++;
  } else {
    op->seq = comm.next_seq++;
  }
}

// True when this call (or group) is the one FAKE_NCCL_FAIL_AT names.
bool CountCall(Comm& comm) {
  std::lock_guard<std::mutex> lock(comm.mu);
  return comm.fail_at > 0 && ++comm.calls == comm.fail_at;
}

ncclResult_t Submit(ncclComm_t handle, cudaStream_t stream, Op op,
                    ncclRedOp_t redop) {
  std::shared_ptr<Comm> comm;
  ncclResult_t rc = FindComm(handle, &comm);
  if (rc == kSuccess && IsReduction(op.kind)) {
    rc = ResolveReduction(*comm, redop, op.dtype, &op.red);
  }
  if (rc == kSuccess) rc = Validate(*comm, op, stream);
  if (rc == kSuccess) rc = comm->async_error.load();
  if (rc == kSuccess && t_group.depth > 0 && t_group.comm &&
      (t_group.comm != comm || t_group.stream != stream)) {
    comm->Log("%s: the fake runs a group on one communicator and one "
              "stream only",
              OpName(op.kind));
    rc = kInvalidUsage;
  }
  if (rc != kSuccess) {
    if (t_group.depth > 0 && t_group.error == kSuccess) t_group.error = rc;
    return rc;
  }
  if (t_group.depth > 0) {
    Number(*comm, &op);
    t_group.comm = comm;
    t_group.stream = stream;
    t_group.ops.push_back(op);
    return kSuccess;
  }
  bool fail = CountCall(*comm);
  if (fail && !comm->fail_async) {
    comm->Log("injected failure of %s (FAKE_NCCL_FAIL_MODE=sync)",
              OpName(op.kind));
    return kSystemError;
  }
  Number(*comm, &op);
  return Launch(comm, stream, {op}, fail);
}

}  // namespace

// ---- the NCCL ABI ----

FAKE_GPU_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return kInvalidArgument;
  *version = static_cast<int>(EnvLong("FAKE_NCCL_VERSION", kDefaultVersion));
  return kSuccess;
}

FAKE_GPU_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return kInvalidArgument;
  std::random_device device;
  IdLayout layout{};
  std::memcpy(layout.magic, kIdMagic, sizeof(kIdMagic));
  layout.random = (static_cast<uint64_t>(device()) << 32) ^ device();
  layout.pid = static_cast<int32_t>(::getpid());
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, &layout, sizeof(layout));
  return kSuccess;
}

FAKE_GPU_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks,
                                              ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    return kInvalidArgument;
  }
  IdLayout layout;
  std::memcpy(&layout, id.internal, sizeof(layout));
  if (std::memcmp(layout.magic, kIdMagic, sizeof(kIdMagic)) != 0) {
    std::fprintf(stderr, "fake NCCL: ncclCommInitRank: not a unique id of "
                         "the fake NCCL\n");
    return kInvalidArgument;
  }
  int device = 0;
  if (cudaGetDevice(&device) != 0) return kUnhandledCudaError;
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix), "fakenccl-%d-%016llx-",
                static_cast<int>(layout.pid),
                static_cast<unsigned long long>(layout.random));
  auto c = std::make_shared<Comm>(rank, nranks, prefix,
                                  fakegpu::ReadSettings());
  if (nranks > 1) {
    ncclResult_t rc = fakegpu::Rendezvous(*c);
    if (rc != kSuccess) return rc;
  }
  *comm = reinterpret_cast<ncclComm_t>(Comms().Add(std::move(c)));
  return kSuccess;
}

FAKE_GPU_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return kInvalidArgument;
  std::shared_ptr<Comm> c = Comms().Remove(reinterpret_cast<uintptr_t>(comm));
  if (!c) return kInvalidUsage;
  {
    std::unique_lock<std::mutex> lock(c->task_mu);
    c->task_cv.wait(lock, [&] { return c->pending == 0; });
  }
  if (c->nranks > 1) fakegpu::RemoveFilesWithPrefix(c->dir, c->OwnPrefix());
  return kSuccess;
}

FAKE_GPU_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return kInvalidArgument;
  std::shared_ptr<Comm> c = Comms().Remove(reinterpret_cast<uintptr_t>(comm));
  if (!c) return kInvalidUsage;
  c->aborted.store(true, std::memory_order_release);
  c->SetAsyncError(kSystemError);
  {
    std::unique_lock<std::mutex> lock(c->task_mu);
    c->task_cv.wait(lock, [&] { return c->running == 0; });
  }
  if (c->nranks > 1) fakegpu::RemoveFilesWithPrefix(c->dir, c->OwnPrefix());
  return kSuccess;
}

FAKE_GPU_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
                                                   ncclResult_t* error) {
  if (error == nullptr) return kInvalidArgument;
  std::shared_ptr<Comm> c;
  ncclResult_t rc = FindComm(comm, &c);
  if (rc != kSuccess) return rc;
  *error = c->async_error.load();
  return kSuccess;
}

FAKE_GPU_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case kSuccess: return "ncclSuccess: no error";
    case kUnhandledCudaError:
      return "ncclUnhandledCudaError: unhandled cuda error";
    case kSystemError: return "ncclSystemError: unhandled system error";
    case kInternalError: return "ncclInternalError: internal error";
    case kInvalidArgument: return "ncclInvalidArgument: invalid argument";
    case kInvalidUsage: return "ncclInvalidUsage: invalid usage";
    case kRemoteError:
      return "ncclRemoteError: remote process exited or there was a network "
             "error";
    case kInProgress: return "ncclInProgress: NCCL operation in progress";
    default: return "unknown result code";
  }
}

FAKE_GPU_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op,
                                                      void* scalar,
                                                      ncclDataType_t dtype,
                                                      int residence,
                                                      ncclComm_t comm) {
  if (op == nullptr || scalar == nullptr || fakegpu::DtypeSize(dtype) == 0 ||
      (residence != 0 && residence != hbcore::kNcclScalarHostImmediate)) {
    return kInvalidArgument;
  }
  std::shared_ptr<Comm> c;
  ncclResult_t rc = FindComm(comm, &c);
  if (rc != kSuccess) return rc;
  Reduction red;
  red.kind = fakegpu::kRedPreMulSum;
  red.dtype = dtype;
  if (residence == hbcore::kNcclScalarHostImmediate) {
    std::memcpy(&red.scalar, scalar, fakegpu::DtypeSize(dtype));
  } else {
    if (c->check_pointers &&
        !fakeCudaIsDevicePointer(scalar, fakegpu::DtypeSize(dtype))) {
      c->Log("ncclRedOpCreatePreMulSum: device scalar %p is not device "
             "memory", scalar);
      return kInvalidArgument;
    }
    red.scalar_on_device = true;
    red.scalar_ptr = scalar;
  }
  std::lock_guard<std::mutex> lock(c->mu);
  int id = kFirstUserRedOp;
  while (c->redops.count(id) != 0) ++id;
  c->redops.emplace(id, red);
  *op = id;
  return kSuccess;
}

FAKE_GPU_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op,
                                              ncclComm_t comm) {
  std::shared_ptr<Comm> c;
  ncclResult_t rc = FindComm(comm, &c);
  if (rc != kSuccess) return rc;
  std::lock_guard<std::mutex> lock(c->mu);
  return c->redops.erase(op) != 0 ? kSuccess : kInvalidArgument;
}

FAKE_GPU_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv,
                                           size_t count, ncclDataType_t dtype,
                                           ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  Op o;
  o.kind = kAllReduce;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.dtype = dtype;
  return Submit(comm, stream, o, op);
}

FAKE_GPU_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv,
                                           size_t count, ncclDataType_t dtype,
                                           int root, ncclComm_t comm,
                                           cudaStream_t stream) {
  Op o;
  o.kind = kBroadcast;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.dtype = dtype;
  o.root = root;
  return Submit(comm, stream, o, 0);
}

FAKE_GPU_EXPORT ncclResult_t ncclReduce(const void* send, void* recv,
                                        size_t count, ncclDataType_t dtype,
                                        ncclRedOp_t op, int root,
                                        ncclComm_t comm, cudaStream_t stream) {
  Op o;
  o.kind = kReduce;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.dtype = dtype;
  o.root = root;
  return Submit(comm, stream, o, op);
}

FAKE_GPU_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv,
                                           size_t send_count,
                                           ncclDataType_t dtype,
                                           ncclComm_t comm,
                                           cudaStream_t stream) {
  Op o;
  o.kind = kAllGather;
  o.send = send;
  o.recv = recv;
  o.count = send_count;
  o.dtype = dtype;
  return Submit(comm, stream, o, 0);
}

FAKE_GPU_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv,
                                               size_t recv_count,
                                               ncclDataType_t dtype,
                                               ncclRedOp_t op,
                                               ncclComm_t comm,
                                               cudaStream_t stream) {
  Op o;
  o.kind = kReduceScatter;
  o.send = send;
  o.recv = recv;
  o.count = recv_count;
  o.dtype = dtype;
  return Submit(comm, stream, o, op);
}

FAKE_GPU_EXPORT ncclResult_t ncclSend(const void* send, size_t count,
                                      ncclDataType_t dtype, int peer,
                                      ncclComm_t comm, cudaStream_t stream) {
  Op o;
  o.kind = kSend;
  o.send = send;
  o.count = count;
  o.dtype = dtype;
  o.root = peer;
  return Submit(comm, stream, o, 0);
}

FAKE_GPU_EXPORT ncclResult_t ncclRecv(void* recv, size_t count,
                                      ncclDataType_t dtype, int peer,
                                      ncclComm_t comm, cudaStream_t stream) {
  Op o;
  o.kind = kRecv;
  o.recv = recv;
  o.count = count;
  o.dtype = dtype;
  o.root = peer;
  return Submit(comm, stream, o, 0);
}

FAKE_GPU_EXPORT ncclResult_t ncclGroupStart() {
  if (t_group.depth == 0) t_group = GroupState();
  ++t_group.depth;
  return kSuccess;
}

FAKE_GPU_EXPORT ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0) return kInvalidUsage;
  if (--t_group.depth > 0) return kSuccess;
  GroupState group = std::move(t_group);
  t_group = GroupState();
  if (group.error != kSuccess) return group.error;
  if (group.ops.empty()) return kSuccess;
  bool fail = CountCall(*group.comm);
  if (fail && !group.comm->fail_async) {
    group.comm->Log("injected failure of a group of %zu operations "
                    "(FAKE_NCCL_FAIL_MODE=sync)",
                    group.ops.size());
    return kSystemError;
  }
  return Launch(group.comm, group.stream, std::move(group.ops), fail);
}

#define FAKE_CHECK_ABI(name)                                              \
  static_assert(std::is_same<decltype(&name), hbcore::name##_fn>::value, \
                #name " does not match gpu_abi.h")
FAKE_CHECK_ABI(ncclGetVersion);
FAKE_CHECK_ABI(ncclGetUniqueId);
FAKE_CHECK_ABI(ncclCommInitRank);
FAKE_CHECK_ABI(ncclCommDestroy);
FAKE_CHECK_ABI(ncclCommAbort);
FAKE_CHECK_ABI(ncclCommGetAsyncError);
FAKE_CHECK_ABI(ncclGetErrorString);
FAKE_CHECK_ABI(ncclRedOpCreatePreMulSum);
FAKE_CHECK_ABI(ncclRedOpDestroy);
FAKE_CHECK_ABI(ncclAllReduce);
FAKE_CHECK_ABI(ncclBroadcast);
FAKE_CHECK_ABI(ncclReduce);
FAKE_CHECK_ABI(ncclAllGather);
FAKE_CHECK_ABI(ncclReduceScatter);
FAKE_CHECK_ABI(ncclSend);
FAKE_CHECK_ABI(ncclRecv);
FAKE_CHECK_ABI(ncclGroupStart);
FAKE_CHECK_ABI(ncclGroupEnd);
#undef FAKE_CHECK_ABI
