// ControlComm over MPI non-blocking collectives on the core's private
// communicator, waited on with mpi_wait's backoff.
//
// Wake-up messages (see runtime.h for the protocol they serve):
//  1. Each rank keeps one receive posted per peer, for that peer alone.
//     Never MPI_ANY_SOURCE: MPICH's ch4 device, when a rank's peers are
//     split between shared memory and the network module (any job spanning
//     hosts), completed an any-source receive of a network message only at
//     the receiver's next collective. An idle rank then never saw the
//     wake-up, and the job sat until the stall inspector's timer started a
//     cycle (60 s by default). Receives per peer, tested together with one
//     MPI_Testsome, complete as soon as the message is there.
//  2. Every rank counts the wake-ups it sent to and received from each
//     peer. Drain(), collective, exchanges the counts and receives what is
//     still in flight, so MPI_Finalize finds no unmatched message (UCX
//     printed a warning per leftover otherwise).
#ifndef HBCORE_TRANSPORT_MPI_CONTROL_COMM_H_
#define HBCORE_TRANSPORT_MPI_CONTROL_COMM_H_

#include <mpi.h>

#include <cstdint>
#include <list>
#include <vector>

#include "common/mpi_wait.h"
#include "negotiation/control_comm.h"

namespace hbcore {

class MpiControlComm : public ControlComm {
 public:
  MpiControlComm(MPI_Comm comm, const WaitPolicy& wait);
  ~MpiControlComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllreduceAnd(std::vector<uint64_t>* words) override;
  // One MPI_Iallreduce of a buffer packed by PackCombined, as one element
  // of a contiguous byte type, with a user-defined operation that calls
  // CombineBuffers (combined_buffer.h).
  Status AllreduceAndSum(std::vector<uint64_t>* words,
                         std::vector<uint8_t>* payload,
                         const std::vector<PayloadSegment>& segments) override;
  Status Gather(const std::string& mine,
                std::vector<std::string>* all) override;
  Status Broadcast(std::string* bytes) override;
  void SendWake(uint64_t cycle) override;
  bool PollWake(uint64_t* cycle) override;
  Status Drain() override;

 private:
  Status Wait(MPI_Request* request);
  void PostWakeReceive(int peer);
  // Takes a completed wake-up from `peer` and reposts the receive.
  uint64_t TakeWake(int peer);
  void ReapSends();

  // Wake-up messages use their own tag; collectives never match them.
  static constexpr int kWakeTag = 7001;

  MPI_Comm comm_;
  // AllreduceAndSum's operation, and its element type for the last buffer
  // size (the layout changes only when the response cache does).
  MPI_Op combine_op_ = MPI_OP_NULL;
  MPI_Datatype combined_type_ = MPI_DATATYPE_NULL;
  size_t combined_type_bytes_ = 0;
  int rank_ = 0;
  int size_ = 1;
  WaitPolicy wait_;
  // Per peer (this rank's own entries stay unused).
  std::vector<uint64_t> wake_in_;
  std::vector<MPI_Request> wake_recv_;
  std::vector<int> done_;  // MPI_Testsome's indices of completed receives
  std::vector<uint64_t> sent_to_;
  std::vector<uint64_t> received_from_;
  struct PendingSend {
    uint64_t value;
    MPI_Request request;
  };
  // A list keeps each send buffer at a fixed address until MPI is done.
  std::list<PendingSend> sends_;
};

}  // namespace hbcore

#endif  // HBCORE_TRANSPORT_MPI_CONTROL_COMM_H_
