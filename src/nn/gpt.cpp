#include "nn/gpt.h"

#include <cmath>
#include <map>

#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"

namespace triad::nn {

void GPTConfig::validate() const {
  TRIAD_CHECK(n_layer > 0, "[model] n_layer must be positive, got " << n_layer);
  TRIAD_CHECK(n_head > 0, "[model] n_head must be positive, got " << n_head);
  TRIAD_CHECK(d_model > 0 && d_model % n_head == 0,
              "[model] d_model must be a positive multiple of n_head (" << n_head << "), got " << d_model);
  TRIAD_CHECK(seq_len > 0, "[model] seq_len must be positive, got " << seq_len);
  TRIAD_CHECK(vocab_size > 0, "[model] vocab_size must be positive, got " << vocab_size);
  TRIAD_CHECK(vocab_multiple > 0, "[model] make_vocab_size_divisible_by must be positive, got " << vocab_multiple);
  TRIAD_CHECK(dropout >= 0.0 && dropout < 1.0, "[model] dropout must be in [0, 1), got " << dropout);
  moe.validate(n_layer);
}

namespace {

// One GELU MLP expert's parameters over C features.
std::vector<std::pair<std::string, Shape>> mlp_expert_shapes(int64_t C) {
  return {{"fc.weight", {4 * C, C}}, {"fc.bias", {4 * C}}, {"proj.weight", {C, 4 * C}}, {"proj.bias", {C}}};
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> GPTConfig::parameter_sizes(int tp) const {
  validate();
  TRIAD_CHECK(tp >= 1 && n_head % tp == 0, "[model] tensor_parallel " << tp << " must divide n_head " << n_head);
  const int64_t C = d_model, t = tp;
  std::vector<std::pair<std::string, int64_t>> sizes{{"wte.weight", vocab_rows_per_rank(vocab_size, tp, vocab_multiple) * C},
                                                     {"wpe.weight", seq_len * C}};
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const MoEConfig layer = moe.at(i);
    for (const auto& [name, n] : std::vector<std::pair<std::string, int64_t>>{{"ln1.weight", C},
                                                                              {"ln1.bias", C},
                                                                              {"attn.qkv.weight", 3 * C * C / t},
                                                                              {"attn.qkv.bias", 3 * C / t},
                                                                              {"attn.proj.weight", C * C / t},
                                                                              {"attn.proj.bias", C},
                                                                              {"ln2.weight", C},
                                                                              {"ln2.bias", C}})
      sizes.emplace_back(b + name, n);
    if (layer.num_experts == 0)
      for (const auto& [name, n] : std::vector<std::pair<std::string, int64_t>>{{"mlp.fc.weight", 4 * C * C / t},
                                                                                {"mlp.fc.bias", 4 * C / t},
                                                                                {"mlp.proj.weight", 4 * C * C / t},
                                                                                {"mlp.proj.bias", C}})
        sizes.emplace_back(b + name, n);
    else
      for (const auto& [name, shape] : moe_parameter_shapes(layer, C, mlp_expert_shapes(C)))
        sizes.emplace_back(b + "moe." + name, numel(shape));
  }
  sizes.emplace_back("ln_f.weight", C);
  sizes.emplace_back("ln_f.bias", C);
  return sizes;
}

int64_t GPTConfig::num_parameters() const {
  validate();
  const int64_t C = d_model, dense_mlp = 8 * C * C + 5 * C;
  int64_t n = vocab_size * C + seq_len * C + n_layer * (12 * C * C + 13 * C) + 2 * C;
  for (int64_t i = 0; i < n_layer; ++i)
    if (const MoEConfig layer = moe.at(i); layer.num_experts != 0)
      for (const auto& [name, shape] : moe_parameter_shapes(layer, C, mlp_expert_shapes(C))) n += numel(shape);
  return n - moe.moe_blocks(n_layer) * dense_mlp;
}

GPTConfig GPTConfig::preset(const std::string& name) {
  GPTConfig c;
  if (name == "tiny") {
    c.n_layer = 2, c.n_head = 4, c.d_model = 64, c.seq_len = 64, c.vocab_size = 256;
  } else if (name == "gpt2-124m") {
    c.n_layer = 12, c.n_head = 12, c.d_model = 768, c.seq_len = 1024, c.vocab_size = 50257, c.vocab_multiple = 64;
  } else if (name == "gpt2-350m") {
    c.n_layer = 24, c.n_head = 16, c.d_model = 1024, c.seq_len = 1024, c.vocab_size = 50257, c.vocab_multiple = 64;
  } else {
    throw Error("unknown model preset '" + name + "' (expected tiny, gpt2-124m or gpt2-350m)");
  }
  return c;
}

GPT::GPT(const GPTConfig& config, std::shared_ptr<const Parallelism> parallelism)
    : LanguageModel("GPT"), config_(config), par_(std::move(parallelism)) {
  config_.validate();
  const int64_t C = config_.d_model;
  const Parallelism& par = *par_;
  wte = register_module("wte", par.token_embedding(config_.vocab_size, C, config_.vocab_multiple));
  wpe = register_module("wpe", std::make_shared<Embedding>(config_.seq_len, C));
  drop = register_module("drop", std::make_shared<Dropout>(config_.dropout, par.residual_generator()));
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < config_.n_layer; ++i)
    blocks->push_back(std::make_shared<Block>(C, config_.n_head, config_.dropout, par, gpt_block_moe(config_, i, par)));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(C));
  par.mark_residual_layer(*wpe);
  par.mark_residual_layer(*ln_f);
  init_weights();
}

