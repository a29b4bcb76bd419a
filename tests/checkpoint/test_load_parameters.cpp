// engine::load_parameters, the weights-only start of fine-tuning (triad-train --init, the
// RLHF steps' `init`): a model takes another's weights, f32 master weights over a 16-bit
// /model; a value model takes a language model's under "base." and keeps its head; another
// model's file is an error naming the file, the dataset and the models.
#include <boost/test/unit_test.hpp>

#include "checkpoint/checkpoint.h"
#include "nn/gpt.h"
#include "nn/value_model.h"
#include "support/check.h"
#include "support/files.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_load_parameters)

using namespace triad;

namespace {

nlohmann::json config(int64_t d_model) {
  return {{"model", {{"n_layer", 1}, {"n_head", 2}, {"d_model", d_model}, {"seq_len", 8}, {"vocab_size", 31}}},
          {"train_batch_size", 1},
          {"steps", 1}};
}

nn::GPTConfig gpt(int64_t d_model, uint64_t seed) {
  nn::GPTConfig c = engine::parse_config(config(d_model)).model;
  c.init_seed = seed;
  return c;
}

double max_diff(const io::NamedTensors& a, const io::NamedTensors& b, const std::string& b_prefix = "") {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    BOOST_REQUIRE_EQUAL(b_prefix + a[i].first, b[i].first);
    d = std::max(d, test::max_abs_diff(a[i].second, b[i].second));
  }
  return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_model_takes_the_files_weights) {
  test::TempDir dir;
  nn::GPT trained(gpt(16, 1)), fresh(gpt(16, 2));
  engine::save_initial_checkpoint(dir.file("a.h5"), config(16), trained.named_parameters());
  BOOST_TEST(max_diff(trained.named_parameters(), fresh.named_parameters()) > 0.0);
  const int64_t n = engine::load_parameters(dir.file("a.h5"), fresh);
  BOOST_TEST(n == int64_t(trained.named_parameters().size()));
  BOOST_TEST(max_diff(trained.named_parameters(), fresh.named_parameters()) == 0.0);

  // A bf16 run's checkpoint: /model in bf16, the f32 master weights beside it.
  nlohmann::json bf16 = config(16);
  bf16["bf16"] = {{"enabled", true}};
  engine::save_initial_checkpoint(dir.file("bf16.h5"), bf16, trained.named_parameters());
  nn::GPT other(gpt(16, 3));
  engine::load_parameters(dir.file("bf16.h5"), other);
  BOOST_TEST(max_diff(trained.named_parameters(), other.named_parameters()) == 0.0);
}

BOOST_AUTO_TEST_CASE(a_value_model_takes_them_under_base_and_keeps_its_head) {
  test::TempDir dir;
  nn::GPT trained(gpt(16, 1));
  engine::save_initial_checkpoint(dir.file("a.h5"), config(16), trained.named_parameters());
  nn::ValueModel value(std::make_shared<nn::GPT>(gpt(16, 2)), 16, *nn::serial(), 9);
  const Tensor head = ops::clone(value.v_head->weight);
  const int64_t n = engine::load_parameters(dir.file("a.h5"), value, "base.");
  BOOST_TEST(n == int64_t(trained.named_parameters().size()));
  BOOST_TEST(max_diff(trained.named_parameters(), value.base->named_parameters()) == 0.0);
  BOOST_TEST(test::max_abs_diff(value.v_head->weight, head) == 0.0);
}

BOOST_AUTO_TEST_CASE(another_models_file_is_an_error_naming_it) {
  test::TempDir dir;
  nn::GPT wide(gpt(32, 1)), narrow(gpt(16, 2));
  engine::save_initial_checkpoint(dir.file("wide.h5"), config(32), wide.named_parameters());
  test::check_error([&] { engine::load_parameters(dir.file("wide.h5"), narrow); },
                    {"wide.h5", "wte.weight", "(31, 32)", "(31, 16)", "d_model 32"});
  // A value model's file read as a language model: its names are under "base.".
  nn::ValueModel value(std::make_shared<nn::GPT>(gpt(16, 2)), 16, *nn::serial(), 9);
  engine::save_initial_checkpoint(dir.file("value.h5"), config(16), value.named_parameters());
  test::check_error([&] { engine::load_parameters(dir.file("value.h5"), narrow); },
                    {"value.h5", "has no dataset", "wte.weight"});
  test::check_error([&] { engine::load_parameters(dir.file("missing.h5"), narrow); }, {"missing.h5"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_load_parameters
