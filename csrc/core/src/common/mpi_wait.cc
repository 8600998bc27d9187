#include "common/mpi_wait.h"

#include <chrono>
#include <string>
#include <thread>

namespace hbcore {

Status MpiStatus(int code, const char* call) {
  if (code == MPI_SUCCESS) return Status::OK();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::Internal(std::string(call) + " failed: " +
                          std::string(text, len));
}

Status WaitForRequest(MPI_Request* request, const WaitPolicy& policy) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto spin = std::chrono::duration<double, std::micro>(policy.spin_us);
  double sleep_us = 2.0;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Test");
    if (done) return Status::OK();
    if (Clock::now() - start < spin) {
      if (policy.yield) std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::micro>(sleep_us));
    sleep_us = sleep_us * 2 < policy.max_sleep_us ? sleep_us * 2
                                                  : policy.max_sleep_us;
  }
}

}  // namespace hbcore
