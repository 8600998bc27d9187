// hbcore._core: the pybind11 front end. It translates numpy arrays into
// hb_request values, and core status codes into hbcore.exceptions types in
// one table (RaiseFor). Waiting releases the GIL; core callbacks never take
// it (they run on the core's background thread and only touch C++ state).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
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
  // Set last, under mu, by Done; read without the lock by Poll and by
  // Wait's spin (acquire pairs with Done's release: the fields are ready).
  std::atomic<bool> done{false};
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
  s.done.store(true, std::memory_order_release);
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

// numpy dtype -> hb_dtype, registered once by hbcore.ops (bfloat16 comes
// from ml_dtypes, whose type number is only known at run time).
struct DtypeTable {
  std::vector<std::pair<int, int>> codes;  // (numpy type number, hb_dtype)
  std::string supported;                   // for the error message

  // Raises InvalidArgumentError for a dtype that was not registered.
  int Code(const py::array& a) const {
    const int num = a.dtype().num();
    for (const auto& c : codes) {
      if (c.first == num) return c.second;
    }
    RaiseFor(HB_ERR_INVALID_ARGUMENT,
             "unsupported dtype " + py::str(a.dtype()).cast<std::string>() +
                 "; supported: " + supported);
  }
};

DtypeTable& Dtypes() {
  static DtypeTable table;  // written once at import, under the GIL
  return table;
}

// What the handle's wait() returns (hbcore.ops picks one per operation).
enum ResultKind {
  kResultGiven = 0,             // the object passed at submit
  kResultOutput = 1,            // the core-allocated output of the one request
  kResultOutputAndSplits = 2,   // (output, received splits as int64 array)
  kResultOutputs = 3,           // list of every request's allocated output
  kResultNone = 4,
  kResultLastJoinedRank = 5,
};

// One submitted request: its shared state plus the arrays the core reads or
// writes, kept alive until the handle goes away.
struct Part {
  std::shared_ptr<OpState> state;
  py::object input;
  py::object output;
  py::object dtype;  // of core-allocated outputs

  bool Done() const { return state->done.load(std::memory_order_acquire); }

  py::object TakeOutput() {
    if (!state->output) return py::none();
    void* data = state->output.release();
    py::capsule owner(data, [](void* p) { std::free(p); });
    return py::array(py::reinterpret_borrow<py::dtype>(dtype),
                     state->output_shape, data, owner);
  }
};

// What Python holds for one submitted operation (one or a group of
// requests): hbcore.ops.Handle. wait() returns the operation's result.
class Handle {
 public:
  Handle(std::vector<Part> parts, int kind, py::object given)
      : parts_(std::move(parts)), kind_(kind), given_(std::move(given)) {}

  bool Poll() const {
    for (const Part& p : parts_) {
      if (!p.Done()) return false;
    }
    return true;
  }

  // Blocks (without the GIL) until every part is done; raises the first
  // failed part's error (again on every call); else returns the result,
  // computed once.
  py::object Wait() {
    if (!finished_) {
      if (!Poll() && !SpinUntilDone()) Block();
      for (const Part& p : parts_) {
        if (p.state->code != HB_OK) RaiseFor(p.state->code, p.state->message);
      }
      result_ = MakeResult();
      given_ = py::none();
      finished_ = true;
    }
    return result_;
  }

 private:
  // The core finishes a fused batch's tensors back to back, so a thread
  // waiting on them in order usually finds the next one done within
  // microseconds: a short spin saves a sleep and a wake-up per tensor.
  bool SpinUntilDone() const {
    constexpr auto kSpin = std::chrono::microseconds(20);
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Poll()) return true;
      std::this_thread::yield();
    }
    return false;
  }

  void Block() const {
    // Not py::gil_scoped_release: if the interpreter finalizes while this
    // thread waits (a daemon thread at exit), taking the GIL back ends the
    // thread by unwinding, which must not pass through a noexcept
    // destructor. Such a thread instead parks until the process is gone.
    PyThreadState* saved = PyEval_SaveThread();
    hb_flush();
    for (const Part& p : parts_) {
      std::unique_lock<std::mutex> lock(p.state->mu);
      p.state->cv.wait(lock, [&p] { return p.Done(); });
    }
    if (IsFinalizing()) {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    PyEval_RestoreThread(saved);
  }

  py::object MakeResult() {
    switch (kind_) {
      case kResultOutput:
        return parts_[0].TakeOutput();
      case kResultOutputAndSplits: {
        const std::vector<int64_t>& splits = parts_[0].state->received_splits;
        py::array_t<int64_t> received(static_cast<py::ssize_t>(splits.size()));
        std::copy(splits.begin(), splits.end(), received.mutable_data());
        return py::make_tuple(parts_[0].TakeOutput(), received);
      }
      case kResultOutputs: {
        py::list outputs;
        for (Part& p : parts_) outputs.append(p.TakeOutput());
        return std::move(outputs);
      }
      case kResultNone:
        return py::none();
      case kResultLastJoinedRank:
        return py::int_(parts_[0].state->last_joined_rank);
      default:
        return given_;
    }
  }

  std::vector<Part> parts_;
  int kind_;
  py::object given_;
  bool finished_ = false;
  py::object result_;
};

