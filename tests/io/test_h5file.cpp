// H5File in serial mode (no MPI) and the range checksum: the element-range decomposition
// checked exhaustively against brute force, bit-exact round trips of every dtype whole and
// by ranges (also in several transfer rounds), attributes of every type, dataset listing,
// errors that name the file and dataset, h5dump reading what we write (a shard over several
// datasets too), and the checksum's composition over ranges and sensitivity to every byte.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "io/checksum.h"
#include "io/h5file.h"
#include "parallel/self_communicator.h"
#include "support/check.h"
#include "support/files.h"
#include "tensor/random.h"

BOOST_AUTO_TEST_SUITE(test_h5file)

using namespace triad;
using io::AttrType;
using io::Box;
using io::H5Access;
using io::H5File;
using test::check_error;
using test::error_message;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

const DType kAllDtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i8};

// A tensor whose element k has the raw bits random_bits(seed, k) (truncated to its width):
// every bit pattern, NaN payloads and subnormals included, must survive bit-exactly.
Tensor pattern(const Shape& shape, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dt);
  const size_t es = element_size(dt);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (int64_t k = 0; k < t.numel(); ++k) {
    const uint64_t bits = random_bits(seed, uint64_t(k));
    std::memcpy(p + size_t(k) * es, &bits, es);  // the low bytes (little-endian)
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Elements [lo, lo + n) of a contiguous tensor, as a flat view sharing its storage.
Tensor flat_range(const Tensor& t, int64_t lo, int64_t n) {
  return Tensor::from_storage(t.storage(), {n}, {1}, t.offset() + lo, t.dtype());
}

// The flat indices a box covers, in row-major order.
std::vector<int64_t> box_indices(const Shape& shape, const Box& box) {
  if (shape.empty()) return {0};
  const Shape strides = contiguous_strides(shape);
  std::vector<int64_t> out;
  Shape idx(shape.size(), 0);
  const int64_t n = numel(box.count);
  for (int64_t e = 0; e < n; ++e) {
    int64_t rem = e, flat = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      flat += (box.start[d] + rem % box.count[d]) * strides[d];
      rem /= box.count[d];
    }
    out.push_back(flat);
  }
  return out;
}

