// Shapes and strides, in elements. Strides may be 0 (broadcast) and need not be
// row-major (views); a contiguous tensor has row-major strides.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace triad {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(4, 16, 64)"
// Resolves a possibly negative dimension index against ndim; throws Error naming `op`.
int normalize_dim(int64_t dim, int64_t ndim, const char* op);
// The shape both operands broadcast to, numpy rules; throws Error naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace triad
