#include "nn/tensor_split.h"

#include <algorithm>

#include "tensor/ops.h"

namespace triad::nn {

namespace {

// For part p: the local range [p·l, p·l + n) holds global range [p·G/parts + r·l, … + n).
struct Run {
  int64_t local_first, global_first, count;
};

std::vector<Run> runs(const TensorSplit& s, int64_t local_extent) {
  TRIAD_ASSERT(s.is_split() && local_extent % s.parts == 0 && s.global_size % s.parts == 0);
  const int64_t l = local_extent / s.parts, block = s.global_size / s.parts;
  std::vector<Run> out;
  for (int64_t p = 0; p < s.parts; ++p) {
    const int64_t n = std::clamp<int64_t>(block - int64_t(s.rank) * l, 0, l);
    if (n > 0) out.push_back({p * l, p * block + int64_t(s.rank) * l, n});
  }
  return out;
}

}  // namespace

Shape TensorSplit::global_shape(const Shape& local) const {
  if (!is_split()) return local;
  Shape g = local;
  g[size_t(dim)] = global_size;
  return g;
}

std::vector<int64_t> TensorSplit::global_indices(int64_t local_extent) const {
  std::vector<int64_t> out(size_t(local_extent), -1);
  for (const Run& r : runs(*this, local_extent))
    for (int64_t i = 0; i < r.count; ++i) out[size_t(r.local_first + i)] = r.global_first + i;
  return out;
}

int64_t vocab_rows_per_rank(int64_t vocab, int ranks, int64_t pad_multiple) {
  const int64_t multiple = int64_t(ranks) * pad_multiple;
  return (vocab + multiple - 1) / multiple * multiple / ranks;
}

TensorSplit split_along(int dim, int ranks, int rank, int64_t global_size, int parts) {
  TRIAD_ASSERT(dim >= 0 && ranks >= 1 && rank >= 0 && rank < ranks && parts >= 1 && global_size > 0);
  return TensorSplit{.dim = dim, .ranks = ranks, .rank = rank, .parts = parts, .global_size = global_size};
}

Tensor local_part(const Tensor& global, const TensorSplit& split, const Shape& local_shape) {
  if (!split.is_split()) return ops::clone(global);
  TRIAD_CHECK(split.global_shape(local_shape) == global.shape(),
              "tensor split: a global tensor " << shape_str(global.shape()) << " does not hold local parts "
                                               << shape_str(local_shape) << " (expected global "
                                               << shape_str(split.global_shape(local_shape)) << ")");
  Tensor local = Tensor::zeros(local_shape, global.dtype(), global.device());
  for (const Run& r : runs(split, local_shape[size_t(split.dim)]))
    ops::copy_(ops::narrow(local, split.dim, r.local_first, r.count),
               ops::narrow(global, split.dim, r.global_first, r.count));
  return local;
}

void place_local_part(const Tensor& global, const Tensor& local, const TensorSplit& split) {
  if (!split.is_split()) return ops::copy_(global, local);
  TRIAD_CHECK(split.global_shape(local.shape()) == global.shape(),
              "tensor split: local part " << shape_str(local.shape()) << " does not belong to a global tensor "
                                          << shape_str(global.shape()));
  for (const Run& r : runs(split, local.size(split.dim)))
    ops::copy_(ops::narrow(global, split.dim, r.global_first, r.count),
               ops::narrow(local, split.dim, r.local_first, r.count));
}

}  // namespace triad::nn
