// A model of the user's own, written as a list of layers (nn/layer_list.h) and given to the
// Engine instead of the GPT (Note [User layer lists], engine/engine.h): a token table read
// by the first layer, residual MLP layers, and a head whose logits come from the token table
// (tied across the first and last stages) or from a projection of its own. 10 clipped AdamW
// steps of it cut into pipeline stages give the losses and final parameters of the same
// list trained by an Engine in one process, within 1e-5 relative (the check:
// support/pipeline_trajectory.h). The config has no model but its tensor_parallel.
// Layouts by world size: 2: pp2 with 1F1B, ZB-H1, interleaved v2, a cut by the list's own
// layer type, ZeRO 1-3, and the untied head; 4: pp4, pp2 x dp2 at ZeRO 0-3 (and ZeRO 3
// untied), pp2 x tp2; 8: pp2 x dp2 x tp2 at ZeRO 1 and 3, pp4 x dp2 interleaved v2.
#include <boost/test/unit_test.hpp>

#include "config/config.h"
#include "engine/engine.h"
#include "parallel/process_grid.h"
#include "parallel/runtime.h"
#include "parallel/tensor_parallel_layers.h"
#include "support/pipeline_trajectory.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_pipeline_layer_list_mpi)

using namespace triad;
using namespace triad::test::pipe;

namespace {

constexpr int64_t kWidth = 16, kBlocks = 6;  // C, and the residual MLP layers

// The first layer: token ids (B, T) to their rows of the table (B, T, C).
class TokenEmbedding : public nn::Module {
 public:
  // own: the table is this layer's child (untied), not a tied module it was given.
  TokenEmbedding(nn::ModulePtr table, bool own) : Module("TokenEmbedding"), table_(std::move(table)) {
    if (own) register_module("emb", table_);
  }
  Tensor forward(const Tensor& ids) override { return (*table_)(ids); }

 private:
  nn::ModulePtr table_;
};

// x + W2 gelu(W1 LayerNorm(x)), W1 column- and W2 row-parallel under tensor parallelism.
class ResidualMLP : public nn::Module {
 public:
  explicit ResidualMLP(const nn::Parallelism& par) : Module("ResidualMLP") {
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(kWidth));
    fc = register_module("fc", par.column_linear(kWidth, 4 * kWidth));
    proj = register_module("proj", par.row_linear(4 * kWidth, kWidth));
    par.mark_residual_layer(*ln);
  }
  Tensor forward(const Tensor& x) override { return add(x, (*proj)(gelu((*fc)((*ln)(x))))); }

  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> fc, proj;
};

// LayerNorm, then logits (B, T, V): against the token table when given one, else through a
// projection of the head's own.
class Head : public nn::Module {
 public:
  Head(std::shared_ptr<const nn::Parallelism> par, nn::ModulePtr table)
      : Module("Head"), par_(std::move(par)), table_(std::static_pointer_cast<nn::Embedding>(table)) {
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(kWidth));
    if (!table_) out = register_module("out", par_->column_linear(kWidth, kVocab));
    par_->mark_residual_layer(*ln_f);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = (*ln_f)(x);
    if (out) return (*out)(h);
    // Inside the table's call(): its ZeRO-3 gather fires around the use (Note [Tied layers]).
    return table_->call([&] { return par_->tied_logits(h, table_->weight); });
  }

  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> out;

 private:
  std::shared_ptr<const nn::Parallelism> par_;
  std::shared_ptr<nn::Embedding> table_;
};

// Every parameter but the LayerNorms' (1 and 0) drawn at its global shape from a generator
// seeded by its name, each rank keeping its tensor-parallel part: the same model whichever
// layers a stage holds and however they are split.
void init_by_name(nn::Module& stage) {
  const auto splits = stage.named_splits();
  const auto params = stage.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    if (name.find("ln") != std::string::npos) continue;
    uint64_t seed = 14695981039346656037ull;  // FNV-1a of the name
    for (const char ch : name) seed = (seed ^ uint8_t(ch)) * 1099511628211ull;
    Generator gen(seed);
    const nn::TensorSplit& s = splits[i].second;
    const Tensor global = s.is_split() ? Tensor::empty(s.global_shape(p.shape()), p.dtype(), p.device()) : p;
    ops::normal_(global, 0.0, 0.1, gen);
    if (s.is_split()) ops::copy_(p, nn::local_part(global, s, p.shape()));
  }
}

