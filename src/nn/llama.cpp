#include "nn/llama.h"

#include <map>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"

namespace triad::nn {

void LlamaConfig::validate() const {
  TRIAD_CHECK(n_layer > 0, "[model] n_layer must be positive, got " << n_layer);
  TRIAD_CHECK(n_head > 0, "[model] n_head must be positive, got " << n_head);
  TRIAD_CHECK(n_kv_head > 0 && n_head % n_kv_head == 0,
              "[model] n_kv_head must be a positive divisor of n_head (" << n_head << "), got " << n_kv_head);
  TRIAD_CHECK(d_model > 0 && d_model % n_head == 0,
              "[model] d_model must be a positive multiple of n_head (" << n_head << "), got " << d_model);
  TRIAD_CHECK((d_model / n_head) % 2 == 0, "[model] the head dimension d_model / n_head must be even for rotary "
                                           "positions, got " << d_model / n_head);
  TRIAD_CHECK(intermediate > 0, "[model] intermediate_size must be positive, got " << intermediate);
  TRIAD_CHECK(seq_len > 0, "[model] seq_len must be positive, got " << seq_len);
  TRIAD_CHECK(vocab_size > 0, "[model] vocab_size must be positive, got " << vocab_size);
  TRIAD_CHECK(rms_eps > 0.0, "[model] rms_norm_eps must be positive, got " << rms_eps);
  moe.validate(n_layer);
  TRIAD_CHECK(rope_theta > 0.0, "[model] rope_theta must be positive, got " << rope_theta);
}

std::vector<std::pair<std::string, Shape>> LlamaConfig::parameter_shapes() const {
  validate();
  const int64_t C = d_model, hd = d_model / n_head, I = intermediate;
  std::vector<std::pair<std::string, Shape>> shapes{{"embed.weight", {vocab_size, C}}};
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{{"norm1.weight", {C}},
                                                                           {"attn.q.weight", {n_head * hd, C}},
                                                                           {"attn.k.weight", {n_kv_head * hd, C}},
                                                                           {"attn.v.weight", {n_kv_head * hd, C}},
                                                                           {"attn.o.weight", {C, n_head * hd}},
                                                                           {"norm2.weight", {C}}})
      shapes.emplace_back(b + name, shape);
    const std::vector<std::pair<std::string, Shape>> swiglu{{"gate.weight", {I, C}}, {"up.weight", {I, C}},
                                                            {"down.weight", {C, I}}};
    if (const MoEConfig layer = moe.at(i); layer.num_experts == 0)
      for (const auto& [name, shape] : swiglu) shapes.emplace_back(b + "mlp." + name, shape);
    else
      for (const auto& [name, shape] : moe_parameter_shapes(layer, C, swiglu)) shapes.emplace_back(b + "moe." + name, shape);
  }
  shapes.emplace_back("norm_f.weight", Shape{C});
  shapes.emplace_back("head.weight", Shape{vocab_size, C});
  return shapes;
}

int64_t LlamaConfig::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes()) n += numel(shape);
  return n;
}

LlamaConfig LlamaConfig::preset(const std::string& name) {
  LlamaConfig c;
  if (name == "llama-tiny") {
    // the defaults
  } else if (name == "tinyllama-1.1b") {
    c.n_layer = 22, c.n_head = 32, c.n_kv_head = 4, c.d_model = 2048, c.intermediate = 5632, c.seq_len = 2048,
    c.vocab_size = 32000;
  } else if (name == "llama2-7b") {
    c.n_layer = 32, c.n_head = 32, c.n_kv_head = 32, c.d_model = 4096, c.intermediate = 11008, c.seq_len = 4096,
    c.vocab_size = 32000;
  } else {
    throw Error("unknown model preset '" + name + "' (expected llama-tiny, tinyllama-1.1b or llama2-7b)");
  }
  return c;
}

std::shared_ptr<MoE> llama_block_moe(const LlamaConfig& config, int64_t block, const Parallelism& par) {
  return block_moe(config.moe, block, config.d_model, swiglu_expert(config.d_model, config.intermediate),
                   config.init_seed, par.experts());
}

void init_llama_parameters(const LlamaConfig& config, Module& model) {
  std::map<std::string, std::pair<Tensor, TensorSplit>> held;
  const auto splits = model.named_splits();
  const auto params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) held.emplace(params[i].first, std::pair(params[i].second, splits[i].second));
  Generator gen(config.init_seed);
  for (const auto& [name, shape] : config.parameter_shapes()) {
    const auto it = held.find(name);
    if (name.find(".moe.") != std::string::npos) continue;  // drawn when built (nn::block_moe)
    if (name.find("norm") != std::string::npos) {  // norms start at 1 and draw nothing
      if (it != held.end()) ops::fill_(it->second.first, 1.0);
      continue;
    }
    if (it == held.end()) {
      gen.advance(uint64_t(numel(shape) + 1) / 2 * 2);  // as normal_ draws
      continue;
    }
    const auto& [p, split] = it->second;
    const Tensor global = split.is_split() ? Tensor::empty(shape, p.dtype(), p.device()) : p;
    ops::normal_(global, 0.0, 0.02, gen);
    if (split.is_split()) ops::copy_(p, local_part(global, split, p.shape()));
  }
}