void check_boxes(const Shape& shape, int64_t first, int64_t count) {
  const auto boxes = io::element_range_boxes(shape, first, count);
  const size_t max_boxes = shape.empty() ? 1 : 2 * (shape.size() - 1) + 1;
  BOOST_REQUIRE_MESSAGE(boxes.size() <= max_boxes,
                        shape_str(shape) << " [" << first << ", +" << count << "): " << boxes.size() << " boxes");
  std::vector<int64_t> covered;
  for (const Box& b : boxes) {
    BOOST_REQUIRE(b.start.size() == shape.size() && b.count.size() == shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      BOOST_REQUIRE(b.count[d] >= 1);
      BOOST_REQUIRE(b.start[d] >= 0 && b.start[d] + b.count[d] <= shape[d]);
    }
    const auto idx = box_indices(shape, b);
    covered.insert(covered.end(), idx.begin(), idx.end());
  }
  // The boxes, in order and each row-major, walk exactly first, first + 1, ...
  BOOST_REQUIRE_MESSAGE(int64_t(covered.size()) == count, shape_str(shape) << " [" << first << ", +" << count << ")");
  for (int64_t k = 0; k < count; ++k)
    BOOST_REQUIRE_MESSAGE(covered[size_t(k)] == first + k, shape_str(shape) << " [" << first << ", +" << count << ")");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(element_ranges)

BOOST_AUTO_TEST_CASE(hand_worked_cases) {
  using V = std::vector<Box>;
  BOOST_TEST((io::element_range_boxes({10}, 3, 4) == V{{{3}, {4}}}));
  BOOST_TEST((io::element_range_boxes({10}, 3, 0) == V{}));
  BOOST_TEST((io::element_range_boxes({}, 0, 1) == V{Box{}}));
  BOOST_TEST((io::element_range_boxes({}, 0, 0) == V{}));
  BOOST_TEST((io::element_range_boxes({3, 4}, 0, 12) == V{{{0, 0}, {3, 4}}}));  // whole: one box
  // (3, 4), elements [2, 9): the tail of row 0, all of row 1, the head of row 2.
  BOOST_TEST((io::element_range_boxes({3, 4}, 2, 7) == V{{{0, 2}, {1, 2}}, {{1, 0}, {1, 4}}, {{2, 0}, {1, 1}}}));
  // (2, 3, 4), elements [5, 19): [5, 8) | [8, 12) | [12, 16) | [16, 19), partial rows at both ends.
  BOOST_TEST((io::element_range_boxes({2, 3, 4}, 5, 14) ==
              V{{{0, 1, 1}, {1, 1, 3}}, {{0, 2, 0}, {1, 1, 4}}, {{1, 0, 0}, {1, 1, 4}}, {{1, 1, 0}, {1, 1, 3}}}));
  BOOST_TEST((io::element_range_boxes({2, 3, 4}, 13, 1) == V{{{1, 0, 1}, {1, 1, 1}}}));  // one element
}

BOOST_AUTO_TEST_CASE(every_range_of_many_shapes) {
  const std::vector<Shape> shapes = {{},           {1},          {7},       {3, 4},       {1, 5},
                                     {5, 1},       {2, 3, 4},    {3, 1, 2}, {2, 1, 3, 2}, {3, 2, 2, 3},
                                     {1, 1, 1, 5}, {2, 3, 1, 4}, {3, 0, 2}, {0},          {4, 5, 1, 3}};
  int64_t ranges = 0;
  for (const Shape& shape : shapes) {
    const int64_t total = numel(shape);
    for (int64_t first = 0; first <= total; ++first)
      for (int64_t count = 0; first + count <= total; ++count, ++ranges) check_boxes(shape, first, count);
  }
  BOOST_TEST(ranges > 3000);
}

BOOST_AUTO_TEST_CASE(out_of_range_throws) {
  check_error([] { io::element_range_boxes({3, 4}, 10, 3); }, {"[10, 10 + 3)", "12 elements", "(3, 4)"});
  check_error([] { io::element_range_boxes({3, 4}, -1, 1); }, {"outside"});
  check_error([] { io::element_range_boxes({3, 4}, 0, -1); }, {"outside"});
  check_error([] { io::element_range_boxes({}, 1, 1); }, {"outside"});
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(serial_files)

BOOST_AUTO_TEST_CASE(round_trip_every_dtype_bit_exactly) {
  TempDir dir;
  const std::string path = dir.file("all.h5");
  const Shape shape = {3, 5, 7};
  {
    H5File f = H5File::create(path);
    BOOST_TEST(!f.is_parallel());
    BOOST_TEST(f.is_writable());
    BOOST_TEST(f.path() == path);
    for (DType dt : kAllDtypes) {
      const std::string name = std::string("/model/") + dtype_name(dt);
      f.create_dataset(name, dt, shape);
      f.write_range(name, 0, pattern(shape, dt, uint64_t(dt)));
    }
    f.close();
    BOOST_TEST(!f.is_open());
    f.close();  // idempotent
  }
  const H5File f = H5File::open(path);
  BOOST_TEST(!f.is_writable());
  for (DType dt : kAllDtypes) {
    const std::string name = std::string("/model/") + dtype_name(dt);
    BOOST_TEST((f.dtype(name) == dt));
    BOOST_TEST(f.shape(name) == shape);
    const Tensor back = f.read(name);
    BOOST_TEST((back.dtype() == dt));
    BOOST_TEST(back.shape() == shape);
    BOOST_TEST(same_bytes(back, pattern(shape, dt, uint64_t(dt))), name);
  }
}

BOOST_AUTO_TEST_CASE(ranges_uneven_pieces_and_edges) {
  TempDir dir;
  const std::string path = dir.file("ranges.h5");
  const Shape shape = {4, 6, 5};  // 120 elements
  const Tensor all = pattern(shape, DType::f32, 7);
  {
    H5File f = H5File::create(path);
    f.create_dataset("/w", DType::f32, shape);
    // Pieces of lengths 1, 0, 13, 29, 30, 0, 47 (crossing rows and planes), out of order.
    const std::vector<std::pair<int64_t, int64_t>> pieces = {{73, 47}, {0, 1},   {1, 0},  {30, 30},
                                                             {1, 29},  {60, 13}, {120, 0}};
    for (auto [lo, n] : pieces) f.write_range("/w", lo, flat_range(all, lo, n));
    // A 0-d dataset and datasets with a zero dimension.
    f.create_dataset("/scalar", DType::f64, {});
    f.write_range("/scalar", 0, Tensor::scalar(2.5, DType::f64));
    f.create_dataset("/empty", DType::i32, {0, 3});
    f.write_range("/empty", 0, Tensor::empty({0}, DType::i32));
  }
  H5File f = H5File::open(path);
  BOOST_TEST(same_bytes(f.read("/w"), all));
  // Another partition, read into tensors of any shape.
  for (auto [lo, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 120}, {5, 50}, {55, 65}, {119, 1}, {64, 0}}) {
    Tensor part = Tensor::empty({n}, DType::f32);
    f.read_range("/w", lo, part);
    BOOST_TEST(same_bytes(part, flat_range(all, lo, n)), "[" << lo << ", +" << n << ")");
  }
  Tensor block = Tensor::empty({2, 15}, DType::f32);  // elements [31, 61) as a (2, 15) tensor
  f.read_range("/w", 31, block);
  BOOST_TEST(same_bytes(block, flat_range(all, 31, 30)));
  BOOST_TEST(f.shape("/scalar") == Shape{});
  BOOST_TEST(f.read("/scalar").item() == 2.5);
  BOOST_TEST(f.shape("/empty") == (Shape{0, 3}));
  BOOST_TEST(f.read("/empty").numel() == 0);
}

// The batch forms do each item as the one-item forms do: datasets created, ranges written
// and read back bit-exactly, shapes, dtypes and checksum attributes; read_ranges calls
// done(i) once per range, in order, with range i already read and range i + 1 not yet.
BOOST_AUTO_TEST_CASE(batches_do_each_item) {
  TempDir dir;
  const std::string path = dir.file("batches.h5");
  const Tensor a = pattern({6, 5}, DType::f32, 1), b = pattern({9}, DType::bf16, 2), c = pattern({}, DType::i64, 3);
  {
    H5File f = H5File::create(path);
    f.create_datasets({{"/a", DType::f32, {6, 5}}, {"/g/b", DType::bf16, {9}}, {"/c", DType::i64, {}}});
    f.set_max_transfer_bytes(8);  // /a in several HDF5 calls
    f.write_ranges({{"/a", 7, flat_range(a, 7, 20)}, {"/g/b", 0, b}, {"/c", 0, c}, {"/a", 0, flat_range(a, 0, 7)}});
    f.write_ranges({{"/a", 27, flat_range(a, 27, 3)}});
    f.write_ranges({});
    f.set_attrs_uint64({"/a", "/g/b"}, "checksum", {0xfedcba9876543210ull, 7});
  }
  const H5File f = H5File::open(path);
  BOOST_TEST((f.shapes({"/c", "/a", "/g/b"}) == std::vector<Shape>{{}, {6, 5}, {9}}));
  BOOST_TEST((f.dtypes({"/g/b", "/c"}) == std::vector<DType>{DType::bf16, DType::i64}));
  BOOST_TEST((f.missing_datasets({"/a", "/g", "/nothing", "/g/b", "/a/x"}) ==
              std::vector<std::string>{"/g", "/nothing", "/a/x"}));
  BOOST_TEST((f.get_attrs_uint64({"/g/b", "/a"}, "checksum") == std::vector<uint64_t>{7, 0xfedcba9876543210ull}));
  std::vector<Tensor> out = {Tensor::zeros({30}, DType::f32), Tensor::zeros({4}, DType::bf16),
                             Tensor::zeros({}, DType::i64)};
  std::vector<size_t> calls;
  f.read_ranges({{"/a", 0, out[0]}, {"/g/b", 5, out[1]}, {"/c", 0, out[2]}}, [&](size_t i) {
    calls.push_back(i);
    const Tensor expected[] = {flat_range(a, 0, 30), flat_range(b, 5, 4), c};
    BOOST_TEST(same_bytes(out[i], expected[i]), "range " << i);
    if (i + 1 < out.size()) BOOST_TEST(!same_bytes(out[i + 1], expected[i + 1]), "range " << i + 1 << " early");
  });
  BOOST_TEST(calls == (std::vector<size_t>{0, 1, 2}));
  check_error([&] { f.read_ranges({{"/a", 0, out[0]}, {"/nothing", 0, out[1]}}); }, {path, "read_range", "/nothing"});
  check_error([&] { f.read_ranges({{"/a", 0, out[0]}, {"/g/b", 6, out[1]}}); }, {path, "/g/b", "[6, 10) are outside"});
  check_error([&] { f.get_attrs_uint64({"/a", "/c"}, "checksum"); }, {path, "/c", "no attribute 'checksum'"});
}

BOOST_AUTO_TEST_CASE(transfers_split_into_rounds) {
  TempDir dir;
  const std::string path = dir.file("rounds.h5");
  const Shape shape = {3, 7, 11};
  const Tensor all = pattern(shape, DType::bf16, 3);
  {
    H5File f = H5File::create(path);
    f.set_max_transfer_bytes(10);  // 5 bf16 elements per HDF5 call
    BOOST_TEST(f.max_transfer_bytes() == 10);
    f.create_dataset("/x", DType::bf16, shape);
    f.write_range("/x", 0, flat_range(all, 0, 100));
    f.write_range("/x", 100, flat_range(all, 100, numel(shape) - 100));
    f.set_max_transfer_bytes(3);  // less than one element: one element per call
    Tensor part = Tensor::empty({17}, DType::bf16);
    f.read_range("/x", 90, part);
    BOOST_TEST(same_bytes(part, flat_range(all, 90, 17)));
    check_error([&] { f.set_max_transfer_bytes(0); }, {"positive"});
  }
  BOOST_TEST(same_bytes(H5File::open(path).read("/x"), all));
}

BOOST_AUTO_TEST_CASE(attributes_of_every_type) {
  TempDir dir;
  const std::string path = dir.file("attrs.h5");
  const std::string big(200000, 'x');  // beyond the 64 KiB of an object header
  {
    H5File f = H5File::create(path);
    f.create_dataset("/model/w", DType::f32, {2, 2});
    f.create_group("/optimizer/state");
    f.set_attr_string("/", "format", "triad-checkpoint");
    f.set_attr_string("/", "empty", "");
    f.set_attr_string("/", "unicode", "héllo wörld ✓");
    f.set_attr_string("/", "big", big);
    f.set_attr_int64("/", "step", -1234567890123);
    f.set_attr_int64("/", "min", std::numeric_limits<int64_t>::min());
    f.set_attr_uint64("/model/w", "checksum", 0xfedcba9876543210ull);
    f.set_attr_double("/model/w", "scale", 0.1);
    f.set_attr_double("/optimizer/state", "lr", -0.0);
    f.set_attr_int64("/model/w", "replaced", 1);
    f.set_attr_string("/model/w", "replaced", "now a string");    // any type replaces any
    BOOST_TEST(f.get_attr_int64("/", "step") == -1234567890123);  // readable while open for writing
  }
  const H5File f = H5File::open(path);
  BOOST_TEST(f.get_attr_string("/", "format") == "triad-checkpoint");
  BOOST_TEST(f.get_attr_string("/", "empty") == "");
  BOOST_TEST(f.get_attr_string("/", "unicode") == "héllo wörld ✓");
  BOOST_TEST(f.get_attr_string("/", "big") == big);
  BOOST_TEST(f.get_attr_int64("/", "step") == -1234567890123);
  BOOST_TEST(f.get_attr_int64("/", "min") == std::numeric_limits<int64_t>::min());
  BOOST_TEST(f.get_attr_uint64("/model/w", "checksum") == 0xfedcba9876543210ull);
  BOOST_TEST(f.get_attr_double("/model/w", "scale") == 0.1);
  const double z = f.get_attr_double("/optimizer/state", "lr");
  BOOST_TEST((z == 0.0 && std::signbit(z)));
  BOOST_TEST(f.get_attr_string("/model/w", "replaced") == "now a string");
  BOOST_TEST(f.has_attr("/", "step"));
  BOOST_TEST(!f.has_attr("/", "nope"));
  BOOST_TEST(f.has_attr("/model/w", "scale"));
  BOOST_TEST((f.list_attrs("/") == std::vector<std::string>{"big", "empty", "format", "min", "step", "unicode"}));
  BOOST_TEST((f.list_attrs("/model/w") == std::vector<std::string>{"checksum", "replaced", "scale"}));
  BOOST_TEST(f.list_attrs("/model").empty());
  BOOST_TEST((f.attr_type("/", "format") == AttrType::string));
  BOOST_TEST((f.attr_type("/", "step") == AttrType::int64));
  BOOST_TEST((f.attr_type("/model/w", "checksum") == AttrType::uint64));
  BOOST_TEST((f.attr_type("/model/w", "scale") == AttrType::f64));

  check_error([&] { f.get_attr_int64("/", "nope"); }, {path, "'/' has no attribute 'nope'"});
  check_error([&] { f.get_attr_int64("/", "format"); }, {path, "'format'", "a string", "expected a signed integer"});
  check_error([&] { f.get_attr_uint64("/", "step"); }, {path, "'step'", "signed 64-bit", "expected an unsigned"});
  check_error([&] { f.get_attr_double("/", "step"); }, {path, "'step'", "expected a float"});
  check_error([&] { f.get_attr_string("/model/w", "scale"); }, {path, "'scale'", "expected a string"});
  check_error([&] { f.get_attr_string("/model/nothing", "x"); }, {path, "no group or dataset '/model/nothing'"});
  check_error([&] { H5File::open(path).set_attr_int64("/", "x", 1); }, {path, "read-only"});
}

BOOST_AUTO_TEST_CASE(list_datasets_recursively_sorted) {
  TempDir dir;
  H5File f = H5File::create(dir.file("list.h5"));
  BOOST_TEST(f.list_datasets().empty());
  for (const char* name : {"/model/h.1.mlp.w", "/model/h.0.attn.weight", "/step", "/model/h.0.attn.bias",
                           "/optimizer/exp_avg/h.0", "/model/wte"})
    f.create_dataset(name, DType::f32, {2});
  f.create_group("/empty/group");
  f.create_group("/model");  // exists: nothing
  BOOST_TEST((f.list_datasets() == std::vector<std::string>{"/model/h.0.attn.bias", "/model/h.0.attn.weight",
                                                            "/model/h.1.mlp.w", "/model/wte", "/optimizer/exp_avg/h.0",
                                                            "/step"}));
  BOOST_TEST(f.has("/model/wte"));
  BOOST_TEST(!f.has("/model"));
  BOOST_TEST(!f.has("/model/nope"));
  BOOST_TEST(!f.has("/nope/deeper/still"));
  BOOST_TEST(!f.has("/step/below"));  // a path through a dataset
  BOOST_TEST(f.has_group("/model"));
  BOOST_TEST(f.has_group("/empty/group"));
  BOOST_TEST(!f.has_group("/step"));
  BOOST_TEST(f.has_group("/"));
}

BOOST_AUTO_TEST_CASE(errors_name_the_file_and_dataset) {
  TempDir dir;
  const std::string path = dir.file("e.h5");
  {
    H5File f = H5File::create(path);
    f.create_dataset("/model/w", DType::bf16, {4, 5});
    f.write_range("/model/w", 0, pattern({4, 5}, DType::bf16, 1));
    check_error([&] { f.create_dataset("/model/w", DType::f32, {1}); }, {path, "'/model/w'", "already exists"});
    check_error([&] { f.create_dataset("model/x", DType::f32, {1}); }, {path, "'model/x'", "absolute"});
    check_error([&] { f.create_dataset("/a//b", DType::f32, {1}); }, {path, "'/a//b'"});
    check_error([&] { f.create_dataset("/neg", DType::f32, {2, -1}); }, {path, "'/neg'", "negative"});
    check_error([&] { f.write_range("/model/w", 15, Tensor::empty({6}, DType::bf16)); },
                {path, "'/model/w'", "[15, 21)", "20 elements"});
    check_error([&] { f.write_range("/model/w", -1, Tensor::empty({1}, DType::bf16)); }, {path, "'/model/w'"});
    check_error([&] { f.write_range("/model/w", 0, Tensor::empty({2}, DType::f32)); },
                {path, "'/model/w'", "holds bf16", "tensor f32"});
    check_error([&] { f.write_range("/model/nope", 0, Tensor::empty({2}, DType::f32)); },
                {path, "no dataset '/model/nope'"});
    check_error([&] { f.write_range("/model", 0, Tensor::empty({2}, DType::f32)); },
                {path, "'/model' is not a dataset"});
    const Tensor strided = Tensor::from_storage(Tensor::empty({4}, DType::bf16).storage(), {2}, {2}, 0, DType::bf16);
    check_error([&] { f.write_range("/model/w", 0, strided); }, {path, "'/model/w'", "contiguous"});
  }
  const std::string missing = dir.file("missing.h5");
  check_error([&] { H5File::open(missing); }, {missing, "opening the file", "unable to open file"});
  check_error([&] { H5File::create(dir.file("no/such/dir/x.h5")); },
              {dir.file("no/such/dir/x.h5"), "creating the file"});
  const std::string text = dir.write("text.h5", std::string(4096, 'a'));
  check_error([&] { H5File::open(text); }, {text, "opening the file"});
  const std::string bytes = test::read_bytes(path);
  const std::string cut = dir.write("cut.h5", bytes.substr(0, bytes.size() / 2));
  check_error([&] { H5File::open(cut); }, {cut, "opening the file", "truncated"});

  const H5File f = H5File::open(path);
  check_error([&] { f.read("/model/nope"); }, {path, "'/model/nope'"});
  check_error([&] { f.shape("/nope"); }, {path, "no dataset '/nope'"});
  Tensor out = Tensor::empty({20}, DType::f16);
  check_error([&] { f.read_range("/model/w", 0, out); }, {path, "read_range '/model/w'", "holds bf16", "tensor f16"});
  Tensor three = Tensor::empty({3}, DType::bf16);
  check_error([&] { f.read_range("/model/w", 18, three); }, {path, "'/model/w'", "[18, 21)"});
  check_error([&] { H5File::open(path).write_range("/model/w", 0, three); }, {path, "read-only"});
  H5File closed = H5File::open(path);
  closed.close();
  check_error([&] { closed.list_datasets(); }, {path, "closed file"});
}

BOOST_AUTO_TEST_CASE(files_from_other_tools) {
  // h5import (hdf5-tools) writes a uint16 dataset, which triad has no dtype for, and a
  // big-endian f32 one, which reads as f32 (HDF5 swaps the bytes).
  TempDir dir;
  const std::string u16_cfg = dir.write("u16.cfg",
                                        "PATH /foreign/u16\nINPUT-CLASS TEXTIN\nRANK 1\nDIMENSION-SIZES 3\n"
                                        "OUTPUT-CLASS UIN\nOUTPUT-SIZE 16\nOUTPUT-ARCHITECTURE STD\n"
                                        "OUTPUT-BYTE-ORDER LE\n");
  const std::string be_cfg = dir.write("be.cfg",
                                       "PATH /foreign/f32be\nINPUT-CLASS TEXTFP\nRANK 2\nDIMENSION-SIZES 2 2\n"
                                       "OUTPUT-CLASS FP\nOUTPUT-SIZE 32\nOUTPUT-ARCHITECTURE IEEE\n"
                                       "OUTPUT-BYTE-ORDER BE\n");
  const std::string u16_txt = dir.write("u16.txt", "1 2 3\n"), f_txt = dir.write("f.txt", "1.5 -2 3.25 4\n");
  const std::string path = dir.file("foreign.h5");
  const std::string cmd = "h5import '" + u16_txt + "' -c '" + u16_cfg + "' '" + f_txt + "' -c '" + be_cfg + "' -o '" +
                          path + "' > /dev/null 2>&1";
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0);
  const H5File f = H5File::open(path);
  BOOST_TEST((f.list_datasets() == std::vector<std::string>{"/foreign/f32be", "/foreign/u16"}));
  BOOST_TEST((f.dtype("/foreign/f32be") == DType::f32));
  BOOST_TEST((f.read("/foreign/f32be").to_vector<float>() == std::vector<float>{1.5f, -2.f, 3.25f, 4.f}));
  check_error([&] { f.dtype("/foreign/u16"); },
              {path, "'/foreign/u16'", "an unsigned 16-bit integer", "none of f32, f64, bf16, f16, i64, i32, i8"});
  check_error([&] { f.read("/foreign/u16"); }, {path, "'/foreign/u16'", "unsigned 16-bit"});
}