// The list: TokenEmbedding, kBlocks ResidualMLP ("mlp.0", ...), Head ("head"); with `tied`
// the token table is the tied module "emb" that the first and last layers share.
nn::LayerList residual_mlp_list(std::shared_ptr<const nn::Parallelism> par, bool tied) {
  constexpr int64_t V = kVocab, C = kWidth;
  const std::vector<std::string> uses_table = tied ? std::vector<std::string>{"emb"} : std::vector<std::string>{};
  nn::LayerList list;
  if (tied) list.tied.push_back({"emb", [par] { return par->token_embedding(V, C); }});
  list.layers.push_back({"", "TokenEmbedding", V * C, uses_table, [par, tied](const nn::TiedModules& t) {
                           return std::make_shared<TokenEmbedding>(tied ? t.at("emb") : par->token_embedding(V, C),
                                                                   !tied);
                         }});
  for (int64_t i = 0; i < kBlocks; ++i)
    list.layers.push_back(
        {"mlp." + std::to_string(i), "ResidualMLP", 8 * C * C + 7 * C, {}, [par](const nn::TiedModules&) {
           return std::make_shared<ResidualMLP>(*par);
         }});
  list.layers.push_back({"head", "Head", 2 * C + (tied ? 0 : C * V), uses_table, [par, tied](const nn::TiedModules& t) {
                           return std::make_shared<Head>(par, tied ? t.at("emb") : nullptr);
                         }});
  list.loss = [par](const Tensor& logits, const Tensor& targets) { return par->cross_entropy(logits, targets, V); };
  list.init = init_by_name;
  return list;
}

struct Layout {
  int pp = 1, dp = 1, tp = 1, zero = 0;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string partition = "parameters";
  bool tied = true;
};

std::string str(const Layout& l) {
  return "pp " + std::to_string(l.pp) + " dp " + std::to_string(l.dp) + " tp " + std::to_string(l.tp) + " zero " +
         std::to_string(l.zero) + " " + l.schedule + " v " + std::to_string(l.virtual_stages) + " " + l.partition +
         (l.tied ? " tied" : " untied");
}

nlohmann::json config_json(const Layout& l) {
  return {
      {"model", {{"tensor_parallel", l.tp}}},
      {"pipeline",
       {{"stages", l.pp}, {"schedule", l.schedule}, {"virtual_stages", l.virtual_stages}, {"partition", l.partition}}},
      {"train_batch_size", kBatch},
      {"gradient_accumulation_steps", kMicro},
      {"steps", kSteps},
      // Adam's eps at 1e-4: Adam's first step moves a weight by lr·g/(|g| + eps), so at eps
      // 1e-8 an element whose gradient is near 0 moves by an amount its rounding decides, and
      // each layout sums in its own order (after one step, 1.9e-5 of the model's scale on a
      // machine with AVX-512; 1.8e-6 at eps 1e-4).
      {"optimizer",
       {{"type", "AdamW"}, {"params", {{"lr", 1e-2}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}, {"eps", 1e-4}}}}},
      {"gradient_clipping", 0.5},
      {"zero_optimization", {{"stage", l.zero}, {"stage3_param_persistence_threshold", 0}}}};
}

Trajectory single_process(bool tied) {
  const nn::LayerList list = residual_mlp_list(nn::serial(), tied);
  engine::Engine e(engine::parse_config(config_json({.tied = tied}), 1, list), list);
  BOOST_REQUIRE(!e.pipelined());
  return train_one_process(e);
}

