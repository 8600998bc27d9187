#include "transport/mpi_peer_alarm.h"

#include <cstring>

namespace hbcore {
namespace {

// Message layout: the set id (int32), then the notice's text.
constexpr int kTag = 7;

}  // namespace

MpiPeerAlarm::MpiPeerAlarm(MPI_Comm comm) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  sent_to_.assign(size_, 0);
  received_from_.assign(size_, 0);
}

MpiPeerAlarm::~MpiPeerAlarm() {
  // After a Drain every send completed; after a failed job (no drain) the
  // sends are abandoned with the communicator.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (Send& s : sends_) MPI_Request_free(&s.request);
  MPI_Comm_free(&comm_);
}

void MpiPeerAlarm::Raise(int set_id, const std::vector<int>& peers,
                         const std::string& why) {
  for (int peer : peers) {
    if (peer == rank_ || peer < 0 || peer >= size_) continue;
    Send s;
    s.bytes = std::make_unique<std::string>(sizeof(int32_t), '\0');
    const int32_t id = set_id;
    std::memcpy(&(*s.bytes)[0], &id, sizeof(id));
    s.bytes->append(why);
    MPI_Isend(s.bytes->data(), static_cast<int>(s.bytes->size()), MPI_BYTE,
              peer, kTag, comm_, &s.request);
    sends_.push_back(std::move(s));
    ++sent_to_[peer];
  }
}

void MpiPeerAlarm::Receive(const MPI_Status& probed) {
  int bytes = 0;
  MPI_Get_count(&probed, MPI_BYTE, &bytes);
  std::string message(static_cast<size_t>(bytes), '\0');
  MPI_Recv(&message[0], bytes, MPI_BYTE, probed.MPI_SOURCE, kTag, comm_,
           MPI_STATUS_IGNORE);
  ++received_from_[probed.MPI_SOURCE];
  if (message.size() < sizeof(int32_t)) return;
  int32_t id = 0;
  std::memcpy(&id, message.data(), sizeof(id));
  notices_.emplace(id, message.substr(sizeof(int32_t)));  // keeps the first
}

bool MpiPeerAlarm::Poll(int set_id, std::string* why) {
  for (;;) {
    int flag = 0;
    MPI_Status probed;
    MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm_, &flag, &probed);
    if (!flag) break;
    Receive(probed);
  }
  auto it = notices_.find(set_id);
  if (it == notices_.end()) return false;
  *why = it->second;
  return true;
}

Status MpiPeerAlarm::Drain() {
  // Everyone learns how many notices it is owed (rank r's sent_to_[p] is
  // what p must receive from r), receives those still missing, then
  // completes its own sends.
  std::vector<int> owed(size_, 0);
  int rc = MPI_Alltoall(sent_to_.data(), 1, MPI_INT, owed.data(), 1, MPI_INT,
                        comm_);
  if (rc != MPI_SUCCESS) return Status::Internal("draining failure notices");
  for (int peer = 0; peer < size_; ++peer) {
    while (received_from_[peer] < owed[peer]) {
      MPI_Status probed;
      MPI_Probe(peer, kTag, comm_, &probed);
      Receive(probed);
    }
  }
  for (Send& s : sends_) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
  sends_.clear();
  return Status::OK();
}

}  // namespace hbcore
