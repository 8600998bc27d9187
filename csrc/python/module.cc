// hbcore._core: the pybind11 front end. It translates numpy arrays into
// hb_request values, and core status codes into hbcore.exceptions types in
// one table (RaiseFor, common.cc). Waiting releases the GIL; core callbacks
// never take it (they run on the core's background thread and only touch
// C++ state).
//
// The per-tensor path (submit, submit_one and the Handle type) is written
// against the CPython API: for a small tensor, pybind11's argument dispatch
// and instance registry cost more than everything else the submission
// does. The rest of the module uses pybind11.
//
// GPU buffers (DLPack inputs, device outputs) are defined in
// gpu_arrays.cc; this file only routes them into requests. Every Python
// object a request uses (inputs, outputs, DLPack owners) lives until the
// request's Done ran and is released on a Python thread: a Handle dropped
// while its operation is in flight parks them until it finished.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common.h"
#include "gpu_arrays.h"
#include "hbcore/c_api.h"

namespace py = pybind11;

namespace {

using hbcore_py::Dtypes;
using hbcore_py::DlpackInput;
using hbcore_py::GpuArray;
using hbcore_py::RaiseFor;

bool IsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Frees an output the core had allocated: malloc'ed host memory, or
// device memory from hb_gpu_malloc.
struct OutputDeleter {
  int device = HB_DEVICE_CPU;
  void operator()(void* p) const {
    if (device == HB_DEVICE_CPU) {
      std::free(p);
    } else {
      hb_gpu_free(device, p);
    }
  }
};

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
  // reducescatter); ownership moves to the numpy array (host) or GpuArray
  // (device) returned. Host memory is malloc'ed, device memory comes from
  // hb_gpu_malloc on `output_device`.
  std::unique_ptr<void, OutputDeleter> output;
  std::vector<py::ssize_t> output_shape;
  size_t item_size = 1;
  int output_device = HB_DEVICE_CPU;  // where AllocOutput allocates
  int output_dtype = 0;               // hb_dtype of a device output
  // Why a device allocation failed (the core reports only that it did).
  std::string alloc_error;
  // The core's reference (the request's `user` is this state): set just
  // before hb_enqueue, moved out by Done, or dropped by the submitter when
  // hb_enqueue rejects the request (Done then never runs). Only one thread
  // touches it at a time: the submitter until hb_enqueue, then the core.
  std::shared_ptr<OpState> core_ref;
};

// Runs on the core's background thread, without the GIL.
void* AllocOutput(void* user, int ndim, const int64_t* shape) {
  OpState& s = *static_cast<OpState*>(user);
  size_t n = s.item_size;
  s.output_shape.assign(shape, shape + ndim);
  for (int i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
  if (n == 0) n = 1;  // a null pointer would read as a failed allocation
  void* p = nullptr;
  if (s.output_device == HB_DEVICE_CPU) {
    p = std::malloc(n);
  } else {
    char err[512] = {0};
    if (hb_gpu_malloc(s.output_device, n, &p, err, sizeof(err)) != HB_OK) {
      s.alloc_error = err;
      p = nullptr;
    }
  }
  s.output = std::unique_ptr<void, OutputDeleter>(
      p, OutputDeleter{s.output_device});
  return p;
}

void Done(void* user, int status, const char* message, const hb_result* r) {
  OpState& s = *static_cast<OpState*>(user);
  // The state lives until this returns even when the handle is gone, so
  // the notification may come after the lock is released.
  const std::shared_ptr<OpState> keep = std::move(s.core_ref);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.code = status;
    if (message != nullptr) s.message = message;
    if (r != nullptr) {
      s.received_splits.assign(r->received_splits,
                               r->received_splits + r->num_received_splits);
      s.last_joined_rank = r->last_joined_rank;
    }
    s.done.store(true, std::memory_order_release);
  }
  s.cv.notify_all();
}

