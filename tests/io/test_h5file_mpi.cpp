// H5File in parallel mode: the ranks create one file collectively, each writes its own
// uneven element range of several N-d datasets (some ranks none, some in several transfer
// rounds), and they read the file back through another partition, bit-exactly against the
// closed-form contents; attributes set collectively read back everywhere; the range
// checksums of any partition sum to the serial checksum; an argument error on one rank,
// or ranks that disagree, throw on every rank instead of hanging.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>

#include "io/checksum.h"
#include "io/h5file.h"
#include "parallel/counting_communicator.h"
#include "parallel/runtime.h"
#include "support/check.h"
#include "tensor/random.h"

BOOST_AUTO_TEST_SUITE(test_h5file_mpi)

using namespace triad;
using io::H5Access;
using io::H5File;
namespace fs = std::filesystem;

namespace {

struct Spec {
  const char* name;
  DType dtype;
  Shape shape;
};
const std::vector<Spec> kSpecs = {
    {"/model/wte", DType::f32, {37}},
    {"/model/h.0.attn.weight", DType::bf16, {5, 7, 3}},
    {"/model/h.0.mlp.bias", DType::f16, {13, 11}},
    {"/optimizer/exp_avg", DType::f64, {2, 3, 4, 5}},
    {"/optimizer/steps", DType::i64, {3, 1, 4}},
    {"/data/tokens", DType::i32, {6, 9}},
    {"/data/mask", DType::i8, {4, 25}},
    {"/scalar", DType::f64, {}},
    {"/empty", DType::f32, {0, 4}},
};

uint64_t seed_of(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ uint64_t(uint8_t(c))) * 1099511628211ull;
  return h;
}

// Elements [first, first + n) of a dataset's closed-form contents: element k has the raw
// bits random_bits(seed, k) (the low bytes), so every bit pattern must survive.
Tensor contents(const Spec& s, int64_t first, int64_t n) {
  Tensor t = Tensor::empty({n}, s.dtype);
  const size_t es = element_size(s.dtype);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t bits = random_bits(seed_of(s.name), uint64_t(first + k));
    std::memcpy(p + size_t(k) * es, &bits, es);
  }
  return t;
}

