// Quantized model files (checkpoint/quantized_model.h, triad-compress zeroquant) of a GPT
// and a Llama: a W8A16 or W4A16 model generates the same greedy 64 tokens as the f32 model
// running on the same quantized weights dequantized; a W8A8 or W4A8 model's logits stay
// within a stated bound of that model's (the only difference is the per-token int8
// activations); with quantize_embeddings the token tables and the output head too (a GPT's
// tied table once), its lookup the file's rows dequantized bit for bit, no f32 table held; a
// file without that key loads as before; the file records the recipe; bad recipes and
// resuming training from a quantized model are errors naming the problem. Layer-by-layer distillation lowers every
// block's distillation loss below post-training quantization's; that loss's gradient
// matches f64 finite differences. XTC: the logit distillation loss against f64 finite
// differences and its closed form; kept blocks parsed and copied from the right teacher
// blocks; a ternary or binary student file generates the text of the f32 model on its
// dequantized weights, and at A8 its logits equal that model's fake-quantized forward (the
// one it trained with); bad input named.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/extreme_compression.h"
#include "checkpoint/held_out_loss.h"
#include "checkpoint/layer_distillation.h"
#include "checkpoint/quantized_model.h"
#include "config/model_factory.h"
#include "engine/generate.h"
#include "io/h5file.h"
#include "io/token_file.h"
#include "parallel/self_communicator.h"
#include "support/check.h"
#include "support/files.h"
#include "tensor/allocator.h"
#include "train/training_data.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_quantized_model)

using namespace triad;

