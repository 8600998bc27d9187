// hbcore._core.HostOutputPool (host_outputs.h).
#include "host_outputs.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <utility>

#include "hbcore/c_api.h"

namespace hbcore_py {

void HostOutputPool::BlockDeleter::operator()(void* p) const {
  hb_host_free(p);
}

// Owned by the capsule that is the array's base: destroyed (under the GIL)
// when the array and all its views are gone, and gives the block back.
struct HostOutputPool::Lease {
  std::shared_ptr<HostOutputPool> pool;
  Block block;
  size_t bytes = 0;
  ~Lease() { pool->Release(std::move(block), bytes); }
};

py::array HostOutputPool::Empty(const std::vector<py::ssize_t>& shape,
                                const py::dtype& dtype) {
  size_t bytes = static_cast<size_t>(dtype.itemsize());
  for (py::ssize_t d : shape) {
    if (d < 0) throw py::value_error("negative dimension in an output shape");
    bytes *= static_cast<size_t>(d);
  }
  auto lease = std::make_unique<Lease>();
  lease->pool = shared_from_this();
  lease->bytes = bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end() && !it->second.empty()) {
      lease->block = std::move(it->second.back());
      it->second.pop_back();
      free_bytes_ -= bytes;
    }
  }
  if (!lease->block) {
    lease->block.reset(hb_host_malloc(std::max<size_t>(bytes, 1)));
    if (!lease->block) throw std::bad_alloc();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    leased_bytes_ += bytes;
    peak_leased_bytes_ = std::max(peak_leased_bytes_, leased_bytes_);
  }
  void* data = lease->block.get();
  // The capsule owns the lease from here on (its destructor deletes it).
  py::capsule owner(lease.get(), [](void* p) {
    std::unique_ptr<Lease> reclaimed(static_cast<Lease*>(p));
  });
  lease.release();
  return py::array(dtype, shape, data, owner);
}

void HostOutputPool::Release(Block block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  leased_bytes_ -= bytes;
  const size_t bound = std::min(peak_leased_bytes_, kMaxFreeBytes);
  if (free_bytes_ + bytes > bound) return;  // `block` frees it
  free_[bytes].push_back(std::move(block));
  free_bytes_ += bytes;
}

size_t HostOutputPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

size_t HostOutputPool::leased_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leased_bytes_;
}

void RegisterHostOutputPool(py::module_& m) {
  py::class_<HostOutputPool, std::shared_ptr<HostOutputPool>>(
      m, "HostOutputPool",
      "Recycled host memory for the numpy API's output arrays.")
      .def(py::init<>())
      .def("empty", &HostOutputPool::Empty, py::arg("shape"), py::arg("dtype"),
           "An uninitialized array whose memory returns to the pool when "
           "the array and its views are gone.")
      .def_property_readonly("free_bytes", &HostOutputPool::free_bytes)
      .def_property_readonly("leased_bytes", &HostOutputPool::leased_bytes)
      .def_readonly_static("min_pooled_bytes",
                           &HostOutputPool::kMinPooledBytes)
      .def_readonly_static("max_free_bytes", &HostOutputPool::kMaxFreeBytes);
}

}  // namespace hbcore_py