// What the handle's wait() returns (hbcore.ops picks one per operation).
// A front-end notion, not the core's: defined here only, and exported to
// Python as RESULT_* module constants (see ExportConstants).
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
  // hb_enqueue accepted the request: Done will run (exactly once).
  bool accepted = false;

  bool Done() const { return state->done.load(std::memory_order_acquire); }

  py::object TakeOutput() {
    if (!state->output) return py::none();
    if (state->output_device != HB_DEVICE_CPU) {
      std::vector<int64_t> shape(state->output_shape.begin(),
                                 state->output_shape.end());
      return hbcore_py::WrapGpuArray(state->output_device,
                                     state->output.release(),
                                     std::move(shape), state->output_dtype);
    }
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
  Handle(size_t count, int kind, py::object given)
      : group_(count == 1 ? 0 : count), count_(count), kind_(kind),
        given_(std::move(given)) {
    for (Part& p : *this) p.state = std::make_shared<OpState>();
  }

  // Most operations are one request: its part lives inline, a group's in
  // group_.
  Part* begin() { return count_ == 1 ? &single_ : group_.data(); }
  Part* end() { return begin() + count_; }
  const Part* begin() const { return count_ == 1 ? &single_ : group_.data(); }
  const Part* end() const { return begin() + count_; }
  size_t size() const { return count_; }

  bool Poll() const {
    for (const Part& p : *this) {
      if (!p.Done()) return false;
    }
    return true;
  }

  using Deadline = std::chrono::steady_clock::time_point;

  // Blocks (without the GIL) until every part is done, or for at most
  // `timeout_s` seconds when it is >= 0; raises the first failed part's
  // error (again on every call); else returns the result, computed once.
  // A wait that times out raises WaitTimeoutError and changes nothing: the
  // operation stays in flight and a later wait still gets its result.
  py::object Wait(double timeout_s = -1) {
    if (!finished_) {
      if (!Poll()) {
        Deadline deadline = std::chrono::steady_clock::now();
        if (timeout_s > 0) {
          // Capped at a day, so the time point cannot overflow.
          deadline += std::chrono::duration_cast<Deadline::duration>(
              std::chrono::duration<double>(std::min(timeout_s, 86400.0)));
        }
        // This thread is done submitting for now: the core need not wait
        // for more of the burst before negotiating what is queued.
        hb_flush();
        if (!SpinUntilDone() && !Block(timeout_s < 0 ? nullptr : &deadline)) {
          RaiseTimeout(timeout_s);
        }
      }
      // Another thread waiting on this handle may have finished it while
      // this one slept: the result (e.g. a core-allocated output, which can
      // be taken once) is built only once.
      if (!finished_) {
        for (const Part& p : *this) {
          if (p.state->code != HB_OK) {
            const std::string& why = p.state->alloc_error;
            RaiseFor(p.state->code,
                     why.empty() ? p.state->message
                                 : p.state->message + " (" + why + ")");
          }
        }
        result_ = MakeResult();
        given_ = py::none();
        finished_ = true;
        // The result in the caller's terms (a GPU output handed back to
        // the input's framework); applied once. Should it raise, later
        // waits return the unconverted result.
        if (finish_) {
          py::object finish = std::move(finish_);
          result_ = finish(result_);
        }
      }
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

  // Returns false when `deadline` (if any) passed with a part unfinished.
  bool Block(const Deadline* deadline) const {
    // Not py::gil_scoped_release: if the interpreter finalizes while this
    // thread waits (a daemon thread at exit), taking the GIL back ends the
    // thread by unwinding, which must not pass through a noexcept
    // destructor. Such a thread instead parks until the process is gone.
    PyThreadState* saved = PyEval_SaveThread();
    bool done = true;
    for (const Part& p : *this) {
      std::unique_lock<std::mutex> lock(p.state->mu);
      auto finished = [&p] { return p.Done(); };
      if (deadline == nullptr) {
        p.state->cv.wait(lock, finished);
      } else if (!p.state->cv.wait_until(lock, *deadline, finished)) {
        done = false;
        break;
      }
    }
    if (IsFinalizing()) {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    PyEval_RestoreThread(saved);
    return done;
  }

  [[noreturn]] void RaiseTimeout(double timeout_s) const {
    size_t pending = 0;
    for (const Part& p : *this) pending += p.Done() ? 0 : 1;
    std::string what = "'" + py::str(name_).cast<std::string>() + "'";
    if (count_ > 1) {
      what = "group of " + std::to_string(count_) + " tensors starting with " +
             what + " (" + std::to_string(pending) + " unfinished)";
    }
    const std::string message =
        "wait(timeout=" + py::repr(py::float_(timeout_s)).cast<std::string>() +
        "): " +
        what + " did not finish in time; it is still in flight: wait or "
        "synchronize again for its result";
    py::object cls =
        py::module_::import("hbcore.exceptions").attr("WaitTimeoutError");
    PyErr_SetObject(cls.ptr(), cls(message).ptr());
    throw py::error_already_set();
  }

  py::object MakeResult() {
    Part& first = *begin();
    switch (kind_) {
      case kResultOutput:
        return first.TakeOutput();
      case kResultOutputAndSplits: {
        const std::vector<int64_t>& splits = first.state->received_splits;
        py::array_t<int64_t> received(static_cast<py::ssize_t>(splits.size()));
        std::copy(splits.begin(), splits.end(), received.mutable_data());
        return py::make_tuple(first.TakeOutput(), received);
      }
      case kResultOutputs: {
        py::list outputs;
        for (Part& p : *this) outputs.append(p.TakeOutput());
        return std::move(outputs);
      }
      case kResultNone:
        return py::none();
      case kResultLastJoinedRank:
        return py::int_(first.state->last_joined_rank);
      default:
        return given_;
    }
  }

 public:
  // The first request's name, for messages.
  void set_name(py::object name) { name_ = std::move(name); }
  // A callable applied once to the result (None: none).
  void set_finish(py::object finish) {
    if (!finish.is_none()) finish_ = std::move(finish);
  }
  // Before the handle goes away: the Python objects of parts still in
  // flight move to the in-flight list, which releases them once their
  // Done ran (the core may still read or write their buffers).
  void ParkUnfinished();

 private:
  Part single_;
  std::vector<Part> group_;
  size_t count_;
  int kind_;
  py::object given_;
  bool finished_ = false;
  py::object result_;
  py::object name_;
  py::object finish_;
};

// Objects of operations whose handle was dropped before they finished.
// Touched only with the GIL held; never destroyed (it may hold Python
// objects at interpreter exit).
struct Parked {
  std::shared_ptr<OpState> state;
  py::object input;
  py::object output;
};

std::vector<Parked>& InFlight() {
  static std::vector<Parked>* parked = new std::vector<Parked>();
  return *parked;
}

// Releases the parked objects of operations that finished since.
void SweepInFlight() {
  std::vector<Parked>& parked = InFlight();
  if (parked.empty()) return;
  std::vector<Parked> finished;
  auto done = [](const Parked& p) {
    return p.state->done.load(std::memory_order_acquire);
  };
  auto mid = std::stable_partition(parked.begin(), parked.end(),
                                   [&](const Parked& p) { return !done(p); });
  std::move(mid, parked.end(), std::back_inserter(finished));
  parked.erase(mid, parked.end());
  // `finished` is destroyed here, after `parked` is consistent again:
  // releasing an object may run Python code that submits (and sweeps).
}

void Handle::ParkUnfinished() {
  for (Part& p : *this) {
    if (p.accepted && !p.Done()) {
      InFlight().push_back({p.state, std::move(p.input), std::move(p.output)});
    }
  }
}

// --- the Handle type --------------------------------------------------------

// A Python object holding a Handle: constructed in place by NewHandle,
// destroyed by HandleDealloc.
struct HandleObject {
  PyObject_HEAD
  Handle handle;
};

PyTypeObject* g_handle_type = nullptr;  // set once at import

Handle& HandleOf(PyObject* self) {
  return reinterpret_cast<HandleObject*>(self)->handle;
}

py::object NewHandle(size_t count, int kind, py::object given) {
  SweepInFlight();
  HandleObject* o = PyObject_New(HandleObject, g_handle_type);
  if (o == nullptr) throw py::error_already_set();
  py::object owner = py::reinterpret_steal<py::object>(
      reinterpret_cast<PyObject*>(o));
  try {
    new (&o->handle) Handle(count, kind, std::move(given));
  } catch (...) {
    // HandleDealloc must not destroy a Handle that was never constructed.
    PyObject_Free(owner.release().ptr());
    Py_DECREF(g_handle_type);
    throw;
  }
  return owner;
}

void HandleDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  HandleOf(self).ParkUnfinished();
  HandleOf(self).~Handle();
  type->tp_free(self);
  Py_DECREF(type);  // instances of a heap type own a reference to it
}

// Runs f, turning a C++ exception into the pending Python error (the
// CPython calling convention: nullptr with an error set).
template <typename F>
PyObject* Guarded(F&& f) {
  try {
    return f();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyObject* HandlePoll(PyObject* self, PyObject*) {
  return PyBool_FromLong(HandleOf(self).Poll());
}

double ToDouble(PyObject* o);  // float(o), defined with the submission code

// wait(timeout=None): METH_FASTCALL | METH_KEYWORDS, so the common call
// without arguments stays cheap.
PyObject* HandleWait(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* kwnames) {
  return Guarded([&] {
    const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
      throw py::type_error("wait() takes at most one argument (timeout)");
    }
    PyObject* timeout = nargs == 1 ? args[0] : nullptr;
    if (nkw == 1) {
      if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                           "timeout") != 0) {
        throw py::type_error("wait() got an unexpected keyword argument");
      }
      timeout = args[0];
    }
    double seconds = -1;
    if (timeout != nullptr && timeout != Py_None) {
      if (!PyNumber_Check(timeout)) {
        throw py::type_error(
            std::string("wait(timeout=...) takes a number of seconds, got ") +
            Py_TYPE(timeout)->tp_name);
      }
      seconds = ToDouble(timeout);
      if (!(seconds >= 0) || std::isinf(seconds)) {
        throw py::value_error(
            "wait(timeout=...) takes None or a finite number of seconds "
            ">= 0");
      }
    }
    return HandleOf(self).Wait(seconds).release().ptr();
  });
}

PyMethodDef g_handle_methods[] = {
    {"poll", HandlePoll, METH_NOARGS,
     "True when the operation finished (wait() will not block)."},
    {"wait", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                 &HandleWait)),
     METH_FASTCALL | METH_KEYWORDS,
     "wait(timeout=None): blocks until the operation finished and returns\n"
     "its result. With a timeout (seconds), raises\n"
     "hbcore.exceptions.WaitTimeoutError (a TimeoutError) if it has not\n"
     "finished by then; the operation stays in flight, and a later wait()\n"
     "or synchronize() returns its result."},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot g_handle_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(&HandleDealloc)},
    {Py_tp_methods, g_handle_methods},
    {Py_tp_doc, const_cast<char*>(
                    "An operation in flight: pass it to\n"
                    "hbcore.synchronize() or hbcore.poll().")},
    {0, nullptr},
};

