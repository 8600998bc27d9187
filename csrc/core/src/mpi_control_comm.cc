#include "mpi_control_comm.h"

#include "mpi_wait.h"

namespace hbcore {

MpiControlComm::MpiControlComm(MPI_Comm comm, double max_sleep_us)
    : comm_(comm), max_sleep_us_(max_sleep_us) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Irecv(&wake_in_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kWakeTag, comm_,
            &wake_recv_);
}

MpiControlComm::~MpiControlComm() {
  if (wake_recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&wake_recv_);
    MPI_Wait(&wake_recv_, MPI_STATUS_IGNORE);
  }
  // Wake-ups are a few bytes and go out eagerly; one a peer never matched
  // must not keep this rank from shutting down.
  for (PendingSend& s : sends_) {
    if (s.request != MPI_REQUEST_NULL) MPI_Request_free(&s.request);
  }
}

Status MpiControlComm::Wait(MPI_Request* request) {
  return WaitForRequest(request, abort_, max_sleep_us_);
}

Status MpiControlComm::AllreduceAnd(std::vector<uint64_t>* words) {
  MPI_Request req;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, words->data(),
                          static_cast<int>(words->size()), MPI_UINT64_T,
                          MPI_BAND, comm_, &req);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Iallreduce");
  return Wait(&req);
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
    sends_.push_back({cycle, MPI_REQUEST_NULL});
    PendingSend& s = sends_.back();
    MPI_Isend(&s.value, 1, MPI_UINT64_T, peer, kWakeTag, comm_, &s.request);
  }
}

bool MpiControlComm::PollWake(uint64_t* cycle) {
  bool any = false;
  for (;;) {
    int done = 0;
    MPI_Test(&wake_recv_, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    if (!any || wake_in_ > *cycle) *cycle = wake_in_;
    any = true;
    MPI_Irecv(&wake_in_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kWakeTag, comm_,
              &wake_recv_);
  }
  if (!sends_.empty()) ReapSends();
  return any;
}

}  // namespace hbcore
