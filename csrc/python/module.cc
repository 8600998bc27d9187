// hbcore._core: the pybind11 front end. It translates numpy arrays into
// hb_request values, and core status codes into hbcore.exceptions types in
// one table (RaiseFor). Waiting releases the GIL; core callbacks never take
// it (they run on the core's background thread and only touch C++ state).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hbcore/c_api.h"

namespace py = pybind11;

namespace {

bool IsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Everything a finished operation leaves behind, filled by the core thread.
struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int code = HB_OK;
  std::string message;
  std::vector<int64_t> received_splits;
  int last_joined_rank = -1;
  // Output allocated by the core's request (allgather, alltoall,
  // reducescatter); ownership moves to the numpy array returned.
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, FreeDeleter> output;
  std::vector<py::ssize_t> output_shape;
  size_t item_size = 1;
};

void* AllocOutput(void* user, int ndim, const int64_t* shape) {
  auto* state = static_cast<std::shared_ptr<OpState>*>(user)->get();
  size_t n = state->item_size;
  state->output_shape.assign(shape, shape + ndim);
  for (int i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
  state->output.reset(std::malloc(n == 0 ? 1 : n));
  return state->output.get();
}

void Done(void* user, int status, const char* message, const hb_result* r) {
  // Reclaims the reference handed to the core at enqueue.
  std::unique_ptr<std::shared_ptr<OpState>> ref(
      static_cast<std::shared_ptr<OpState>*>(user));
  OpState& s = **ref;
  std::lock_guard<std::mutex> lock(s.mu);
  s.code = status;
  s.message = message ? message : "";
  if (r != nullptr) {
    s.received_splits.assign(r->received_splits,
                             r->received_splits + r->num_received_splits);
    s.last_joined_rank = r->last_joined_rank;
  }
  s.done = true;
  s.cv.notify_all();
}

// The one translation table from core status codes to Python exceptions.
[[noreturn]] void RaiseFor(int code, const std::string& message) {
  py::module_ exc = py::module_::import("hbcore.exceptions");
  const char* type = "InternalError";
  switch (code) {
    case HB_ERR_INVALID_ARGUMENT: type = "InvalidArgumentError"; break;
    case HB_ERR_MISMATCH: type = "MismatchError"; break;
    case HB_ERR_NOT_INITIALIZED: type = "NotInitializedError"; break;
    case HB_ERR_SHUTDOWN: type = "ShutdownError"; break;
    case HB_ERR_DUPLICATE_NAME: type = "DuplicateNameError"; break;
    case HB_ERR_CONFIG: type = "ConfigError"; break;
    case HB_ERR_UNSUPPORTED: type = "UnsupportedError"; break;
    default: break;
  }
  PyErr_SetString(exc.attr(type).ptr(), message.c_str());
  throw py::error_already_set();
}

// What Python holds for one submitted operation: the shared state plus the
// arrays the core reads or writes, kept alive until the handle goes away.
class Handle {
 public:
  Handle(std::shared_ptr<OpState> state, py::object input, py::object output,
         py::object dtype)
      : state_(std::move(state)), input_(std::move(input)),
        output_(std::move(output)), dtype_(std::move(dtype)) {}

  bool Poll() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->done;
  }

  // Blocks (without the GIL) until done; raises the operation's error.
  void Wait() const {
    if (!Poll()) {
      // Not py::gil_scoped_release: if the interpreter finalizes while this
      // thread waits (a daemon thread at exit), taking the GIL back ends the
      // thread by unwinding, which must not pass through a noexcept
      // destructor. Such a thread instead parks until the process is gone.
      PyThreadState* saved = PyEval_SaveThread();
      {
        std::unique_lock<std::mutex> lock(state_->mu);
        state_->cv.wait(lock, [this] { return state_->done; });
      }
      if (IsFinalizing()) {
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      }
      PyEval_RestoreThread(saved);
    }
    if (state_->code != HB_OK) RaiseFor(state_->code, state_->message);
  }

  // The array the core allocated; valid once after Wait().
  py::object Output() {
    if (!state_->output) return py::none();
    void* data = state_->output.release();
    py::capsule owner(data, [](void* p) { std::free(p); });
    return py::array(py::reinterpret_borrow<py::dtype>(dtype_),
                     state_->output_shape, data, owner);
  }

  std::vector<int64_t> ReceivedSplits() const {
    return state_->received_splits;
  }
  int LastJoinedRank() const { return state_->last_joined_rank; }

 private:
  std::shared_ptr<OpState> state_;
  py::object input_;
  py::object output_;
  py::object dtype_;
};

// One request as Python describes it: a tuple (name, op, reduce_op, dtype,
// input, output, root_rank, prescale, postscale, splits, allocate), where
// input/output are C-contiguous numpy arrays (the Python layer guarantees
// it) or None and splits is a list of ints or None. A tuple, not a class:
// building it costs Python far less than setting attributes one by one.
// The fields the core needs beyond the hb_request (which points into it)
// live here until hb_enqueue returns.
struct Prepared {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;
  py::object input;
  py::object output;
  py::object dtype = py::none();
  std::shared_ptr<OpState> state = std::make_shared<OpState>();
  std::unique_ptr<std::shared_ptr<OpState>> ref;
};

