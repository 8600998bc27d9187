// CRC-32C (Castagnoli), the checksum of TensorFlow's checkpoint bundles:
// hbcore_tf.embedding.bundle writes bundles whose tables are streamed from
// other bundles' data files, and needs the checksum of every entry it
// writes and of every table block it copies. Python's own binascii/zlib
// only have CRC-32 (another polynomial).
#ifndef HBCORE_PYTHON_CRC32C_H_
#define HBCORE_PYTHON_CRC32C_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>

namespace hbcore_py {

// Extends `crc` (the CRC-32C of earlier bytes, 0 for none) by `size` bytes
// at `data`; unmasked, as TensorFlow's crc32c::Extend.
uint32_t Crc32cExtend(uint32_t crc, const uint8_t* data, size_t size);

// Registers hbcore._core.crc32c(buffer, crc=0) -> int.
void RegisterCrc32c(pybind11::module_& m);

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_CRC32C_H_