BOOST_AUTO_TEST_CASE(self_communicator_gives_a_serial_file) {
  TempDir dir;
  parallel::SelfCommunicator self;
  H5File f = H5File::create(dir.file("self.h5"), self);
  BOOST_TEST(!f.is_parallel());
  f.create_dataset("/x", DType::i64, {2});
  f.write_range("/x", 0, Tensor::from_vector<int64_t>({5, -6}, {2}));
  f.close();
  BOOST_TEST((H5File::open(dir.file("self.h5"), self).read("/x").to_vector<int64_t>() == std::vector<int64_t>{5, -6}));
}

BOOST_AUTO_TEST_CASE(move_only) {
  static_assert(!std::is_copy_constructible_v<H5File>);
  static_assert(std::is_nothrow_move_constructible_v<H5File>);
  TempDir dir;
  H5File a = H5File::create(dir.file("a.h5"));
  a.create_dataset("/a", DType::f32, {1});
  H5File moved(std::move(a));
  BOOST_TEST(moved.has("/a"));
  H5File b = H5File::create(dir.file("b.h5"));
  b = std::move(moved);  // closes b.h5
  BOOST_TEST(b.path() == dir.file("a.h5"));
  BOOST_TEST(H5File::open(dir.file("b.h5")).list_datasets().empty());
}

