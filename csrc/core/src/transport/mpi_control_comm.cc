#include "transport/mpi_control_comm.h"

#include "backends/combined_buffer.h"
#include "common/mpi_wait.h"

namespace hbcore {
namespace {

// MPI's user-defined operation over `len` packed buffers. A layout
// mismatch cannot be returned from here: CombineBuffers marks the result,
// which AllreduceAndSum checks.
void CombineOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint8_t* a = static_cast<const uint8_t*>(in);
  uint8_t* b = static_cast<uint8_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const size_t bytes = CombinedSize(b);
    CombineBuffers(a, b);
    a += bytes;
    b += bytes;
  }
}

}  // namespace

MpiControlComm::MpiControlComm(MPI_Comm comm, const WaitPolicy& wait)
    : comm_(comm), wait_(wait) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  wake_in_.assign(size_, 0);
  wake_recv_.assign(size_, MPI_REQUEST_NULL);
  done_.assign(size_, 0);
  sent_to_.assign(size_, 0);
  received_from_.assign(size_, 0);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) PostWakeReceive(peer);
  }
}

MpiControlComm::~MpiControlComm() {
  if (combined_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&combined_type_);
  if (combine_op_ != MPI_OP_NULL) MPI_Op_free(&combine_op_);
  for (MPI_Request& r : wake_recv_) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  // After a Drain every send has completed. Without one (the job failed),
  // a wake-up a peer never matched must not keep this rank from exiting.
  for (PendingSend& s : sends_) {
    if (s.request != MPI_REQUEST_NULL) MPI_Request_free(&s.request);
  }
}

Status MpiControlComm::Wait(MPI_Request* request) {
  return WaitForRequest(request, wait_);
}

void MpiControlComm::PostWakeReceive(int peer) {
  MPI_Irecv(&wake_in_[peer], 1, MPI_UINT64_T, peer, kWakeTag, comm_,
            &wake_recv_[peer]);
}

uint64_t MpiControlComm::TakeWake(int peer) {
  const uint64_t cycle = wake_in_[peer];
  ++received_from_[peer];
  PostWakeReceive(peer);
  return cycle;
}

Status MpiControlComm::AllreduceAnd(std::vector<uint64_t>* words) {
  MPI_Request req;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, words->data(),
                          static_cast<int>(words->size()), MPI_UINT64_T,
                          MPI_BAND, comm_, &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Iallreduce");
  return Wait(&req);
}

Status MpiControlComm::AllreduceAndSum(
    std::vector<uint64_t>* words, std::vector<uint8_t>* payload,
    const std::vector<PayloadSegment>& segments) {
  std::vector<uint8_t> buffer = PackCombined(*words, *payload, segments);
  int rc;
  if (combine_op_ == MPI_OP_NULL) {
    rc = MPI_Op_create(&CombineOp, /*commute=*/1, &combine_op_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Op_create");
  }
  if (combined_type_bytes_ != buffer.size()) {
    if (combined_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&combined_type_);
    combined_type_bytes_ = 0;
    rc = MPI_Type_contiguous(static_cast<int>(buffer.size()), MPI_BYTE,
                             &combined_type_);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&combined_type_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Type_contiguous");
    combined_type_bytes_ = buffer.size();
  }
  MPI_Request req;
  rc = MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), 1, combined_type_,
                      combine_op_, comm_, &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Iallreduce");
  Status s = Wait(&req);
  if (!s.ok()) return s;
  if (CombinedBroken(buffer.data())) {
    return Status::Internal("the fast path's buffers have different layouts "
                            "on different ranks");
  }
  UnpackCombined(buffer.data(), words, payload);
  return Status::OK();
}

Status MpiControlComm::Gather(const std::string& mine,
                              std::vector<std::string>* all) {
  int my_len = static_cast<int>(mine.size());
  std::vector<int> lens(rank_ == 0 ? size_ : 0);
  MPI_Request req;
  int rc = MPI_Igather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm_,
                       &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Igather");
  Status s = Wait(&req);
  if (!s.ok()) return s;

  std::vector<int> displs(lens.size());
  int total = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    displs[i] = total;
    total += lens[i];
  }
  std::string buffer(static_cast<size_t>(total), '\0');
  rc = MPI_Igatherv(mine.data(), my_len, MPI_BYTE, &buffer[0], lens.data(),
                    displs.data(), MPI_BYTE, 0, comm_, &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Igatherv");
  s = Wait(&req);
  if (!s.ok() || rank_ != 0) return s;
  all->resize(size_);
  for (int r = 0; r < size_; ++r) {
    (*all)[r] = buffer.substr(displs[r], lens[r]);
  }
  return Status::OK();
}

Status MpiControlComm::Broadcast(std::string* bytes) {
  uint64_t len = bytes->size();
  MPI_Request req;
  int rc = MPI_Ibcast(&len, 1, MPI_UINT64_T, 0, comm_, &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Ibcast");
  Status s = Wait(&req);
  if (!s.ok()) return s;
  bytes->resize(len);
  rc = MPI_Ibcast(&(*bytes)[0], static_cast<int>(len), MPI_BYTE, 0, comm_,
                  &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Ibcast");
  return Wait(&req);
}

void MpiControlComm::ReapSends() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? sends_.erase(it) : std::next(it);
  }
}

void MpiControlComm::SendWake(uint64_t cycle) {
  ReapSends();
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    ++sent_to_[peer];
    sends_.push_back({cycle, MPI_REQUEST_NULL});
    PendingSend& s = sends_.back();
    MPI_Isend(&s.value, 1, MPI_UINT64_T, peer, kWakeTag, comm_, &s.request);
  }
}

bool MpiControlComm::PollWake(uint64_t* cycle) {
  bool any = false;
  // One call tests every peer's receive (this rank's own slot is
  // MPI_REQUEST_NULL, which MPI skips; all null gives MPI_UNDEFINED).
  for (;;) {
    int count = 0;
    MPI_Testsome(size_, wake_recv_.data(), &count, done_.data(),
                 MPI_STATUSES_IGNORE);
    if (count == MPI_UNDEFINED || count == 0) break;
    for (int i = 0; i < count; ++i) {
      const uint64_t asked = TakeWake(done_[i]);
      if (!any || asked > *cycle) *cycle = asked;
      any = true;
    }
  }
  if (!sends_.empty()) ReapSends();
  return any;
}

Status MpiControlComm::Drain() {
  // expected[p]: how many wake-ups peer p sent to this rank in all.
  std::vector<uint64_t> expected(size_, 0);
  MPI_Request req;
  int rc = MPI_Ialltoall(sent_to_.data(), 1, MPI_UINT64_T, expected.data(), 1,
                         MPI_UINT64_T, comm_, &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Ialltoall");
  Status s = Wait(&req);
  if (!s.ok()) return s;
  for (int peer = 0; peer < size_; ++peer) {
    while (peer != rank_ && received_from_[peer] < expected[peer]) {
      s = Wait(&wake_recv_[peer]);
      if (!s.ok()) return s;
      TakeWake(peer);
    }
  }
  // Every peer drained what this rank sent, so the sends complete.
  for (PendingSend& p : sends_) {
    s = Wait(&p.request);
    if (!s.ok()) return s;
  }
  sends_.clear();
  return Status::OK();
}

}  // namespace hbcore
