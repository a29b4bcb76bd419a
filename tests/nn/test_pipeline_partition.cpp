// DeepSpeed's PipelineModule partition methods (nn/pipeline_partition.h) on DeepSpeed's own
// cases (tests/unit/runtime/utils/test_partition.py and tests/unit/utils/
// test_partition_balanced.py in DeepSpeed) and on triad's GPT layer list, each result
// worked out from DeepSpeed's partition_uniform and partition_balanced; errors name the key.
#include <boost/test/unit_test.hpp>

#include "nn/gpt_layers.h"
#include "nn/pipeline_partition.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_pipeline_partition)

using namespace triad;
using nn::LayerInfo;
using Bounds = std::vector<int>;

namespace {

std::vector<LayerInfo> weighted(const std::vector<int64_t>& params) {
  std::vector<LayerInfo> out;
  for (int64_t p : params) out.push_back({"Layer", p});
  return out;
}

Bounds by_parameters(const std::vector<int64_t>& params, int stages) {
  return nn::partition_layers(weighted(params), stages, "parameters");
}

// The GPT of 6 blocks of width 16, vocabulary 32, 8 positions: GPTEmbedding (640
// parameters), 6 Block (3280 each), GPTHead (544).
std::vector<LayerInfo> gpt_layers() {
  nn::GPTConfig c{.n_layer = 6, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 32};
  std::vector<LayerInfo> out;
  for (const nn::LayerSpec& l : nn::gpt_layers(c).layers) out.push_back({l.type, l.parameters});
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(uniform_gives_the_first_stages_one_more) {
  const auto uniform = [](int n, int stages) {
    return nn::partition_layers(weighted(std::vector<int64_t>(size_t(n), 1)), stages, "uniform");
  };
  // 10 in 4: chunks of 2, the residual 2 going to the first two stages.
  BOOST_TEST(uniform(10, 4) == (Bounds{0, 3, 6, 8, 10}), boost::test_tools::per_element());
  BOOST_TEST(uniform(8, 4) == (Bounds{0, 2, 4, 6, 8}), boost::test_tools::per_element());  // test_easy_balance_uniform
  BOOST_TEST(uniform(4, 4) == (Bounds{0, 1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(uniform(7, 1) == (Bounds{0, 7}), boost::test_tools::per_element());
  // Method names are case-insensitive, as in DeepSpeed.
  BOOST_TEST(nn::partition_layers(weighted({1, 1, 1}), 2, "Uniform") == (Bounds{0, 2, 3}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(parameters_follow_deepspeeds_programme) {
  // DeepSpeed's test_int_balanced: 0+1+2 | 3 | 3 | 3, every stage 3.
  BOOST_TEST(by_parameters({0, 1, 2, 3, 3, 3}, 4) == (Bounds{0, 3, 4, 5, 6}), boost::test_tools::per_element());
  // test_float_balanced ([0, 1.1, 1.9, 3, 3, 3]) in tenths: the same cut.
  BOOST_TEST(by_parameters({0, 11, 19, 30, 30, 30}, 4) == (Bounds{0, 3, 4, 5, 6}), boost::test_tools::per_element());
  // test_float_midheavy ([0, 1.1, 30, 3] in tenths): 0+11 | 300 | 30, the heavy layer alone.
  BOOST_TEST(by_parameters({0, 11, 300, 30}, 3) == (Bounds{0, 2, 3, 4}), boost::test_tools::per_element());
  // test_easy_balance_balanced and test_valid_partition.
  BOOST_TEST(by_parameters(std::vector<int64_t>(8, 1), 4) == (Bounds{0, 2, 4, 6, 8}), boost::test_tools::per_element());
  BOOST_TEST(by_parameters(std::vector<int64_t>(10, 1), 1) == (Bounds{0, 10}), boost::test_tools::per_element());
  // test_partition_balanced ([1, 1, 1, 1, 1] in 4: spread 1). Every cut has spread 1; the
  // programme keeps the later cut on ties at each step, (4 | 5), then (3 | 4), then
  // (2 | 3): the two-layer stage comes first.
  BOOST_TEST(by_parameters({1, 1, 1, 1, 1}, 4) == (Bounds{0, 2, 3, 4, 5}), boost::test_tools::per_element());
  // ([1, 1, 1, 1, 0, 1] in 4: spread 1): 1+1 | 1 | 1+0 | 1.
  BOOST_TEST(by_parameters({1, 1, 1, 1, 0, 1}, 4) == (Bounds{0, 2, 3, 5, 6}), boost::test_tools::per_element());
  // test_balance_bert: embedding, 24 blocks, a parameterless layer, head, in 8: the two
  // ends alone (52.6M each), four blocks per stage (50.4M), the last stage of blocks
  // taking the parameterless layer too.
  std::vector<int64_t> bert{52559872};
  for (int i = 0; i < 24; ++i) bert.push_back(12596224);
  bert.push_back(0), bert.push_back(52559872);
  BOOST_TEST(by_parameters(bert, 8) == (Bounds{0, 1, 5, 9, 13, 17, 21, 26, 27}), boost::test_tools::per_element());
  // One heavy layer against four light ones: 4 | 1+1+1+1.
  BOOST_TEST(by_parameters({4, 1, 1, 1, 1}, 2) == (Bounds{0, 1, 5}), boost::test_tools::per_element());
  // Equal spreads (1 | 0+1 and 1+0 | 1): the later cut wins.
  BOOST_TEST(by_parameters({1, 0, 1}, 2) == (Bounds{0, 2, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(parameters_on_the_gpt) {
  const std::vector<LayerInfo> gpt = gpt_layers();
  BOOST_TEST_REQUIRE(gpt.size() == 8u);
  BOOST_TEST(gpt.front().parameters == 640);
  BOOST_TEST(gpt[1].parameters == 3280);
  BOOST_TEST(gpt.back().parameters == 544);
  // Embedding + 3 blocks (10480) | 3 blocks + head (10384): a spread of 96; moving a block
  // either way makes it 6464 or more.
  BOOST_TEST(nn::partition_layers(gpt, 2, "parameters") == (Bounds{0, 4, 8}), boost::test_tools::per_element());
  // In 4: embedding + block (3920) | 2 blocks (6560) | 2 blocks | block + head (3824).
  BOOST_TEST(nn::partition_layers(gpt, 4, "parameters") == (Bounds{0, 2, 4, 6, 8}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(type_balances_the_matching_layers) {
  const std::vector<LayerInfo> gpt = gpt_layers();  // GPTEmbedding, 6 Block, GPTHead
  // Weights 0 1 1 1 1 1 1 0: three blocks a stage; the programme's later cuts put the
  // embedding with the first three and the head with the last three.
  BOOST_TEST(nn::partition_layers(gpt, 2, "type:Block") == (Bounds{0, 4, 8}), boost::test_tools::per_element());
  BOOST_TEST(nn::partition_layers(gpt, 3, "type:block") == (Bounds{0, 3, 5, 8}), boost::test_tools::per_element());
  BOOST_TEST(nn::partition_layers(gpt, 4, "TYPE:BLOCK") == (Bounds{0, 3, 5, 6, 8}), boost::test_tools::per_element());
  // Found anywhere in the type: "emb|head" weighs the two ends, 1 | 1.
  BOOST_TEST(nn::partition_layers(gpt, 2, "type:emb|head") == (Bounds{0, 7, 8}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_partitions_name_the_key) {
  const std::vector<LayerInfo> gpt = gpt_layers();
  BOOST_TEST(test::error_message([&] { nn::partition_layers(gpt, 9, "uniform"); }) ==
             "[config] pipeline.stages x pipeline.virtual_stages (9) exceeds the model's 8 layers: every stage needs "
             "at least one layer");
  BOOST_TEST(test::error_message([&] { nn::partition_layers(gpt, 2, "best"); }) ==
             "[config] pipeline.partition must be \"uniform\", \"parameters\" or \"type:REGEX\", got \"best\"");
  test::check_error([&] { nn::partition_layers(gpt, 0, "uniform"); }, {"pipeline.stages must be >= 1, got 0"});
  test::check_error([&] { nn::partition_layers(gpt, 2, "type:("); },
                    {"pipeline.partition \"type:(\"", "not a valid regular expression"});
  test::check_error([&] { nn::partition_layers(gpt, 2, "type:Conv"); },
                    {"pipeline.partition \"type:Conv\" matches none of the model's layer types"});
  test::check_error([&] { nn::partition_layers({}, 1, "parameters"); }, {"the model's 0 layers"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_partition
