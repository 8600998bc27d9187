// Waiting on MPI requests without spinning. MPICH's blocking calls poll the
// network at full speed; on a small CPU host that steals a core from the
// model. Control-plane waits instead test, spin briefly, then sleep with an
// exponential backoff capped at `max_sleep_us`.
#ifndef HBCORE_MPI_WAIT_H_
#define HBCORE_MPI_WAIT_H_

#include <mpi.h>

#include "status.h"

namespace hbcore {

Status WaitForRequest(MPI_Request* request, double max_sleep_us);

// Maps an MPI error code to a status naming the call that failed.
Status MpiStatus(int code, const char* call);

}  // namespace hbcore

#endif  // HBCORE_MPI_WAIT_H_
