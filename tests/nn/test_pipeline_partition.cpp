// DeepSpeed's PipelineModule partition methods, on cases worked out by hand from its
// definitions (deepspeed/runtime/utils.py partition_uniform and partition_balanced).
#define BOOST_TEST_MODULE pipeline_partition
#include <boost/test/unit_test.hpp>

#include "nn/gpt_layers.h"
#include "nn/pipeline_partition.h"
#include "support/check.h"

using namespace triad;
using nn::LayerInfo;

namespace {

std::vector<LayerInfo> weighted(const std::vector<int64_t>& params) {
  std::vector<LayerInfo> out;
  for (int64_t p : params) out.push_back({"Layer", p});
  return out;
}

// The GPT of 6 blocks of width 16, vocabulary 32, 8 positions: embedding 640 parameters,
// blocks 3280, head 544.
std::vector<LayerInfo> gpt_layers() {
  nn::GPTConfig c{.n_layer = 6, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 32};
  std::vector<LayerInfo> out;
  for (const nn::LayerSpec& l : nn::gpt_layers(c).layers) out.push_back({l.type, l.parameters});
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(uniform_gives_the_first_stages_one_more) {
  // 10 layers in 4: chunks of 2, the residual 2 going to the first two stages.
  BOOST_TEST(nn::partition_layers(weighted(std::vector<int64_t>(10, 1)), 4, "uniform") == (std::vector<int>{0, 3, 6, 8, 10}),
             boost::test_tools::per_element());
  BOOST_TEST(nn::partition_layers(weighted(std::vector<int64_t>(4, 1)), 4, "uniform") == (std::vector<int>{0, 1, 2, 3, 4}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(parameters_balances_the_heaviest_against_the_lightest) {
  // One heavy layer against four light ones: 4 | 1+1+1+1.
  BOOST_TEST(nn::partition_layers(weighted({4, 1, 1, 1, 1}), 2, "parameters") == (std::vector<int>{0, 1, 5}),
             boost::test_tools::per_element());
  // The GPT: embedding + 3 blocks (10480) against 3 blocks + head (10384), a spread of 96;
  // any other cut is worse.
  const std::vector<LayerInfo> gpt = gpt_layers();
  BOOST_TEST(gpt.front().parameters == 640);
  BOOST_TEST(gpt[1].parameters == 3280);
  BOOST_TEST(gpt.back().parameters == 544);
  BOOST_TEST(nn::partition_layers(gpt, 2, "parameters") == (std::vector<int>{0, 4, 8}), boost::test_tools::per_element());
  // Equal spreads: the later cut wins (DeepSpeed's `>=`): 1 | 0+1 and 1+0 | 1 tie.
  BOOST_TEST(nn::partition_layers(weighted({1, 0, 1}), 2, "parameters") == (std::vector<int>{0, 2, 3}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(type_balances_the_matching_layers) {
  const std::vector<LayerInfo> gpt = gpt_layers();  // GPTEmbedding, 6 Block, GPTHead
  BOOST_TEST(nn::partition_layers(gpt, 2, "type:Block") == (std::vector<int>{0, 4, 8}), boost::test_tools::per_element());
  BOOST_TEST(nn::partition_layers(gpt, 3, "type:block") == (std::vector<int>{0, 3, 5, 8}),
             boost::test_tools::per_element());
  // A regex found anywhere in the type: "Emb|Head" weighs the two ends.
  BOOST_TEST(nn::partition_layers(gpt, 2, "type:emb|head") == (std::vector<int>{0, 7, 8}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_partitions_name_the_key) {
  const std::vector<LayerInfo> gpt = gpt_layers();
  test::check_error([&] { nn::partition_layers(gpt, 9, "uniform"); }, {"pipeline.stages", "8 layers"});
  test::check_error([&] { nn::partition_layers(gpt, 2, "best"); }, {"pipeline.partition", "\"best\""});
  test::check_error([&] { nn::partition_layers(gpt, 2, "type:("); }, {"pipeline.partition", "regular expression"});
  test::check_error([&] { nn::partition_layers(gpt, 2, "type:Conv"); }, {"pipeline.partition", "matches none"});
}