std::shared_ptr<MoE> gpt_block_moe(const GPTConfig& config, int64_t block, const Parallelism& par) {
  return block_moe(config.moe, block, config.d_model, gelu_mlp_expert(config.d_model, config.dropout), config.init_seed,
                   par.experts());
}

void init_gpt_parameters(const GPTConfig& config, int tp, Module& model) {
  // GPT-2: N(0, 0.02) for matrices and embeddings, residual projections scaled by
  // 1/sqrt(2 n_layer), zero biases, unit LayerNorms. The draws follow the whole model's
  // parameter order; a split parameter draws its global tensor and keeps its part
  // (nn/tensor_split.h), and a parameter `model` does not hold skips its draws.
  std::map<std::string, std::pair<Tensor, TensorSplit>> held;
  const auto splits = model.named_splits();
  const auto params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) held.emplace(params[i].first, std::pair(params[i].second, splits[i].second));
  Generator gen(config.init_seed);
  const double resid_std = 0.02 / std::sqrt(2.0 * double(config.n_layer));
  for (const auto& [name, count] : config.parameter_sizes(tp)) {
    if (name.find("ln") != std::string::npos) continue;   // LayerNorms keep 1 and 0
    if (name.find(".moe.") != std::string::npos) continue;  // drawn when built (nn::block_moe)
    const auto it = held.find(name);
    if (name.ends_with(".bias")) {
      if (it != held.end()) ops::zero_(it->second.first);
      continue;
    }
    if (it == held.end()) {  // every matrix but the position table is split under tp
      const int64_t drawn = name == "wpe.weight" ? count : count * tp;
      gen.advance(uint64_t(drawn + 1) / 2 * 2);  // as normal_ draws
      continue;
    }
    const auto& [p, split] = it->second;
    const bool is_resid_proj = name.ends_with("attn.proj.weight") || name.ends_with("mlp.proj.weight");
    const Tensor global = split.is_split() ? Tensor::empty(split.global_shape(p.shape()), p.dtype(), p.device()) : p;
    ops::normal_(global, 0.0, is_resid_proj ? resid_std : 0.02, gen);
    if (split.is_split()) ops::copy_(p, local_part(global, split, p.shape()));
  }
}

void GPT::init_weights() { init_gpt_parameters(config_, par_->ranks(), *this); }

Tensor GPT::forward(const Tensor& indices) { return logits(indices, nullptr); }

Tensor GPT::forward(const Tensor& indices, const LeftPadding& padding) {
  TRIAD_CHECK(indices.dim() == 2, "GPT: expected indices (B, T), got " << shape_str(indices.shape()));
  check_padding(padding, indices, config_.seq_len, "GPT");
  return call([&] { return logits(indices, &padding); });
}