// Only NewHandle makes instances: Python code cannot (no tp_new).
#if PY_VERSION_HEX >= 0x030A0000
constexpr unsigned int kHandleFlags =
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION;
#else
constexpr unsigned int kHandleFlags = Py_TPFLAGS_DEFAULT;  // tp_new cleared
#endif
PyType_Spec g_handle_spec = {"hbcore._core.Handle", sizeof(HandleObject), 0,
                             kHandleFlags, g_handle_slots};

// --- submission -------------------------------------------------------------

// int(o), as the int() the Python layer used to apply.
int ToInt(PyObject* o) {
  py::object owned;
  if (!PyLong_Check(o)) {
    owned = py::reinterpret_steal<py::object>(PyNumber_Long(o));
    if (!owned) throw py::error_already_set();
    o = owned.ptr();
  }
  const long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (v < INT_MIN || v > INT_MAX) {
    throw py::value_error("hbcore: integer out of range");
  }
  return static_cast<int>(v);
}

// float(o).
double ToDouble(PyObject* o) {
  if (PyFloat_CheckExact(o)) return PyFloat_AS_DOUBLE(o);
  py::object f = py::reinterpret_steal<py::object>(PyNumber_Float(o));
  if (!f) throw py::error_already_set();
  return PyFloat_AS_DOUBLE(f.ptr());
}

