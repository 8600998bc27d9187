// hbcore._core: the pybind11 front end. It translates numpy arrays into
// hb_request values, and core status codes into hbcore.exceptions types in
// one table (RaiseFor, common.cc). Waiting releases the GIL; core callbacks
// never take it (they run on the core's background thread and only touch
// C++ state).
//
// The per-tensor path (submit and submit_one here, the Handle type in
// operation.h/.cc) is written against the CPython API: for a small tensor, pybind11's argument dispatch
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

#include "autotune.h"
#include "common.h"
#include "crc32c.h"
#include "gpu_arrays.h"
#include "host_outputs.h"
#include "hbcore/c_api.h"
#include "operation.h"

namespace py = pybind11;

namespace {

using namespace hbcore_py;  // NOLINT: this module's own pieces

using hbcore_py::Dtypes;
using hbcore_py::DlpackInput;
using hbcore_py::GpuArray;
using hbcore_py::RaiseFor;

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
// tuples given to submit -- and the request's process set. allocate is
// false (the output is given or there is none), true (the core allocates
// the output: host memory by malloc, device memory on the input's GPU), or
// a HostOutputPool (as true, with host outputs of its min_pooled_bytes
// and more from that pool). input and
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
  // allocate may name the HostOutputPool that host outputs come from.
  if (py::isinstance<HostOutputPool>(f[9])) {
    part->state->host_pool =
        py::reinterpret_borrow<py::object>(f[9])
            .cast<std::shared_ptr<HostOutputPool>>();
  }
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
  m.def(
      "start_timeline",
      [](const std::string& path, bool mark_cycles) {
        char err[1024] = {0};
        const int code = hb_start_timeline(path.c_str(), mark_cycles ? 1 : 0,
                                           err, sizeof(err));
        if (code != HB_OK) RaiseFor(code, err);
      },
      "start_timeline(path, mark_cycles): hb_start_timeline");
  m.def(
      "stop_timeline",
      [] {
        char err[1024] = {0};
        const int code = hb_stop_timeline(err, sizeof(err));
        if (code != HB_OK) RaiseFor(code, err);
      },
      "stop_timeline(): hb_stop_timeline");
  m.def("rank", &hb_rank);
  m.def("size", &hb_size);
  m.def("local_rank", &hb_local_rank);
  m.def("local_size", &hb_local_size);
  m.def("cross_rank", &hb_cross_rank);
  m.def("cross_size", &hb_cross_size);
  m.def("mpi_threads_supported", &hb_mpi_threads_supported);
  m.def("is_homogeneous", &hb_is_homogeneous);
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
      [] { return hbcore_py::ParkedOperations(); },
      "parked_operations() -> int: operations whose handle was dropped "
      "before they finished; their buffers stay alive until they do (for "
      "tests)");
  m.def("raise_for", [](int code, const std::string& message) {
    RaiseFor(code, message);
  });

  hbcore_py::RegisterHandleType(m);
  for (PyMethodDef& def : g_submit_defs) {
    PyObject* fn = PyCFunction_NewEx(&def, nullptr, m.attr("__name__").ptr());
    if (fn == nullptr) throw py::error_already_set();
    m.add_object(def.ml_name, py::reinterpret_steal<py::object>(fn));
  }
  hbcore_py::RegisterGpuArrays(m);
  hbcore_py::RegisterCrc32c(m);
  hbcore_py::RegisterHostOutputPool(m);
  hbcore_py::RegisterAutotune(m);
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
