// The MPI transport: MPI initialisation, the core's private communicator and
// the topology split.
#include <mpi.h>

#include <cstdlib>

#include "backends/mpi/mpi_backend.h"
#include "common/logging.h"
#include "common/mpi_wait.h"
#include "transport/mpi_control_comm.h"
#include "transport/mpi_peer_alarm.h"
#include "transport/thread_affinity.h"
#include "transport/transport.h"

namespace hbcore {
namespace {

// Under HB_HIERARCHICAL_ALLGATHER=auto, the smallest allgather output that
// goes hierarchical (MpiHierAllgather::Takes says why small ones do not).
constexpr int64_t kAutoHierAllgatherBytes = 1 << 20;

// Registered only when the core itself initialised MPI: whoever initialises
// finalises (mpi4py does the same for its own).
void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

class MpiGroup : public Group {
 public:
  // Takes ownership of `comm`. `ring`: its allreduces go around hbcore's
  // ring (a collective call on `comm`: every member passes the same).
  MpiGroup(MPI_Comm comm, const WaitPolicy& wait, bool ring)
      : comm_(comm),
        control_(std::make_unique<MpiControlComm>(comm_, wait)),
        backend_(std::make_unique<MpiBackend>(
            comm_, nullptr, MPI_COMM_NULL, nullptr,
            ring ? std::make_unique<MpiRingAllreduce>(comm_) : nullptr)),
        ring_(ring) {}
  ~MpiGroup() override {
    // Objects using the communicator go first.
    backend_.reset();
    control_.reset();
    MPI_Comm_free(&comm_);
  }
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  ControlComm* control() override { return control_.get(); }
  Backend* cpu_backend() override { return backend_.get(); }
  bool ring_allreduce() const override { return ring_; }

 private:
  MPI_Comm comm_;
  std::unique_ptr<MpiControlComm> control_;
  std::unique_ptr<MpiBackend> backend_;
  bool ring_;
};

class MpiTransport : public Transport {
 public:
  MpiTransport() = default;
  ~MpiTransport() override {
    // Objects using the communicators go first.
    backend_.reset();
    control_.reset();
    alarm_.reset();
    for (MPI_Comm* c : {&cross_, &local_, &comm_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }

  Status Init(int64_t comm, double max_sleep_us, const Config& config) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = 0;
    if (!initialized && comm != HB_COMM_WORLD) {
      return Status::InvalidArgument(
          "a communicator was given to init but MPI is not initialized");
    }
    if (!initialized) {
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE,
                               &provided);
      if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Init_thread");
      std::atexit(FinalizeAtExit);
    } else {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized) {
        return Status::Internal("MPI was already finalized in this process");
      }
      MPI_Query_thread(&provided);
    }
    topo_.threads_multiple = provided == MPI_THREAD_MULTIPLE;