// The array behind an input or output field, which the Python layer makes
// a C-contiguous numpy array (writeable where the core writes it).
const py::detail::PyArray_Proxy* ArrayOf(PyObject* o, bool written) {
  if (!py::detail::npy_api::get().PyArray_Check_(o)) {
    throw py::type_error("hbcore request: expected a numpy array");
  }
  const auto* a = py::detail::array_proxy(o);
  int need = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_;
  if (written) need |= py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  if ((a->flags & need) != need) {
    RaiseFor(HB_ERR_INVALID_ARGUMENT,
             written ? "hbcore needs a C-contiguous, writeable output array"
                     : "hbcore needs a C-contiguous input array");
  }
  return a;
}

// Request fields that must outlive the hb_request until hb_enqueue returns
// (the core copies them there).
struct Scratch {
  std::vector<int64_t> shape;  // only where numpy's dimensions are not int64
  std::vector<int64_t> splits;
};

// The output buffer of a GPU request: a GpuArray (allocated for it) or the
// DlpackInput itself (in place), on the input's device and of its size.
void* DeviceOutput(PyObject* o, const hb_request& r, size_t nbytes) {
  if (const DlpackInput* in = hbcore_py::AsDlpackInput(o)) {
    if (in->device() == r.device && in->nbytes() == nbytes) return in->data();
  } else if (const GpuArray* out = hbcore_py::AsGpuArray(o)) {
    if (out->device() == r.device && out->nbytes() == nbytes) return out->ptr();
  } else {
    RaiseFor(HB_ERR_INVALID_ARGUMENT,
             std::string("tensor '") + r.name + "' is on GPU " +
                 std::to_string(r.device) + ", but its output is a " +
                 Py_TYPE(o)->tp_name + ", not device memory");
  }
  RaiseFor(HB_ERR_INVALID_ARGUMENT,
           std::string("tensor '") + r.name + "': the output buffer is not " +
               std::to_string(nbytes) + " bytes on GPU " +
               std::to_string(r.device));
}