Llama::Llama(const LlamaConfig& config, std::shared_ptr<const Parallelism> parallelism, bool with_head)
    : LanguageModel("Llama"), config_(config), par_(std::move(parallelism)) {
  config_.validate();
  const Parallelism& par = *par_;
  const int64_t C = config_.d_model, V = config_.vocab_size;
  TRIAD_CHECK(V % par.ranks() == 0, "Llama: vocab_size " << V << " must be divisible by the " << par.ranks()
                                                         << " tensor-parallel ranks (the head is split by rows)");
  const auto rope = std::make_shared<const RotaryEmbedding>(C / config_.n_head, config_.seq_len, config_.rope_theta);
  embed = register_module("embed", par.token_embedding(V, C, 1));
  blocks = register_module("blocks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < config_.n_layer; ++i)
    blocks->push_back(std::make_shared<LlamaBlock>(C, config_.n_head, config_.n_kv_head, config_.intermediate,
                                                   config_.rms_eps, rope, par, llama_block_moe(config_, i, par)));
  norm_f = register_module("norm_f", std::make_shared<RMSNorm>(C, config_.rms_eps));
  if (with_head) head = register_module("head", par.column_linear(C, V, 1, false));
  par.mark_residual_layer(*norm_f);
  init_llama_parameters(config_, *this);
}

void Llama::check_head() const {
  TRIAD_CHECK(head, "Llama: this model was built without its output head (a value model's base): it has no logits");
}

Tensor Llama::forward(const Tensor& indices) { return logits(indices, nullptr); }

Tensor Llama::forward(const Tensor& indices, const LeftPadding& padding) {
  TRIAD_CHECK(indices.dim() == 2, "Llama: expected indices (B, T), got " << shape_str(indices.shape()));
  check_padding(padding, indices, config_.seq_len, "Llama");
  return call([&] { return logits(indices, &padding); });
}

Tensor Llama::logits(const Tensor& indices, const LeftPadding* padding) {
  check_head();
  return (*head)(hidden_states(indices, padding));
}

Tensor Llama::hidden_states(const Tensor& indices, const LeftPadding* padding) {
  TRIAD_CHECK(indices.dim() == 2, "Llama: expected indices (B, T), got " << shape_str(indices.shape()));
  TRIAD_CHECK(indices.size(1) <= config_.seq_len,
              "Llama: sequence length " << indices.size(1) << " exceeds the model's seq_len " << config_.seq_len);
  Tensor x = (*embed)(indices);
  for (size_t i = 0; i < blocks->size(); ++i) {
    LlamaBlock& block = static_cast<LlamaBlock&>(*(*blocks)[i]);
    x = padding ? block.forward_padded(x, *padding) : block(x);
  }
  return (*norm_f)(x);
}

Tensor Llama::loss(const Tensor& indices, const Tensor& targets) {
  check_head();
  if (!head->plain()) return par_->cross_entropy((*this)(indices), targets, config_.vocab_size);
  return call([&] {
    const Tensor x = hidden_states(indices, nullptr);
    return head->call([&] { return par_->head_loss(x, head->weight, targets, config_.vocab_size); });
  });
}

KVCache Llama::make_cache(int64_t batch) const {
  KVCache cache;
  const Tensor& w = norm_f->weight;  // (the token table may be quantized: nn::Embedding::use_quantized)
  const Shape shape{batch, config_.n_kv_head / par_->ranks(), config_.seq_len, config_.d_model / config_.n_head};
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    cache.k.push_back(Tensor::zeros(shape, w.dtype(), w.device()));  // activations' dtype: the parameters'
    cache.v.push_back(Tensor::zeros(shape, w.dtype(), w.device()));
  }
  return cache;
}

Tensor Llama::forward_cached(const Tensor& indices, KVCache& cache, const Tensor& positions) {
  TRIAD_CHECK(indices.dim() == 2, "Llama: expected indices (B, T), got " << shape_str(indices.shape()));
  const int64_t T = indices.size(1), pos = cache.length;
  TRIAD_CHECK(pos + T <= config_.seq_len,
              "Llama: " << pos + T << " positions exceed the model's seq_len " << config_.seq_len);
  TRIAD_CHECK(!cache.k.empty() && cache.k[0].size(0) == indices.size(0),
              "Llama: the cache was made for another batch size");
  if (positions.defined()) check_positions(positions, indices, config_.seq_len, "Llama");
  if (cache.key_start.defined()) check_key_start(cache.key_start, indices, "Llama");
  check_head();
  NoGradGuard no_grad;
  const SequenceParallelPause whole;  // Note [Sequence parallelism paused]
  return call([&] {
    Tensor x = (*embed)(indices);
    for (size_t i = 0; i < blocks->size(); ++i)
      x = static_cast<LlamaBlock&>(*(*blocks)[i])
              .forward_cached(x, cache.k[i], cache.v[i], pos, positions, cache.key_start, cache.device_length);
    cache.length = pos + T;
    return par_->full_logits((*head)((*norm_f)(x)), config_.vocab_size);
  });
}

}  // namespace triad::nn