Trajectory pipelined(const Layout& l) {
  const auto grid = std::make_shared<const parallel::ProcessGrid>(
      parallel::world(), parallel::GridLayout{.tp = l.tp, .dp = l.dp, .pp = l.pp});
  const std::shared_ptr<const nn::Parallelism> par =
      l.tp > 1 ? std::make_shared<parallel::TensorParallel>(grid->tp(), false) : nn::serial();
  const nn::LayerList list = residual_mlp_list(par, l.tied);
  const engine::TrainConfig config = engine::parse_config(config_json(l), parallel::world()->size(), list);
  engine::Engine e(config, list, grid);
  return train_pipelined(e, *grid);
}

std::vector<Layout> layouts(int world) {
  std::vector<Layout> out;
  if (world == 2) {
    for (const char* s : {"1f1b", "zb_h1"}) out.push_back({.pp = 2, .schedule = s});
    out.push_back({.pp = 2, .schedule = "interleaved", .virtual_stages = 2});
    out.push_back({.pp = 2, .partition = "type:ResidualMLP"});
    for (int zero = 1; zero <= 3; ++zero) out.push_back({.pp = 2, .zero = zero});
    out.push_back({.pp = 2, .tied = false});
  } else if (world == 4) {
    out.push_back({.pp = 4});
    for (int zero = 0; zero <= 3; ++zero) out.push_back({.pp = 2, .dp = 2, .zero = zero});
    out.push_back({.pp = 2, .dp = 2, .zero = 3, .tied = false});
    out.push_back({.pp = 2, .tp = 2, .zero = 1});
  } else if (world == 8) {
    for (int zero : {1, 3}) out.push_back({.pp = 2, .dp = 2, .tp = 2, .zero = zero});
    out.push_back({.pp = 4, .dp = 2, .schedule = "interleaved", .virtual_stages = 2});
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_layout_equals_the_list_in_one_process) {
  const Trajectory tied = single_process(true), untied = single_process(false);
  BOOST_TEST(tied.losses.back() < tied.losses.front() - 0.05);
  BOOST_TEST(untied.losses.back() < untied.losses.front() - 0.05);
  // The two heads are different models: the reference must tell them apart.
  BOOST_TEST(std::abs(tied.losses.back() - untied.losses.back()) > 1e-3);
  const std::vector<Layout> runs = layouts(parallel::world()->size());
  BOOST_REQUIRE(!runs.empty());
  for (const Layout& l : runs) check_equal(pipelined(l), l.tied ? tied : untied, str(l));
}

// The cut is checked against the list's own layers when the config is parsed: a type the
// list has cuts it, the GPT's does not, and too many stages for its layers are refused.
BOOST_AUTO_TEST_CASE(the_cut_is_checked_against_the_list) {
  const nn::LayerList list = residual_mlp_list(nn::serial(), true);
  const auto parse = [&](int stages, const std::string& partition) {
    return engine::parse_config(config_json({.pp = stages, .partition = partition}), stages, list);
  };
  BOOST_TEST(parse(2, "type:ResidualMLP").pipeline.stages == 2);
  BOOST_CHECK_EXCEPTION(parse(2, "type:Block"), Error, [](const Error& e) {
    return std::string(e.what()).find("\"type:Block\" matches none of the model's layer types") != std::string::npos;
  });
  const int64_t layers = kBlocks + 2;  // the embedding, the MLPs, the head
  BOOST_CHECK_EXCEPTION(parse(int(layers) + 1, "uniform"), Error, [layers](const Error& e) {
    return std::string(e.what()).find("exceeds the model's " + std::to_string(layers) + " layers") != std::string::npos;
  });
  // The GPT's own parse still cuts the GPT: its blocks are of type Block.
  nlohmann::json gpt = config_json({.pp = 2, .partition = "type:Block"});
  gpt["model"] = {{"n_layer", 2}, {"n_head", 2}, {"d_model", 16}, {"seq_len", kSeq}, {"vocab_size", kVocab}};
  BOOST_TEST(engine::parse_config(gpt, 2).pipeline.stages == 2);
}

BOOST_AUTO_TEST_SUITE_END()  // test_pipeline_layer_list_mpi
