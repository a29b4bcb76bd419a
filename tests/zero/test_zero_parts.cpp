// ZeRO's parts that need no ranks. ZeroConfig::validate, the one check of ZeRO's settings
// (the config's parser and ZeroOptimizer both call it): each key out of range, and ZeRO++
// that does not fit the stage or the data-parallel ranks, named in the message. The device
// shard store keeps each group's master weights and zeroed Adam moments where it was asked
// to, hands them back as the tensors themselves (an update written through them stays), and
// counts their bytes.
#define BOOST_TEST_MODULE zero_parts
#include <boost/test/unit_test.hpp>

#include "support/check.h"
#include "tensor/ops.h"
#include "zero/shard_store.h"
#include "zero/zero_config.h"

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

  const zero::ShardState& mixed = store.get(0);
  BOOST_TEST(mixed.master.is_same(master));
  for (const Tensor* t : {&mixed.exp_avg, &mixed.exp_avg_sq}) {
    BOOST_TEST((t->dtype() == DType::f32));
    BOOST_TEST(t->to_vector<float>() == std::vector<float>(3, 0.0f), boost::test_tools::per_element());
  }
  const zero::ShardState& plain = store.get(1);
  BOOST_TEST(!plain.master.defined());
  BOOST_TEST(plain.exp_avg.numel() == 5);
  BOOST_TEST(plain.exp_avg_sq.numel() == 5);
  // 3 elements x 3 tensors + 5 x 2, 4 bytes each.
  BOOST_TEST(store.device_bytes() == (9 + 10) * 4);

  ops::fill_(store.get(1).exp_avg, 0.5);
  ops::mul_(store.get(0).master, 2.0);
  BOOST_TEST(store.get(1).exp_avg.to_vector<float>() == std::vector<float>(5, 0.5f), boost::test_tools::per_element());
  BOOST_TEST(store.get(0).master.to_vector<float>() == (std::vector<float>{2, 4, 6}), boost::test_tools::per_element());
  BOOST_TEST(store.get(1).exp_avg_sq.to_vector<float>() == std::vector<float>(5, 0.0f),
             boost::test_tools::per_element());
}
