// hbcore._core.Handle and the core callbacks of the operations it holds
// (operation.h).
#include "operation.h"

namespace hbcore_py {

// Runs on the core's background thread, without the GIL.
void* AllocOutput(void* user, int ndim, const int64_t* shape) {
  OpState& s = *static_cast<OpState*>(user);
  size_t n = s.item_size;
  s.output_shape.assign(shape, shape + ndim);
  for (int i = 0; i < ndim; ++i) n *= static_cast<size_t>(shape[i]);
  if (n == 0) n = 1;  // a null pointer would read as a failed allocation
  void* p = nullptr;
  if (s.output_device == HB_DEVICE_CPU && s.host_pool &&
      n >= HostOutputPool::kMinPooledBytes) {
    s.pooled_output = s.host_pool->Take(n);
    return s.pooled_output ? s.pooled_output->data() : nullptr;
  }
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

namespace {

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


// --- the Handle type --------------------------------------------------------

// A Python object holding a Handle: constructed in place by NewHandle,
// destroyed by HandleDealloc.
struct HandleObject {
  PyObject_HEAD
  Handle handle;
};

PyTypeObject* g_handle_type = nullptr;  // set once at import



void HandleDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  HandleOf(self).ParkUnfinished();
  HandleOf(self).~Handle();
  type->tp_free(self);
  Py_DECREF(type);  // instances of a heap type own a reference to it
}

PyObject* HandlePoll(PyObject* self, PyObject*) {
  return PyBool_FromLong(HandleOf(self).Poll());
}

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

}  // namespace

void Handle::ParkUnfinished() {
  for (Part& p : *this) {
    if (p.accepted && !p.Done()) {
      InFlight().push_back({p.state, std::move(p.input), std::move(p.output)});
    }
  }
}

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

double ToDouble(PyObject* o) {
  if (PyFloat_CheckExact(o)) return PyFloat_AS_DOUBLE(o);
  py::object f = py::reinterpret_steal<py::object>(PyNumber_Float(o));
  if (!f) throw py::error_already_set();
  return PyFloat_AS_DOUBLE(f.ptr());
}

size_t ParkedOperations() {
  SweepInFlight();
  return InFlight().size();
}

void RegisterHandleType(py::module_& m) {
  g_handle_type =
      reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_handle_spec));
  if (g_handle_type == nullptr) throw py::error_already_set();
#if PY_VERSION_HEX < 0x030A0000
  g_handle_type->tp_new = nullptr;
#endif
  m.add_object("Handle",
               py::handle(reinterpret_cast<PyObject*>(g_handle_type)));
}

}  // namespace hbcore_py
