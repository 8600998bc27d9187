#include "backends/mpi/mpi_hier_allgather.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "common/mpi_wait.h"

namespace hbcore {

Status MpiHierAllgather::Create(MPI_Comm comm, MPI_Comm local,
                                int64_t min_bytes,
                                std::unique_ptr<MpiHierAllgather>* out) {
  // The destructor frees whatever was created if a step fails. Every step
  // is collective over `comm` (or over each host), so every rank runs all
  // of them and fails or succeeds alike.
  std::unique_ptr<MpiHierAllgather> h(new MpiHierAllgather());
  h->min_bytes_ = min_bytes;
  int size = 1;
  int local_rank = 0;
  MPI_Comm_rank(comm, &h->rank_);
  MPI_Comm_size(comm, &size);
  int rc = MPI_Comm_dup(local, &h->local_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(h->local_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(h->local_, &local_rank);
  MPI_Comm_size(h->local_, &h->local_size_);
  // Keyed by global rank: leader i of `leaders_` is host i's leader.
  rc = MPI_Comm_split(comm, local_rank == 0 ? 0 : MPI_UNDEFINED, h->rank_,
                      &h->leaders_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_split");
  if (h->leaders_ != MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(h->leaders_, MPI_ERRORS_RETURN);
  }

  // Every rank learns every rank's host, named by its leader's global rank
  // (local rank 0 is the host's lowest global rank: `local` is keyed so).
  int leader = h->rank_;
  rc = MPI_Bcast(&leader, 1, MPI_INT, 0, h->local_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Bcast");
  std::vector<int> leader_of(size);
  rc = MPI_Allgather(&leader, 1, MPI_INT, leader_of.data(), 1, MPI_INT, comm);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allgather");
  std::vector<int> leaders = leader_of;
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  h->host_ranks_.resize(leaders.size());
  for (int r = 0; r < size; ++r) {  // ascending, so each host's list is too
    const size_t index = std::lower_bound(leaders.begin(), leaders.end(),
                                          leader_of[r]) - leaders.begin();
    h->host_ranks_[index].push_back(r);
    if (r == h->rank_) h->host_ = static_cast<int>(index);
  }
  int next = 0;
  for (const std::vector<int>& ranks : h->host_ranks_) {
    for (int r : ranks) h->contiguous_ = h->contiguous_ && r == next++;
  }
  *out = std::move(h);
  return Status::OK();
}

MpiHierAllgather::~MpiHierAllgather() {
  for (MPI_Comm* c : {&leaders_, &local_}) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

bool MpiHierAllgather::Takes(
    const std::vector<int64_t>& bytes_per_rank) const {
  int64_t total = 0;
  for (int64_t b : bytes_per_rank) total += b;
  return total >= min_bytes_ && total <= INT_MAX;
}

Status MpiHierAllgather::Allgatherv(
    const void* in, void* out, const std::vector<int64_t>& bytes_per_rank) {
  const int hosts = static_cast<int>(host_ranks_.size());
  // Host-major layout: host h's blocks (its ranks ascending) start at
  // host_offset[h]. Takes() bounds every sum below by INT_MAX.
  std::vector<int> host_bytes(hosts, 0);
  std::vector<int> host_offset(hosts, 0);
  int total = 0;
  for (int h = 0; h < hosts; ++h) {
    host_offset[h] = total;
    for (int r : host_ranks_[h]) host_bytes[h] += bytes_per_rank[r];
    total += host_bytes[h];
  }
  const bool leader = leaders_ != MPI_COMM_NULL;
  char* global = static_cast<char*>(out);
  char* host_major = global;
  if (!contiguous_ && leader) {
    if (scratch_.size() < static_cast<size_t>(total)) scratch_.resize(total);
    host_major = scratch_.data();
  }

  // 1. Gather this host's blocks to its leader, at the host's offset.
  const std::vector<int>& mine = host_ranks_[host_];
  std::vector<int> counts(mine.size());
  std::vector<int> displs(mine.size());
  int offset = host_offset[host_];
  for (size_t i = 0; i < mine.size(); ++i) {
    counts[i] = static_cast<int>(bytes_per_rank[mine[i]]);
    displs[i] = offset;
    offset += counts[i];
  }
  int rc = MPI_Gatherv(in, static_cast<int>(bytes_per_rank[rank_]), MPI_BYTE,
                       host_major, counts.data(), displs.data(), MPI_BYTE, 0,
                       local_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Gatherv (within host)");

  if (leader) {
    // 2. Exchange whole host blocks between the leaders.
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host_major,
                        host_bytes.data(), host_offset.data(), MPI_BYTE,
                        leaders_);
    if (rc != MPI_SUCCESS) {
      return MpiStatus(rc, "MPI_Allgatherv (across hosts)");
    }
    // 3a. Host-major to global rank order.
    if (host_major != global) {
      std::vector<int64_t> global_offset(bytes_per_rank.size(), 0);
      for (size_t r = 1; r < bytes_per_rank.size(); ++r) {
        global_offset[r] = global_offset[r - 1] + bytes_per_rank[r - 1];
      }
      const char* src = host_major;
      for (const std::vector<int>& ranks : host_ranks_) {
        for (int r : ranks) {
          if (bytes_per_rank[r] > 0) {
            std::memcpy(global + global_offset[r], src, bytes_per_rank[r]);
          }
          src += bytes_per_rank[r];
        }
      }
    }
  }
  // 3b. The whole result to the rest of the host.
  if (local_size_ > 1 && total > 0) {
    rc = MPI_Bcast(global, total, MPI_BYTE, 0, local_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Bcast (within host)");
  }
  return Status::OK();
}

}  // namespace hbcore