// Prepare's half for a GPU request: f[3] is a DlpackInput (hbcore.ops made
// it from the caller's DLPack object). The core orders its reads after
// the work queued on the legacy default stream, the stream __dlpack__ was
// asked to make the producer's writes visible on.
void PrepareDevice(PyObject* const* f, bool allocate, hb_request* r,
                   Part* part) {
  const DlpackInput* in = hbcore_py::AsDlpackInput(f[3]);
  if (in == nullptr) ArrayOf(f[3], false);  // raises: not an array either
  r->device = in->device();
  r->dtype = in->dtype();
  r->ndim = static_cast<int>(in->shape().size());
  r->shape = in->shape().data();
  r->input = in->data();
  r->stream = reinterpret_cast<void*>(1);  // cudaStreamLegacy
  r->ready_event = nullptr;
  part->input = py::reinterpret_borrow<py::object>(f[3]);
  OpState& state = *part->state;
  state.item_size = hbcore_py::ItemSize(in->dtype());
  if (allocate) {
    state.output_device = in->device();
    state.output_dtype = in->dtype();
  }
  if (f[4] != Py_None) {
    r->output = DeviceOutput(f[4], *r, in->nbytes());
    part->output = py::reinterpret_borrow<py::object>(f[4]);
  }
  r->alloc = allocate ? &AllocOutput : nullptr;
  r->done = &Done;
  r->user = part->state.get();
}

// Fills `r` and `part` from the 10 fields of one request, in the order
// (name, op, reduce_op, input, output, root_rank, prescale, postscale,
// splits, allocate) -- the positional arguments of submit_one and the
// tuples given to submit -- and the request's process set. input and
// output are C-contiguous numpy arrays or None; or, for a GPU request, a
// DlpackInput and a GpuArray / the same DlpackInput (in place) / None.
// splits is a sequence of ints or None. `f` must stay alive until
// hb_enqueue returns: `r` points into the name and the input's shape.
void Prepare(PyObject* const* f, int process_set_id, hb_request* r, Part* part,
             Scratch* scratch) {
  std::memset(r, 0, sizeof(*r));
  r->process_set_id = process_set_id;
  if (!PyUnicode_Check(f[0])) {
    throw py::type_error(std::string("hbcore tensor name must be a str, got ") +
                         Py_TYPE(f[0])->tp_name);
  }
  r->name = PyUnicode_AsUTF8AndSize(f[0], nullptr);
  if (r->name == nullptr) throw py::error_already_set();
  r->op = ToInt(f[1]);
  r->reduce_op = ToInt(f[2]);
  r->root_rank = ToInt(f[5]);
  r->prescale_factor = ToDouble(f[6]);
  r->postscale_factor = ToDouble(f[7]);
  if (f[8] != Py_None) {
    py::sequence splits = py::reinterpret_borrow<py::sequence>(f[8]);
    for (py::handle s : splits) scratch->splits.push_back(s.cast<int64_t>());
    r->splits = scratch->splits.data();
    r->num_splits = static_cast<int>(scratch->splits.size());
  }
  const int allocate = PyObject_IsTrue(f[9]);
  if (allocate < 0) throw py::error_already_set();
  r->device = HB_DEVICE_CPU;
  if (f[3] != Py_None && !py::detail::npy_api::get().PyArray_Check_(f[3])) {
    PrepareDevice(f, allocate != 0, r, part);
    return;
  }
  if (f[3] != Py_None) {
    const auto* in = ArrayOf(f[3], false);
    r->dtype = Dtypes().Code(in->descr);
    r->ndim = in->nd;
    if (std::is_same<py::ssize_t, int64_t>::value) {
      r->shape = reinterpret_cast<const int64_t*>(in->dimensions);
    } else {
      scratch->shape.assign(in->dimensions, in->dimensions + in->nd);
      r->shape = scratch->shape.data();
    }
    r->input = in->data;
    part->input = py::reinterpret_borrow<py::object>(f[3]);
    py::dtype dtype = py::reinterpret_borrow<py::dtype>(in->descr);
    part->state->item_size = static_cast<size_t>(dtype.itemsize());
    if (allocate) part->dtype = std::move(dtype);
  }
  if (f[4] != Py_None) {
    r->output = ArrayOf(f[4], true)->data;
    part->output = py::reinterpret_borrow<py::object>(f[4]);
  }
  r->alloc = allocate ? &AllocOutput : nullptr;
  r->done = &Done;
  r->user = part->state.get();
}

// Submits the handle's prepared requests atomically (one hb_enqueue:
// negotiated and fused together); each accepted request's state is then
// also owned by the core until Done runs.
void Enqueue(const hb_request* requests, Handle& handle) {
  for (Part& p : handle) p.state->core_ref = p.state;
  char err[1024];
  err[0] = '\0';
  const int code =
      hb_enqueue(requests, static_cast<int>(handle.size()), err, sizeof(err));
  if (code != HB_OK) {
    for (Part& p : handle) p.state->core_ref.reset();
    RaiseFor(code, err);
  }
  for (Part& p : handle) p.accepted = true;
}