BOOST_AUTO_TEST_CASE(h5dump_reads_what_we_write) {
  TempDir dir;
  const std::string path = dir.file("dump.h5");
  {
    H5File f = H5File::create(path);
    for (DType dt : kAllDtypes) {
      const std::string name = std::string("/model/") + dtype_name(dt);
      f.create_dataset(name, dt, {2, 3});
      Tensor values = Tensor::from_vector<double>({1, -2, 3, 0.5, 64, -100}, {2, 3});
      f.write_range(name, 0, ops::to(values, dt));
    }
    f.create_dataset("/scalar", DType::f32, {});
    f.write_range("/scalar", 0, Tensor::scalar(1.5));
    f.set_attr_string("/", "format", "triad-checkpoint");
    f.set_attr_int64("/", "step", 42);
    f.set_attr_uint64("/model/f32", "checksum", 7);
    f.set_attr_double("/model/f32", "scale", 0.25);
  }
  const std::string out = dir.file("dump.txt");
  const int rc = std::system(("h5dump '" + path + "' > '" + out + "' 2>&1").c_str());
  const std::string text = test::read_bytes(out);
  BOOST_TEST_REQUIRE(rc == 0, "h5dump failed:\n" << text);
  for (const char* s : {"\"triad-checkpoint\"", "DATASET \"bf16\"", "DATASET \"f16\"", "H5T_STD_I64LE",
                        "H5T_IEEE_F32LE", "H5T_STD_I8LE", "42"})
    BOOST_TEST(text.find(s) != std::string::npos, "h5dump output lacks " << s);
  // bf16 and f16 are floats to h5dump: the values print as numbers.
  const size_t bf = text.find("DATASET \"bf16\"");
  BOOST_TEST(text.find("-100", bf) != std::string::npos);
}

