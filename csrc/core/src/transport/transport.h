// A transport is what init creates from the message-passing library: the
// process topology, the control plane and the CPU data-plane backend. The
// MPI transport is the only one today; this header keeps <mpi.h> out of
// everything that is not an MPI file.
#ifndef HBCORE_TRANSPORT_TRANSPORT_H_
#define HBCORE_TRANSPORT_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/peer_alarm.h"
#include "common/config.h"
#include "common/status.h"
#include "common/wait_policy.h"
#include "negotiation/control_comm.h"

namespace hbcore {

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  // The lowest global rank on this rank's host: names the host (the MPI
  // shared-memory split), the same number on every rank of it.
  int host_id = 0;
  bool threads_multiple = false;
  // Every host runs the same number of ranks (Horovod's is_homogeneous).
  bool homogeneous = true;
  // Fused allreduces reduce within each host, then across hosts (see
  // mpi_shm_allreduce.h); the same on every rank.
  bool hierarchical_allreduce = false;
  // Allgathers gather within each host, then between one leader per host
  // (see mpi_hier_allgather.h); the same on every rank.
  bool hierarchical_allgather = false;
  // Allreduces of the global set that MPI would carry go around a ring of
  // point-to-point messages instead (see mpi_ring_allreduce.h); the same on
  // every rank.
  bool ring_allreduce = false;
  // The CPUs this process may run on (ThreadCpus(); empty if unreadable),
  // and whether they give every local rank's background thread and calling
  // thread a CPU of its own (2 x local_size <= their number, or the
  // machine's when unreadable).
  std::vector<int> cpus;
  bool spare_cpus = false;
};

// A process set's own communicator, as its control plane and CPU backend
// (plain MPI: the node shared-memory allreduce serves the global set only;
// where its members span hosts, hbcore's ring as for the global set).
class Group {
 public:
  virtual ~Group() = default;
  virtual ControlComm* control() = 0;
  virtual Backend* cpu_backend() = 0;
  // Its allreduces go around hbcore's ring (mpi_ring_allreduce.h).
  virtual bool ring_allreduce() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const Topology& topology() const = 0;
  // How the control planes wait (the global set's and every group's).
  virtual const WaitPolicy& control_wait() const = 0;
  virtual ControlComm* control() = 0;
  virtual Backend* cpu_backend() = 0;
  // Failure notices between the data planes of any process set (see
  // peer_alarm.h); drained at shutdown.
  virtual PeerAlarm* alarm() = 0;
  // Collective over every rank of the transport, called in the same order
  // everywhere (the runtime does it in lockstep): creates the communicator
  // of `ranks` (ascending), in which rank i is ranks[i]. `*out` is null on
  // ranks that are not members.
  virtual Status CreateGroup(const std::vector<int>& ranks,
                             std::unique_ptr<Group>* out) = 0;
};

// Initialises MPI if nobody did (MPI_THREAD_MULTIPLE requested), duplicates
// `comm` (see hb_init: a Fortran communicator handle, or HB_COMM_WORLD) for
// the core's private use and splits it into local and cross communicators.
// `max_sleep_us` caps the polling backoff. Fused allreduces of up to
// config.shm_allreduce_bytes per piece run through node shared memory when
// the whole job is on one node, and hierarchically (shared memory within
// each host, MPI between hosts) when every host runs the same number of
// ranks and config.hierarchical_allreduce allows it. Allgathers go
// hierarchical (within hosts, then between host leaders) when the job spans
// hosts, some host runs more than one rank and
// config.hierarchical_allgather allows it.
Status CreateMpiTransport(int64_t comm, double max_sleep_us,
                          const Config& config,
                          std::unique_ptr<Transport>* out);

// The MPI library's version string (valid without init).
std::string MpiLibraryVersion();

}  // namespace hbcore

#endif  // HBCORE_TRANSPORT_TRANSPORT_H_