PyObject* ResultOrNone(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t i) {
  return i < nargs ? args[i] : Py_None;
}

// submit_one(name, op, reduce_op, input, output, root_rank, prescale,
// postscale, splits, allocate, result_kind, result=None,
// process_set_id=0, finish=None) -> Handle: one request, the common case,
// without building a list of tuples. `finish`, when given, is applied
// once to the result by the handle's wait().
PyObject* SubmitOne(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return Guarded([&] {
    if (nargs < 11 || nargs > 14) {
      throw py::type_error("submit_one() takes 11 to 14 positional arguments");
    }
    py::object obj = NewHandle(
        1, ToInt(args[10]),
        py::reinterpret_borrow<py::object>(ResultOrNone(args, nargs, 11)));
    Handle& handle = HandleOf(obj.ptr());
    hb_request request;
    Scratch scratch;
    Prepare(args, nargs >= 13 ? ToInt(args[12]) : 0, &request, handle.begin(),
            &scratch);
    handle.set_name(py::reinterpret_borrow<py::object>(args[0]));
    if (nargs == 14) {
      handle.set_finish(py::reinterpret_borrow<py::object>(args[13]));
    }
    Enqueue(&request, handle);
    return obj.release().ptr();
  });
}

// submit(requests, result_kind, result=None, process_set_id=0,
// finish=None) -> Handle: a group of requests, each a tuple of Prepare's
// 10 fields, submitted atomically on one process set.
PyObject* Submit(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return Guarded([&] {
    if (nargs < 2 || nargs > 5) {
      throw py::type_error("submit() takes 2 to 5 positional arguments");
    }
    const int process_set_id = nargs >= 4 ? ToInt(args[3]) : 0;
    if (!PyList_Check(args[0])) throw py::type_error("requests must be a list");
    // A copy: converting fields may run Python code that changes the list.
    py::tuple items =
        py::reinterpret_steal<py::tuple>(PySequence_Tuple(args[0]));
    if (!items) throw py::error_already_set();
    const size_t n = items.size();
    py::object obj = NewHandle(
        n, ToInt(args[1]),
        py::reinterpret_borrow<py::object>(ResultOrNone(args, nargs, 2)));
    Handle& handle = HandleOf(obj.ptr());
    std::vector<hb_request> requests(n);
    std::vector<Scratch> scratch(n);
    Part* part = handle.begin();
    for (size_t i = 0; i < n; ++i) {
      PyObject* item = PyTuple_GET_ITEM(items.ptr(), i);
      if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 10) {
        throw py::value_error("hbcore request must be a tuple of 10 fields");
      }
      PyObject* fields[10];
      for (int k = 0; k < 10; ++k) fields[k] = PyTuple_GET_ITEM(item, k);
      Prepare(fields, process_set_id, &requests[i], part + i, &scratch[i]);
      if (i == 0) handle.set_name(py::reinterpret_borrow<py::object>(fields[0]));
    }
    if (nargs == 5) {
      handle.set_finish(py::reinterpret_borrow<py::object>(args[4]));
    }
    Enqueue(requests.data(), handle);
    return obj.release().ptr();
  });
}

// A METH_FASTCALL function, stored as PyCFunction (CPython casts it back).
PyCFunction FastCall(PyObject* (*f)(PyObject*, PyObject* const*, Py_ssize_t)) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

PyMethodDef g_submit_defs[] = {
    {"submit_one", FastCall(&SubmitOne), METH_FASTCALL,
     "submit_one(name, op, reduce_op, input, output, root_rank, prescale, "
     "postscale, splits, allocate, result_kind, result=None, "
     "process_set_id=0, finish=None) -> Handle (finish: applied once to "
     "the result by wait())"},
    {"submit", FastCall(&Submit), METH_FASTCALL,
     "submit(requests, result_kind, result=None, process_set_id=0, "
     "finish=None) -> Handle: the requests (tuples of submit_one's first "
     "10 arguments) in one hb_enqueue"},
};

