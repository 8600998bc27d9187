// Waiting on MPI requests without spinning for long. MPICH's blocking calls
// poll the network at full speed; on a small CPU host that steals a core
// from the model. Control-plane waits instead test for a while (WaitPolicy),
// then sleep with an exponential backoff.
#ifndef HBCORE_COMMON_MPI_WAIT_H_
#define HBCORE_COMMON_MPI_WAIT_H_

#include <mpi.h>

#include "common/status.h"
#include "common/wait_policy.h"

namespace hbcore {

Status WaitForRequest(MPI_Request* request, const WaitPolicy& policy);

// Maps an MPI error code to a status naming the call that failed.
Status MpiStatus(int code, const char* call);

}  // namespace hbcore

#endif  // HBCORE_COMMON_MPI_WAIT_H_