void Prepare(const py::handle& item, hb_request* r, Prepared* p) {
  if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) != 11) {
    throw py::value_error("hbcore request must be a tuple of 11 fields");
  }
  py::tuple t = py::reinterpret_borrow<py::tuple>(item);
  std::memset(r, 0, sizeof(*r));
  p->name = t[0].cast<std::string>();
  r->name = p->name.c_str();
  r->op = t[1].cast<int>();
  r->reduce_op = t[2].cast<int>();
  r->dtype = t[3].cast<int>();
  p->input = t[4];
  p->output = t[5];
  r->root_rank = t[6].cast<int>();
  r->prescale_factor = t[7].cast<double>();
  r->postscale_factor = t[8].cast<double>();
  if (!t[9].is_none()) p->splits = t[9].cast<std::vector<int64_t>>();
  const bool allocate = t[10].cast<bool>();
  r->device = HB_DEVICE_CPU;
  if (!p->input.is_none()) {
    auto in = py::reinterpret_borrow<py::array>(p->input);
    p->shape.assign(in.shape(), in.shape() + in.ndim());
    r->input = in.data();
    p->state->item_size = static_cast<size_t>(in.itemsize());
    if (allocate) p->dtype = in.dtype();
  }
  if (!p->output.is_none()) {
    r->output = py::reinterpret_borrow<py::array>(p->output).mutable_data();
  }
  r->ndim = static_cast<int>(p->shape.size());
  r->shape = p->shape.data();
  r->splits = p->splits.empty() ? nullptr : p->splits.data();
  r->num_splits = static_cast<int>(p->splits.size());
  r->alloc = allocate ? &AllocOutput : nullptr;
  r->done = &Done;
  p->ref = std::make_unique<std::shared_ptr<OpState>>(p->state);
  r->user = p->ref.get();
}

// Submits prepared requests atomically; each accepted request's reference
// to its state then belongs to the core until Done runs.
void Submit(std::vector<hb_request>* requests,
            std::vector<Prepared>* prepared) {
  char err[1024] = {0};
  int code = hb_enqueue(requests->data(), static_cast<int>(requests->size()),
                        err, sizeof(err));
  if (code != HB_OK) RaiseFor(code, err);
  for (Prepared& p : *prepared) p.ref.release();
}

Handle MakeHandle(Prepared* p) {
  return Handle(p->state, std::move(p->input), std::move(p->output),
                std::move(p->dtype));
}

Handle EnqueueOne(const py::handle& item) {
  std::vector<hb_request> requests(1);
  std::vector<Prepared> prepared(1);
  Prepare(item, &requests[0], &prepared[0]);
  Submit(&requests, &prepared);
  return MakeHandle(&prepared[0]);
}

std::vector<Handle> EnqueueGroup(const py::list& items) {
  const size_t n = items.size();
  std::vector<hb_request> requests(n);
  std::vector<Prepared> prepared(n);
  for (size_t i = 0; i < n; ++i) Prepare(items[i], &requests[i], &prepared[i]);
  Submit(&requests, &prepared);
  std::vector<Handle> handles;
  handles.reserve(n);
  for (Prepared& p : prepared) handles.push_back(MakeHandle(&p));
  return handles;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "hbcore native core (libhbcore.so) bindings";

  m.def("init", [] {
    char err[1024] = {0};
    int code;
    {
      py::gil_scoped_release release;
      code = hb_init(err, sizeof(err));
    }
    if (code != HB_OK) RaiseFor(code, err);
  });
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    hb_shutdown();
  });
  m.def("is_initialized", [] { return hb_is_initialized() != 0; });
  m.def("rank", &hb_rank);
  m.def("size", &hb_size);
  m.def("local_rank", &hb_local_rank);
  m.def("local_size", &hb_local_size);
  m.def("cross_rank", &hb_cross_rank);
  m.def("cross_size", &hb_cross_size);
  m.def("mpi_threads_supported", &hb_mpi_threads_supported);
  m.def("version", [] { return std::string(hb_version()); });
  m.def("mpi_library_version",
        [] { return std::string(hb_mpi_library_version()); });
  m.def("nccl_built", [] { return hb_nccl_built() != 0; });
  m.def("config_string", [] {
    std::vector<char> buf(4096);
    size_t n = hb_config_string(buf.data(), buf.size());
    return std::string(buf.data(), std::min(n, buf.size() - 1));
  });
  m.def("raise_for", [](int code, const std::string& message) {
    RaiseFor(code, message);
  });

  py::class_<Handle>(m, "Handle")
      .def("poll", &Handle::Poll)
      .def("wait", &Handle::Wait)
      .def("output", &Handle::Output)
      .def("received_splits", &Handle::ReceivedSplits)
      .def("last_joined_rank", &Handle::LastJoinedRank);

  m.def("enqueue", &EnqueueGroup, py::arg("requests"));
  m.def("enqueue_one", &EnqueueOne, py::arg("request"));
}
