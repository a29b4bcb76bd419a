#include "nn/transformer.h"

#include <cmath>

#include "autograd/functions.h"

namespace triad::nn {

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t n_head_, double dropout, const Parallelism& par)
    : Module("CausalSelfAttention"), n_head(n_head_ / par.ranks()) {
  TRIAD_CHECK(n_head_ > 0 && d_model % n_head_ == 0,
              "CausalSelfAttention: d_model " << d_model << " is not divisible by n_head " << n_head_);
  TRIAD_CHECK(n_head_ % par.ranks() == 0, "CausalSelfAttention: the " << n_head_ << " heads cannot be split over "
                                                                      << par.ranks() << " tensor-parallel ranks");
  qkv = register_module("qkv", par.column_linear(d_model, 3 * d_model, 3));
  proj = register_module("proj", par.row_linear(d_model, d_model));
  attn_drop = register_module("attn_drop", std::make_shared<Dropout>(dropout, par.region_generator()));
  resid_drop = register_module("resid_drop", std::make_shared<Dropout>(dropout, par.residual_generator()));
}

Tensor CausalSelfAttention::forward(const Tensor& x, const Tensor& key_start) {
  TRIAD_CHECK(x.dim() == 3, "CausalSelfAttention: expected input (B, T, C), got " << shape_str(x.shape()));
  const Tensor qkv_out = (*qkv)(x);  // (B, T, 3C), C: the features of this rank's heads
  const int64_t B = qkv_out.size(0), T = qkv_out.size(1), C = qkv_out.size(2) / 3, hs = C / n_head;
  const double scale = 1.0 / std::sqrt(double(hs));
  Tensor y;  // (B, NH, T, hs)
  if (attn_drop->is_training() && attn_drop->p > 0.0) {
    // Attention dropout acts on the probabilities, which the fused op never stores.
    TRIAD_CHECK(!key_start.defined(), "CausalSelfAttention: attention dropout does not take left-padded batches");
    auto heads = [&](int64_t part) {  // (B, NH, T, hs)
      return transpose(reshape(narrow(qkv_out, 2, part * C, C), {B, T, n_head, hs}), 1, 2);
    };
    const Tensor att = softmax(mul(matmul(heads(0), heads(1), false, true), scale), /*causal=*/true);
    y = matmul((*attn_drop)(att), heads(2));
  } else {
    y = causal_attention_qkv(qkv_out, n_head, scale, key_start);  // one (B, T, 3C) gradient
  }
  return (*resid_drop)((*proj)(reshape(transpose(y, 1, 2), {B, T, C})));
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                                           const Tensor& key_start, const Tensor& device_pos) {
  const Tensor qkv_out = (*qkv)(x);
  const int64_t B = qkv_out.size(0), T = qkv_out.size(1), C = qkv_out.size(2) / 3, hs = C / n_head;
  TRIAD_CHECK(pos + T <= k_cache.size(2), "CausalSelfAttention: positions " << pos << ".." << pos + T
                                                                            << " exceed the cache capacity "
                                                                            << k_cache.size(2));
  auto heads = [&](int64_t part) {
    return ops::transpose(ops::reshape(ops::narrow(qkv_out, 2, part * C, C), {B, T, n_head, hs}), 1, 2);
  };
  const double scale = 1.0 / std::sqrt(double(hs));
  Tensor att;  // (B, NH, T, hs)
  if (device_pos.defined()) {  // Note [Positions on the device]: one launch for every pos
    ops::copy_at_(k_cache, 2, device_pos, heads(1));
    ops::copy_at_(v_cache, 2, device_pos, heads(2));
    att = ops::causal_attention(heads(0), k_cache, v_cache, scale, key_start, device_pos).out;
  } else {
    ops::copy_(ops::narrow(k_cache, 2, pos, T), heads(1));
    ops::copy_(ops::narrow(v_cache, 2, pos, T), heads(2));
    att = ops::causal_attention(heads(0), ops::narrow(k_cache, 2, 0, pos + T), ops::narrow(v_cache, 2, 0, pos + T),
                                scale, key_start)
              .out;
  }
  const Tensor y = ops::reshape(ops::transpose(att, 1, 2), {B, T, C});
  return (*proj)(y);
}

MLP::MLP(int64_t d_model, double dropout, const Parallelism& par) : Module("MLP") {
  fc = register_module("fc", par.column_linear(d_model, 4 * d_model));
  act = register_module("act", std::make_shared<GELU>());
  proj = register_module("proj", par.row_linear(4 * d_model, d_model));
  drop = register_module("drop", std::make_shared<Dropout>(dropout, par.residual_generator()));
}

// fc and act run as one fused op, through fc's hooks.
Tensor MLP::forward(const Tensor& x) {
  const Tensor h = fc->call([&] { return fc->forward_gelu(x); });
  return (*drop)((*proj)(h));
}

Block::Block(int64_t d_model, int64_t n_head, double dropout, const Parallelism& par, std::shared_ptr<MoE> moe_)
    : Module("Block"), par_(par.shared_from_this()) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(d_model));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(d_model, n_head, dropout, par));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(d_model));
  if (moe_)
    moe = register_module("moe", std::move(moe_));
  else
    mlp = register_module("mlp", std::make_shared<MLP>(d_model, dropout, par));
  par.mark_residual_layer(*ln1);
  par.mark_residual_layer(*ln2);
}

Tensor Block::feed_forward(const Tensor& x) { return mlp ? (*mlp)(x) : par_->on_whole_sequence(*moe, x); }

// The residual add after attention runs inside ln2 (LayerNorm::forward_add, through ln2's
// hooks): h = x + attn and ln2(h) from one kernel.
Tensor Block::residual_feed_forward(const Tensor& x, const Tensor& attn_out) {
  const AddNorm h = ln2->call([&] { return ln2->forward_add(x, attn_out); });
  return add(h.sum, feed_forward(h.y));
}

Tensor Block::forward(const Tensor& x) { return residual_feed_forward(x, (*attn)((*ln1)(x))); }

Tensor Block::forward_padded(const Tensor& x, const Tensor& key_start) {
  return call(
      [&] { return residual_feed_forward(x, attn->call([&] { return attn->forward((*ln1)(x), key_start); })); });
}

Tensor Block::forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                             const Tensor& key_start, const Tensor& device_pos) {
  return call([&] {
    return residual_feed_forward(x, attn->forward_cached((*ln1)(x), k_cache, v_cache, pos, key_start, device_pos));
  });
}

}  // namespace triad::nn
