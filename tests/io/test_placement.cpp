// Placements (io/placement.h): the parts of an array split along one dimension, in blocks
// and with padding as tensor parallelism splits parameters, written by element ranges (as
// ZeRO shards them) into one H5File dataset reassemble the array exactly, read back into
// the same parts, and their placed checksums sum to the whole array's checksum.
#include <boost/test/unit_test.hpp>

#include "io/checksum.h"
#include "io/h5file.h"
#include "io/placement.h"
#include "support/check.h"
#include "support/files.h"
#include "tensor/ops.h"
#include "tensor/random.h"

BOOST_AUTO_TEST_SUITE(test_placement)

using namespace triad;
using io::Placement;

namespace {

// Rank r's map of `ranks` along an extent of `global` indices in `parts` blocks (a fused
// q|k|v projection has 3), padded to `local` indices per rank: block b's indices
// [r·l, (r+1)·l) of its global_size / parts, past which they are padding.
std::vector<int64_t> split_map(int64_t global, int ranks, int r, int parts, int64_t local) {
  const int64_t l = local / parts, block = global / parts;
  std::vector<int64_t> map;
  for (int b = 0; b < parts; ++b)
    for (int64_t i = 0; i < l; ++i) {
      const int64_t in_block = r * l + i;
      map.push_back(in_block < block ? b * block + in_block : -1);
    }
  return map;
}

// The part of `global` that `map` places along dim: padding zero.
Tensor part_of(const Tensor& global, int dim, const std::vector<int64_t>& map) {
  Shape shape = global.shape();
  shape[size_t(dim)] = int64_t(map.size());
  Tensor part = Tensor::zeros(shape, global.dtype());
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i] >= 0) ops::copy_(ops::narrow(part, dim, int64_t(i), 1), ops::narrow(global, dim, map[i], 1));
  return part;
}

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator g(seed);
  ops::uniform_(t, -1.0, 1.0, g);
  return t;
}

struct Layout {
  std::string what;
  Shape global;
  int dim, ranks, parts;
  int64_t local;  // extent along dim per rank
};

const Layout kLayouts[] = {
    {"rows", {12, 5}, 0, 3, 1, 4},
    {"columns (row-parallel weight)", {3, 8, 6}, 2, 2, 1, 3},
    {"middle dimension", {3, 8, 6}, 1, 4, 1, 2},
    {"fused q|k|v rows", {12, 4}, 0, 2, 3, 6},
    {"fused columns", {5, 12}, 1, 2, 3, 6},
    {"padded vocabulary rows", {10, 3}, 0, 4, 1, 4},  // 16 rows: 6 padding
    {"one rank, padded", {10, 3}, 0, 1, 1, 16},
};

}  // namespace

