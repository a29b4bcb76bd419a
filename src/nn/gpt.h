// GPT-2: token and learned position embeddings, n_layer pre-LN blocks, a final LayerNorm,
// and an output head tied to the token embedding (logits = x wte^T). Parameter names:
// wte.weight, wpe.weight, blocks.{i}.{ln1,attn.qkv,attn.proj,ln2,mlp.fc,mlp.proj}.{weight,bias},
// ln_f.{weight,bias}. An MoE block (GPTConfig::moe) holds blocks.{i}.moe.{gate.wg,
// experts.{e}.{fc,proj}, ...} (nn/moe.h) in place of its mlp. A quantized token table
// (nn::Embedding::use_quantized, checkpoint/quantized_model.h) serves both its lookup and
// the tied head, which then runs the integer GEMM (its loss: cross-entropy of those logits).
#pragma once

#include "nn/transformer.h"

namespace triad::nn {

struct GPTConfig {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t d_model = 768;
  int64_t seq_len = 1024;  // rows of the position table: the longest sequence accepted
  int64_t vocab_size = 50257;
  // Megatron-LM's make-vocab-size-divisible-by: the token table holds vocab_size rows
  // rounded up to a multiple of vocab_multiple × tp (the tensor-parallel ranks), so that the
  // output head's matrices have aligned leading dimensions (on a GPU, 50257 → 50304 makes
  // GPT-2's step 15% faster); the extra rows are padding that never reaches the loss or
  // the samples, and checkpoints hold vocab_size rows. 1: no padding (on one rank).
  int64_t vocab_multiple = 1;
  double dropout = 0.0;
  bool activation_checkpointing = false;  // recompute each block in the backward pass
  uint64_t init_seed = 1234;
  // Mixture-of-Experts blocks (none by default): each has GELU MLP experts of the dense MLP's
  // shape, initialised from streams of their own (nn::block_moe). Under tensor parallelism
  // every rank of a tp group holds them whole (replicated, as the LayerNorms are).
  MoEModelConfig moe;

  void validate() const;  // throws Error naming the bad field

  // Every parameter GPT(config) holds, by name, with its element count, from the shapes
  // alone (no model is built): on one rank the vocabulary rows padded as vocab_multiple
  // asks; with tp > 1 what one rank of a tensor-parallel group holds (split weights and
  // biases divided by tp, the vocabulary padded first; the rest whole).
  std::vector<std::pair<std::string, int64_t>> parameter_sizes(int tp = 1) const;
  // The model's parameters, Ψ = V·C + S·C + L·(12C² + 13C) + 2C (V = vocab_size: padding is
  // no parameter of the model; a checkpoint holds Ψ); with MoE blocks, each MoE block's
  // layer in place of its MLP.
  int64_t num_parameters() const;

  // Named shapes: "tiny" (L2 C64 NH4 V256 T64, for tests), "gpt2-124m" (L12 C768 NH12
  // V50257 T1024, vocab_multiple 64), "gpt2-350m" (L24 C1024 NH16). Throws Error listing
  // the names.
  static GPTConfig preset(const std::string& name);
};

// Block `block`'s MoE layer, or null when it is dense; its experts spread as `par` says.
std::shared_ptr<MoE> gpt_block_moe(const GPTConfig& config, int64_t block, const Parallelism& par);

// Sets the initial values of the GPT parameters `model` holds, found by name (a GPT, or a
// pipeline stage holding some of its layers: nn/gpt_layers.h), to exactly those of the
// whole model built for tp tensor-parallel ranks: every parameter takes its part of the
// same draws whatever else the module holds.
void init_gpt_parameters(const GPTConfig& config, int tp, Module& model);

// Built with a Parallelism other than serial(), the GPT holds this rank's part of a model
// split over tensor-parallel ranks (nn/parallelism.h): the same parameter names, each with
// its TensorSplit, and initial values that are exactly its part of the single-process
// model's (every parameter is drawn at its global shape and sliced).
class GPT : public LanguageModel {
 public:
  explicit GPT(const GPTConfig& config, std::shared_ptr<const Parallelism> parallelism = serial());

  // indices (B, T) of i64/i32, T <= seq_len -> logits (B, T, V), V the vocabulary rows
  // this rank holds (on one process vocab_size, padded when vocab_multiple asks: the
  // columns past vocab_size are padding).
  Tensor forward(const Tensor& indices) override;
  // A left-padded batch (Note [Left-padded batches]): position rows gathered per token, each
  // row's attention from its key_start (with sequence parallelism: the rank's columns).
  Tensor forward(const Tensor& indices, const LeftPadding& padding) override;
  // Generation (LanguageModel's), over all vocab_size tokens on every rank; with sequence
  // parallelism, paused (Note [Sequence parallelism paused] in nn/parallelism.h).
  KVCache make_cache(int64_t batch) const override;
  Tensor forward_cached(const Tensor& indices, KVCache& cache, const Tensor& positions = Tensor()) override;
  Tensor loss(const Tensor& indices, const Tensor& targets) override;
  Tensor hidden_states(const Tensor& indices, const LeftPadding* padding = nullptr) override;
  int64_t seq_len() const override { return config_.seq_len; }
  int64_t vocab_size() const override { return config_.vocab_size; }

  const GPTConfig& config() const { return config_; }
  const Parallelism& parallelism() const { return *par_; }

  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  void init_weights();
  Tensor logits(const Tensor& indices, const LeftPadding* padding);  // forward's body
  // The tied head's logits of hidden states x: x wte^T, or with a quantized token table the
  // integer GEMM on its packed integers (nn::Embedding::use_quantized).
  Tensor head_logits(const Tensor& x);
  GPTConfig config_;
  std::shared_ptr<const Parallelism> par_;
};

}  // namespace triad::nn
