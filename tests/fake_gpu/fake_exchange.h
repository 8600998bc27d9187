// The shared-memory protocol of the fake NCCL (libfakenccl only): the
// rendezvous of ncclCommInitRank and the exchange one stream task performs.
// Both are described at the top of fake_nccl.cc; the segments they are made
// of are in fake_shm.h.
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_EXCHANGE_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_EXCHANGE_H_

#include <vector>

#include "fake_comm.h"

namespace fakegpu {

// Joins the other ranks of `comm` (nranks > 1); ncclSuccess once all of
// them have, ncclInvalidArgument on a mismatch, ncclSystemError on a
// timeout or a file system error.
ncclResult_t Rendezvous(Comm& comm);

// Runs the operations of one task (a call or a group) with the peers: the
// error the communicator should get, or ncclSuccess.
ncclResult_t RunExchange(Comm& comm, const std::vector<Op>& ops);

}  // namespace fakegpu

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_EXCHANGE_H_