namespace {

nlohmann::json config(const std::string& arch, int64_t n_layer = 2) {
  nlohmann::json model = {{"arch", arch.starts_with("gpt2") ? "gpt2" : arch},
                          {"n_layer", n_layer},
                          {"n_head", 4},
                          {"d_model", 64},
                          {"seq_len", 96},
                          {"vocab_size", 97}};
  if (arch == "llama") model["n_kv_head"] = 2, model["intermediate_size"] = 192;
  if (arch == "gpt2-padded") model["make_vocab_size_divisible_by"] = 64;  // a token table of 128 rows
  if (arch == "gpt2-moe")  // (no sampled second choice: both models route alike)
    model["moe"] = {{"num_experts", 4}, {"every", 1}, {"top_k", 2}, {"drop_tokens", false}, {"top2_2nd_expert_sampling", false}};
  return {{"model", model}, {"train_batch_size", 1}, {"steps", 1}};
}

// A checkpoint of a freshly initialised model of `arch` at dir/<arch>-f32.h5.
std::string write_checkpoint(const test::TempDir& dir, const std::string& arch, int64_t n_layer = 2) {
  // (a checkpoint holds the vocabulary's rows, without the padding: the unpadded model's)
  const std::string unpadded = arch == "gpt2-padded" ? "gpt2" : arch;
  const std::shared_ptr<nn::LanguageModel> model =
      engine::build_model(engine::parse_config(config(unpadded, n_layer)));
  const std::string path = dir.file(arch + "-" + std::to_string(n_layer) + "-f32.h5");
  engine::save_initial_checkpoint(path, config(arch, n_layer), model->named_parameters());
  return path;
}

// The f32 model of a quantized file: its full-precision parameters, and each quantized
// weight dequantized.
std::shared_ptr<nn::LanguageModel> dequantized_file(const std::string& path) {
  const io::H5File file = io::H5File::open(path);
  const std::shared_ptr<nn::LanguageModel> model =
      engine::build_model(engine::parse_config(nlohmann::json::parse(file.get_attr_string("/", "config"))));
  const engine::QuantRecipe recipe = engine::read_recipe(path);
  for (const auto& [name, p] : model->named_parameters())
    if (file.has("/model/" + name)) ops::copy_(p, file.read("/model/" + name));
  for (const auto& [name, linear] : engine::quantized_linears(model)) {
    const std::string base = "/quantized/" + name + ".weight";
    ops::dequantize_blocks(file.read(base + "/q"), file.read(base + "/scales"), linear->weight,
                           recipe.format(linear->weight.size(1)));
  }
  return model;
}

// A token file of n tokens of the 97-token vocabulary at dir/tokens.bin.
std::string write_tokens(const test::TempDir& dir, int64_t n = 4000) {
  std::vector<uint32_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(uint32_t((i * 37 + i / 7 + 5) % 97));
  io::write_token_file(dir.file("tokens.bin"), tokens, 97);
  return dir.file("tokens.bin");
}

// The weight of a module of engine::quantized_embeddings (an nn::Embedding or nn::Linear).
Tensor table_weight_of(const nn::ModulePtr& m) {
  if (const auto table = std::dynamic_pointer_cast<nn::Embedding>(m)) return table->weight;
  return std::dynamic_pointer_cast<nn::Linear>(m)->weight;
}

// The f32 model of `path` with each weight `recipe` quantizes (the blocks' linear layers;
// with quantize_embeddings the token tables and the output head too) replaced by its
// quantization, dequantized.
std::shared_ptr<nn::LanguageModel> dequantized_model(const std::string& path, const engine::QuantRecipe& recipe) {
  const engine::LoadedModel m = engine::load_model(path);
  std::vector<Tensor> weights;
  for (const auto& [name, linear] : engine::quantized_linears(m.model)) weights.push_back(linear->weight);
  if (recipe.quantize_embeddings)
    for (const auto& [name, table] : engine::quantized_embeddings(m.model)) weights.push_back(table_weight_of(table));
  for (const Tensor& w : weights) {
    const QuantFormat format = recipe.format(w.size(1));
    const Quantized q = ops::quantize_blocks(w, format);
    ops::dequantize_blocks(q.q, q.scales, w, format);
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

// The MoE GPT's gates stay f32 (quantized_linears); its experts' layers are quantized.
BOOST_AUTO_TEST_CASE(weight_only_models_generate_the_dequantized_models_text) {
  test::TempDir dir;
  for (const std::string arch : {"gpt2", "llama", "gpt2-moe"}) {
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
      BOOST_TEST(linears.size() == (arch == "gpt2" ? 8u : arch == "llama" ? 14u : 20u));
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

// With quantize_embeddings the token tables and the output head are quantized too (a GPT's
// tied table once, a Llama's embed and head): at W8A16 and W4A16 the model generates the 64
// greedy tokens of the f32 model on the dequantized weights (tables and head included) and
// its loss is that model's (their logits differ by f32 rounding: the head's products added in
// another order); at W8A8 its logits stay within 2% of that model's largest logit. It holds
// no f32 table, and a table's lookup is the file's rows dequantized (dequantize_blocks), bit
// for bit. The padded GPT's table has 128 rows for 97 tokens.
BOOST_AUTO_TEST_CASE(quantized_embeddings_generate_the_dequantized_models_text) {
  test::TempDir dir;
  std::vector<int64_t> ids, next;
  for (int64_t i = 0; i < 2 * 40; ++i) ids.push_back((i * 37 + 5) % 97), next.push_back((i * 37 + 42) % 97);
  const Tensor inputs = Tensor::from_vector(ids, {2, 40}), targets = Tensor::from_vector(next, {2, 40});
  for (const std::string arch : {"gpt2", "gpt2-padded", "llama"}) {
    const std::string f32 = write_checkpoint(dir, arch);
    for (const auto& [wbits, abits] : {std::pair{8, 16}, std::pair{4, 16}, std::pair{8, 8}}) {
      engine::QuantRecipe recipe;
      recipe.wbits = wbits;
      recipe.abits = abits;
      recipe.group_size = 32;
      recipe.quantize_embeddings = true;
      const std::string what = arch + " W" + std::to_string(wbits) + "A" + std::to_string(abits);
      const std::string out = dir.file(arch + "-emb-w" + std::to_string(wbits) + "a" + std::to_string(abits) + ".h5");
      engine::save_quantized_model(f32, out, recipe);
      BOOST_TEST(engine::read_recipe(out).quantize_embeddings);
      BOOST_TEST(engine::read_summary(out).recipe.at("quantize_embeddings") == true);
      BOOST_TEST(engine::failed_checksums(out).empty());
      const engine::LoadedModel q = engine::load_model(out);
      const auto tables = engine::quantized_embeddings(q.model);
      BOOST_TEST_REQUIRE(tables.size() == (arch == "llama" ? 2u : 1u));
      std::set<std::string> params;
      for (const auto& [name, p] : q.model->named_parameters()) params.insert(name);
      BOOST_TEST(params.count(arch == "llama" ? "norm_f.weight" : "wpe.weight") == 1u, what);
      for (const auto& [name, m] : tables) {
        BOOST_TEST(!params.count(name + ".weight"), what << ": " << name << " holds an f32 weight");
        BOOST_TEST(!table_weight_of(m).defined(), what << ": " << name);
        const auto table = std::dynamic_pointer_cast<nn::Embedding>(m);
        BOOST_TEST((table ? table->quantized() : std::dynamic_pointer_cast<nn::Linear>(m)->quantized()) != nullptr,
                   what << ": " << name << " is not quantized");
      }
      const std::shared_ptr<nn::LanguageModel> dq = dequantized_model(f32, recipe);
      if (abits == 16) {
        BOOST_TEST(greedy(*q.model) == greedy(*dq), what << ": the quantized model's 64 greedy tokens differ");
        NoGradGuard no_grad;
        const double got = q.model->loss(inputs, targets).item(), want = dq->loss(inputs, targets).item();
        BOOST_TEST_MESSAGE(what << ": loss " << got << ", dequantized model's " << want);
        BOOST_TEST(got == want, boost::test_tools::tolerance(1e-5));
      } else {
        const Tensor got = logits(*q.model), want = logits(*dq);
        const double diff = test::max_abs_diff(got, want), top = ops::max_abs(want);
        BOOST_TEST_MESSAGE(what << ": max |logit difference| " << diff << " of max |logit| " << top);
        BOOST_TEST(diff <= 0.02 * top, what << ": " << diff << " > 2% of " << top);
        BOOST_TEST(diff > 0.0);
      }
      // The lookup: rows 0, 96 (the last token) and others of the file's table, dequantized.
      const std::string table_name = tables.front().first;
      const io::H5File file = io::H5File::open(out);
      const Tensor tq = file.read("/quantized/" + table_name + ".weight/q");
      const Tensor ts = file.read("/quantized/" + table_name + ".weight/scales");
      BOOST_TEST(tq.size(0) == (arch == "gpt2-padded" ? 128 : 97), what);
      Tensor rows = Tensor::empty({tq.size(0), 64});
      ops::dequantize_blocks(tq, ts, rows, recipe.format(64));
      const Tensor some = Tensor::from_vector(std::vector<int64_t>{0, 96, 5, 5, 41, 63}, {2, 3});
      const Tensor got = (*std::dynamic_pointer_cast<nn::Embedding>(tables.front().second))(some);
      const Tensor want = ops::embedding(rows, some);
      BOOST_TEST_REQUIRE((got.shape() == Shape{2, 3, 64}));
      BOOST_TEST(std::memcmp(got.raw_data(), want.raw_data(), size_t(want.nbytes())) == 0,
                 what << ": the table's lookup differs from dequantize_blocks of its rows");
    }
  }
}

// A quantized model loaded for inference holds its full-precision parameters and, for each
// quantized layer, only its packed integers, scales and sums: the closed form below, which
// the allocator's live bytes after loading equal (with a Llama's rotary tables). No f32 weight of those layers is
// allocated: the load's peak stays below the f32 model's bytes, which it would pass if
// they were (the packed weights come on top of them).
BOOST_AUTO_TEST_CASE(quantized_models_hold_their_integers_and_no_f32_weights) {
  test::TempDir dir;
  for (const std::string arch : {"gpt2", "llama"}) {
    const std::string f32 = write_checkpoint(dir, arch);
    const engine::LoadedModel full = engine::load_model(f32);
    for (int wbits : {8, 4})
      for (bool embeddings : {false, true}) {
        engine::QuantRecipe recipe;
        recipe.wbits = wbits;
        recipe.group_size = 32;
        recipe.quantize_embeddings = embeddings;
        const std::string what = arch + " W" + std::to_string(wbits) + (embeddings ? " with embeddings" : "");
        const std::string out =
            dir.file(arch + "-bytes-w" + std::to_string(wbits) + (embeddings ? "-emb" : "") + ".h5");
        engine::save_quantized_model(f32, out, recipe);
        // f32 parameters other than the quantized weights; per quantized (N, K) weight (the
        // blocks' linear layers, and the tables and head with embeddings), rows padded to 32:
        // N' K wbits / 8 bytes of integers and N' K / 32 f32 scales and i32 sums.
        std::vector<std::pair<std::string, Tensor>> weights;
        for (const auto& [name, linear] : engine::quantized_linears(full.model))
          weights.emplace_back(name + ".weight", linear->weight);
        if (embeddings)
          for (const auto& [name, table] : engine::quantized_embeddings(full.model))
            weights.emplace_back(name + ".weight", table_weight_of(table));
        BOOST_TEST(weights.size() == (arch == "gpt2" ? 8u : 14u) + (embeddings ? (arch == "gpt2" ? 1u : 2u) : 0u));
        int64_t kept = 0, packed = 0, f32_weights = 0;
        std::set<std::string> quantized;
        for (const auto& [name, w] : weights) {
          const int64_t n = w.size(0), k = w.size(1), padded = (n + 31) / 32 * 32;
          packed += padded * k * wbits / 8 + 2 * padded * (k / 32) * 4;
          f32_weights += n * k * 4;
          quantized.insert(name);
        }
        for (const auto& [name, p] : full.model->named_parameters())
          if (!quantized.count(name)) kept += p.numel() * 4;
        for (const auto& [name, b] : full.model->named_buffers()) kept += b.numel() * int64_t(element_size(b.dtype()));

        const size_t before = cpu_allocator().bytes_in_use();
        cpu_allocator().reset_peak();
        const engine::LoadedModel q = engine::load_model(out);
        const int64_t live = int64_t(cpu_allocator().bytes_in_use() - before);
        const int64_t peak = int64_t(cpu_allocator().peak_bytes() - before);
        const engine::ModelBytes b = engine::model_bytes(q.model);
        BOOST_TEST_MESSAGE(what << ": " << b.resident << " bytes in memory, " << b.full_precision
                                << " in full precision; load peak " << peak);
        BOOST_TEST(b.packed == packed, what);
        BOOST_TEST(b.packed_f32 == f32_weights, what);
        BOOST_TEST(b.resident == kept + packed, what);
        BOOST_TEST(b.full_precision == kept + f32_weights, what);
        // The Llama also holds its rotary tables, no module tensors: f64 cos and sin of
        // (seq_len, head_dim) = (96, 16).
        const int64_t rotary = arch == "llama" ? 2 * 96 * 16 * 8 : 0;
        BOOST_TEST(live == kept + packed + rotary, what << ": the allocator holds " << live << " bytes after loading");
        BOOST_TEST(peak < kept + f32_weights, what << ": loading peaked at " << peak << " bytes");
        for (const auto& [name, linear] : engine::quantized_linears(q.model))
          BOOST_TEST(!linear->weight.defined(), what << ": " << name << " has an f32 weight");
        for (const auto& [name, table] : engine::quantized_embeddings(q.model))
          BOOST_TEST(table_weight_of(table).defined() == !embeddings, what << ": " << name);
        for (const auto& [name, p] : q.model->named_parameters()) BOOST_TEST(!quantized.count(name), name);
      }
  }
  nn::Linear bare(8, 4, true, nn::Linear::WithoutWeight{});
  test::check_error([&] { bare(Tensor::zeros({2, 8})); }, {"Linear (4, 8): built without a weight"});
  test::check_error([&] { bare.set_weight(Tensor::zeros({8, 4})); }, {"expected a weight of (4, 8), got (8, 4)"});
  bare.set_weight(Tensor::zeros({4, 8}));
  test::check_error([&] { bare.set_weight(Tensor::zeros({4, 8})); }, {"set_weight: the layer has a weight"});
  nn::Embedding bare_table(10, 8, nn::WithoutWeight{});
  BOOST_TEST(bare_table.named_parameters().empty());
  const Tensor some = Tensor::from_vector(std::vector<int64_t>{1, 9}, {2});
  test::check_error([&] { bare_table(some); }, {"Embedding (10, 8): built without a weight"});
  test::check_error(
      [&] {
        bare_table.set_weight(Tensor::zeros({8, 10}));
      },
      {"expected a weight of (10, 8), got (8, 10)"});
  const QuantFormat f{8, 8};
  const Quantized q = ops::quantize_blocks(Tensor::ones({4, 8}), f);
  test::check_error(
      [&] { bare_table.use_quantized(std::make_shared<const PackedWeight>(ops::pack_weight(q, 4, 8, f)), 8); },
      {"Embedding::use_quantized: expected a packed weight of (10, 8)"});
  bare_table.set_weight(Tensor::ones({10, 8}));
  BOOST_TEST(ops::max_abs(ops::sub(bare_table(some), Tensor::ones({2, 8}))) == 0.0);
  test::check_error([&] { bare_table.set_weight(Tensor::zeros({10, 8})); }, {"set_weight: the table has a weight"});
}

// A file written before quantize_embeddings existed (its recipe without the key) reads as
// false and loads as before: the token tables and a Llama's head in f32, the values of the
// full-precision model's, and the logits of the file as written.
BOOST_AUTO_TEST_CASE(a_recipe_without_quantize_embeddings_loads_as_before) {
  test::TempDir dir;
  for (const std::string arch : {"gpt2", "llama"}) {
    const std::string f32 = write_checkpoint(dir, arch), out = dir.file(arch + "-old.h5");
    engine::save_quantized_model(f32, out, {});
    const Tensor before = logits(*engine::load_model(out).model);
    {
      io::H5File file = io::H5File::open(out, io::H5Access::read_write);
      nlohmann::json r = nlohmann::json::parse(file.get_attr_string("/", "recipe"));
      BOOST_TEST(r.at("quantize_embeddings") == false);
      r.erase("quantize_embeddings");
      file.set_attr_string("/", "recipe", r.dump());
      file.flush();
    }
    BOOST_TEST(!engine::read_summary(out).recipe.contains("quantize_embeddings"));
    BOOST_TEST(!engine::read_recipe(out).quantize_embeddings);
    const engine::LoadedModel m = engine::load_model(out), full = engine::load_model(f32);
    const auto tables = engine::quantized_embeddings(m.model), full_tables = engine::quantized_embeddings(full.model);
    BOOST_TEST_REQUIRE(tables.size() == full_tables.size());
    for (size_t i = 0; i < tables.size(); ++i) {
      BOOST_TEST_REQUIRE(table_weight_of(tables[i].second).defined(), arch << ": " << tables[i].first);
      BOOST_TEST(test::max_abs_diff(table_weight_of(tables[i].second), table_weight_of(full_tables[i].second)) == 0.0);
    }
    BOOST_TEST(test::max_abs_diff(logits(*m.model), before) == 0.0, arch);
    BOOST_TEST(engine::failed_checksums(out).empty());
  }
}

// The held-out loss is measured on triad-train's validation batches (the same rows of the
// token file's last val_fraction) and is the mean of the model's loss over them.
BOOST_AUTO_TEST_CASE(validation_loss_is_the_mean_loss_on_triad_trains_validation_batches) {
  test::TempDir dir;
  nlohmann::json c = config("gpt2");
  c["seed"] = 7;
  c["data"] = {{"corpus", write_tokens(dir)}, {"val_fraction", 0.1}};
  const std::shared_ptr<nn::LanguageModel> model = engine::build_model(engine::parse_config(c));
  const io::TokenFile tokens = io::TokenFile::open(dir.file("tokens.bin"));
  const engine::HeldOutSplit split = engine::held_out_split(tokens, c, 96);
  BOOST_TEST(split.train.end == 3600);
  BOOST_TEST(split.val.begin == 3600);
  BOOST_TEST(split.val.end == 4000);
  const auto batches = engine::validation_batches(tokens, split, c, 3, 2, 96);
  const std::unique_ptr<engine::TrainingData> data = engine::corpus_data(engine::parse_config(c));
  double sum = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const io::Batch want = data->validation(i, 2, 0, 2);
    BOOST_TEST(test::max_abs_diff(batches[size_t(i)].first, want.inputs) == 0.0);
    BOOST_TEST(test::max_abs_diff(batches[size_t(i)].second, want.targets) == 0.0);
    NoGradGuard no_grad;
    sum += model->loss(want.inputs, want.targets).item();
  }
  BOOST_TEST(model->is_training());
  BOOST_TEST(engine::validation_loss(*model, batches) == sum / 3, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(model->is_training());

  c["data"]["val_fraction"] = 0.0;
  test::check_error([&] { engine::validation_batches(tokens, engine::held_out_split(tokens, c, 96), c, 3, 2, 96); },
                    {"tokens.bin", "held-out part (data.val_fraction 0", "holds 0 tokens"});
  test::check_error([&] { engine::validation_batches(tokens, split, c, 0, 2, 96); }, {"positive count and rows"});
  test::check_error([&] { engine::validation_loss(*model, {}); }, {"no batches"});
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

  bad = {};
  bad.method = "xtc";
  bad.wbits = 2;
  bad.quantize_embeddings = true;
  test::check_error([&] { engine::save_quantized_model(f32, dir.file("x.h5"), bad); },
                    {"quantize_embeddings is built for zeroquant only", "xtc trains the embeddings"});
  nlohmann::json j = bad.to_json();
  test::check_error([&] { engine::QuantRecipe::from_json(j); }, {"quantize_embeddings is built for zeroquant only"});

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
      BOOST_TEST(b.kept);
    }
    // The distilled model is written as PTQ's is, and no layer is left fake-quantized.
    engine::save_quantized_model(m, dir.file("lkd.h5"), recipe);
    BOOST_TEST(engine::read_recipe(dir.file("lkd.h5")).wbits == 4);

    // A learning rate far too large raises every block's loss: each block is put back as it
    // was, bit for bit, and quantized as PTQ alone quantizes it.
    const engine::LoadedModel fresh = engine::load_model(write_checkpoint(dir, arch));
    std::vector<std::pair<std::string, Tensor>> before;
    for (const auto& [name, p] : fresh.model->named_parameters()) before.emplace_back(name, ops::clone(p));
    for (const engine::BlockDistillation& b : engine::distill_blocks(fresh.model, recipe, batches, {5, 1.0})) {
      BOOST_TEST(b.mse_lkd > b.mse_ptq, arch << " block " << b.block);
      BOOST_TEST(!b.kept);
    }
    const auto after = fresh.model->named_parameters();
    BOOST_TEST_REQUIRE(after.size() == before.size());
    for (size_t i = 0; i < after.size(); ++i)
      BOOST_TEST(std::memcmp(after[i].second.raw_data(), before[i].second.raw_data(), before[i].second.nbytes()) == 0,
                 before[i].first);
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

BOOST_AUTO_TEST_CASE(logit_distillation_gradient_matches_f64_finite_differences_and_its_closed_form) {
  const int64_t rows = 6, v = 5;
  const double temperature = 2.0;
  std::vector<double> s(size_t(rows * v)), t(s.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = 3 * std::sin(0.7 * double(i)), t[i] = 2 * std::cos(0.3 * double(i));
  Tensor student = Tensor::from_vector(s, {2, 3, v});
  const Tensor teacher = Tensor::from_vector(t, {2, 3, v});
  set_requires_grad(student);
  const Tensor kl = engine::distillation_kl(student, teacher, temperature);
  // T^2 / rows * sum_r sum_j pt (log pt - log ps), softmaxes at temperature T, in f64 here.
  const auto softmax_row = [&](const std::vector<double>& x, int64_t r) {
    std::vector<double> p(static_cast<size_t>(v));
    double z = 0;
    for (int64_t j = 0; j < v; ++j) z += p[size_t(j)] = std::exp(x[size_t(r * v + j)] / temperature);
    for (double& e : p) e /= z;
    return p;
  };
  double want = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> ps = softmax_row(s, r), pt = softmax_row(t, r);
    for (int64_t j = 0; j < v; ++j) want += pt[size_t(j)] * std::log(pt[size_t(j)] / ps[size_t(j)]);
  }
  want *= temperature * temperature / double(rows);
  BOOST_TEST(kl.item() == want, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(want > 0.01);
  backward(kl);
  const std::vector<double> g = grad(student).to_vector<double>();
  const auto loss = [&](const std::vector<double>& x) {
    NoGradGuard no_grad;
    return engine::distillation_kl(Tensor::from_vector(x, {2, 3, v}), teacher, temperature).item();
  };
  const double h = 1e-6;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> ps = softmax_row(s, r), pt = softmax_row(t, r);
    for (int64_t j = 0; j < v; ++j) {
      const size_t i = size_t(r * v + j);
      std::vector<double> up = s, down = s;
      up[i] += h, down[i] -= h;
      BOOST_TEST(g[i] == (loss(up) - loss(down)) / (2 * h), boost::test_tools::tolerance(1e-6));
      BOOST_TEST(g[i] == temperature * (ps[size_t(j)] - pt[size_t(j)]) / double(rows),
                 boost::test_tools::tolerance(1e-10));
    }
  }
  test::check_error([&] { engine::distillation_kl(student, teacher, 0.0); }, {"temperature must be positive"});
  test::check_error(
      [&] {
        engine::distillation_kl(student, Tensor::zeros({2, 3, 4}, DType::f64), 1.0);
      },
      {"distillation_kl", "differ in shape"});
}

BOOST_AUTO_TEST_CASE(keep_layers_are_parsed_and_bad_ones_named) {
  BOOST_TEST(engine::parse_keep_layers("", 3) == std::vector<int64_t>({0, 1, 2}));
  BOOST_TEST(engine::parse_keep_layers("every:2", 6) == std::vector<int64_t>({1, 3, 5}));
  BOOST_TEST(engine::parse_keep_layers("every:3", 7) == std::vector<int64_t>({2, 5}));
  BOOST_TEST(engine::parse_keep_layers("every:1", 2) == std::vector<int64_t>({0, 1}));
  BOOST_TEST(engine::parse_keep_layers("0,2,5", 6) == std::vector<int64_t>({0, 2, 5}));
  test::check_error([] { engine::parse_keep_layers("0,6", 6); },
                    {"--keep-layers '0,6'", "block 6 is out of range", "the teacher has 6 blocks"});
  test::check_error([] { engine::parse_keep_layers("2,1", 6); }, {"increasing order"});
  test::check_error([] { engine::parse_keep_layers("every:0", 6); }, {"K must be in [1, 6]"});
  test::check_error([] { engine::parse_keep_layers("every:x", 6); }, {"K is not a whole number"});
  test::check_error([] { engine::parse_keep_layers("1,a", 6); }, {"'a' is not a block index"});
}

// XTC's layer reduction: student block i starts as teacher block keep[i]; the rest (the
// embeddings, the final norm) as the teacher's. With 0 steps the file holds exactly that,
// the kept blocks' weights quantized with a scale per row.
BOOST_AUTO_TEST_CASE(xtc_student_starts_from_the_chosen_teacher_blocks) {
  for (const std::string arch : {"gpt2", "llama"}) {
    test::TempDir dir;
    const std::string path = write_checkpoint(dir, arch, 4);
    const engine::LoadedModel teacher = engine::load_model(path);
    engine::XtcOptions o;
    o.recipe.keep_layers = {1, 3};
    const std::shared_ptr<nn::LanguageModel> student =
        engine::build_model(engine::parse_config(engine::student_config(teacher.config, o, 1)));
    engine::init_student(*student, *teacher.model, {1, 3});
    std::map<std::string, Tensor> t;
    for (const auto& [name, p] : teacher.model->named_parameters()) t.emplace(name, p);
    int64_t compared = 0;
    for (const auto& [name, p] : student->named_parameters()) {
      std::string from = name;
      if (name.starts_with("blocks.0.")) from = "blocks.1." + name.substr(9);
      if (name.starts_with("blocks.1.")) from = "blocks.3." + name.substr(9);
      BOOST_TEST(test::max_abs_diff(p, t.at(from)) == 0.0, arch << ": " << name << " from " << from);
      compared += name.starts_with("blocks.") ? 1 : 0;
    }
    BOOST_TEST(compared > 0);

    o.keep_layers = "1,3";
    o.steps = 0;
    o.recipe.wbits = 1;
    o.recipe.group_size = 0;
    const io::TokenFile tokens = io::TokenFile::open(write_tokens(dir));
    engine::train_xtc(path, tokens, o, nullptr, dir.file("xtc.h5"));
    const engine::QuantRecipe r = engine::read_recipe(dir.file("xtc.h5"));
    BOOST_TEST(r.method == "xtc");
    BOOST_TEST(r.keep_layers == std::vector<int64_t>({1, 3}));
    BOOST_TEST(r.teacher_layers == 4);
    const io::H5File file = io::H5File::open(dir.file("xtc.h5"));
    for (const auto& [name, linear] : engine::quantized_linears(teacher.model)) {
      if (!name.starts_with("blocks.3.")) continue;
      const int64_t k = linear->weight.size(1);
      const Quantized q = ops::quantize_blocks(linear->weight, QuantFormat{1, k, true});
      const std::string base = "/quantized/blocks.1." + name.substr(9) + ".weight";
      BOOST_TEST(test::max_abs_diff(file.read(base + "/q"), q.q) == 0.0, arch << ": " << base);
      BOOST_TEST(test::max_abs_diff(file.read(base + "/scales"), q.scales) == 0.0, arch << ": " << base);
    }
    for (const engine::CheckpointSummary::Dataset& d : engine::read_summary(dir.file("xtc.h5")).datasets)
      BOOST_TEST(!(d.name.starts_with("/model/blocks.2.") || d.name.starts_with("/quantized/blocks.2.")), d.name);
  }
}

// The student file runs the integer GEMM: at A16 it generates the same 64 greedy tokens as
// the f32 model on its dequantized weights; at A8 its logits equal that model's forward with
// the linear layers fake-quantized (weights and per-token activations: what training saw)
// up to f32 rounding, where an activation on a rounding boundary may land on either side:
// measured 3e-7 to 1.3e-4 of the largest logit, bound 1e-3.
BOOST_AUTO_TEST_CASE(xtc_student_generates_the_dequantized_models_text) {
  for (const std::string arch : {"gpt2", "llama"}) {
    test::TempDir dir;
    const std::string path = write_checkpoint(dir, arch, 2);
    const io::TokenFile tokens = io::TokenFile::open(write_tokens(dir));
    for (int wbits : {2, 1})
      for (int abits : {16, 8}) {
        engine::XtcOptions o;
        o.recipe.wbits = wbits;
        o.recipe.abits = abits;
        o.recipe.group_size = 0;
        o.steps = 3;
        o.batch_size = 2;
        o.seq_len = 24;
        o.lr = 1e-3;
        o.label_weight = 0.5;
        o.eval_batches = 2;
        o.eval_interval = 2;
        std::vector<engine::XtcStep> steps;
        const std::string out = dir.file("xtc-w" + std::to_string(wbits) + "a" + std::to_string(abits) + ".h5");
        const engine::XtcResult r =
            engine::train_xtc(path, tokens, o, nullptr, out, [&](const engine::XtcStep& s) { steps.push_back(s); });
        const std::string what = arch + " W" + std::to_string(wbits) + "A" + std::to_string(abits);
        BOOST_TEST_REQUIRE(steps.size() == 3u);
        // Held-out losses after steps 2 and 3 (the last); the teacher's and the written
        // student's on the same batches, the student's by its integer GEMM: at A16 equal to the
        // fake-quantized one of the last step up to f32 rounding.
        BOOST_TEST(std::isnan(steps[0].val_loss));
        BOOST_TEST(std::isfinite(steps[1].val_loss));
        const engine::LoadedModel teacher = engine::load_model(path);
        const auto val = engine::validation_batches(tokens, engine::held_out_split(tokens, teacher.config, 24),
                                                    teacher.config, 2, 2, 24);
        BOOST_TEST(r.seq_len == 24);
        BOOST_TEST(r.teacher_val_loss == engine::validation_loss(*teacher.model, val));
        BOOST_TEST(r.val_loss == engine::validation_loss(*engine::load_model(out).model, val));
        BOOST_TEST(r.val_loss == steps[2].val_loss, boost::test_tools::tolerance(abits == 16 ? 1e-5 : 1e-3));
        for (const engine::XtcStep& s : steps) {
          BOOST_TEST(s.loss == s.logit + s.hidden + 0.5 * s.label, boost::test_tools::tolerance(1e-5));
          BOOST_TEST(s.logit > 0.0, what);
          BOOST_TEST(s.hidden > 0.0, what);
        }
        const std::shared_ptr<nn::LanguageModel> q = engine::load_model(out).model;
        const std::shared_ptr<nn::LanguageModel> f = dequantized_file(out);
        if (abits == 16) {
          BOOST_TEST(greedy(*q) == greedy(*f), what << ": the student's 64 greedy tokens differ");
          continue;
        }
        for (const auto& [name, linear] : engine::quantized_linears(f))
          linear->use_fake_quantization(engine::read_recipe(out).format(linear->weight.size(1)), 8);
        const Tensor got = logits(*q), want = logits(*f);
        const double diff = test::max_abs_diff(got, want), top = ops::max_abs(want);
        BOOST_TEST_MESSAGE(what << ": max |logit difference| to the fake-quantized model " << diff << " of " << top);
        BOOST_TEST(diff <= 1e-3 * top, what << ": " << diff << " > 1e-3 of " << top);
      }
  }
}

BOOST_AUTO_TEST_CASE(xtc_bad_input_is_named) {
  test::TempDir dir;
  const std::string path = write_checkpoint(dir, "gpt2", 2);
  const io::TokenFile tokens = io::TokenFile::open(write_tokens(dir));
  engine::XtcOptions o;
  o.steps = 1;
  o.recipe.wbits = 3;
  test::check_error([&] { engine::train_xtc(path, tokens, o, nullptr, dir.file("x.h5")); },
                    {"xtc's wbits must be 2 or 1, got 3"});
  o.recipe.wbits = 2;
  o.keep_layers = "0,2";
  test::check_error([&] { engine::train_xtc(path, tokens, o, nullptr, dir.file("x.h5")); },
                    {"--keep-layers '0,2'", "block 2 is out of range", "the teacher has 2 blocks"});
  o.keep_layers = "";
  test::check_error([&] { engine::train_xtc(dir.file("none.h5"), tokens, o, nullptr, dir.file("x.h5")); }, {"none.h5"});
  o.recipe.group_size = 12;
  test::check_error([&] { engine::train_xtc(path, tokens, o, nullptr, dir.file("x.h5")); },
                    {"group_size must be a positive multiple of 8 or 0 (one scale per row), got 12"});
  o.recipe.group_size = 0;
  engine::save_quantized_model(path, dir.file("w8.h5"), {});
  test::check_error([&] { engine::train_xtc(dir.file("w8.h5"), tokens, o, nullptr, dir.file("x.h5")); },
                    {"the teacher", "w8.h5", "is a quantized model"});
  test::check_error([&] { engine::export_weights(dir.file("w8.h5"), dir.file("e.h5"), DType::f32); },
                    {"w8.h5", "is a quantized model (triad-compress)", "not weights to export"});
}

// xtc --config: the recipe from DeepSpeed's compression_training keys, and what XTC does not
// do named by its key.
BOOST_AUTO_TEST_CASE(xtc_recipe_from_a_compression_training_section) {
  const auto weights = [](int start, int target, const nlohmann::json& shared) {
    return nlohmann::json{
        {"shared_parameters", shared},
        {"different_groups",
         {{"wq1", {{"params", {{"start_bits", start}, {"target_bits", target}}}, {"modules", {"*"}}}}}}};
  };
  const nlohmann::json on = {{"enabled", true}, {"quantize_groups", 1}};
  nlohmann::json c = {
      {"compression_training",
       {{"weight_quantization", weights(1, 1, on)},
        {"activation_quantization",
         {{"shared_parameters", {{"enabled", true}}}, {"different_groups", {{"aq1", {{"params", {{"bits", 8}}}}}}}}},
        {"layer_reduction", {{"enabled", true}, {"keep_number_layer", 2}, {"teacher_layer", {1, 3}}}}}}};
  engine::XtcOptions o;
  engine::apply_compression_config(c, 4, o);
  BOOST_TEST(o.recipe.wbits == 1);
  BOOST_TEST(o.recipe.abits == 8);
  BOOST_TEST(o.recipe.group_size == 0);
  BOOST_TEST(o.keep_layers == "1,3");
  BOOST_TEST(engine::parse_keep_layers(o.keep_layers, 4) == std::vector<int64_t>({1, 3}));

  c["compression_training"]["weight_quantization"] = weights(2, 2, on);
  c["compression_training"]["activation_quantization"]["shared_parameters"]["enabled"] = false;
  c["compression_training"].erase("layer_reduction");
  engine::apply_compression_config(c, 4, o);
  BOOST_TEST(o.recipe.wbits == 2);
  BOOST_TEST(o.recipe.abits == 16);
  BOOST_TEST(o.keep_layers == "");

  const std::string key = "[config] compression_training.weight_quantization.";
  c["compression_training"]["weight_quantization"] = weights(4, 4, on);
  test::check_error([&] { engine::apply_compression_config(c, 4, o); },
                    {key + "different_groups.wq1.params.target_bits must be 2 or 1 for xtc, got 4"});
  c["compression_training"]["weight_quantization"] = weights(8, 2, on);
  test::check_error([&] { engine::apply_compression_config(c, 4, o); },
                    {"start_bits must equal target_bits 2 for xtc, got 8"});
  c["compression_training"]["weight_quantization"] = weights(2, 2, {{"enabled", true}, {"quantize_groups", 4}});
  test::check_error([&] { engine::apply_compression_config(c, 4, o); },
                    {key + "shared_parameters.quantize_groups must be 1 for xtc (a scale per row), got 4"});
  c["compression_training"]["weight_quantization"] = weights(2, 2, {{"enabled", false}});
  test::check_error([&] { engine::apply_compression_config(c, 4, o); },
                    {key + "shared_parameters.enabled must be true"});
  test::check_error(
      [&] {
        engine::apply_compression_config({{"steps", 1}}, 4, o);
      },
      {"[config] compression_training is missing"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_quantized_model
