// Definitions of common.h: the status-code table and the dtype table.
#include "common.h"

#include <pybind11/numpy.h>

#include "hbcore/c_api.h"

namespace hbcore_py {

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
  // The instance keeps the core's code (mpi4py style), e.g.
  // err.status == hbcore._native.core.HB_ERR_MISMATCH.
  py::object cls = exc.attr(type);
  py::object error = cls(message);
  error.attr("status") = code;
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

int DtypeTable::Code(PyObject* descr) const {
  const int num = py::detail::array_descriptor_proxy(descr)->type_num;
  for (const Entry& e : entries) {
    if (e.type_num == num) return e.code;
  }
  RaiseFor(HB_ERR_INVALID_ARGUMENT,
           "unsupported dtype " +
               py::str(py::handle(descr)).cast<std::string>() +
               "; supported: " + supported);
}

py::object DtypeTable::DtypeOf(int code) const {
  for (const Entry& e : entries) {
    if (e.code == code) return e.dtype;
  }
  return py::none();
}

DtypeTable& Dtypes() {
  // Written once at import, under the GIL; deliberately leaked.
  static DtypeTable* table = new DtypeTable();
  return *table;
}

size_t ItemSize(int code) {
  switch (code) {
    case HB_UINT8: case HB_INT8: case HB_BOOL: return 1;
    case HB_UINT16: case HB_INT16: case HB_FLOAT16: case HB_BFLOAT16:
      return 2;
    case HB_INT32: case HB_FLOAT32: return 4;
    default: return 8;
  }
}

}  // namespace hbcore_py

