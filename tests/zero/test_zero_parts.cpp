// ZeRO's parts that need no ranks. ZeroConfig::validate, the one check of ZeRO's settings
// (the config's parser and ZeroOptimizer both call it): each key out of range, and ZeRO++
// that does not fit the stage or the data-parallel ranks, named in the message. The device
// shard store keeps each group's master weights and zeroed Adam moments where it was asked
// to, hands them back as the tensors themselves (an update written through them stays), and
// counts their bytes. The NVMe store (Note [Offloaded optimizer state]) hands back exactly
// what was written, through few buffers, read ahead or not, written behind or not, and by
// parts for checkpoints; a corrupted byte or a truncated file is an error naming the file,
// and so is a missing or unwritable nvme_path; gradients kept in the store (Note [Offloaded
// gradients]) come back as their running sum in the training dtype. The parameter swap
// (Note [Offloaded parameters]) hands back each shard as last stored, read on its thread or
// not, written behind, within its buffers, and names a damaged file; parameter
// offload below stage 3, without its folder, or with buffers too few or too small for a
// unit's shards is a named error. A delayed update with a negative warm-up, with parameter
// offload or in pipeline stages is a named error. Partial offload (Note [Partial offload])
// splits sub-groups of equal size as DeepSpeed does, keeps the first entries on the device
// and the rest in the host store, and refuses a ratio outside [0, 1] or below 1 with nvme.
// The loss scale on the device (Note [Loss scale on the device]) moves as optim::LossScaler
// moves and picks the row of the steps taken, through a ring that wraps.
#include <fcntl.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "parallel/self_communicator.h"
#include "support/check.h"
#include "support/files.h"
#include "support/zero_trajectory.h"
#include "tensor/ops.h"
#include "tensor/random.h"
#include "zero/device_loss_scale.h"
#include "zero/nvme_shard_store.h"
#include "zero/param_swap.h"
#include "zero/partial_offload_store.h"
#include "zero/shard_store.h"
#include "zero/zero_config.h"

BOOST_AUTO_TEST_SUITE(test_zero_parts)

using namespace triad;

namespace {

std::string error_of(const zero::ZeroConfig& c, int64_t data_parallel = 4) {
  return test::error_message([&] { c.validate(data_parallel); });
}

}  // namespace

BOOST_AUTO_TEST_CASE(defaults_and_every_stage_are_valid) {
  for (int stage : {0, 1, 2, 3}) BOOST_TEST(error_of({.stage = stage}) == "(no error)");
  BOOST_TEST(error_of({.stage = 3, .quantized_weights = true, .hpz_partition_size = 2, .quantized_gradients = true}) ==
             "(no error)");
}

BOOST_AUTO_TEST_CASE(out_of_range_keys_are_named) {
  BOOST_TEST(error_of({.stage = 4}) == "[config] zero_optimization.stage must be an integer in [0, 3], got 4");
  BOOST_TEST(error_of({.stage = -1}) == "[config] zero_optimization.stage must be an integer in [0, 3], got -1");
  BOOST_TEST(error_of({.reduce_bucket_size = 0}) ==
             "[config] zero_optimization bucket sizes must be positive, got reduce_bucket_size 0 and "
             "allgather_bucket_size 500000000");
  BOOST_TEST(error_of({.gradient_predivide_factor = 0}) == "[config] gradient_predivide_factor must be > 0, got 0");
  BOOST_TEST(error_of({.dtype = DType::f64}) == "ZeRO stores parameters in f32, bf16 or f16, not f64");
  BOOST_TEST(error_of({.weight_quantization_block = 0}) ==
             "[config] zero_optimization.zeropp_quantization_block must be at least 1, got 0");
  BOOST_TEST(error_of({.gradient_quantization_block = 7}) ==
             "[config] zero_optimization.zeropp_gradient_quantization_block must be an even number of elements "
             "(int4 packs two per byte), got 7");
}

BOOST_AUTO_TEST_CASE(offload_needs_a_stage_a_folder_and_a_ratio_in_range) {
  const zero::OffloadConfig nvme{.device = zero::OffloadDevice::nvme, .nvme_path = "/tmp"};
  BOOST_TEST(error_of({.stage = 1, .offload_optimizer = nvme}) == "(no error)");
  BOOST_TEST(error_of({.stage = 3, .offload_optimizer = {.device = zero::OffloadDevice::cpu}}) == "(no error)");
  BOOST_TEST(error_of({.stage = 0, .offload_optimizer = nvme}) ==
             "[config] zero_optimization.offload_optimizer: offloading the optimizer's state runs at stages 1-3, not "
             "stage 0");
  BOOST_TEST(error_of({.stage = 2, .offload_optimizer = {.device = zero::OffloadDevice::nvme}}) ==
             "[config] zero_optimization.offload_optimizer.nvme_path is required with device \"nvme\" (the folder "
             "that holds each rank's optimizer state files)");
  // Note [Partial offload]: ratio in [0, 1] at stages 1-3 with device cpu, 1 with nvme.
  for (int stage : {1, 2, 3})
    for (double ratio : {0.0, 0.5, 1.0})
      BOOST_TEST(error_of({.stage = stage,
                           .offload_optimizer = {.device = zero::OffloadDevice::cpu, .ratio = ratio}}) == "(no error)");
  for (double ratio : {-0.25, 1.5, std::nan("")})
    BOOST_TEST(error_of({.stage = 3, .offload_optimizer = {.device = zero::OffloadDevice::cpu, .ratio = ratio}}) ==
               "[config] zero_optimization.offload_optimizer.ratio must be a number in [0, 1], got " +
                   (std::ostringstream() << ratio).str());
  BOOST_TEST(
      error_of({.stage = 3,
                .offload_optimizer = {.device = zero::OffloadDevice::nvme, .nvme_path = "/tmp", .ratio = 0.5}}) ==
      "[config] zero_optimization.offload_optimizer.ratio below 1 (partial offload) runs with device \"cpu\", "
      "not \"nvme\" (every sub-group's state is in the files), got 0.5");
  BOOST_TEST(error_of({.stage = 2, .offload_optimizer = {.buffer_count = 0}}) ==
             "[config] zero_optimization.offload_optimizer.buffer_count must be at least 1, got 0");
  BOOST_TEST(error_of({.stage = 2, .sub_group_size = 0}) == "[config] zero_optimization.sub_group_size must be at least 1, got 0");
  BOOST_TEST(error_of({.stage = 2, .aio = {.block_size = 4097}}) ==
             "[config] aio.block_size must be a positive multiple of 4096 bytes (direct I/O moves whole pages), got 4097");
}