    MPI_Comm base = MPI_COMM_WORLD;
    if (comm != HB_COMM_WORLD) {
      base = MPI_Comm_f2c(static_cast<MPI_Fint>(comm));
      if (base == MPI_COMM_NULL) {
        return Status::InvalidArgument(
            "the communicator given to init is MPI_COMM_NULL");
      }
      int inter = 0;
      int rc = MPI_Comm_test_inter(base, &inter);
      if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_test_inter");
      if (inter) {
        return Status::InvalidArgument(
            "the communicator given to init is an intercommunicator; hbcore "
            "needs an intracommunicator");
      }
    }
    int rc = MPI_Comm_dup(base, &comm_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_dup");
    // Errors become statuses the core reports, not aborts inside MPI.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &topo_.rank);
    MPI_Comm_size(comm_, &topo_.size);
    SetLogRank(topo_.rank);

    rc = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, topo_.rank,
                             MPI_INFO_NULL, &local_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_split_type");
    MPI_Comm_rank(local_, &topo_.local_rank);
    MPI_Comm_size(local_, &topo_.local_size);
    rc = MPI_Comm_split(comm_, topo_.local_rank, topo_.rank, &cross_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_split");
    MPI_Comm_rank(cross_, &topo_.cross_rank);
    MPI_Comm_size(cross_, &topo_.cross_size);
    // The host's lowest global rank names it (process sets ask whether
    // their members span hosts: CreateGroup; the NCCL backend which ranks
    // share a GPU).
    rc = MPI_Allreduce(&topo_.rank, &topo_.host_id, 1, MPI_INT, MPI_MIN,
                       local_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allreduce (host id)");
    ring_choice_ = config.ring_allreduce;
    topo_.cpus = ThreadCpus();
    topo_.spare_cpus = 2 * topo_.local_size <= CpuCount(topo_.cpus);
    wait_ = ControlWaitPolicy(topo_.spare_cpus, max_sleep_us);

    control_ = std::make_unique<MpiControlComm>(comm_, wait_);
    alarm_ = std::make_unique<MpiPeerAlarm>(comm_);
    const bool single_node = topo_.local_size == topo_.size;
    bool hierarchical = false;
    bool hier_allgather = false;
    topo_.homogeneous = true;  // one host
    if (!single_node) {
      Status s = ChooseHierarchical(config, &hierarchical, &hier_allgather,
                                    &topo_.homogeneous);
      if (!s.ok()) return s;
    }
    std::unique_ptr<MpiHierAllgather> allgather;
    if (hier_allgather) {
      // Collective on every rank: they all made the same choice above.
      // Forced on, every call goes hierarchical; chosen automatically, only
      // outputs of kAutoHierAllgatherBytes and more (MpiHierAllgather::Takes).
      const int64_t min_bytes =
          config.hierarchical_allgather == Choice::kOn ? 0
                                                       : kAutoHierAllgatherBytes;
      Status s = MpiHierAllgather::Create(comm_, local_, min_bytes,
                                          &allgather);
      if (!s.ok()) return s;
    }
    topo_.hierarchical_allgather = hier_allgather;
    std::unique_ptr<MpiShmAllreduce> shm;
    if (topo_.size > 1 && (single_node || hierarchical)) {
      // Collective on every rank of each node; a failure only costs the
      // faster path, and every rank of the job learns of it below.
      Status s = MpiShmAllreduce::Create(local_, config.shm_allreduce_bytes,
                                         &shm);
      if (!s.ok() && s.code() != HB_ERR_UNSUPPORTED && topo_.rank == 0) {
        HB_LOG(kWarning, s.message() << "; allreduces use MPI instead "
                         "(set HB_SHM_ALLREDUCE_THRESHOLD=0 to silence this)");
      }
      if (hierarchical) {
        // Every node must have its segment, or no node uses one.
        int have = shm ? 1 : 0;
        int all = 0;
        int rc = MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, comm_);
        if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allreduce");
        if (!all) {
          shm.reset();
          hierarchical = false;
        }
      }
    }
    topo_.hierarchical_allreduce = hierarchical;
    Status s = ChooseRing(config, single_node, &topo_.ring_allreduce);
    if (!s.ok()) return s;
    std::unique_ptr<MpiRingAllreduce> ring;
    if (topo_.ring_allreduce) {
      // Collective on every rank (of each cross communicator where the
      // allreduce goes hierarchical): they all made the same choice.
      ring = std::make_unique<MpiRingAllreduce>(hierarchical ? cross_ : comm_);
    }
    backend_ = std::make_unique<MpiBackend>(
        comm_, std::move(shm), hierarchical ? cross_ : MPI_COMM_NULL,
        std::move(allgather), std::move(ring));
    return Status::OK();
  }

  const Topology& topology() const override { return topo_; }
  const WaitPolicy& control_wait() const override { return wait_; }
  ControlComm* control() override { return control_.get(); }
  Backend* cpu_backend() override { return backend_.get(); }
  PeerAlarm* alarm() override { return alarm_.get(); }

  Status CreateGroup(const std::vector<int>& ranks,
                     std::unique_ptr<Group>* out) override {
    out->reset();
    bool member = false;
    for (int r : ranks) member = member || r == topo_.rank;
    // Keyed by global rank, so set rank i is the i-th smallest member.
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, topo_.rank,
                            &comm);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_split");
    if (comm == MPI_COMM_NULL) return Status::OK();
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    bool ring = false;
    Status s = ChooseSetRing(comm, &ring);
    if (!s.ok()) {
      MPI_Comm_free(&comm);
      return s;
    }
    *out = std::make_unique<MpiGroup>(comm, wait_, ring);
    return Status::OK();
  }

