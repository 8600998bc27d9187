// What the translation units of hbcore._core share: the one table from
// core status codes to Python exceptions, and the dtype table hbcore.ops
// registers. Everything here is used with the GIL held.
#ifndef HBCORE_PYTHON_COMMON_H_
#define HBCORE_PYTHON_COMMON_H_

#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

namespace hbcore_py {

namespace py = pybind11;

// Raises the hbcore.exceptions type of a core status code (HB_ERR_*),
// with the code stored on the instance as `status`.
[[noreturn]] void RaiseFor(int code, const std::string& message);

// numpy dtype <-> hb_dtype, registered once by hbcore.ops (bfloat16 comes
// from ml_dtypes, whose type number is only known at run time).
struct DtypeTable {
  struct Entry {
    int type_num;        // numpy type number
    int code;            // hb_dtype
    py::object dtype;    // the numpy dtype object
  };
  std::vector<Entry> entries;
  std::string supported;  // for the error message

  // Raises InvalidArgumentError for a dtype that was not registered.
  int Code(PyObject* descr) const;
  // The numpy dtype of an hb_dtype, or None when it has none here
  // (bfloat16 without ml_dtypes).
  py::object DtypeOf(int code) const;
};

// The table. Never destroyed: it holds Python objects, which must not be
// released after the interpreter is gone.
DtypeTable& Dtypes();

// Size in bytes of one element of an hb_dtype.
size_t ItemSize(int code);

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_COMMON_H_