BOOST_AUTO_TEST_CASE(parameter_offload_needs_stage_3_and_a_folder) {
  const zero::ParamOffloadConfig nvme{.device = zero::OffloadDevice::nvme, .nvme_path = "/tmp"};
  BOOST_TEST(error_of({.stage = 3, .offload_param = nvme}) == "(no error)");
  BOOST_TEST(error_of({.stage = 3, .offload_param = {.device = zero::OffloadDevice::cpu}}) == "(no error)");
  BOOST_TEST(error_of({.stage = 2, .offload_param = nvme}) ==
             "[config] zero_optimization.offload_param: offloading parameters runs at stage 3, not stage 2");
  BOOST_TEST(error_of({.stage = 2, .offload_param = {.device = zero::OffloadDevice::cpu}}) ==
             "[config] zero_optimization.offload_param: offloading parameters runs at stage 3, not stage 2");
  BOOST_TEST(error_of({.stage = 3, .offload_param = {.device = zero::OffloadDevice::nvme}}) ==
             "[config] zero_optimization.offload_param.nvme_path is required with device \"nvme\" (the folder that "
             "holds each rank's parameter swap file)");
  BOOST_TEST(error_of({.stage = 3, .offload_param = {.buffer_count = 0}}) ==
             "[config] zero_optimization.offload_param.buffer_count must be at least 1, got 0");
  BOOST_TEST(error_of({.stage = 3, .offload_param = {.buffer_size = 0}}) ==
             "[config] zero_optimization.offload_param.buffer_size must be at least 1, got 0");
}

BOOST_AUTO_TEST_CASE(a_delayed_update_needs_a_warmup_of_at_least_0_and_no_parameter_offload_or_pipeline) {
  const zero::ZeroConfig::DelayedUpdate on{.enabled = true, .warmup_steps = 0};
  for (int stage : {0, 1, 2, 3}) BOOST_TEST(error_of({.stage = stage, .delayed_update = on}) == "(no error)");
  BOOST_TEST(error_of({.stage = 2,
                       .offload_optimizer = {.device = zero::OffloadDevice::nvme, .nvme_path = "/tmp"},
                       .delayed_update = on}) == "(no error)");
  BOOST_TEST(error_of({.stage = 1, .delayed_update = {.enabled = true, .warmup_steps = -1}}) ==
             "[config] zero_optimization.delayed_update.warmup_steps must be at least 0, got -1");
  BOOST_TEST(error_of({.stage = 1, .delayed_update = {.enabled = false, .warmup_steps = -1}}) ==
             "[config] zero_optimization.delayed_update.warmup_steps must be at least 0, got -1");
  BOOST_TEST(error_of({.stage = 3,
                       .offload_param = {.device = zero::OffloadDevice::nvme, .nvme_path = "/tmp"},
                       .delayed_update = on}) ==
             "[config] zero_optimization.delayed_update does not run with offload_param.device \"nvme\" (the pending "
             "update would hold every parameter shard in memory); turn one of them off");
  BOOST_TEST(error_of({.stage = 1, .defer_reduction = true, .delayed_update = on}) ==
             "[config] zero_optimization.delayed_update does not run in pipeline stages (pipeline.stages > 1)");
}

BOOST_AUTO_TEST_CASE(zeropp_needs_stage_3_and_hpz_groups_that_tile_the_ranks) {
  const std::string below = "[config] zero_optimization: ZeRO++ (zero_quantized_weights, zero_hpz_partition_size, "
                            "zero_quantized_gradients) runs at stage 3, not stage 2";
  BOOST_TEST(error_of({.stage = 2, .quantized_weights = true}) == below);
  BOOST_TEST(error_of({.stage = 2, .hpz_partition_size = 2}) == below);
  BOOST_TEST(error_of({.stage = 2, .quantized_gradients = true}) == below);
  BOOST_TEST(error_of({.stage = 3, .hpz_partition_size = 3}) ==
             "[config] zero_optimization.zero_hpz_partition_size 3 must divide the 4 data-parallel ranks");
  BOOST_TEST(error_of({.stage = 3, .hpz_partition_size = 3}, 6) == "(no error)");
  BOOST_TEST(error_of({.stage = 3, .hpz_partition_size = 0}) ==
             "[config] zero_optimization.zero_hpz_partition_size 0 must divide the 4 data-parallel ranks");
}

