// NumPy .npy files, so that maps and attributions can be read with np.load. The format (NEP 1):
//   "\x93NUMPY", major and minor version bytes, the header's length (uint16 little-endian in
//   version 1.0, uint32 in 2.0), the header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//   padded with spaces and a final '\n' so that the data starts at a multiple of 64 bytes, then
//   the elements in C (row-major) order.
#pragma once
#include <string>

#include "autograd/tensor.h"

namespace vitrine::explain {

/// Writes t as a NumPy .npy file (format version 1.0, '<f4', C order, header padded with spaces
/// to a multiple of 64 bytes and ending in '\n' as numpy writes it: the bytes are those of
/// np.save in numpy 1.24, which also leaves room for the first dimension to grow to 21 digits);
/// any float dtype is converted to float32, any device is read back to the CPU. Written
/// atomically (temp file + rename). Errors name the file: a tensor that is not of a float dtype,
/// a file that cannot be written.
void write_npy(const std::string& path, const Tensor& t);

/// Reads a .npy ('<f4', '<f8', '|u1', '<i8', '<i4'; C order; version 1.0/2.0) into a float32 CPU
/// tensor; Fortran order, other dtypes, a truncated file or a bad magic are Errors naming the
/// file and what was found/expected.
Tensor read_npy(const std::string& path);

}  // namespace vitrine::explain
