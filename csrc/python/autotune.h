// hbcore._core's autotune functions (autotune.cc).
#ifndef HBCORE_PYTHON_AUTOTUNE_H_
#define HBCORE_PYTHON_AUTOTUNE_H_

#include <pybind11/pybind11.h>

namespace hbcore_py {

void RegisterAutotune(pybind11::module_& m);

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_AUTOTUNE_H_