// The numbers that cross the core's boundary, exported under their C API
// names (hbcore/c_api.h) so the Python layers never repeat them: op codes
// (HB_ALLREDUCE...), dtype codes (HB_FLOAT32...), reduce ops
// (HB_REDUCE_SUM...), status codes (HB_OK, HB_ERR_*), knob types
// (HB_KNOB_*), HB_DEVICE_CPU and HB_COMM_WORLD,
// plus this module's result kinds (RESULT_*).
void ExportConstants(py::module_& m) {
#define HB_EXPORT(name) m.attr(#name) = static_cast<int>(name)
  HB_EXPORT(HB_ALLREDUCE);
  HB_EXPORT(HB_ALLGATHER);
  HB_EXPORT(HB_BROADCAST);
  HB_EXPORT(HB_ALLTOALL);
  HB_EXPORT(HB_REDUCESCATTER);
  HB_EXPORT(HB_BARRIER);
  HB_EXPORT(HB_JOIN);

  HB_EXPORT(HB_UINT8);
  HB_EXPORT(HB_INT8);
  HB_EXPORT(HB_UINT16);
  HB_EXPORT(HB_INT16);
  HB_EXPORT(HB_INT32);
  HB_EXPORT(HB_INT64);
  HB_EXPORT(HB_FLOAT16);
  HB_EXPORT(HB_FLOAT32);
  HB_EXPORT(HB_FLOAT64);
  HB_EXPORT(HB_BOOL);
  HB_EXPORT(HB_BFLOAT16);

  HB_EXPORT(HB_REDUCE_AVERAGE);
  HB_EXPORT(HB_REDUCE_SUM);
  HB_EXPORT(HB_REDUCE_ADASUM);
  HB_EXPORT(HB_REDUCE_MIN);
  HB_EXPORT(HB_REDUCE_MAX);
  HB_EXPORT(HB_REDUCE_PRODUCT);

  HB_EXPORT(HB_OK);
  HB_EXPORT(HB_ERR_INVALID_ARGUMENT);
  HB_EXPORT(HB_ERR_MISMATCH);
  HB_EXPORT(HB_ERR_NOT_INITIALIZED);
  HB_EXPORT(HB_ERR_SHUTDOWN);
  HB_EXPORT(HB_ERR_DUPLICATE_NAME);
  HB_EXPORT(HB_ERR_INTERNAL);
  HB_EXPORT(HB_ERR_CONFIG);
  HB_EXPORT(HB_ERR_UNSUPPORTED);

  HB_EXPORT(HB_KNOB_INTEGER);
  HB_EXPORT(HB_KNOB_NUMBER);
  HB_EXPORT(HB_KNOB_STRING);
  HB_EXPORT(HB_KNOB_BOOL);
  HB_EXPORT(HB_KNOB_LOG_LEVEL);
  HB_EXPORT(HB_KNOB_CHOICE);

  HB_EXPORT(HB_DEVICE_CPU);
  HB_EXPORT(HB_COMM_WORLD);
#undef HB_EXPORT
  m.attr("RESULT_GIVEN") = static_cast<int>(kResultGiven);
  m.attr("RESULT_OUTPUT") = static_cast<int>(kResultOutput);
  m.attr("RESULT_OUTPUT_AND_SPLITS") = static_cast<int>(kResultOutputAndSplits);
  m.attr("RESULT_OUTPUTS") = static_cast<int>(kResultOutputs);
  m.attr("RESULT_NONE") = static_cast<int>(kResultNone);
  m.attr("RESULT_LAST_JOINED_RANK") = static_cast<int>(kResultLastJoinedRank);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "hbcore native core (libhbcore.so) bindings";
  ExportConstants(m);

  m.def(
      "init",
      [](int64_t comm,
         const std::vector<std::pair<std::string, std::string>>& config,
         const std::vector<std::vector<int>>& process_sets) {
        std::vector<hb_config_entry> entries;
        for (const auto& c : config) {
          entries.push_back({c.first.c_str(), c.second.c_str()});
        }
        std::vector<int> ranks, sizes;
        for (const auto& set : process_sets) {
          ranks.insert(ranks.end(), set.begin(), set.end());
          sizes.push_back(static_cast<int>(set.size()));
        }
        char err[1024] = {0};
        int code;
        {
          py::gil_scoped_release release;
          code = hb_init(comm, entries.data(), static_cast<int>(entries.size()),
                         ranks.data(), sizes.data(),
                         static_cast<int>(sizes.size()), err, sizeof(err));
        }
        if (code != HB_OK) RaiseFor(code, err);
      },
      py::arg("comm") = HB_COMM_WORLD,
      py::arg("config") = std::vector<std::pair<std::string, std::string>>(),
      py::arg("process_sets") = std::vector<std::vector<int>>(),
      "init(comm, config, process_sets): hb_init with (knob name, value "
      "text) overrides and process sets (lists of ranks; [] on a rank that "
      "is not a member and does not know them)");
  m.def(
      "add_process_set",
      [](const std::vector<int>& ranks) {
        char err[1024] = {0};
        int id = -1;
        int code;
        {
          py::gil_scoped_release release;
          code = hb_add_process_set(ranks.data(),
                                    static_cast<int>(ranks.size()), &id, err,
                                    sizeof(err));
        }
        if (code != HB_OK) RaiseFor(code, err);
        return id;
      },
      "add_process_set(ranks) -> id: hb_add_process_set (collective)");
  m.def(
      "remove_process_set",
      [](int id) {
        char err[1024] = {0};
        int removed = 0;
        int code;
        {
          py::gil_scoped_release release;
          code = hb_remove_process_set(id, &removed, err, sizeof(err));
        }
        if (code != HB_OK) RaiseFor(code, err);
        return removed != 0;
      },
      "remove_process_set(id) -> bool: hb_remove_process_set (collective)");
  m.def(
      "process_set_info",
      [](int id) -> py::object {
        int size = 0, rank = -1;
        int code = hb_process_set_info(id, &size, &rank, nullptr, 0);
        if (code == HB_ERR_INVALID_ARGUMENT) return py::none();
        if (code != HB_OK) {
          RaiseFor(code, "hbcore has not been initialized; use hbcore.init().");
        }
        std::vector<int> ranks(static_cast<size_t>(size));
        code = hb_process_set_info(id, &size, &rank, ranks.data(), size);
        // Removed in between: as unknown.
        if (code != HB_OK || static_cast<size_t>(size) != ranks.size()) {
          return py::none();
        }
        return py::make_tuple(size, rank, ranks);
      },
      "process_set_info(id) -> (size, rank or -1, ranks), or None for an "
      "unknown id");
  m.def(
      "process_set_ids",
      [] {
        int n = hb_process_set_ids(nullptr, 0);
        if (n < 0) {
          RaiseFor(HB_ERR_NOT_INITIALIZED,
                   "hbcore has not been initialized; use hbcore.init().");
        }
        std::vector<int> ids(static_cast<size_t>(n));
        n = hb_process_set_ids(ids.data(), n);
        ids.resize(static_cast<size_t>(std::min<int>(n, ids.size())));
        return ids;
      },
      "process_set_ids() -> ascending ids of the process sets");
  m.def(
      "check_config",
      [](const std::vector<std::pair<std::string, std::string>>& config) {
        std::vector<hb_config_entry> entries;
        for (const auto& c : config) {
          entries.push_back({c.first.c_str(), c.second.c_str()});
        }
        char err[1024] = {0};
        const int code = hb_check_config(
            entries.data(), static_cast<int>(entries.size()), err, sizeof(err));
        if (code != HB_OK) RaiseFor(code, err);
      },
      "check_config(config): validates (knob name, value text) overrides "
      "with the core's parser, without reading the environment");
  m.def(
      "knobs",
      [] {
        int count = 0;
        const hb_knob* knobs = hb_knobs(&count);
        py::list out;
        for (int i = 0; i < count; ++i) {
          const hb_knob& k = knobs[i];
          py::dict d;
          d["name"] = k.name;
          d["env"] = k.env;
          d["type"] = k.type;
          d["default"] = k.default_value;
          d["min"] = k.min;
          d["max"] = k.max;
          d["unit"] = k.unit;
          out.append(d);
        }
        return out;
      },
      "knobs() -> the core's knob table (hb_knobs), one dict per knob");
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
  m.def(
      "parked_operations",
      [] {
        SweepInFlight();
        return InFlight().size();
      },
      "parked_operations() -> int: operations whose handle was dropped "
      "before they finished; their buffers stay alive until they do (for "
      "tests)");
  m.def("raise_for", [](int code, const std::string& message) {
    RaiseFor(code, message);
  });

  g_handle_type =
      reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_handle_spec));
  if (g_handle_type == nullptr) throw py::error_already_set();
#if PY_VERSION_HEX < 0x030A0000
  g_handle_type->tp_new = nullptr;
#endif
  m.add_object("Handle",
               py::handle(reinterpret_cast<PyObject*>(g_handle_type)));
  for (PyMethodDef& def : g_submit_defs) {
    PyObject* fn = PyCFunction_NewEx(&def, nullptr, m.attr("__name__").ptr());
    if (fn == nullptr) throw py::error_already_set();
    m.add_object(def.ml_name, py::reinterpret_steal<py::object>(fn));
  }
  hbcore_py::RegisterGpuArrays(m);
  m.def("register_dtypes",
        [](const std::vector<std::pair<py::dtype, int>>& codes) {
          hbcore_py::DtypeTable& table = Dtypes();
          table.entries.clear();
          table.supported.clear();
          for (const auto& c : codes) {
            table.entries.push_back({c.first.num(), c.second, c.first});
            if (!table.supported.empty()) table.supported += ", ";
            table.supported += py::str(c.first).cast<std::string>();
          }
        });
}
