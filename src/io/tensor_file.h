// Named-tensor files (.tns): a small, self-describing binary format for exchanging tensors
// with other tools (the PyTorch reference data under tests/data/, interim weights).
//
// Layout, little-endian: magic "TRIADTNS", u32 version (1), u32 count; then per tensor:
// u32 name length, name bytes, u32 dtype code (tensor/dtype.h), u32 ndim, i64 dims[ndim],
// the row-major data.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace triad::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Throws Error naming the file (and the entry) when it is missing, truncated or malformed.
NamedTensors read_tensor_file(const std::string& path);
// Written atomically (io/atomic_file.h): a failed write leaves an earlier file intact.
void write_tensor_file(const std::string& path, const NamedTensors& tensors);

// The tensor called `name`; throws Error naming the file's path when absent.
const Tensor& find_tensor(const NamedTensors& tensors, const std::string& name, const std::string& path);

}  // namespace triad::io
