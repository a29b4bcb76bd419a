// Boxes and placements: the element sets that H5File reads and writes.
//
// Placement: where a tensor's elements lie in a larger array (a dataset of a file), when the
// tensor is that array's part along one dimension. It is how a tensor-parallel rank's part
// of a parameter (nn/tensor_split.h) is written into, and read from, the parameter's
// dataset at its global shape, with no knowledge of tensor parallelism here.
//
// The tensor has `shape`; the array has the same extents except along `dim`, where the
// tensor's index i is the array's index map[i]. map increases, and may end in -1 entries:
// padding, elements that belong to no element of the array (a vocabulary padded to a
// multiple of the ranks), only along dimension 0, so that they are the tail of the
// tensor's flattening. dim -1 is the identity (the tensor is the whole array).
//
// Because map increases, the tensor's row-major order is the array's row-major order
// restricted to the tensor's elements: an element range of the tensor is a set of boxes of
// the array whose elements, walked in the array's order, are the range's in order.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace triad::io {

// A hyperslab of an N-d array: per dimension, the first index and the extent. For a 0-d
// array both are empty and the box is the one element.
struct Box {
  Shape start;
  Shape count;
  bool operator==(const Box&) const = default;
};

// Elements [first, first + count) of the row-major flattening of an array of `shape`, as
// disjoint boxes in increasing order whose union is exactly that range: at most
// 2(N−1)+1 boxes for N >= 1 dimensions (a partial-row head and tail per level, one block
// of whole rows between), none when count is 0. Throws Error unless
// 0 <= first <= first + count <= numel(shape).
std::vector<Box> element_range_boxes(const Shape& shape, int64_t first, int64_t count);

struct Placement {
  int dim = -1;                // -1: the tensor is the whole array
  std::vector<int64_t> map;    // along dim: the array's index of each of the tensor's, or -1
  bool is_identity() const { return dim < 0; }
  // The array's shape, given the tensor's (extent along dim: the largest index + 1 when
  // `extent` is 0; else `extent`).
  Shape array_shape(const Shape& shape, int64_t extent) const;
  // Elements of the tensor's flattening that are not padding (a prefix of it).
  int64_t placed_numel(const Shape& shape) const;
};

// The elements [first, first + count) of a tensor of `shape` placed by p, as disjoint boxes
// of the array (padding left out); their union, walked in row-major order, holds the
// range's non-padding elements in order. Throws Error when the range is outside the
// tensor or p does not fit `shape`.
std::vector<Box> placed_boxes(const Shape& shape, const Placement& p, int64_t first, int64_t count);

// Calls f(offset, index, n) for each run of the range [first, first + count) of the
// tensor's flattening that lies contiguously in the array's flattening (array_shape
// `array`): the run's offset in the range, its first element's index in the array, and its
// length. Padding is skipped. In order.
void for_each_placed_run(const Shape& shape, const Placement& p, const Shape& array, int64_t first, int64_t count,
                         const std::function<void(int64_t offset, int64_t index, int64_t n)>& f);

// The partial checksum (io/checksum.h) of a range of a tensor as placed in the array:
// values are data's elements (the range, contiguous on the host), positions their indices in
// the array. Sums with the other parts' to the checksum of the whole array.
uint64_t placed_checksum(const Tensor& data, const Shape& shape, const Placement& p, const Shape& array,
                         int64_t first);

}  // namespace triad::io
