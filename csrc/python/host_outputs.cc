// hbcore._core.HostOutputPool (host_outputs.h).
#include "host_outputs.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <utility>

#include "hbcore/c_api.h"

namespace hbcore_py {

HostOutputPool::Lease::~Lease() {
  if (pool) pool->Release(std::move(block), bytes);
}

std::unique_ptr<HostOutputPool::Lease> HostOutputPool::Take(size_t bytes) {
  auto lease = std::make_unique<Lease>();
  lease->bytes = bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lease->block = free_.Take(bytes);
  }
  if (!lease->block) {
    lease->block.reset(hb_host_malloc(std::max<size_t>(bytes, 1)));
    if (!lease->block) return nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    leased_bytes_ += bytes;
    peak_leased_bytes_ = std::max(peak_leased_bytes_, leased_bytes_);
  }
  // Counted as leased from here: the destructor gives it back.
  lease->pool = shared_from_this();
  return lease;
}

py::array HostOutputPool::Wrap(std::unique_ptr<Lease> lease,
                               const std::vector<py::ssize_t>& shape,
                               const py::dtype& dtype) {
  void* data = lease->data();
  // The capsule owns the lease from here on (its destructor deletes it).
  py::capsule owner(lease.get(), [](void* p) {
    std::unique_ptr<Lease> reclaimed(static_cast<Lease*>(p));
  });
  lease.release();
  return py::array(dtype, shape, data, owner);
}

py::array HostOutputPool::Empty(const std::vector<py::ssize_t>& shape,
                                const py::dtype& dtype) {
  size_t bytes = static_cast<size_t>(dtype.itemsize());
  for (py::ssize_t d : shape) {
    if (d < 0) throw py::value_error("negative dimension in an output shape");
    bytes *= static_cast<size_t>(d);
  }
  std::unique_ptr<Lease> lease = Take(bytes);
  if (!lease) throw std::bad_alloc();
  return Wrap(std::move(lease), shape, dtype);
}

void HostOutputPool::Release(Block block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  leased_bytes_ -= bytes;
  free_.Put(std::move(block), bytes,
            std::min(peak_leased_bytes_, kMaxFreeBytes));
}

size_t HostOutputPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.bytes();
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