BOOST_AUTO_TEST_CASE(device_store_keeps_each_groups_state) {
  zero::DeviceShardStore store(Device::cpu());
  BOOST_TEST(store.device_bytes() == 0);
  const Tensor master = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  BOOST_TEST(store.add(master, 3) == 0u);
  BOOST_TEST(store.add(Tensor(), 5) == 1u);  // f32 training: no master weights

  const zero::ShardState& mixed = store.acquire(0);
  BOOST_TEST(mixed.master.is_same(master));
  for (const Tensor* t : {&mixed.exp_avg, &mixed.exp_avg_sq}) {
    BOOST_TEST((t->dtype() == DType::f32));
    BOOST_TEST(t->to_vector<float>() == std::vector<float>(3, 0.0f), boost::test_tools::per_element());
  }
  store.release(0, true);
  const zero::ShardState& plain = store.acquire(1);
  BOOST_TEST(!plain.master.defined());
  BOOST_TEST(plain.exp_avg.numel() == 5);
  BOOST_TEST(plain.exp_avg_sq.numel() == 5);
  // 3 elements x 3 tensors + 5 x 2, 4 bytes each.
  BOOST_TEST(store.device_bytes() == (9 + 10) * 4);

  ops::fill_(plain.exp_avg, 0.5);
  store.release(1, true);
  ops::mul_(store.acquire(0).master, 2.0);
  store.release(0, true);
  const zero::ShardState& again = store.acquire(1);
  BOOST_TEST(again.exp_avg.to_vector<float>() == std::vector<float>(5, 0.5f), boost::test_tools::per_element());
  BOOST_TEST(again.exp_avg_sq.to_vector<float>() == std::vector<float>(5, 0.0f), boost::test_tools::per_element());
  store.release(1, false);
  BOOST_TEST(store.acquire(0).master.to_vector<float>() == (std::vector<float>{2, 4, 6}), boost::test_tools::per_element());
  store.release(0, false);
  // Checkpoints' parts are the stored tensors themselves.
  BOOST_TEST(store.read_part(0, zero::ShardPart::master).is_same(master));
  BOOST_TEST(store.read_part(1, zero::ShardPart::exp_avg).is_same(store.acquire(1).exp_avg));
  store.release(1, false);
}

namespace {

Tensor random_f32(int64_t n, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty({n});
  ops::normal_(t, 0.0, 1.0, gen);
  return t;
}

std::vector<float> values(const Tensor& t) { return ops::contiguous(t).to_vector<float>(); }

zero::OffloadConfig nvme_at(const test::TempDir& dir, int64_t buffers, bool pipelined) {
  return {.device = zero::OffloadDevice::nvme,
          .nvme_path = dir.path().string(),
          .buffer_count = buffers,
          .pipeline_read = pipelined,
          .pipeline_write = pipelined};
}

// Changes one byte of the file at `offset`.
void flip_byte(const std::string& path, int64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  BOOST_REQUIRE(fd >= 0);
  unsigned char byte = 0;
  BOOST_REQUIRE(::pread(fd, &byte, 1, offset) == 1);
  byte ^= 0x40;
  BOOST_REQUIRE(::pwrite(fd, &byte, 1, offset) == 1);
  BOOST_REQUIRE(::close(fd) == 0);
}

}  // namespace

// Note [Partial offload]: over sub-groups of equal size the split is DeepSpeed's (stage3.py:
// of n sub-groups, i stays on the accelerator when i < int((1 - ratio) n)), for every n to
// 40 and ratio in steps of 0.05 (their floating-point edges included: (1 - 0.9) 10 rounds
// below 1, so all ten go); over unequal ones the first entries whose elements end within
// (1 - ratio) of the total stay.
BOOST_AUTO_TEST_CASE(partial_offload_splits_by_deepspeeds_rule) {
  for (int64_t n = 1; n <= 40; ++n)
    for (int step = 0; step <= 20; ++step) {
      const double ratio = 0.05 * step;
      const int64_t deepspeed = int64_t((1 - ratio) * double(n));  // the sub-groups it keeps
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) kept += zero::stays_on_device((i + 1) * 4096, n * 4096, ratio);
      BOOST_TEST(kept == deepspeed, n << " sub-groups, ratio " << ratio);
    }
  BOOST_TEST(!zero::stays_on_device(1, 10, 0.9));  // DeepSpeed's int(0.1 * 10) is 0
  BOOST_TEST(zero::stays_on_device(10, 10, 0.0));
  BOOST_TEST(!zero::stays_on_device(1, 10, 1.0));
  // Entries of 300, 20, 300, 80 (700): ratio 0.5 keeps 320 on the device, 0.3 keeps 320 too
  // (620 > 490), 0.1 keeps 620.
  for (const auto& [ratio, kept] : {std::pair{0.5, 320}, {0.3, 320}, {0.1, 620}}) {
    int64_t end = 0, device = 0;
    for (int64_t s : {300, 20, 300, 80})
      if (zero::stays_on_device(end += s, 700, ratio)) device = end;
    BOOST_TEST(device == kept, "ratio " << ratio);
  }
}