Tensor GPT::logits(const Tensor& indices, const LeftPadding* padding) {
  return head_logits(hidden_states(indices, padding));
}

Tensor GPT::head_logits(const Tensor& x) {
  if (const PackedWeight* table = wte->quantized())
    return ops::quantized_linear(x, *table, Tensor(), wte->quantized_abits());
  return par_->tied_logits(x, wte->weight);
}

Tensor GPT::hidden_states(const Tensor& indices, const LeftPadding* padding) {
  TRIAD_CHECK(indices.dim() == 2, "GPT: expected indices (B, T), got " << shape_str(indices.shape()));
  const int64_t T = indices.size(1);
  TRIAD_CHECK(T <= config_.seq_len, "GPT: sequence length " << T << " exceeds the model's seq_len " << config_.seq_len);
  const auto [first, count] = par_->sequence_part(T);
  const Tensor position_rows =  // with sequence parallelism, of this rank's columns
      padding ? embedding(wpe->weight, ops::contiguous(ops::narrow(padding->positions, 1, first, count)))
              : narrow(wpe->weight, 0, first, count);
  Tensor x = add((*wte)(indices), position_rows);
  x = (*drop)(x);
  const Tensor key_start = padding ? padding->key_start : Tensor();
  for (size_t i = 0; i < blocks->size(); ++i) {
    Block& block = static_cast<Block&>(*(*blocks)[i]);
    auto run = [&block, key_start](const Tensor& h) {  // by value: checkpointing replays it later
      return key_start.defined() ? block.forward_padded(h, key_start) : block(h);
    };
    x = config_.activation_checkpointing && is_training() ? checkpoint(run, x) : run(x);
  }
  return (*ln_f)(x);
}

KVCache GPT::make_cache(int64_t batch) const {
  KVCache cache;
  const int64_t hs = config_.d_model / config_.n_head;
  const Tensor& w = wpe->weight;  // (the token table may be quantized: nn::Embedding::use_quantized)
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    const Shape shape{batch, config_.n_head / par_->ranks(), config_.seq_len, hs};
    cache.k.push_back(Tensor::zeros(shape, w.dtype(), w.device()));
    cache.v.push_back(Tensor::zeros(shape, w.dtype(), w.device()));
  }
  return cache;
}

Tensor GPT::forward_cached(const Tensor& indices, KVCache& cache, const Tensor& positions) {
  TRIAD_CHECK(indices.dim() == 2, "GPT: expected indices (B, T), got " << shape_str(indices.shape()));
  const int64_t T = indices.size(1), pos = cache.length;
  TRIAD_CHECK(pos + T <= config_.seq_len,
              "GPT: " << pos + T << " positions exceed the model's seq_len " << config_.seq_len);
  TRIAD_CHECK(!cache.k.empty() && cache.k[0].size(0) == indices.size(0),
              "GPT: the cache was made for another batch size");
  if (positions.defined()) check_positions(positions, indices, config_.seq_len, "GPT");
  if (cache.key_start.defined()) check_key_start(cache.key_start, indices, "GPT");
  NoGradGuard no_grad;
  const SequenceParallelPause whole;  // Note [Sequence parallelism paused]
  return call([&] {
    Tensor x = ops::add((*wte)(indices), positions.defined() ? embedding(wpe->weight, positions)
                                                             : ops::narrow(wpe->weight, 0, pos, T));
    for (size_t i = 0; i < blocks->size(); ++i)
      x = static_cast<Block&>(*(*blocks)[i])
              .forward_cached(x, cache.k[i], cache.v[i], pos, cache.key_start, cache.device_length);
    cache.length = pos + T;
    return par_->full_logits(head_logits((*ln_f)(x)), config_.vocab_size);
  });
}

Tensor GPT::loss(const Tensor& indices, const Tensor& targets) {
  if (wte->quantized()) return par_->cross_entropy((*this)(indices), targets, config_.vocab_size);
  return call(
      [&] { return par_->head_loss(hidden_states(indices, nullptr), wte->weight, targets, config_.vocab_size); });
}

}  // namespace triad::nn
