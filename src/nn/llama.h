// Llama: a token embedding, n_layer pre-norm decoder blocks (RMSNorm, grouped-query
// attention with rotary positions, SwiGLU MLP; nn/llama_block.h), a final RMSNorm and an
// untied output head; no biases, no position table. Parameter names, Hugging Face's
// LlamaForCausalLM's in triad's words (Linear weights (out, in) in both), hd = C / NH:
//   embed.weight (V, C)                       model.embed_tokens.weight
//   blocks.{i}.norm1.weight (C)               model.layers.{i}.input_layernorm.weight
//   blocks.{i}.attn.q.weight (NH·hd, C)       model.layers.{i}.self_attn.q_proj.weight
//   blocks.{i}.attn.k.weight (NKV·hd, C)      model.layers.{i}.self_attn.k_proj.weight
//   blocks.{i}.attn.v.weight (NKV·hd, C)      model.layers.{i}.self_attn.v_proj.weight
//   blocks.{i}.attn.o.weight (C, NH·hd)       model.layers.{i}.self_attn.o_proj.weight
//   blocks.{i}.norm2.weight (C)               model.layers.{i}.post_attention_layernorm.weight
//   blocks.{i}.mlp.gate.weight (I, C)         model.layers.{i}.mlp.gate_proj.weight
//   blocks.{i}.mlp.up.weight (I, C)           model.layers.{i}.mlp.up_proj.weight
//   blocks.{i}.mlp.down.weight (C, I)         model.layers.{i}.mlp.down_proj.weight
//   norm_f.weight (C)                         model.norm.weight
//   head.weight (V, C)                        lm_head.weight
// Rotary positions pair features (i, i + hd/2) as Hugging Face's rotate_half does, so its
// q and k weights need no permutation.
#pragma once

#include "nn/llama_block.h"

namespace triad::nn {

struct LlamaConfig {
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_kv_head = 2;  // key/value heads; divides n_head
  int64_t d_model = 64;
  int64_t intermediate = 172;  // the SwiGLU MLP's hidden units
  int64_t seq_len = 64;        // the longest sequence accepted (rotary angles are made for it)
  int64_t vocab_size = 256;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  uint64_t init_seed = 1234;
  // Mixture-of-Experts blocks (none by default): SwiGLU experts of the dense MLP's shape
  // (Mixtral's), initialised from streams of their own (nn::block_moe).
  MoEModelConfig moe;

  void validate() const;  // throws Error naming the bad field

  // Every parameter of the model, by name, at its global shape, in the model's order (an MoE
  // block's blocks.{i}.moe.* in place of its mlp).
  std::vector<std::pair<std::string, Shape>> parameter_shapes() const;
  // Ψ = 2VC + L·(2C + 2C·NH·hd + 2C·NKV·hd + 3CI) + C (hd = C / NH: q and o 2C², k and v
  // 2C²·NKV/NH, the MLP 3CI, two norms), the embedding and head counted apart (untied); an
  // MoE block's layer in place of its MLP.
  int64_t num_parameters() const;

  // Named shapes: "llama-tiny" (L2 C64 NH4 NKV2 I172 V256 T64, the defaults, for tests),
  // "tinyllama-1.1b" (L22 C2048 NH32 NKV4 I5632 V32000 T2048), "llama2-7b" (L32 C4096 NH32
  // NKV32 I11008 V32000 T4096). Throws Error listing the names.
  static LlamaConfig preset(const std::string& name);
};

// Sets the initial values of the Llama parameters `model` holds, found by name (a Llama, or
// a pipeline stage holding some of its layers: nn/llama_layers.h), to exactly those of the
// whole single-process model: N(0, 0.02) for the embedding, the head and every projection
// (Hugging Face's initializer_range), 1 for the norms; each parameter drawn at its global
// shape in the model's order (a split one keeps its part), whatever else the module holds.
void init_llama_parameters(const LlamaConfig& config, Module& model);

// Block `block`'s MoE layer, or null when it is dense; its experts spread as `par` says.
std::shared_ptr<MoE> llama_block_moe(const LlamaConfig& config, int64_t block, const Parallelism& par);

// Built with a Parallelism other than serial(), the Llama holds this rank's part of a model
// split over tensor-parallel ranks (nn/parallelism.h): the embedding by vocabulary rows, the
// head by output rows (vocab_size must be divisible by the ranks), the blocks as
// nn/llama_block.h says; n_kv_head must be divisible by the ranks.
class Llama : public LanguageModel {
 public:
  // with_head false: the model without its output head (a value model's base, which reads
  // the hidden states alone: nn::ValueModel); its logits are an error.
  explicit Llama(const LlamaConfig& config, std::shared_ptr<const Parallelism> parallelism = serial(),
                 bool with_head = true);

  // indices (B, T) of i64/i32, T <= seq_len -> logits (B, T, V), V the vocabulary rows
  // this rank's head holds (vocab_size on one process).
  Tensor forward(const Tensor& indices) override;
  // A left-padded batch (Note [Left-padded batches]): rotary angles per token, each row's
  // attention from its key_start (with sequence parallelism: the rank's columns).
  Tensor forward(const Tensor& indices, const LeftPadding& padding) override;
  Tensor loss(const Tensor& indices, const Tensor& targets) override;
  Tensor hidden_states(const Tensor& indices, const LeftPadding* padding = nullptr) override;
  // Generation (LanguageModel's): the cache holds per layer n_kv_head / ranks heads of keys
  // (rotated) and values. With sequence parallelism, paused (Note [Sequence parallelism
  // paused] in nn/parallelism.h).
  KVCache make_cache(int64_t batch) const override;
  Tensor forward_cached(const Tensor& indices, KVCache& cache, const Tensor& positions = Tensor()) override;
  int64_t seq_len() const override { return config_.seq_len; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  const LlamaConfig& config() const { return config_; }

  std::shared_ptr<Embedding> embed;
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<RMSNorm> norm_f;
  std::shared_ptr<Linear> head;  // null without its head

 private:
  Tensor logits(const Tensor& indices, const LeftPadding* padding);  // forward's body
  void check_head() const;
  LlamaConfig config_;
  std::shared_ptr<const Parallelism> par_;
};

}  // namespace triad::nn
