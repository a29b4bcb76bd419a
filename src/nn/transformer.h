// The pieces of a GPT-2 transformer block: causal self-attention, the MLP, and the pre-LN
// block that joins them with residual connections.
#pragma once

#include "nn/language_model.h"
#include "nn/moe.h"
#include "nn/parallelism.h"

namespace triad::nn {

// Multi-head causal self-attention on x (B, T, C): one fused qkv projection (C -> 3C, split
// q|k|v), softmax(q k^T / sqrt(hs)) over keys at or before each query, output projection.
// Under tensor parallelism each rank computes n_head / ranks heads: qkv is column-parallel
// (each of q, k, v split by heads), proj row-parallel.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t d_model, int64_t n_head, double dropout, const Parallelism& par = *serial());
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  // key_start (B,) i64, or undefined: each row's first key (Note [Left-padded batches]);
  // not with attention dropout in training.
  Tensor forward(const Tensor& x, const Tensor& key_start);
  // x (B, T_new, C) at columns pos.. of a sequence whose keys and values before pos are in
  // k_cache/v_cache (B, NH, capacity, hs); appends this step's keys and values there.
  // device_pos, when defined, (1,) i64 on x's device holding pos, which the kernels read
  // (nn::KVCache::device_length). Inference only (no gradients).
  Tensor forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                        const Tensor& key_start = Tensor(), const Tensor& device_pos = Tensor());

  int64_t n_head;  // the heads this rank computes
  std::shared_ptr<Linear> qkv, proj;
  std::shared_ptr<Dropout> attn_drop, resid_drop;
};

// fc (C -> 4C, column-parallel), GELU, proj (4C -> C, row-parallel), dropout. fc and GELU
// run fused (Linear::forward_gelu); `act` stays for the module tree (its hooks do not run).
class MLP : public Module {
 public:
  MLP(int64_t d_model, double dropout, const Parallelism& par = *serial());
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> fc, proj;
  std::shared_ptr<GELU> act;
  std::shared_ptr<Dropout> drop;
};

// x + attn(ln1(x)), then x + mlp(ln2(x)), the first residual add fused into ln2
// (LayerNorm::forward_add); in an MoE block (given `moe`), x + moe(ln2(x)),
// the layer's router loss riding on its output (nn/router_loss.h).
class Block : public Module {
 public:
  Block(int64_t d_model, int64_t n_head, double dropout, const Parallelism& par = *serial(),
        std::shared_ptr<MoE> moe = nullptr);
  Tensor forward(const Tensor& x) override;
  // A left-padded batch: the rows' first keys (Note [Left-padded batches]); runs the hooks.
  Tensor forward_padded(const Tensor& x, const Tensor& key_start);
  Tensor forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                        const Tensor& key_start = Tensor(), const Tensor& device_pos = Tensor());

  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;  // null in an MoE block
  std::shared_ptr<MoE> moe;  // null in a dense block

 private:
  Tensor feed_forward(const Tensor& x);  // (*mlp)(x) or the MoE on the whole sequence (Parallelism::on_whole_sequence)
  // h + feed_forward(ln2(h)) for h = x + attn_out, the add fused into ln2.
  Tensor residual_feed_forward(const Tensor& x, const Tensor& attn_out);
  std::shared_ptr<const Parallelism> par_;
};

}  // namespace triad::nn
