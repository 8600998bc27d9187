// hbcore._core.HostOutputPool: recycled host memory for the new arrays the
// numpy API returns: the out-of-place calls whose output is allocated
// before submission (hb.allreduce, grouped_allreduce, broadcast), and those
// whose output the core allocates once the shape is negotiated (allgather,
// alltoall, reducescatter: operation.h's AllocOutput takes the block on the
// core's thread, and the array is made when the result is collected).
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
//    list (hbcore/free_blocks.h: found by its exact byte size).
//  - Free blocks total at most min(the most bytes ever leased at once,
//    kMaxFreeBytes): a loop keeps its working set, and what a process
//    holds unused is bounded. A released block that does not fit first
//    evicts the least recently released free blocks (the sizes of a past
//    phase of the program); it is freed only if it alone exceeds the
//    bound.
//  - Arrays are released under the GIL (they are Python objects), but the
//    pool locks anyway: nothing here relies on the GIL.
#ifndef HBCORE_PYTHON_HOST_OUTPUTS_H_
#define HBCORE_PYTHON_HOST_OUTPUTS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "hbcore/free_blocks.h"

namespace hbcore_py {

namespace py = pybind11;

class HostOutputPool : public std::enable_shared_from_this<HostOutputPool> {
 public:
  // Smaller arrays come from numpy: malloc serves them from its free lists.
  static constexpr size_t kMinPooledBytes = size_t{64} << 10;
  static constexpr size_t kMaxFreeBytes = size_t{256} << 20;

  using Block = hbcore::FreeBlocks::Block;

  // One block out of the pool: it goes back when the lease is destroyed
  // (any thread; the pool locks). An array's base capsule owns its lease.
  struct Lease {
    std::shared_ptr<HostOutputPool> pool;
    Block block;
    size_t bytes = 0;
    void* data() const { return block.get(); }
    ~Lease();
  };

  // A block of `bytes`, recycled when one of that size is free. Needs no
  // GIL (the core's allocator callback calls it on its thread). Returns
  // null when memory is exhausted.
  std::unique_ptr<Lease> Take(size_t bytes);

  // The array of `shape` and `dtype` over a leased block, which it then
  // owns (the lease must hold at least that many bytes).
  static py::array Wrap(std::unique_ptr<Lease> lease,
                        const std::vector<py::ssize_t>& shape,
                        const py::dtype& dtype);

  // An uninitialized C-contiguous array of `shape` and `dtype`, backed by a
  // recycled block when one of its size is free. Raises MemoryError.
  py::array Empty(const std::vector<py::ssize_t>& shape, const py::dtype& dtype);

  size_t free_bytes() const;
  size_t leased_bytes() const;

 private:
  void Release(Block block, size_t bytes);

  mutable std::mutex mu_;
  hbcore::FreeBlocks free_;
  size_t leased_bytes_ = 0;
  size_t peak_leased_bytes_ = 0;
};

void RegisterHostOutputPool(py::module_& m);

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_HOST_OUTPUTS_H_
