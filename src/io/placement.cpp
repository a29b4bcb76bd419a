#include "io/placement.h"

#include <algorithm>

#include "io/checksum.h"

namespace triad::io {

// ---------------------------------------------------------------- element ranges

namespace {

// Appends the boxes of elements [a, b) of the row-major array shape[k..], with the leading
// dimensions fixed at `prefix`. A range inside one row of dimension k descends into it;
// otherwise it is a partial head row, a block of whole rows and a partial tail row, and the
// head and tail are suffix and prefix ranges of one row, which add at most one box per level.
void add_boxes(const Shape& shape, size_t k, Shape& prefix, int64_t a, int64_t b, std::vector<Box>& out) {
  if (a == b) return;
  const size_t n = shape.size();
  auto whole_rows = [&](int64_t first_row, int64_t rows) {
    Box box;
    box.start = prefix;
    box.count.assign(prefix.size(), 1);
    box.start.push_back(first_row);
    box.count.push_back(rows);
    for (size_t d = k + 1; d < n; ++d) {
      box.start.push_back(0);
      box.count.push_back(shape[d]);
    }
    out.push_back(std::move(box));
  };
  if (k + 1 == n) {
    whole_rows(a, b - a);
    return;
  }
  int64_t row = 1;  // elements per index of dimension k
  for (size_t d = k + 1; d < n; ++d) row *= shape[d];
  int64_t ra = a / row;
  const int64_t rb = b / row, oa = a % row, ob = b % row;
  auto descend = [&](int64_t r, int64_t lo, int64_t hi) {
    prefix.push_back(r);
    add_boxes(shape, k + 1, prefix, lo, hi, out);
    prefix.pop_back();
  };
  if (ra == rb) {  // inside one row (ob > oa)
    descend(ra, oa, ob);
    return;
  }
  if (oa != 0) descend(ra++, oa, row);
  if (rb > ra) whole_rows(ra, rb - ra);
  if (ob != 0) descend(rb, 0, ob);
}

}  // namespace

std::vector<Box> element_range_boxes(const Shape& shape, int64_t first, int64_t count) {
  const int64_t total = numel(shape);
  TRIAD_CHECK(first >= 0 && count >= 0 && first <= total && count <= total - first,
              "element range [" << first << ", " << first << " + " << count << ") is outside the " << total
                                << " elements of shape " << shape_str(shape));
  std::vector<Box> out;
  if (count == 0) return out;
  if (shape.empty()) {
    out.push_back(Box{});
    return out;
  }
  Shape prefix;
  add_boxes(shape, 0, prefix, first, first + count, out);
  return out;
}

// ---------------------------------------------------------------- placements

namespace {

void check_fits(const Shape& shape, const Placement& p) {
  if (p.is_identity()) return;
  TRIAD_CHECK(p.dim < int(shape.size()) && int64_t(p.map.size()) == shape[size_t(p.dim)],
              "placement along dimension " << p.dim << " with " << p.map.size() << " indices does not fit shape "
                                           << shape_str(shape));
  bool padding = false;
  int64_t previous = -1;
  for (int64_t g : p.map) {
    if (g < 0) {
      padding = true;
      continue;
    }
    TRIAD_CHECK(!padding && g > previous, "placement: the indices along dimension "
                                              << p.dim << " must increase, with padding (-1) only at the end");
    previous = g;
  }
  TRIAD_CHECK(!padding || p.dim == 0, "placement: padding only along dimension 0, not " << p.dim);
}

// The runs of consecutive array indices among map[lo, hi): (tensor index, array index, n).
struct Run {
  int64_t local, global, n;
};
std::vector<Run> index_runs(const std::vector<int64_t>& map, int64_t lo, int64_t hi) {
  std::vector<Run> runs;
  for (int64_t i = lo; i < hi; ++i) {
    if (map[size_t(i)] < 0) break;  // padding: the rest is padding too
    if (!runs.empty() && runs.back().global + runs.back().n == map[size_t(i)])
      ++runs.back().n;
    else
      runs.push_back({i, map[size_t(i)], 1});
  }
  return runs;
}

}  // namespace

Shape Placement::array_shape(const Shape& shape, int64_t extent) const {
  if (is_identity()) return shape;
  check_fits(shape, *this);
  Shape out = shape;
  int64_t largest = -1;
  for (int64_t g : map) largest = std::max(largest, g);
  out[size_t(dim)] = extent > 0 ? extent : largest + 1;
  return out;
}

int64_t Placement::placed_numel(const Shape& shape) const {
  if (is_identity()) return numel(shape);
  check_fits(shape, *this);
  const int64_t kept = int64_t(std::count_if(map.begin(), map.end(), [](int64_t g) { return g >= 0; }));
  return shape[size_t(dim)] == 0 ? 0 : numel(shape) / shape[size_t(dim)] * kept;
}

std::vector<Box> placed_boxes(const Shape& shape, const Placement& p, int64_t first, int64_t count) {
  std::vector<Box> local = element_range_boxes(shape, first, count);
  if (p.is_identity()) return local;
  check_fits(shape, p);
  const size_t d = size_t(p.dim);
  std::vector<Box> out;
  for (const Box& box : local)
    for (const Run& run : index_runs(p.map, box.start[d], box.start[d] + box.count[d])) {
      Box placed = box;
      placed.start[d] = run.global;
      placed.count[d] = run.n;
      out.push_back(std::move(placed));
    }
  return out;
}

void for_each_placed_run(const Shape& shape, const Placement& p, const Shape& array, int64_t first, int64_t count,
                         const std::function<void(int64_t offset, int64_t index, int64_t n)>& f) {
  const std::vector<Box> local = element_range_boxes(shape, first, count);
  if (shape.empty()) {
    if (count > 0) f(0, 0, 1);
    return;
  }
  if (!p.is_identity()) check_fits(shape, p);
  const size_t nd = shape.size(), last = nd - 1;
  // Row-major strides of the array.
  Shape stride(nd, 1);
  for (size_t k = nd - 1; k-- > 0;) stride[k] = stride[k + 1] * array[k + 1];
  int64_t offset = 0;
  for (const Box& box : local) {
    // Each row of the box (all indices fixed but the last) is a run of the tensor; along the
    // placed dimension it maps to one array index, or splits where that is the last one.
    Shape index = box.start;
    const int64_t rows = numel(box.count) / box.count[last];
    for (int64_t r = 0; r < rows; ++r) {
      int64_t base = 0;
      bool padding = false;
      for (size_t k = 0; k < last; ++k) {
        int64_t g = index[k];
        if (!p.is_identity() && k == size_t(p.dim)) g = p.map[size_t(g)];
        padding = padding || g < 0;
        base += g * stride[k];
      }
      if (!padding) {
        if (!p.is_identity() && size_t(p.dim) == last) {
          for (const Run& run : index_runs(p.map, index[last], index[last] + box.count[last]))
            f(offset + run.local - index[last], base + run.global, run.n);
        } else {
          f(offset, base + index[last], box.count[last]);
        }
      }
      offset += box.count[last];
      for (size_t k = last; k-- > 0;) {  // the next row of the box
        if (++index[k] < box.start[k] + box.count[k]) break;
        index[k] = box.start[k];
      }
    }
  }
}

uint64_t placed_checksum(const Tensor& data, const Shape& shape, const Placement& p, const Shape& array,
                         int64_t first) {
  TRIAD_CHECK(data.device().is_cpu() && data.is_contiguous(),
              "placed_checksum: expected a contiguous host tensor, got " << data.str());
  const auto* bytes = static_cast<const unsigned char*>(data.raw_data());
  const int esize = int(element_size(data.dtype()));
  uint64_t sum = 0;
  for_each_placed_run(shape, p, array, first, data.numel(), [&](int64_t offset, int64_t index, int64_t n) {
    sum += range_checksum(bytes + offset * esize, index, n, esize, ChecksumThreads::calling);
  });
  return sum;
}

}  // namespace triad::io
