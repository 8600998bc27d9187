// PeerAlarm over a private duplicate of the job's communicator.
#ifndef HBCORE_TRANSPORT_MPI_PEER_ALARM_H_
#define HBCORE_TRANSPORT_MPI_PEER_ALARM_H_

#include <mpi.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/peer_alarm.h"

namespace hbcore {

class MpiPeerAlarm : public PeerAlarm {
 public:
  // Duplicates `comm` (collective over it).
  explicit MpiPeerAlarm(MPI_Comm comm);
  ~MpiPeerAlarm() override;
  MpiPeerAlarm(const MpiPeerAlarm&) = delete;
  MpiPeerAlarm& operator=(const MpiPeerAlarm&) = delete;

  void Raise(int set_id, const std::vector<int>& peers,
             const std::string& why) override;
  bool Poll(int set_id, std::string* why) override;
  Status Drain() override;

 private:
  // Receives one message that MPI_Iprobe reported.
  void Receive(const MPI_Status& probed);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  // A send in flight owns its bytes until MPI_Wait (Drain).
  struct Send {
    std::unique_ptr<std::string> bytes;
    MPI_Request request;
  };
  std::vector<Send> sends_;
  std::vector<int> sent_to_;        // per global rank
  std::vector<int> received_from_;  // per global rank
  std::map<int, std::string> notices_;  // first notice per set id
};

}  // namespace hbcore

#endif  // HBCORE_TRANSPORT_MPI_PEER_ALARM_H_