// The partial store places each entry as it is added (the total known up front) and sends
// every call to the entry's side: the device entries resident, the host entries updated on
// the host, staged, with their own buffers; each hands back its state and parts.
BOOST_AUTO_TEST_CASE(partial_offload_store_keeps_the_first_entries_on_the_device) {
  zero::PartialOffloadStore store(Device::cpu(), DType::bf16, false, 0.5, 10);
  const Tensor first = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  const Tensor second = Tensor::from_vector(std::vector<float>{5, 6}, {2});
  const Tensor third = Tensor::from_vector(std::vector<float>{7, 8, 9, 10}, {4});
  BOOST_TEST(store.add(first, 4) == 0u);
  BOOST_TEST(store.add(second, 2) == 1u);  // ends at 6 > 5: the host's
  BOOST_TEST(store.add(third, 4) == 2u);
  BOOST_TEST(store.resident(0));
  BOOST_TEST(!store.updates_on_host(0));
  for (size_t e : {1, 2}) {
    BOOST_TEST(!store.resident(e));
    BOOST_TEST(store.updates_on_host(e));
  }
  // Device: 4 x (master, two moments) x 4 bytes; host: 6 x (master, moments, gradient: 16
  // bytes; new bf16 parameters: 2), the CPU training device's.
  BOOST_TEST(store.device_bytes() == 4 * 12 + 6 * 18);
  BOOST_TEST(store.host_bytes() == 0);
  BOOST_TEST(store.acquire(0).master.is_same(first));
  store.release(0, false);
  BOOST_TEST(values(store.read_part(1, zero::ShardPart::master)) == (std::vector<float>{5, 6}),
             boost::test_tools::per_element());
  store.write_part(2, zero::ShardPart::exp_avg, Tensor::full({4}, 0.25));
  const Tensor params = Tensor::zeros({4}, DType::bf16);
  store.stage(2, Tensor::full({4}, 1.0), params);
  const zero::ShardState& host = store.acquire(2);
  BOOST_TEST(!host.master.is_same(third));  // the host store's own copy
  BOOST_TEST(values(host.master) == (std::vector<float>{7, 8, 9, 10}), boost::test_tools::per_element());
  BOOST_TEST(values(host.exp_avg) == std::vector<float>(4, 0.25f), boost::test_tools::per_element());
  BOOST_TEST(values(host.grad) == std::vector<float>(4, 1.0f), boost::test_tools::per_element());
  ops::fill_(host.params, 3.0);
  store.release(2, true);  // copies the new parameters out
  store.finish_update();
  BOOST_TEST(values(ops::to(params, DType::f32)) == std::vector<float>(4, 3.0f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(nvme_store_hands_back_exactly_what_was_written) {
  // Five entries (one without master weights, one empty) through one buffer (every acquire
  // reads from the file), two, and more than there are entries, each with and without
  // pipelining: three rounds of updates, each checked against a copy kept in memory.
  test::TempDir dir;
  const std::vector<int64_t> sizes = {1000, 1, 3000, 0, 777};
  for (int64_t buffers : {1, 2, 8})
    for (bool pipelined : {false, true}) {
      BOOST_TEST_CONTEXT(buffers << " buffers" << (pipelined ? ", pipelined" : "")) {
        zero::NvmeShardStore store(Device::cpu(), nvme_at(dir, buffers, pipelined), {.block_size = 4096, .queue_depth = 2});
        std::vector<zero::ShardState> expect;
        for (size_t e = 0; e < sizes.size(); ++e) {
          const Tensor master = e == 1 ? Tensor() : random_f32(sizes[e], e);
          BOOST_TEST(store.add(master, sizes[e]) == e);
          expect.push_back({master.defined() ? ops::clone(master) : Tensor(), Tensor::zeros({sizes[e]}),
                            Tensor::zeros({sizes[e]})});
        }
        BOOST_TEST(std::filesystem::file_size(store.path()) == uint64_t((3 + 2 + 9 + 0 + 3) * 4096));  // parts padded to pages
        BOOST_TEST(store.device_bytes() == std::min<int64_t>(buffers, 5) * 9 * 4096);  // the largest record
        for (int round = 0; round < 3; ++round)
          for (size_t e = 0; e < sizes.size(); ++e) {
            const zero::ShardState& s = store.acquire(e);
            if (e + 1 < sizes.size()) store.prefetch(e + 1);
            BOOST_TEST(s.master.defined() == expect[e].master.defined());
            for (zero::ShardPart p : {zero::ShardPart::master, zero::ShardPart::exp_avg, zero::ShardPart::exp_avg_sq}) {
              if (!part_of(expect[e], p).defined()) continue;
              BOOST_TEST(values(part_of(s, p)) == values(part_of(expect[e], p)), boost::test_tools::per_element());
              const Tensor next = random_f32(sizes[e], 100 * uint64_t(round) + 10 * e + uint64_t(p));
              ops::copy_(part_of(s, p), next);
              ops::copy_(part_of(expect[e], p), next);
            }
            store.release(e, /*dirty=*/true);
          }
        // Checkpoints read and write single parts.
        BOOST_TEST(values(store.read_part(2, zero::ShardPart::exp_avg_sq)) == values(expect[2].exp_avg_sq),
                   boost::test_tools::per_element());
        const Tensor loaded = random_f32(sizes[2], 999);
        store.write_part(2, zero::ShardPart::master, loaded);
        const zero::ShardState& s = store.acquire(2);
        BOOST_TEST(values(s.master) == values(loaded), boost::test_tools::per_element());
        BOOST_TEST(values(s.exp_avg) == values(expect[2].exp_avg), boost::test_tools::per_element());
        store.release(2, false);
      }
    }
  BOOST_TEST(std::filesystem::is_empty(dir.path()));  // every file went with its store
}

BOOST_AUTO_TEST_CASE(nvme_store_names_a_damaged_or_truncated_file) {
  test::TempDir dir;
  zero::NvmeShardStore store(Device::cpu(), nvme_at(dir, 1, false), {});
  store.add(random_f32(2000, 1), 2000);  // record: 3 parts of 2 pages
  store.add(random_f32(10, 2), 10);
  ops::fill_(store.acquire(0).exp_avg, 0.25);
  store.release(0, true);
  store.acquire(1);  // the one buffer now holds entry 1: entry 0 must come from the file
  store.release(1, false);
  flip_byte(store.path(), 2 * 4096 + 4 * 1999);  // the last element of exp_avg
  const std::string damaged = test::error_message([&] { store.acquire(0); });
  BOOST_TEST(damaged.find("swap file '" + store.path() + "': the exp_avg of sub-group 0 read back differ from what was "
                          "written (CRC-32C ") == 0u);
  BOOST_TEST(damaged.find("): the file is damaged") != std::string::npos);
  BOOST_TEST(test::error_message([&] { store.read_part(0, zero::ShardPart::exp_avg); }) == damaged);
  BOOST_TEST(values(store.read_part(0, zero::ShardPart::exp_avg_sq)) == std::vector<float>(2000, 0.0f),
             boost::test_tools::per_element());  // the other parts are intact

  BOOST_REQUIRE(::truncate(store.path().c_str(), 6 * 4096) == 0);  // entry 1 cut off
  BOOST_TEST(test::error_message([&] { store.acquire(1); }) ==
             "swap file '" + store.path() + "': read of 12288 bytes at offset 24576 failed: short read (0 of 12288 "
             "bytes; the file is shorter than it was written)");
}

// Note [Offloaded gradients]: gradients accumulated into the store come back with the state
// as their sum, rounded to the training dtype after each addition as an in-memory shard of
// that dtype is; a read ahead started before the last addition is read again; cleared
// gradients are zeros; the file and the buffers grow by a gradient part; a changed byte of
// a gradient is an error naming the file.
BOOST_AUTO_TEST_CASE(nvme_store_keeps_gradients_as_their_running_sum) {
  test::TempDir dir;
  const std::vector<int64_t> sizes = {1000, 3000, 777};
  for (DType dtype : {DType::f32, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      zero::NvmeShardStore store(Device::cpu(), nvme_at(dir, 2, true), {}, /*gradients=*/true);
      BOOST_TEST(store.keeps_gradients());
      for (size_t e = 0; e < sizes.size(); ++e) store.add(random_f32(sizes[e], e), sizes[e]);
      BOOST_TEST(std::filesystem::file_size(store.path()) == uint64_t((4 + 12 + 4) * 4096));  // 3 parts and a gradient
      BOOST_TEST(store.device_bytes() == 2 * 9 * 4096 + (2 + 2) * 3 * 4096);  // 2 records, 4 gradient parts
      for (int step = 0; step < 2; ++step) {
        store.prefetch(0);  // before the backward: its gradient is read again on acquire
        std::vector<Tensor> expect;
        for (size_t e = 0; e < sizes.size(); ++e) expect.push_back(Tensor::zeros({sizes[e]}, dtype));
        for (int micro = 0; micro < 3; ++micro)
          for (size_t e = 0; e < sizes.size(); ++e) {
            if (e == 2 && micro == 1) continue;  // no gradient this time
            const Tensor g = ops::to(random_f32(sizes[e], 100 * uint64_t(step) + 10 * uint64_t(micro) + e), dtype);
            ops::add_(expect[e], g);
            BOOST_TEST(values(store.accumulate_gradient(e, g)) == values(ops::to(expect[e], DType::f32)),
                       boost::test_tools::per_element());
          }
        for (size_t e = 0; e < sizes.size(); ++e) {
          const zero::ShardState& s = store.acquire(e);
          if (e + 1 < sizes.size()) store.prefetch(e + 1);
          BOOST_TEST(values(s.grad) == values(ops::to(expect[e], DType::f32)), boost::test_tools::per_element());
          ops::mul_(s.grad, 0.5);  // the update scales it in place
          store.release(e, true);
        }
        store.clear_gradients();
        BOOST_TEST(values(store.acquire(1).grad) == std::vector<float>(3000, 0.0f), boost::test_tools::per_element());
        store.release(1, false);
      }
    }
  }
  zero::NvmeShardStore store(Device::cpu(), nvme_at(dir, 1, false), {}, /*gradients=*/true);
  for (int64_t n : {2000, 10, 10}) store.add(Tensor(), n);  // entry 0: 2 parts of 2 pages, then its gradient's 2
  store.accumulate_gradient(0, random_f32(2000, 7));
  store.accumulate_gradient(1, random_f32(10, 8));
  store.accumulate_gradient(2, random_f32(10, 9));  // entry 0's gradient buffer taken: it is in the file alone
  flip_byte(store.path(), 4 * 4096 + 4 * 1999);
  const std::string damaged = test::error_message([&] { store.acquire(0); });
  BOOST_TEST(damaged.find("swap file '" + store.path() + "': the gradient of sub-group 0 read back differs from what "
                          "was written (CRC-32C ") == 0u, damaged);
  BOOST_TEST(test::error_message([&] { store.accumulate_gradient(0, random_f32(2000, 10)); }) == damaged);
}

BOOST_AUTO_TEST_CASE(nvme_store_names_a_missing_or_unwritable_folder) {
  const auto error = [](const std::string& folder) {
    return test::error_message([&] {
      zero::NvmeShardStore store(Device::cpu(), {.device = zero::OffloadDevice::nvme, .nvme_path = folder}, {});
    });
  };
  BOOST_TEST(error("/nonexistent/nvme") ==
             "[config] zero_optimization.offload_optimizer.nvme_path '/nonexistent/nvme': No such file or directory");
  test::TempDir dir;
  const std::string file = dir.write("plain", "x");
  BOOST_TEST(error(file) == "[config] zero_optimization.offload_optimizer.nvme_path '" + file + "' is not a folder");
  // A folder this process may not write in (root writes anywhere but in sysfs).
  const std::string locked = ::geteuid() == 0 ? "/sys" : dir.file("locked");
  if (::geteuid() != 0) {
    std::filesystem::create_directory(locked);
    std::filesystem::permissions(locked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  const std::string refused = error(locked);
  BOOST_TEST(refused.find("[config] zero_optimization.offload_optimizer.nvme_path '" + locked +
                          "': cannot create swap file '" + locked + "/triad-optimizer-rank0-") == 0u,
             refused);
  BOOST_TEST(refused.find(".swp': Permission denied") != std::string::npos, refused);
}

// A partitioned group's shard goes to the file on add (none left in memory), comes back as
// it was, and as last stored after an update; a changed byte is an error naming the file.
BOOST_AUTO_TEST_CASE(parameter_swap_hands_back_each_shard_as_last_stored) {
  test::TempDir dir;
  zero::ParamSwap swap({.device = zero::OffloadDevice::nvme, .nvme_path = dir.path().string(), .buffer_count = 1,
                        .buffer_size = 1500},
                       {});
  const Tensor w = random_f32(1500, 3);
  zero::FlatGroup group({{"w", ops::clone(w)}}, 0.0, 1, 0);
  group.partition();
  swap.add(group);
  BOOST_TEST(!group.owned_shard().defined());
  BOOST_TEST(swap.file_bytes() == 2 * 4096);  // 6000 bytes padded to pages
  swap.bring_in(group);
  BOOST_TEST(values(group.owned_shard()) == values(w), boost::test_tools::per_element());
  BOOST_TEST(swap.resident_bytes() == 6000);
  ops::fill_(group.owned_shard(), 0.5);
  swap.store(group);
  swap.flush();
  BOOST_TEST(swap.resident_bytes() == 0);
  swap.bring_in(group);
  BOOST_TEST(values(group.owned_shard()) == std::vector<float>(1500, 0.5f), boost::test_tools::per_element());
  swap.drop(group);
  flip_byte(swap.path(), 4 * 1499);
  const std::string damaged = test::error_message([&] { swap.bring_in(group); });
  BOOST_TEST(damaged.find("swap file '" + swap.path() + "': a parameter shard of 6000 bytes at offset 0 read back "
                          "differs from what was written (CRC-32C ") == 0u, damaged);
  BOOST_TEST(swap.peak_resident_bytes() == 6000);
}

// start_read reads a shard on the I/O thread: bring_in hands back what was stored, within
// buffer_count shards (a read with every buffer taken is not started); a changed byte is
// an error naming the file, raised by the bring_in that needs the shard; a read dropped
// unused gives its buffer back. Every read is counted and timed.
BOOST_AUTO_TEST_CASE(parameter_swap_reads_ahead_on_its_thread) {
  test::TempDir dir;
  zero::ParamSwap swap(
      {.device = zero::OffloadDevice::nvme, .nvme_path = dir.path().string(), .buffer_count = 2, .buffer_size = 1500},
      {});
  const Tensor a = random_f32(1500, 4), b = random_f32(1000, 5), c = random_f32(700, 6);
  zero::FlatGroup ga({{"a", ops::clone(a)}}, 0.0, 1, 0), gb({{"b", ops::clone(b)}}, 0.0, 1, 0),
      gc({{"c", ops::clone(c)}}, 0.0, 1, 0);
  for (zero::FlatGroup* g : {&ga, &gb, &gc}) {
    g->partition();
    swap.add(*g);
  }
  swap.start_read(ga);
  swap.start_read(gb);
  BOOST_TEST(swap.resident_bytes() == 10000);
  swap.start_read(gc);  // both buffers taken: not started
  BOOST_TEST(swap.resident_bytes() == 10000);
  BOOST_TEST(!swap.ready(gc));
  swap.bring_in(gb);
  BOOST_TEST(swap.ready(gb));
  BOOST_TEST(values(gb.owned_shard()) == values(b), boost::test_tools::per_element());
  swap.bring_in(ga);
  BOOST_TEST(values(ga.owned_shard()) == values(a), boost::test_tools::per_element());
  swap.drop(ga);
  swap.drop(gb);
  swap.start_read(gc);
  swap.drop(gc);  // read for nothing
  BOOST_TEST(swap.resident_bytes() == 0);
  BOOST_TEST(!gc.owned_shard().defined());
  flip_byte(swap.path(), 4096 * 2 + 4 * 10);  // b's slot follows a's two pages
  swap.start_read(gb);
  const std::string damaged = test::error_message([&] { swap.bring_in(gb); });
  BOOST_TEST(damaged.find("swap file '" + swap.path() +
                          "': a parameter shard of 4000 bytes at offset 8192 read back "
                          "differs from what was written (CRC-32C ") == 0u,
             damaged);
  BOOST_TEST(swap.resident_bytes() == 0);
  BOOST_TEST(swap.peak_resident_bytes() == 10000);
  const zero::ParamSwap::ReadTimes times = swap.read_times();
  BOOST_TEST(times.reads == 4);  // a, b, c once started, and b damaged
  BOOST_TEST(times.read_seconds > 0);
  BOOST_TEST(times.waited_seconds > 0);
}

// store writes a shard behind on a thread: its buffer stays taken until the write is done,
// so with one buffer the next bring_in waits for it; what comes back is what was stored,
// also when read again while its write may still be in flight.
BOOST_AUTO_TEST_CASE(parameter_swap_writes_behind_within_its_buffers) {
  test::TempDir dir;
  zero::ParamSwap swap(
      {.device = zero::OffloadDevice::nvme, .nvme_path = dir.path().string(), .buffer_count = 1, .buffer_size = 3000},
      {});
  const Tensor a = random_f32(3000, 11), b = random_f32(1000, 12);
  zero::FlatGroup ga({{"a", ops::clone(a)}}, 0.0, 1, 0), gb({{"b", ops::clone(b)}}, 0.0, 1, 0);
  for (zero::FlatGroup* g : {&ga, &gb}) {
    g->partition();
    swap.add(*g);
  }
  const Tensor expect = ops::clone(a);
  for (int round = 0; round < 3; ++round) {
    swap.bring_in(ga);
    ops::copy_(ga.owned_shard(), ops::add(ga.owned_shard(), 1.0));
    ops::copy_(expect, ops::add(expect, 1.0));
    swap.store(ga);
    BOOST_TEST(!ga.owned_shard().defined());
    BOOST_TEST(swap.resident_bytes() == 12000);  // being written
    swap.start_read(gb);  // every buffer taken: nothing starts
    BOOST_TEST(!swap.ready(gb));
    swap.bring_in(gb);  // waits for a's write
    BOOST_TEST(swap.resident_bytes() == 4000);
    BOOST_TEST(values(gb.owned_shard()) == values(b), boost::test_tools::per_element());
    swap.store(gb);
  }
  swap.bring_in(ga);  // b's write done first
  BOOST_TEST(values(ga.owned_shard()) == values(expect), boost::test_tools::per_element());
  swap.drop(ga);
  swap.flush();
  BOOST_TEST(swap.resident_bytes() == 0);
  BOOST_TEST(swap.peak_resident_bytes() == 12000);
}

// Each unit's shards must fit the buffers: one buffer per flat group of the unit (its
// matrices and its vectors), each of the largest shard's elements.
BOOST_AUTO_TEST_CASE(parameter_buffers_too_few_or_too_small_are_named) {
  test::TempDir dir;
  const auto comm = std::make_shared<parallel::SelfCommunicator>();
  const auto error = [&](int64_t count, int64_t size) {
    return test::error_message([&] {
      zero::ZeroOptimizer opt(test::make_model(), {.stage = 3,
                                                   .stage3_param_persistence_threshold = 0,
                                                   .offload_param = {.device = zero::OffloadDevice::nvme,
                                                                     .nvme_path = dir.path().string(),
                                                                     .buffer_count = count,
                                                                     .buffer_size = size}},
                              test::kAdam, test::kDecay, comm);
    });
  };
  int64_t largest = 0;
  {
    zero::ZeroOptimizer plain(test::make_model(), {.stage = 3, .stage3_param_persistence_threshold = 0}, test::kAdam, test::kDecay, comm);
    for (const auto& [padded, partitioned] : plain.group_sizes()) largest = std::max(largest, partitioned ? padded : 0);
  }
  BOOST_TEST(largest > 0);
  BOOST_TEST(error(2, largest) == "(no error)");
  const std::string small = error(2, largest - 1);
  BOOST_TEST(small.find("[config] zero_optimization.offload_param.buffer_size " + std::to_string(largest - 1) +
                        " is too small: unit '") == 0u, small);
  BOOST_TEST(small.find("' has a parameter shard of " + std::to_string(largest) + " elements") != std::string::npos,
             small);
  const std::string few = error(1, largest);
  BOOST_TEST(few.find("[config] zero_optimization.offload_param.buffer_count 1 is too small: unit '") == 0u, few);
  BOOST_TEST(few.find("' gathers 2 parameter shards at once") != std::string::npos, few);
  BOOST_TEST(std::filesystem::is_empty(dir.path()));
}

// Parameters in host memory (offload_param cpu, the backend forced on the CPU): no fixed
// buffers, so buffer_size does not bound a shard, while buffer_count still bounds a unit's
// shards on the device; a delayed update, whose pending copies would hold every shard on the
// device, is refused by name.
BOOST_AUTO_TEST_CASE(parameters_in_host_memory_take_buffer_count_and_refuse_a_delayed_update) {
  const auto comm = std::make_shared<parallel::SelfCommunicator>();
  const auto error = [&](int64_t count, bool delayed) {
    return test::error_message([&] {
      zero::ZeroOptimizer opt(test::make_model(),
                              {.stage = 3,
                               .stage3_param_persistence_threshold = 0,
                               .offload_param = {.device = zero::OffloadDevice::cpu,
                                                 .buffer_count = count,
                                                 .buffer_size = 1,
                                                 .host_store_on_cpu = true},
                               .delayed_update = {.enabled = delayed}},
                              test::kAdam, test::kDecay, comm);
    });
  };
  BOOST_TEST(error(2, false) == "(no error)");
  BOOST_TEST(error(1, false).find("[config] zero_optimization.offload_param.buffer_count 1 is too small: unit '") == 0u);
  BOOST_TEST(error(2, true) == "[config] zero_optimization.delayed_update does not run with offload_param.device "
                               "\"cpu\" on a cpu device (the pending update would hold every parameter shard on the "
                               "device); turn one of them off");
}

// Note [Loss scale on the device]: over 60 steps with overflows drawn at random, the scale,
// its counters and the verdicts follow optim::LossScaler's; each step's constants are the
// row of the steps taken before it (row_at(t) fills row t with 1000 t + its index), with
// the skip set on overflow, and its rate that row's. A ring of 3 rows wraps at once and
// makes the host read the state every second unread step; reads at random points in
// between change nothing. The seed and the unscaling read the scale there.
BOOST_AUTO_TEST_CASE(device_loss_scale_moves_as_the_hosts_and_picks_the_row_taken) {
  const optim::LossScaleConfig config{.dynamic = true, .initial_scale = 0x1p20, .window = 3, .hysteresis = 2};
  const int64_t groups = 2;
  zero::DeviceLossScale device(config, /*predivide=*/2.0, /*ranks=*/4, groups, Device::cpu(), /*ring_rows=*/3);
  optim::LossScaler host(config);
  int64_t taken = 0;
  std::map<int64_t, int> asked;  // how often each row was asked for
  const auto row_at = [&](int64_t t, const Tensor& row) {
    BOOST_TEST(row.shape() == (Shape{groups, kAdamWConstants}));
    for (int64_t i = 0; i < row.numel(); ++i) row.data<float>()[i] = float(1000 * t + i);
    ++asked[t];
    return 0.5 + double(t);
  };
  for (int64_t step = 0; step < 60; ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      const bool overflow = random_bits(77, uint64_t(step)) % 3 == 0;
      const Tensor ones = Tensor::ones({5});
      device.unscale({ones});
      BOOST_TEST(ones.data<float>()[0] == float(2.0 / (4.0 * host.scale())));
      BOOST_TEST(device.seed(4.0, DType::f64).item() == host.scale() / 4.0);
      device.prepare(row_at);
      const std::vector<double> outcome =
          device.decide(Tensor::full({1}, overflow ? INFINITY : 9.0, DType::f64)).to_vector<double>();
      host.update(overflow);
      BOOST_TEST(outcome == (std::vector<double>{0.5 + double(taken), overflow ? 1.0 : 0.0, host.scale()}),
                 boost::test_tools::per_element());
      const std::vector<float> k = device.constants().to_vector<float>();
      for (int64_t i = 0; i < groups * kAdamWConstants; ++i)
        BOOST_TEST(
            k[size_t(i)] == (i % kAdamWConstants == kAdamWSkip ? (overflow ? 1.0f : 0.0f) : float(1000 * taken + i)),
            "constant " << i);
      taken += overflow ? 0 : 1;
      if (random_bits(78, uint64_t(step)) % 5 == 0) {
        const zero::DeviceLossScale::Counters c = device.read();
        BOOST_TEST(c.taken == taken);
        BOOST_TEST(c.scale.scale == host.state().scale);
        BOOST_TEST(c.scale.hysteresis_left == host.state().hysteresis_left);
        BOOST_TEST(c.scale.clean_steps == host.state().clean_steps);
      }
    }
  }
  for (const auto& [t, n] : asked) BOOST_TEST(n == 1, "row " << t << " asked " << n << " times");
  BOOST_TEST(asked.count(taken) == 1);
  // A resumed run's counters: the rows are asked again from the steps taken.
  device.write({7, {0x1p10, 1, 2}});
  device.prepare(row_at);
  BOOST_TEST(device.decide(Tensor::full({1}, 1.0, DType::f64)).to_vector<double>() ==
                 (std::vector<double>{7.5, 0.0, 0x1p11}),  // the third clean step doubles
             boost::test_tools::per_element());
  BOOST_TEST(device.read().taken == 8);
  test::check_error([&] { zero::DeviceLossScale(config, 1.0, 1, 1, Device::cpu(), 1); }, {"2 rows or more, got 1"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_zero_parts