// Rank r's range of `total` elements when the ranks take shares proportional to weight(r)
// (weights may be 0: that rank has no elements).
template <class W>
std::pair<int64_t, int64_t> share(int64_t total, int rank, int size, W weight) {
  int64_t sum = 0, before = 0;
  for (int r = 0; r < size; ++r) {
    sum += weight(r);
    if (r < rank) before += weight(r);
  }
  const int64_t lo = total * before / sum, hi = total * (before + weight(rank)) / sum;
  return {lo, hi - lo};
}
// Uneven, with empty ranks (every third rank from 1), for writing ...
std::pair<int64_t, int64_t> write_share(int64_t total, int rank, int size) {
  return share(total, rank, size, [](int r) { return r % 3 == 1 ? 0 : r + 1; });
}
// ... and a different partition for reading (descending weights; the last rank empty).
std::pair<int64_t, int64_t> read_share(int64_t total, int rank, int size) {
  return share(total, rank, size, [size](int r) { return r == size - 1 ? 0 : 2 * (size - r) + 1; });
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// A folder every rank names alike (rank 0's pid), made by rank 0; removed by the last user.
class SharedDir {
 public:
  explicit SharedDir(parallel::Communicator& comm) : comm_(comm) {
    Tensor pid = Tensor::from_vector<int64_t>({comm.rank() == 0 ? int64_t(::getpid()) : 0}, {1});
    comm.broadcast(pid, 0)->wait();
    path_ = fs::temp_directory_path() /
            ("triad_h5_mpi_" + std::to_string(pid.to_vector<int64_t>()[0]) + "_np" + std::to_string(comm.size()));
    if (comm.rank() == 0) fs::create_directories(path_);
    comm.barrier();
  }
  ~SharedDir() {
    comm_.barrier();
    if (comm_.rank() == 0) fs::remove_all(path_);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  parallel::Communicator& comm_;
  fs::path path_;
};

}  // namespace

BOOST_AUTO_TEST_CASE(write_one_partition_read_another) {
  auto world = parallel::world();
  const int rank = world->rank(), size = world->size();
  SharedDir dir(*world);
  const std::string path = dir.file("ckpt.h5");
  {
    H5File f = H5File::create(path, *world);
    BOOST_TEST(f.is_parallel());
    if (rank == 0) f.set_max_transfer_bytes(40);  // rank 0 writes in several rounds; the others join them
    for (const Spec& s : kSpecs) f.create_dataset(s.name, s.dtype, s.shape);
    for (const Spec& s : kSpecs) {
      const auto [lo, n] = write_share(numel(s.shape), rank, size);
      f.write_range(s.name, lo, contents(s, lo, n));
    }
    f.set_attr_string("/", "format", "triad-checkpoint");
    f.set_attr_int64("/", "world_size", size);
    f.set_attr_uint64("/model/wte", "checksum", 0x8000000000000001ull);
    f.set_attr_double("/optimizer/exp_avg", "beta1", 0.9);
    f.flush();
    f.close();
  }
  {
    const H5File f = H5File::open(path, *world);
    BOOST_TEST(!f.is_writable());
    std::vector<std::string> names;
    for (const Spec& s : kSpecs) names.push_back(s.name);
    std::sort(names.begin(), names.end());
    BOOST_TEST(f.list_datasets() == names);
    for (const Spec& s : kSpecs) {
      BOOST_TEST((f.dtype(s.name) == s.dtype));
      BOOST_TEST(f.shape(s.name) == s.shape);
      const auto [lo, n] = read_share(numel(s.shape), rank, size);
      Tensor part = Tensor::empty({n}, s.dtype);
      f.read_range(s.name, lo, part);
      BOOST_TEST(same_bytes(part, contents(s, lo, n)), s.name << " [" << lo << ", +" << n << ") on rank " << rank);
    }
    const Tensor whole = f.read("/model/h.0.attn.weight");  // every rank reads all of it
    BOOST_TEST(same_bytes(whole, contents(kSpecs[1], 0, 105)));
    BOOST_TEST(f.get_attr_string("/", "format") == "triad-checkpoint");
    BOOST_TEST(f.get_attr_int64("/", "world_size") == size);
    BOOST_TEST(f.get_attr_uint64("/model/wte", "checksum") == 0x8000000000000001ull);
    BOOST_TEST(f.get_attr_double("/optimizer/exp_avg", "beta1") == 0.9);
  }
  world->barrier();
  if (rank == 0) {  // the same file through the serial driver, whole
    const H5File f = H5File::open(path);
    for (const Spec& s : kSpecs) BOOST_TEST(same_bytes(f.read(s.name), contents(s, 0, numel(s.shape))), s.name);
  }
}

BOOST_AUTO_TEST_CASE(read_write_reopened_and_counting_communicator) {
  auto world = parallel::world();
  const int rank = world->rank(), size = world->size();
  parallel::CountingCommunicator counting(world);  // an MPI communicator behind a wrapper
  SharedDir dir(*world);
  const std::string path = dir.file("rw.h5");
  const Spec s{"/x", DType::f32, {size, 3}};
  {
    H5File f = H5File::create(path, counting);
    f.create_dataset(s.name, s.dtype, s.shape);
    f.write_range(s.name, 3 * rank, contents(s, 3 * rank, 3));  // row r by rank r
  }
  {
    H5File f = H5File::open(path, *world, H5Access::read_write);
    const auto [lo, n] = read_share(3 * size, rank, size);
    f.write_range(s.name, lo, contents(s, lo, n));  // the same bits again, another partition
    f.set_attr_int64(s.name, "rewritten", 1);
  }
  const H5File f = H5File::open(path, *world);
  BOOST_TEST(same_bytes(f.read(s.name), contents(s, 0, 3 * size)));
  BOOST_TEST(f.get_attr_int64(s.name, "rewritten") == 1);
}

BOOST_AUTO_TEST_CASE(checksum_partials_sum_to_the_serial_checksum) {
  auto world = parallel::world();
  const int rank = world->rank(), size = world->size();
  for (const Spec& s : kSpecs) {
    const int64_t total = numel(s.shape);
    const uint64_t serial = io::tensor_checksum(contents(s, 0, total));
    for (auto part : {write_share, read_share}) {
      const auto [lo, n] = part(total, rank, size);
      const Tensor mine = Tensor::from_vector<int64_t>({int64_t(io::tensor_checksum(contents(s, lo, n), lo))}, {1});
      Tensor all = Tensor::empty({size}, DType::i64);
      world->all_gather(mine, all)->wait();
      uint64_t sum = 0;  // wrapping uint64 addition
      for (int64_t v : all.to_vector<int64_t>()) sum += uint64_t(v);
      BOOST_TEST(sum == serial, s.name);
    }
  }
}

// Every dataset created, written and read in one batch each (as a checkpoint does), with
// the ranks' uneven ranges; the checksum attributes set and read as a batch.
BOOST_AUTO_TEST_CASE(batches_write_one_partition_read_another) {
  auto world = parallel::world();
  const int rank = world->rank(), size = world->size();
  SharedDir dir(*world);
  const std::string path = dir.file("batches.h5");
  std::vector<std::string> names;
  for (const Spec& s : kSpecs) names.push_back(s.name);
  std::vector<uint64_t> sums;
  for (const Spec& s : kSpecs) sums.push_back(io::tensor_checksum(contents(s, 0, numel(s.shape))));
  {
    H5File f = H5File::create(path, *world);
    if (rank == 0) f.set_max_transfer_bytes(40);
    std::vector<H5File::DatasetSpec> specs;
    std::vector<H5File::TensorRange> writes;
    for (const Spec& s : kSpecs) {
      specs.push_back({s.name, s.dtype, s.shape});
      const auto [lo, n] = write_share(numel(s.shape), rank, size);
      writes.push_back({s.name, lo, contents(s, lo, n)});
    }
    f.create_datasets(specs);
    f.write_ranges(writes);
    f.set_attrs_uint64(names, "checksum", sums);
  }
  const H5File f = H5File::open(path, *world);
  std::vector<H5File::TensorRange> reads;
  for (const Spec& s : kSpecs) {
    const auto [lo, n] = read_share(numel(s.shape), rank, size);
    reads.push_back({s.name, lo, Tensor::empty({n}, s.dtype)});
  }
  size_t done = 0;
  f.read_ranges(reads, [&](size_t i) { BOOST_TEST(i == done++); });
  BOOST_TEST(done == kSpecs.size());
  for (size_t i = 0; i < kSpecs.size(); ++i)
    BOOST_TEST(same_bytes(reads[i].data, contents(kSpecs[i], reads[i].first, reads[i].data.numel())),
               kSpecs[i].name << " on rank " << rank);
  BOOST_TEST(f.get_attrs_uint64(names, "checksum") == sums);
  std::vector<Shape> shapes;
  for (const Spec& s : kSpecs) shapes.push_back(s.shape);
  BOOST_TEST(f.shapes(names) == shapes);
}

// A batch one rank gets wrong is agreed on before any byte moves: every rank throws, and
// nothing of the batch reaches the file, not even the other ranks' valid ranges.
BOOST_AUTO_TEST_CASE(a_bad_batch_on_one_rank_writes_nothing) {
  auto world = parallel::world();
  const int rank = world->rank(), size = world->size();
  SharedDir dir(*world);
  const std::string path = dir.file("bad_batch.h5");
  H5File f = H5File::create(path, *world);
  f.create_datasets({{"/v", DType::f32, {size}}, {"/w", DType::f32, {4, 4}}});
  f.write_ranges({{"/v", rank, Tensor::ones({1})}, {"/w", 0, Tensor::ones({rank == 0 ? 16 : 0})}});
  const std::string msg = test::error_message([&] {
    f.write_ranges({{"/v", rank, Tensor::zeros({1})}, {"/w", rank == 1 ? 15 : 0, Tensor::zeros({rank == 1 ? 2 : 1})}});
  });
  if (rank == 1)
    BOOST_TEST(msg.find("'/w': elements [15, 17) are outside") != std::string::npos, msg);
  else
    BOOST_TEST(msg.find("'2 datasets' failed on another rank") != std::string::npos, msg);
  BOOST_TEST(f.read("/v").to_vector<float>() == std::vector<float>(size_t(size), 1.f));
  BOOST_TEST(f.read("/w").to_vector<float>() == std::vector<float>(16, 1.f));
  // Ranks whose batches name different datasets, or differ in length.
  const std::string differ = test::error_message([&] {
    f.create_datasets({{"/x", DType::f32, {2}}, {rank == 0 ? "/y" : "/z", DType::f32, {2}}});
  });
  BOOST_TEST(differ.find("different arguments") != std::string::npos, differ);
  const std::string length = test::error_message([&] {
    std::vector<std::string> objects = {"/v"};
    if (rank == 0) objects.push_back("/w");
    f.set_attrs_uint64(objects, "checksum", std::vector<uint64_t>(objects.size(), 1));
  });
  BOOST_TEST(length.find("different arguments") != std::string::npos, length);
  BOOST_TEST(f.list_datasets() == (std::vector<std::string>{"/v", "/w"}));
  f.close();
}

BOOST_AUTO_TEST_CASE(an_error_on_one_rank_throws_on_every_rank) {
  auto world = parallel::world();
  const int rank = world->rank();
  SharedDir dir(*world);
  const std::string path = dir.file("errors.h5");
  H5File f = H5File::create(path, *world);
  f.create_dataset("/w", DType::f32, {4, 4});
  // Rank 1 asks for elements past the end: every rank throws, none hangs.
  const std::string msg = test::error_message([&] {
    const int64_t first = rank == 1 ? 14 : 0;
    f.write_range("/w", first, Tensor::zeros({rank == 1 ? 3 : 1}));
  });
  if (rank == 1)
    BOOST_TEST(msg.find("[14, 17) are outside") != std::string::npos, msg);
  else
    BOOST_TEST(msg.find("'/w' failed on another rank") != std::string::npos, msg);
  BOOST_TEST(msg.find(path) != std::string::npos, msg);
  // Ranks that name different datasets.
  const std::string name = rank == 0 ? "/a" : "/b";
  const std::string differ = test::error_message([&] { f.create_dataset(name, DType::f32, {2}); });
  BOOST_TEST(differ.find("different arguments") != std::string::npos, differ);
  // A wrong dtype on one rank.
  const std::string dt =
      test::error_message([&] { f.read_range("/w", 0, Tensor::empty({0}, rank == 0 ? DType::f64 : DType::f32)); });
  BOOST_TEST(dt.find(rank == 0 ? "holds f32, the tensor f64" : "failed on another rank") != std::string::npos, dt);
  // A missing file, opened by every rank.
  const std::string missing = dir.file("missing.h5");
  const std::string open_msg = test::error_message([&] { H5File::open(missing, *world); });
  BOOST_TEST(open_msg.find("HDF5 file '" + missing + "': opening the file failed") != std::string::npos, open_msg);
  // The file is still usable afterwards.
  f.write_range("/w", 0, Tensor::ones({rank == 0 ? 16 : 0}));
  BOOST_TEST(f.read("/w").to_vector<float>() == std::vector<float>(16, 1.f));
  BOOST_TEST(f.list_datasets() == std::vector<std::string>{"/w"});
  f.close();
}

BOOST_AUTO_TEST_SUITE_END()  // test_h5file_mpi