// The values h5dump prints for dataset `name` (index-free, unwrapped).
std::vector<double> h5dump_values(const TempDir& dir, const std::string& path, const std::string& name) {
  const std::string out = dir.file("values.txt");
  const int rc = std::system(("h5dump -y -w 0 -d '" + name + "' '" + path + "' > '" + out + "' 2>&1").c_str());
  const std::string text = test::read_bytes(out);
  BOOST_TEST_REQUIRE(rc == 0, "h5dump failed:\n" << text);
  const size_t data = text.find("DATA {");
  BOOST_TEST_REQUIRE(data != std::string::npos, text);
  std::istringstream in(text.substr(data + 6, text.find('}', data) - data - 6));
  std::vector<double> values;
  for (std::string item; std::getline(in, item, ',');) values.push_back(std::stod(item));
  return values;
}

// A ZeRO shard's shape of batch: the tail of /s/a, all of /s/b and the head of /s/c, views
// of one buffer, written in one batch. HDF5's own reader (h5dump) must find every value
// where the datasets' elements are.
BOOST_AUTO_TEST_CASE(a_shard_across_datasets_lands_where_hdf5_reads_it) {
  TempDir dir;
  const std::string path = dir.file("shard.h5");
  std::vector<float> all(13);
  for (size_t k = 0; k < all.size(); ++k) all[k] = float(k) + 0.5f;
  const Tensor flat = Tensor::from_vector(all, {13});
  const auto part = [&](int64_t first, int64_t count) { return ops::narrow(flat, 0, first, count); };
  {
    H5File f = H5File::create(path);
    f.create_datasets({{"/s/a", DType::f32, {2, 3}}, {"/s/b", DType::f32, {4}}, {"/s/c", DType::f32, {3}}});
    f.write_ranges({{"/s/a", 4, part(4, 2)}, {"/s/b", 0, part(6, 4)}, {"/s/c", 0, part(10, 1)}});
    f.write_ranges({{"/s/a", 0, part(0, 4)}, {"/s/c", 1, part(11, 2)}});
  }
  BOOST_TEST(h5dump_values(dir, path, "/s/a") == (std::vector<double>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5}));
  BOOST_TEST(h5dump_values(dir, path, "/s/b") == (std::vector<double>{6.5, 7.5, 8.5, 9.5}));
  BOOST_TEST(h5dump_values(dir, path, "/s/c") == (std::vector<double>{10.5, 11.5, 12.5}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(checksums)

BOOST_AUTO_TEST_CASE(split_ranges_sum_to_the_whole) {
  for (DType dt : kAllDtypes) {
    const Tensor t = pattern({1000}, dt, 11);
    const int es = int(element_size(dt));
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    const uint64_t whole = io::range_checksum(p, 0, 1000, es);
    BOOST_TEST(whole == io::tensor_checksum(t));
    for (int64_t cut : {0, 1, 333, 999, 1000}) {
      const uint64_t parts = io::range_checksum(p, 0, cut, es) + io::range_checksum(p + cut * es, cut, 1000 - cut, es);
      BOOST_TEST(parts == whole, dtype_name(dt) << " cut at " << cut);
    }
    uint64_t ones = 0;  // one element at a time
    for (int64_t k = 0; k < 1000; ++k) ones += io::range_checksum(p + k * es, k, 1, es);
    BOOST_TEST(ones == whole);
    BOOST_TEST(io::tensor_checksum(flat_range(t, 400, 100), 400) == io::range_checksum(p + 400 * es, 400, 100, es));
  }
}

// The terms of elements [0, k).
uint64_t p_terms(const uint32_t* p, int64_t k) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += io::checksum_mix(i, p[i]);
  return sum;
}

BOOST_AUTO_TEST_CASE(large_counts_run_in_parallel_and_compose) {
  const int64_t n = 3 << 18;  // above the one-thread limit
  const Tensor t = pattern({n}, DType::f32, 5);
  const auto* p = static_cast<const uint32_t*>(t.raw_data());
  uint64_t serial = 0;
  for (int64_t k = 0; k < n; ++k) serial += io::checksum_mix(k, p[k]);
  BOOST_TEST(io::tensor_checksum(t) == serial);
  BOOST_TEST(io::range_checksum(p, 0, 100000, 4) + io::range_checksum(p + 100000, 100000, n - 100000, 4) == serial);
  BOOST_TEST(io::tensor_checksum(t, 0, io::ChecksumThreads::calling) == serial);
  BOOST_TEST(io::range_checksum(p + 7, 7, n - 7, 4, io::ChecksumThreads::calling) == serial - p_terms(p, 7));
}

BOOST_AUTO_TEST_CASE(every_flipped_byte_changes_it) {
  for (DType dt : kAllDtypes) {
    Tensor t = pattern({2, 7}, dt, 2);
    const uint64_t base = io::tensor_checksum(t);
    auto* p = static_cast<unsigned char*>(t.raw_data());
    std::set<uint64_t> seen = {base};
    for (size_t b = 0; b < t.nbytes(); ++b) {
      for (unsigned char flip : {0x01, 0x80, 0xff}) {
        p[b] ^= flip;
        const uint64_t c = io::tensor_checksum(t);
        BOOST_TEST(c != base, dtype_name(dt) << " byte " << b << " ^ " << int(flip));
        seen.insert(c);
        p[b] ^= flip;
      }
    }
    BOOST_TEST(seen.size() == 1 + 3 * t.nbytes());  // all distinct, too
    BOOST_TEST(io::tensor_checksum(t) == base);
    // The same bits at other positions (a swap of two elements) change it as well.
    Tensor swapped = pattern({2, 7}, dt, 2);
    const size_t es = element_size(dt);
    auto* q = static_cast<unsigned char*>(swapped.raw_data());
    std::vector<unsigned char> tmp(q, q + es);
    std::memcpy(q, q + es, es);
    std::memcpy(q + es, tmp.data(), es);
    if (std::memcmp(q, q + es, es) != 0) BOOST_TEST(io::tensor_checksum(swapped) != base);
  }
}

BOOST_AUTO_TEST_CASE(values_are_pinned) {
  // Checkpoints store checksums: the function must not change between versions.
  BOOST_TEST(io::checksum_mix(0, 0) == 0u);
  std::vector<int32_t> iota(100);
  for (int i = 0; i < 100; ++i) iota[size_t(i)] = i;
  BOOST_TEST(io::range_checksum(iota.data(), 0, 100, 4) == 6699059856009311643ull);
  BOOST_TEST(io::range_checksum(iota.data(), 1000, 100, 4) == 10218632375190595915ull);
  BOOST_TEST(io::checksum_mix(1, 1) == 16490336266968443936ull);
}

BOOST_AUTO_TEST_CASE(bad_arguments) {
  int32_t x = 0;
  check_error([&] { io::range_checksum(&x, 0, 1, 3); }, {"element_size", "3"});
  check_error([&] { io::range_checksum(&x, -1, 1, 4); }, {"first_index"});
  check_error([&] { io::range_checksum(&x, 0, -1, 4); }, {"count"});
  BOOST_TEST(io::range_checksum(nullptr, 5, 0, 4) == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_h5file
