#include "mpi_wait.h"

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

Status WaitForRequest(MPI_Request* request, double max_sleep_us) {
  using Clock = std::chrono::steady_clock;
  // Spinning for a few tens of microseconds keeps the latency of a cycle
  // whose peers are already waiting at MPI's own; after that the peer is
  // late and sleeping costs nothing measurable.
  constexpr auto kSpin = std::chrono::microseconds(30);
  const auto start = Clock::now();
  double sleep_us = 2.0;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Test");
    if (done) return Status::OK();
    if (Clock::now() - start < kSpin) continue;
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::micro>(sleep_us));
    sleep_us = sleep_us * 2 < max_sleep_us ? sleep_us * 2 : max_sleep_us;
  }
}

}  // namespace hbcore