// One request as Python describes it: a tuple (name, op, reduce_op, input,
// output, root_rank, prescale, postscale, splits, allocate), where
// input/output are C-contiguous numpy arrays (the Python layer guarantees
// it) or None and splits is a list of ints or None. A tuple, not a class:
// building it costs Python far less than setting attributes one by one.
// The fields the core needs beyond the hb_request (which points into it)
// live here until hb_enqueue returns.
struct Prepared {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;
  Part part{std::make_shared<OpState>(), py::none(), py::none(), py::none()};
  std::unique_ptr<std::shared_ptr<OpState>> ref;
};

void Prepare(const py::handle& item, hb_request* r, Prepared* p) {
  if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) != 10) {
    throw py::value_error("hbcore request must be a tuple of 10 fields");
  }
  py::tuple t = py::reinterpret_borrow<py::tuple>(item);
  std::memset(r, 0, sizeof(*r));
  p->name = t[0].cast<std::string>();
  r->name = p->name.c_str();
  r->op = t[1].cast<int>();
  r->reduce_op = t[2].cast<int>();
  p->part.input = t[3];
  p->part.output = t[4];
  r->root_rank = t[5].cast<int>();
  r->prescale_factor = t[6].cast<double>();
  r->postscale_factor = t[7].cast<double>();
  if (!t[8].is_none()) p->splits = t[8].cast<std::vector<int64_t>>();
  const bool allocate = t[9].cast<bool>();
  r->device = HB_DEVICE_CPU;
  if (!p->part.input.is_none()) {
    auto in = py::reinterpret_borrow<py::array>(p->part.input);
    r->dtype = Dtypes().Code(in);
    p->shape.assign(in.shape(), in.shape() + in.ndim());
    r->input = in.data();
    p->part.state->item_size = static_cast<size_t>(in.itemsize());
    if (allocate) p->part.dtype = in.dtype();
  }
  if (!p->part.output.is_none()) {
    r->output = py::reinterpret_borrow<py::array>(p->part.output).mutable_data();
  }
  r->ndim = static_cast<int>(p->shape.size());
  r->shape = p->shape.data();
  r->splits = p->splits.empty() ? nullptr : p->splits.data();
  r->num_splits = static_cast<int>(p->splits.size());
  r->alloc = allocate ? &AllocOutput : nullptr;
  r->done = &Done;
  p->ref = std::make_unique<std::shared_ptr<OpState>>(p->part.state);
  r->user = p->ref.get();
}

// Submits the requests atomically (one hb_enqueue: negotiated and fused
// together); each accepted request's reference to its state then belongs to
// the core until Done runs.
Handle Submit(const py::list& items, int kind, py::object given) {
  const size_t n = items.size();
  std::vector<hb_request> requests(n);
  std::vector<Prepared> prepared(n);
  for (size_t i = 0; i < n; ++i) Prepare(items[i], &requests[i], &prepared[i]);
  char err[1024] = {0};
  int code = hb_enqueue(requests.data(), static_cast<int>(n), err, sizeof(err));
  if (code != HB_OK) RaiseFor(code, err);
  std::vector<Part> parts;
  parts.reserve(n);
  for (Prepared& p : prepared) {
    p.ref.release();
    parts.push_back(std::move(p.part));
  }
  return Handle(std::move(parts), kind, std::move(given));
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "hbcore native core (libhbcore.so) bindings";

  m.def(
      "init",
      [](int64_t comm) {
        char err[1024] = {0};
        int code;
        {
          py::gil_scoped_release release;
          code = hb_init(comm, err, sizeof(err));
        }
        if (code != HB_OK) RaiseFor(code, err);
      },
      py::arg("comm") = HB_COMM_WORLD);
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

  py::class_<Handle>(m, "Handle", R"doc(An operation in flight: pass it to
hbcore.synchronize() or hbcore.poll().)doc")
      .def("poll", &Handle::Poll,
           "True when the operation finished (wait() will not block).")
      .def("wait", &Handle::Wait,
           "Blocks until the operation finished; returns its result.");

  m.def("submit", &Submit, py::arg("requests"), py::arg("result_kind"),
        py::arg("result") = py::none());
  m.def("register_dtypes",
        [](const std::vector<std::pair<py::dtype, int>>& codes) {
          DtypeTable& table = Dtypes();
          table.codes.clear();
          table.supported.clear();
          for (const auto& c : codes) {
            table.codes.emplace_back(c.first.num(), c.second);
            if (!table.supported.empty()) table.supported += ", ";
            table.supported += py::str(c.first).cast<std::string>();
          }
        });
}