BOOST_AUTO_TEST_CASE(parts_written_by_ranges_reassemble_the_array) {
  test::TempDir dir;
  uint64_t seed = 1;
  for (const Layout& l : kLayouts) {
    BOOST_TEST_CONTEXT(l.what) {
      const Tensor global = random_tensor(l.global, seed++);
      const std::string path = (dir.path() / "placed.h5").string();
      io::H5File file = io::H5File::create(path);
      file.create_dataset("/w", DType::f32, l.global);
      uint64_t sum = 0;
      std::vector<Tensor> parts;
      std::vector<Placement> placements;
      for (int r = 0; r < l.ranks; ++r) {
        const Placement p{l.dim, split_map(l.global[size_t(l.dim)], l.ranks, r, l.parts, l.local)};
        const Tensor part = part_of(global, l.dim, p.map);
        BOOST_TEST((p.array_shape(part.shape(), l.global[size_t(l.dim)]) == l.global));
        // Written in three element ranges (a ZeRO shard's cuts), the last ending in padding.
        const int64_t n = part.numel(), cuts[] = {0, n / 3, n / 3 + n / 4, n};
        const Tensor flat = ops::reshape(part, {n});
        for (int c = 0; c < 3; ++c) {
          const Tensor piece = ops::contiguous(ops::narrow(flat, 0, cuts[c], cuts[c + 1] - cuts[c]));
          file.write_ranges({{"/w", cuts[c], piece, part.shape(), p}});
          sum += io::placed_checksum(piece, part.shape(), p, l.global, cuts[c]);
        }
        parts.push_back(part);
        placements.push_back(p);
      }
      BOOST_TEST(test::max_abs_diff(file.read("/w"), global) == 0.0);
      BOOST_TEST(sum == io::tensor_checksum(global));
      // Each part read back by ranges of other cuts; padding keeps what the buffer held.
      for (int r = 0; r < l.ranks; ++r) {
        const int64_t n = parts[size_t(r)].numel();
        Tensor back = Tensor::full(parts[size_t(r)].shape(), 0.0);
        const Tensor flat = ops::reshape(back, {n});
        for (int64_t lo = 0; lo < n; lo += 7) {
          const Tensor piece = Tensor::empty({std::min<int64_t>(7, n - lo)});
          const Tensor before = ops::clone(ops::narrow(flat, 0, lo, piece.numel()));
          ops::copy_(piece, before);
          file.read_ranges({{"/w", lo, piece, back.shape(), placements[size_t(r)]}});
          ops::copy_(ops::narrow(flat, 0, lo, piece.numel()), piece);
        }
        BOOST_TEST(test::max_abs_diff(back, parts[size_t(r)]) == 0.0, "rank " << r);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(placed_boxes_split_at_block_boundaries) {
  // Columns [2, 4) and [8, 10) of a 2 x 12 array (rank 1 of 2, three blocks of 4 columns:
  // block 1's columns are padding-free [4, 8), its rank-1 half [6, 8)).
  const Placement p{1, {2, 3, 6, 7, 10, 11}};
  const std::vector<io::Box> boxes = io::placed_boxes({2, 6}, p, 0, 12);
  BOOST_TEST_REQUIRE(boxes.size() == 3u);
  BOOST_TEST((boxes[0] == io::Box{{0, 2}, {2, 2}}));
  BOOST_TEST((boxes[1] == io::Box{{0, 6}, {2, 2}}));
  BOOST_TEST((boxes[2] == io::Box{{0, 10}, {2, 2}}));
  // A range inside one row: elements 3..4 of row 0 are columns 7 and 10.
  const std::vector<io::Box> inner = io::placed_boxes({2, 6}, p, 3, 2);
  BOOST_TEST_REQUIRE(inner.size() == 2u);
  BOOST_TEST((inner[0] == io::Box{{0, 7}, {1, 1}}));
  BOOST_TEST((inner[1] == io::Box{{0, 10}, {1, 1}}));
}

BOOST_AUTO_TEST_CASE(bad_placements_and_parts_that_do_not_fit_are_errors) {
  test::check_error([] { io::placed_boxes({4, 3}, Placement{0, {0, 2, 1, 3}}, 0, 12); }, {"must increase"});
  test::check_error([] { io::placed_boxes({4, 3}, Placement{1, {0, 1, -1}}, 0, 12); },
                    {"padding only along dimension 0"});
  test::check_error([] { io::placed_boxes({4, 3}, Placement{0, {0, 1}}, 0, 12); }, {"does not fit"});
  test::TempDir dir;
  io::H5File file = io::H5File::create((dir.path() / "bad.h5").string());
  file.create_dataset("/w", DType::f32, {4, 3});
  test::check_error(
      [&] { file.write_ranges({{"/w", 0, Tensor::zeros({6}), {2, 3}, Placement{0, {3, 4}}}}); },
      {"/w", "does not fit the dataset's shape (4, 3)"});
  test::check_error(
      [&] { file.write_ranges({{"/w", 0, Tensor::zeros({6}), {3, 2}, Placement{0, {0, 1, 2}}}}); },
      {"/w", "does not fit"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_placement
