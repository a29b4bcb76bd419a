// The pieces of a Llama decoder layer: RMSNorm, grouped-query attention with rotary
// positions, the SwiGLU MLP, and the pre-norm block that joins them with residual
// connections. No layer has a bias. Under tensor parallelism (nn/parallelism.h) q, k, v,
// gate and up are column-parallel (each rank its query heads, its key/value heads, its
// hidden units), o and down row-parallel, as Megatron-LM splits a GPT block.
#pragma once

#include "nn/language_model.h"
#include "nn/moe.h"
#include "nn/parallelism.h"
#include "nn/rotary.h"

namespace triad::nn {

// y = x / sqrt(mean(x^2) + eps) * weight over the last dimension (triad::rms_norm);
// weight (C,) starts at 1.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  // The residual add before the norm, fused: {x + r, forward(x + r)} (triad::add_rms_norm).
  AddNorm forward_add(const Tensor& x, const Tensor& r);

  Tensor weight;
  double eps;
};

// Causal self-attention on x (B, T, C) with n_kv_head key/value heads shared by groups of
// n_head / n_kv_head query heads (GQA; n_kv_head = n_head is multi-head attention, 1
// multi-query): q (C -> NH·hd), k and v (C -> NKV·hd), hd = C / NH, rotary positions on q
// and k, query head h reading key/value head h / (NH / NKV), softmax(q k^T / sqrt(hd)) over
// keys at or before each query, o (NH·hd -> C).
class GroupedQueryAttention : public Module {
 public:
  GroupedQueryAttention(int64_t d_model, int64_t n_head, int64_t n_kv_head, std::shared_ptr<const RotaryEmbedding> rope,
                        const Parallelism& par = *serial());
  Tensor forward(const Tensor& x) override;
  // A left-padded batch (Note [Left-padded batches]): rotary angles per token, each row's
  // keys from its key_start.
  Tensor forward(const Tensor& x, const LeftPadding& padding);
  // x (B, T_new, C) at columns pos.. of a sequence whose keys (rotated) and values before
  // pos are in k_cache/v_cache (B, n_kv_head, capacity, hd); appends this step's there.
  // positions (B, T_new), or undefined: pos..; key_start as the cache's (nn::KVCache);
  // device_pos, when defined, (1,) i64 on x's device holding pos, which the kernels read
  // (nn::KVCache::device_length). Inference only (no gradients).
  Tensor forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                        const Tensor& positions = Tensor(), const Tensor& key_start = Tensor(),
                        const Tensor& device_pos = Tensor());

  int64_t n_head, n_kv_head, head_dim;  // the heads this rank computes
  std::shared_ptr<Linear> q, k, v, o;

 private:
  // (B, NH, T, hd) -> (B, T, NH·hd); key_start and cached as ops::causal_attention's
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_start,
                const Tensor& cached = Tensor()) const;
  std::shared_ptr<const RotaryEmbedding> rope_;
};

// down(silu(gate(x)) * up(x)): gate, up (C -> I), down (I -> C); silu and the product run
// as one fused op (triad::swiglu).
class SwiGLU : public Module {
 public:
  SwiGLU(int64_t d_model, int64_t intermediate, const Parallelism& par = *serial());
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> gate, up, down;
};

// x + attn(norm1(x)), then x + mlp(norm2(x)), the first residual add fused into norm2
// (RMSNorm::forward_add).
class LlamaBlock : public Module {
 public:
  // With `moe`, the block's feed-forward is that MoE layer (SwiGLU experts, Mixtral's shape)
  // in place of the SwiGLU, its router loss riding on its output (nn/router_loss.h).
  LlamaBlock(int64_t d_model, int64_t n_head, int64_t n_kv_head, int64_t intermediate, double rms_eps,
             std::shared_ptr<const RotaryEmbedding> rope, const Parallelism& par = *serial(),
             std::shared_ptr<MoE> moe = nullptr);
  Tensor forward(const Tensor& x) override;
  // A left-padded batch (Note [Left-padded batches]); runs the hooks.
  Tensor forward_padded(const Tensor& x, const LeftPadding& padding);
  Tensor forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                        const Tensor& positions = Tensor(), const Tensor& key_start = Tensor(),
                        const Tensor& device_pos = Tensor());

  std::shared_ptr<RMSNorm> norm1, norm2;
  std::shared_ptr<GroupedQueryAttention> attn;
  std::shared_ptr<SwiGLU> mlp;  // null in an MoE block
  std::shared_ptr<MoE> moe;     // null in a dense block

 private:
  Tensor feed_forward(const Tensor& x);  // (*mlp)(x) or the MoE on the whole sequence (Parallelism::on_whole_sequence)
  // h + feed_forward(norm2(h)) for h = x + attn_out, the add fused into norm2.
  Tensor residual_feed_forward(const Tensor& x, const Tensor& attn_out);
  std::shared_ptr<const Parallelism> par_;
};

}  // namespace triad::nn
