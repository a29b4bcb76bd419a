// Quantized model files (checkpoint/quantized_model.h, triad-compress zeroquant) of a GPT
// and a Llama: a W8A16 or W4A16 model generates the same greedy 64 tokens as the f32 model
// running on the same quantized weights dequantized; a W8A8 or W4A8 model's logits stay
// within a stated bound of that model's (the only difference is the per-token int8
// activations); the file records the recipe; bad recipes and resuming training from a
// quantized model are errors naming the problem. Layer-by-layer distillation lowers every
// block's distillation loss below post-training quantization's; that loss's gradient
// matches f64 finite differences.
#include <boost/test/unit_test.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layer_distillation.h"
#include "checkpoint/quantized_model.h"
#include "config/model_factory.h"
#include "engine/generate.h"
#include "parallel/self_communicator.h"
#include "support/check.h"
#include "support/files.h"
#include "triad.h"

using namespace triad;

namespace {

nlohmann::json config(const std::string& arch) {
  nlohmann::json model = {{"arch", arch},  {"n_layer", 2},  {"n_head", 4},
                          {"d_model", 64}, {"seq_len", 96}, {"vocab_size", 97}};
  if (arch == "llama") model["n_kv_head"] = 2, model["intermediate_size"] = 192;
  return {{"model", model}, {"train_batch_size", 1}, {"steps", 1}};
}

// A checkpoint of a freshly initialised model of `arch` at dir/f32.h5.
std::string write_checkpoint(const test::TempDir& dir, const std::string& arch) {
  const std::shared_ptr<nn::LanguageModel> model = engine::build_model(engine::parse_config(config(arch)));
  const std::string path = dir.file(arch + "-f32.h5");
  engine::save_initial_checkpoint(path, config(arch), model->named_parameters());
  return path;
}

// The f32 model of `path` with each quantized layer's weight replaced by its quantization
// under `recipe`, dequantized.
std::shared_ptr<nn::LanguageModel> dequantized_model(const std::string& path, const engine::QuantRecipe& recipe) {
  const engine::LoadedModel m = engine::load_model(path);
  for (const auto& [name, linear] : engine::quantized_linears(m.model)) {
    const Quantized q = ops::quantize_blocks(linear->weight, recipe.format());
    ops::dequantize_blocks(q.q, q.scales, linear->weight, recipe.format());
  }
  return m.model;
}

std::vector<int32_t> greedy(nn::LanguageModel& model) {
  engine::SamplingOptions o;
  o.temperature = 0;
  o.max_new_tokens = 64;
  return engine::generate(model, {3, 14, 15, 92, 65}, o);
}

Tensor logits(nn::LanguageModel& model) {
  NoGradGuard no_grad;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 48; ++i) ids.push_back((i * 37 + 5) % 97);
  return model.forward(Tensor::from_vector(ids, {1, 48}));
}

}  // namespace

BOOST_AUTO_TEST_CASE(weight_only_models_generate_the_dequantized_models_text) {
  test::TempDir dir;
  for (const std::string arch : {"gpt2", "llama"}) {
    const std::string f32 = write_checkpoint(dir, arch);
    for (int wbits : {8, 4}) {
      engine::QuantRecipe recipe;
      recipe.wbits = wbits;
      recipe.abits = 16;
      recipe.group_size = 32;
      const std::string out = dir.file(arch + "-w" + std::to_string(wbits) + ".h5");
      engine::save_quantized_model(f32, out, recipe);
      const engine::LoadedModel q = engine::load_model(out);
      const auto linears = engine::quantized_linears(q.model);
      BOOST_TEST(linears.size() == (arch == "gpt2" ? 8u : 14u));
      for (const auto& [name, linear] : linears) BOOST_TEST(linear->quantized() != nullptr, name);
      const std::vector<int32_t> got = greedy(*q.model), want = greedy(*dequantized_model(f32, recipe));
      BOOST_TEST(got == want, arch << " W" << wbits << "A16: the quantized model's 64 greedy tokens differ");
      BOOST_TEST(engine::read_recipe(out).wbits == wbits);
      const engine::CheckpointSummary s = engine::read_summary(out);
      BOOST_TEST(s.kind == "quantized");
      BOOST_TEST(s.recipe.at("group_size") == 32);
      BOOST_TEST(engine::failed_checksums(out).empty());
    }
  }
}

