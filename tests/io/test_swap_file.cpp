// SwapFile (io/swap_file.h): buffers written and read back byte for byte through each path
// (O_DIRECT or the page cache; kernel aio or pread/pwrite threads) and each aio setting
// that changes how requests are cut, queued and submitted; the file has its full size at
// once, replaces a leftover, is locked against a second user and goes with the object;
// a truncated file, a missing folder and bad aio values are errors that name them.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>

#include "io/swap_file.h"
#include "support/check.h"
#include "support/files.h"

BOOST_AUTO_TEST_SUITE(test_swap_file)

using namespace triad;
using io::AioConfig;
using io::SwapFile;

namespace {

constexpr int64_t kPage = io::kSwapAlignment;

// `bytes` of a pattern that differs from page to page and run to run (`seed`).
io::AlignedBuffer pattern(int64_t bytes, unsigned seed) {
  io::AlignedBuffer b = io::aligned_buffer(bytes);
  auto* p = static_cast<unsigned char*>(b.get());
  for (int64_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>((i * 131 + i / kPage * 7 + seed) & 0xff);
  return b;
}

bool same(const void* a, const void* b, int64_t bytes) { return std::memcmp(a, b, size_t(bytes)) == 0; }

}  // namespace

BOOST_AUTO_TEST_CASE(buffers_round_trip_through_every_path_and_setting) {
  test::TempDir dir;
  const std::vector<std::pair<std::string, AioConfig>> configs = {
      {"defaults", {}},
      {"page requests, 2 in flight, 3 threads", {.block_size = kPage, .queue_depth = 2, .intra_op_parallelism = 3}},
      {"single submit, batches", {.block_size = 2 * kPage, .queue_depth = 3, .single_submit = true, .overlap_events = false}},
  };
  for (bool direct : {true, false})
    for (bool kernel_aio : {true, false})
      for (const auto& [what, config] : configs) {
        BOOST_TEST_CONTEXT(what << (direct ? ", O_DIRECT" : ", page cache") << (kernel_aio ? ", libaio" : ", pread/pwrite")) {
          const int64_t bytes = 13 * kPage;  // requests that do not divide it
          SwapFile file(dir.file("swap"), 2 * bytes, config, {.direct = direct, .kernel_aio = kernel_aio});
          const io::AlignedBuffer a = pattern(bytes, 1), b = pattern(bytes, 2);
          file.write(0, a.get(), bytes);
          file.write(bytes, b.get(), bytes);
          const io::AlignedBuffer back = io::aligned_buffer(bytes);
          file.read(bytes, back.get(), bytes);
          BOOST_TEST(same(back.get(), b.get(), bytes));
          file.read(0, back.get(), bytes);
          BOOST_TEST(same(back.get(), a.get(), bytes));
          file.read(3 * kPage, back.get(), kPage);  // a part, at an offset
          BOOST_TEST(same(back.get(), static_cast<char*>(a.get()) + 3 * kPage, kPage));
        }
      }
}

BOOST_AUTO_TEST_CASE(the_file_has_its_size_replaces_a_leftover_and_goes_with_the_object) {
  test::TempDir dir;
  const std::string path = dir.write("swap", std::string(3 * kPage + 5, 'x'));  // a leftover of another run
  {
    SwapFile file(path, 2 * kPage, {});
    BOOST_TEST(std::filesystem::file_size(path) == uint64_t(2 * kPage));
    const io::AlignedBuffer back = pattern(2 * kPage, 3);
    file.read(0, back.get(), 2 * kPage);  // nothing of the leftover: zeros
    const std::vector<char> zeros(size_t(2 * kPage), 0);
    BOOST_TEST(same(back.get(), zeros.data(), 2 * kPage));
    file.grow(5 * kPage);
    BOOST_TEST(file.size() == 5 * kPage);
    BOOST_TEST(std::filesystem::file_size(path) == uint64_t(5 * kPage));
    // A second user of the same file is refused instead of overwriting it.
    BOOST_TEST(test::error_message([&] { SwapFile again(path, kPage, {}); }) ==
               "swap file '" + path + "': another process is using it (it is locked)");
  }
  BOOST_TEST(!std::filesystem::exists(path));
}

BOOST_AUTO_TEST_CASE(a_truncated_file_is_a_short_read_naming_it) {
  test::TempDir dir;
  for (bool kernel_aio : {true, false}) {
    BOOST_TEST_CONTEXT((kernel_aio ? "libaio" : "pread/pwrite")) {
      SwapFile file(dir.file("swap"), 4 * kPage, {}, {.kernel_aio = kernel_aio});
      const io::AlignedBuffer a = pattern(4 * kPage, 4);
      file.write(0, a.get(), 4 * kPage);
      BOOST_REQUIRE(::truncate(file.path().c_str(), 2 * kPage) == 0);
      BOOST_TEST(test::error_message([&] { file.read(2 * kPage, a.get(), 2 * kPage); }) ==
                 "swap file '" + file.path() + "': read of " + std::to_string(2 * kPage) +
                     " bytes at offset " + std::to_string(2 * kPage) +
                     " failed: short read (0 of " + std::to_string(2 * kPage) +
                     " bytes; the file is shorter than it was written)");
    }
  }
}

BOOST_AUTO_TEST_CASE(a_missing_folder_and_bad_aio_values_are_named) {
  BOOST_TEST(test::error_message([] { SwapFile file("/nonexistent/folder/swap", kPage, {}); }) ==
             "cannot create swap file '/nonexistent/folder/swap': No such file or directory");
  BOOST_TEST(test::error_message([] { io::check_aio({.block_size = 1000}); }) ==
             "[config] aio.block_size must be a positive multiple of 4096 bytes (direct I/O moves whole pages), got 1000");
  BOOST_TEST(test::error_message([] { io::check_aio({.queue_depth = 0}); }) ==
             "[config] aio.queue_depth must be at least 1, got 0");
  BOOST_TEST(test::error_message([] { io::check_aio({.intra_op_parallelism = 0}); }) ==
             "[config] aio.intra_op_parallelism must be at least 1, got 0");
  BOOST_TEST(test::error_message([] { io::check_aio({}); }) == "(no error)");
}

BOOST_AUTO_TEST_SUITE_END()  // test_swap_file
