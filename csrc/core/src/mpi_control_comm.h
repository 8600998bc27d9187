// ControlComm over MPI non-blocking collectives on the core's private
// communicator, waited on with mpi_wait's backoff.
#ifndef HBCORE_MPI_CONTROL_COMM_H_
#define HBCORE_MPI_CONTROL_COMM_H_

#include <mpi.h>

#include <atomic>
#include <list>
#include <memory>

#include "control_comm.h"

namespace hbcore {

class MpiControlComm : public ControlComm {
 public:
  MpiControlComm(MPI_Comm comm, double max_sleep_us);
  ~MpiControlComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllreduceAnd(std::vector<uint64_t>* words) override;
  Status Gather(const std::string& mine,
                std::vector<std::string>* all) override;
  Status Broadcast(std::string* bytes) override;
  void SendWake(uint64_t cycle) override;
  bool PollWake(uint64_t* cycle) override;
  void Abort() override { abort_ = true; }

 private:
  Status Wait(MPI_Request* request);
  void ReapSends();

  // Wake-up messages use their own tag; collectives never match them.
  static constexpr int kWakeTag = 7001;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  double max_sleep_us_;
  std::atomic<bool> abort_{false};
  uint64_t wake_in_ = 0;
  MPI_Request wake_recv_ = MPI_REQUEST_NULL;
  struct PendingSend {
    uint64_t value;
    MPI_Request request;
  };
  // A list keeps each send buffer at a fixed address until MPI is done.
  std::list<PendingSend> sends_;
};

}  // namespace hbcore

#endif  // HBCORE_MPI_CONTROL_COMM_H_