// Per-token int8 activations move each logit by a few quantization steps of the layers'
// inputs: for these models at most 2% of the largest logit; and they do move it.
BOOST_AUTO_TEST_CASE(w8a8_and_w4a8_logits_within_a_bound_of_the_dequantized_model) {
  test::TempDir dir;
  for (const std::string arch : {"gpt2", "llama"}) {
    const std::string f32 = write_checkpoint(dir, arch);
    for (int wbits : {8, 4}) {
      engine::QuantRecipe recipe;
      recipe.wbits = wbits;
      recipe.abits = 8;
      recipe.group_size = 64;
      const std::string out = dir.file(arch + "-w" + std::to_string(wbits) + "a8.h5");
      engine::save_quantized_model(f32, out, recipe);
      const Tensor got = logits(*engine::load_model(out).model);
      const Tensor want = logits(*dequantized_model(f32, recipe));
      const double diff = test::max_abs_diff(got, want), top = ops::max_abs(want);
      BOOST_TEST_MESSAGE(arch << " W" << wbits << "A8: max |logit difference| " << diff << " of max |logit| " << top);
      BOOST_TEST(diff <= 0.02 * top, arch << " W" << wbits << "A8: " << diff << " > 2% of " << top);
      BOOST_TEST(diff > 0.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_recipes_and_resuming_training_are_errors) {
  test::TempDir dir;
  const std::string f32 = write_checkpoint(dir, "gpt2");
  engine::QuantRecipe bad;
  bad.wbits = 3;
  test::check_error([&] { engine::save_quantized_model(f32, dir.file("x.h5"), bad); }, {"wbits must be 8 or 4, got 3"});
  bad = {};
  bad.abits = 4;
  test::check_error([&] { engine::save_quantized_model(f32, dir.file("x.h5"), bad); },
                    {"abits must be 8 or 16, got 4"});
  bad = {};
  bad.group_size = 48;
  test::check_error([&] { engine::save_quantized_model(f32, dir.file("x.h5"), bad); },
                    {"group size 48 does not divide the input dimension 64", "blocks.0.attn.qkv.weight"});

  const std::string out = dir.file("w8a8.h5");
  engine::save_quantized_model(f32, out, {});
  engine::Engine e(engine::parse_config(config("gpt2")));
  parallel::SelfCommunicator self;
  test::check_error([&] { engine::load_checkpoint(out, e, self); },
                    {"w8a8.h5", "is a quantized model", "training resumes from a full-precision checkpoint"});
}

BOOST_AUTO_TEST_CASE(layer_distillation_lowers_every_blocks_loss_below_post_training_quantization) {
  for (const std::string arch : {"gpt2", "llama"}) {
    test::TempDir dir;
    const engine::LoadedModel m = engine::load_model(write_checkpoint(dir, arch));
    std::vector<Tensor> batches;
    for (int64_t b = 0; b < 4; ++b) {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < 2 * 32; ++i) ids.push_back((i * 31 + b * 17 + 3) % 97);
      batches.push_back(Tensor::from_vector(ids, {2, 32}));
    }
    engine::QuantRecipe recipe;
    recipe.wbits = 4;
    recipe.group_size = 32;
    const std::vector<engine::BlockDistillation> r = engine::distill_blocks(m.model, recipe, batches, {60, 1e-4});
    BOOST_TEST_REQUIRE(r.size() == 2u);
    for (const engine::BlockDistillation& b : r) {
      BOOST_TEST_MESSAGE(arch << " block " << b.block << ": MSE " << b.mse_ptq << " (PTQ) -> " << b.mse_lkd
                              << " (LKD)");
      BOOST_TEST(b.mse_ptq > 0.0);
      BOOST_TEST(b.mse_lkd < 0.8 * b.mse_ptq, arch << " block " << b.block);
    }
    // The distilled model is written as PTQ's is, and no layer is left fake-quantized.
    engine::save_quantized_model(m, dir.file("lkd.h5"), recipe);
    BOOST_TEST(engine::read_recipe(dir.file("lkd.h5")).wbits == 4);
  }
  test::TempDir dir;
  const engine::LoadedModel m = engine::load_model(write_checkpoint(dir, "gpt2"));
  test::check_error([&] { engine::distill_blocks(m.model, {}, {}, {1, 1e-3}); }, {"LKD", "no batches"});
}

BOOST_AUTO_TEST_CASE(distillation_loss_gradient_matches_f64_finite_differences) {
  std::vector<double> s(12), t(12);
  for (size_t i = 0; i < s.size(); ++i) s[i] = std::sin(0.7 * double(i)), t[i] = std::cos(0.3 * double(i));
  Tensor student = Tensor::from_vector(s, {3, 4});
  const Tensor teacher = Tensor::from_vector(t, {3, 4});
  set_requires_grad(student);
  backward(engine::distillation_mse(student, teacher));
  const std::vector<double> g = grad(student).to_vector<double>();
  const auto loss = [&](const std::vector<double>& v) {
    NoGradGuard no_grad;
    return engine::distillation_mse(Tensor::from_vector(v, {3, 4}), teacher).item();
  };
  const double h = 1e-6;
  for (size_t i = 0; i < s.size(); ++i) {
    std::vector<double> up = s, down = s;
    up[i] += h, down[i] -= h;
    BOOST_TEST(g[i] == (loss(up) - loss(down)) / (2 * h), boost::test_tools::tolerance(1e-7));
    BOOST_TEST(g[i] == 2.0 * (s[i] - t[i]) / 12.0, boost::test_tools::tolerance(1e-12));
  }
}
