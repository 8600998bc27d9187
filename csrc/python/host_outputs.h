// hbcore._core.HostOutputPool: recycled host memory for the new arrays the
// numpy API returns (hb.allreduce, grouped_allreduce, broadcast: the
// out-of-place calls whose output is allocated before submission).
//
// A fresh large numpy array is fresh pages: the first write to each page
// faults, and the kernel zeroes it. A 16 MiB out-of-place allreduce across
// emulated hosts paid that on every call: 4.0 ms against 2.6 ms for MPI
// writing into a buffer it reused (docs/benchmarks.md). The pool hands out
// arrays whose memory goes back to it when the last reference to the array
// (and to every view of it) is dropped, so a training loop's outputs reuse
// the same pages step after step. Blocks come from hb_host_malloc (2 MiB
// blocks on transparent huge pages).
//
// Invariants:
//  - A block is in at most one place: leased to one array, or on the free
//    list of its exact byte size.
//  - Free blocks total at most min(the most bytes ever leased at once,
//    kMaxFreeBytes): a loop keeps its working set, and what a process
//    holds unused is bounded (a block that does not fit is freed).
//  - Arrays are released under the GIL (they are Python objects), but the
//    pool locks anyway: nothing here relies on the GIL.
#ifndef HBCORE_PYTHON_HOST_OUTPUTS_H_
#define HBCORE_PYTHON_HOST_OUTPUTS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace hbcore_py {

namespace py = pybind11;

class HostOutputPool : public std::enable_shared_from_this<HostOutputPool> {
 public:
  // Smaller arrays come from numpy: malloc serves them from its free lists.
  static constexpr size_t kMinPooledBytes = size_t{64} << 10;
  static constexpr size_t kMaxFreeBytes = size_t{256} << 20;

  // An uninitialized C-contiguous array of `shape` and `dtype`, backed by a
  // recycled block when one of its size is free. Raises MemoryError.
  py::array Empty(const std::vector<py::ssize_t>& shape, const py::dtype& dtype);

  size_t free_bytes() const;
  size_t leased_bytes() const;

 private:
  struct BlockDeleter {
    void operator()(void* p) const;
  };
  using Block = std::unique_ptr<void, BlockDeleter>;
  struct Lease;  // what an array's base capsule owns

  void Release(Block block, size_t bytes);

  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<Block>> free_;  // by size in bytes
  size_t free_bytes_ = 0;
  size_t leased_bytes_ = 0;
  size_t peak_leased_bytes_ = 0;
};

void RegisterHostOutputPool(py::module_& m);

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_HOST_OUTPUTS_H_