 private:
  // HB_RING_ALLREDUCE: `auto` where the job spans hosts, `1` in any job of
  // more than one rank, `0` never. The ring's communicator is created on
  // every rank or on none: a rank whose setting differs turns it off
  // everywhere (init then fails in the runtime's agreement check, which
  // names the knob).
  Status ChooseRing(const Config& config, bool single_node, bool* ring) {
    const int wants = config.ring_allreduce == Choice::kOn
                          ? topo_.size > 1
                          : config.ring_allreduce == Choice::kAuto &&
                                !single_node;
    int mine[2] = {wants, -wants};
    int max[2] = {0, 0};
    int rc = MPI_Allreduce(mine, max, 2, MPI_INT, MPI_MAX, comm_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allreduce");
    *ring = max[0] == 1 && max[1] == -1;  // every rank wants it
    return Status::OK();
  }

  // A process set's allreduces go around the ring by the rule of the global
  // set (ChooseRing) applied to its members: `1` where it has more than one,
  // `auto` where they span hosts (a set within one host keeps MPI's
  // shared-memory allreduce). The same answer on every member: the runtime
  // checked at init that every rank has the same HB_RING_ALLREDUCE, and the
  // span comes from one allreduce over the set.
  Status ChooseSetRing(MPI_Comm comm, bool* ring) {
    int size = 1;
    MPI_Comm_size(comm, &size);
    // Maxima of (host id, -host id): one host iff they agree.
    int mine[2] = {topo_.host_id, -topo_.host_id};
    int max[2] = {0, 0};
    int rc = MPI_Allreduce(mine, max, 2, MPI_INT, MPI_MAX, comm);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allreduce (set hosts)");
    const bool spans_hosts = max[0] != -max[1];
    *ring = size > 1 && (ring_choice_ == Choice::kOn ||
                         (ring_choice_ == Choice::kAuto && spans_hosts));
    return Status::OK();
  }

  // Whether fused allreduces and allgathers go hierarchical, the same
  // answer on every rank: one allreduce gathers what both rules need, so
  // the two paths are decided from the same facts.
  //  - allreduce: the job spans hosts (the caller checks), each runs the
  //    same number (> 1) of ranks (its shared-memory chunks must line up
  //    across hosts), shared memory is enabled and no rank says 0;
  //  - allgather: the job spans hosts and some host runs more than one
  //    rank (any placement works, uneven and interleaved included; with one
  //    rank per host there is nothing to gather within hosts, so the path
  //    would be the flat one plus copies) and no rank says 0.
  // A rank saying 0 where others do not turns every rank's answer off; init
  // then fails in the runtime's agreement check, which names the knob.
  // `homogeneous`: every host runs the same number of ranks.
  Status ChooseHierarchical(const Config& config, bool* allreduce,
                            bool* allgather, bool* homogeneous) {
    const int wants_allreduce =
        config.hierarchical_allreduce != Choice::kOff &&
        config.shm_allreduce_bytes > 0;
    const int wants_allgather = config.hierarchical_allgather != Choice::kOff;
    // Maxima of (local size, -local size, -wants...): uniform local sizes
    // iff the first two agree; every rank wants a path iff its entry is -1.
    int mine[4] = {topo_.local_size, -topo_.local_size, -wants_allreduce,
                   -wants_allgather};
    int max[4] = {0, 0, 0, 0};
    int rc = MPI_Allreduce(mine, max, 4, MPI_INT, MPI_MAX, comm_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allreduce");
    const bool uniform = max[0] == -max[1];
    *homogeneous = uniform;
    const int largest_host = max[0];
    *allreduce = uniform && topo_.local_size > 1 && max[2] == -1;
    *allgather = largest_host > 1 && max[3] == -1;
    if (topo_.rank != 0) return Status::OK();
    if (config.hierarchical_allreduce == Choice::kOn && !*allreduce) {
      HB_LOG(kWarning,
             "HB_HIERARCHICAL_ALLREDUCE=1 ignored: "
                 << (!uniform ? "hosts run different numbers of ranks"
                     : topo_.local_size == 1
                         ? "every host runs one rank"
                         : "shared memory is disabled on some rank "
                           "(HB_SHM_ALLREDUCE_THRESHOLD=0)"));
    }
    if (config.hierarchical_allgather == Choice::kOn && largest_host == 1) {
      HB_LOG(kWarning, "HB_HIERARCHICAL_ALLGATHER=1 ignored: every host runs "
                       "one rank");
    }
    return Status::OK();
  }

  Topology topo_;
  Choice ring_choice_ = Choice::kAuto;  // HB_RING_ALLREDUCE
  WaitPolicy wait_;  // of every control plane (the global set's and groups')
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Comm cross_ = MPI_COMM_NULL;
  std::unique_ptr<MpiControlComm> control_;
  std::unique_ptr<MpiPeerAlarm> alarm_;
  std::unique_ptr<MpiBackend> backend_;
};

}  // namespace

Status CreateMpiTransport(int64_t comm, double max_sleep_us,
                          const Config& config,
                          std::unique_ptr<Transport>* out) {
  auto transport = std::make_unique<MpiTransport>();
  Status s = transport->Init(comm, max_sleep_us, config);
  if (!s.ok()) return s;
  *out = std::move(transport);
  return Status::OK();
}

std::string MpiLibraryVersion() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, len);
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

}  // namespace hbcore
