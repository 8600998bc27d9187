// One submitted operation of hbcore._core: the state the core's callbacks
// fill (OpState), the Python objects a request keeps alive (Part), and what
// Python holds (Handle, exported as the type hbcore._core.Handle and made
// only by NewHandle). Everything here except the callbacks runs with the
// GIL held.
#ifndef HBCORE_PYTHON_OPERATION_H_
#define HBCORE_PYTHON_OPERATION_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "gpu_arrays.h"
#include "host_outputs.h"
#include "hbcore/c_api.h"

namespace hbcore_py {

namespace py = pybind11;

inline bool IsFinalizing() {
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
  // (device) returned. Host memory is malloc'ed (or pooled, below), device
  // memory comes from hb_gpu_malloc on `output_device`.
  std::unique_ptr<void, OutputDeleter> output;
  // A host output of kMinPooledBytes or more when the request named a pool
  // (then `output` stays empty): the block goes back to `host_pool` once
  // the array made from it is gone, or with this state if it never is.
  std::shared_ptr<HostOutputPool> host_pool;
  std::unique_ptr<HostOutputPool::Lease> pooled_output;
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


// The core's callbacks of every request this module submits (`user` is
// its OpState). Run on the core's background thread, without the GIL.
void* AllocOutput(void* user, int ndim, const int64_t* shape);
void Done(void* user, int status, const char* message, const hb_result* r);

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
    if (state->pooled_output) {
      return HostOutputPool::Wrap(std::move(state->pooled_output),
                                  state->output_shape,
                                  py::reinterpret_borrow<py::dtype>(dtype));
    }
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
  // microseconds: a short spin saves a sleep and a wake-up per tensor. Only
  // where the host has CPUs to spare (hb_spin_wait): on a 2-CPU host with
  // 2 ranks the spin took the CPU from the background threads, and a 4 B
  // allreduce took 27.6-33 us with it against 17.7-19.2 us without.
  bool SpinUntilDone() const {
    if (!hb_spin_wait()) return false;
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

// A new hbcore._core.Handle of `count` requests, whose wait() returns
// what `kind` says (ResultKind); `given` is returned for kResultGiven.
py::object NewHandle(size_t count, int kind, py::object given);
// The Handle inside an hbcore._core.Handle object.
Handle& HandleOf(PyObject* self);
// Operations whose handle was dropped before they finished (their objects
// are parked until they do); releases those that finished since.
size_t ParkedOperations();
// Creates the type hbcore._core.Handle and adds it to `m`.
void RegisterHandleType(py::module_& m);

// float(o), as the float() the Python layer used to apply.
double ToDouble(PyObject* o);

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

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_OPERATION_H_
