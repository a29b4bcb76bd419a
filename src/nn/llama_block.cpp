#include "nn/llama_block.h"

#include <cmath>

#include "autograd/functions.h"

namespace triad::nn {

RMSNorm::RMSNorm(int64_t dim, double eps_) : Module("RMSNorm"), eps(eps_) {
  TRIAD_CHECK(dim > 0, "RMSNorm: dimension must be positive, got " << dim);
  TRIAD_CHECK(eps > 0.0, "RMSNorm: eps must be positive, got " << eps);
  weight = register_parameter("weight", Tensor::ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, weight, eps); }

AddNorm RMSNorm::forward_add(const Tensor& x, const Tensor& r) { return add_rms_norm(x, r, weight, eps); }

GroupedQueryAttention::GroupedQueryAttention(int64_t d_model, int64_t n_head_, int64_t n_kv_head_,
                                             std::shared_ptr<const RotaryEmbedding> rope, const Parallelism& par)
    : Module("GroupedQueryAttention"),
      n_head(n_head_ / par.ranks()),
      n_kv_head(n_kv_head_ / par.ranks()),
      head_dim(n_head_ > 0 ? d_model / n_head_ : 0),
      rope_(std::move(rope)) {
  TRIAD_CHECK(n_head_ > 0 && d_model % n_head_ == 0,
              "GroupedQueryAttention: d_model " << d_model << " is not divisible by n_head " << n_head_);
  TRIAD_CHECK(n_kv_head_ > 0 && n_head_ % n_kv_head_ == 0,
              "GroupedQueryAttention: n_kv_head " << n_kv_head_ << " must divide n_head " << n_head_);
  TRIAD_CHECK(n_kv_head_ % par.ranks() == 0, "GroupedQueryAttention: the " << n_kv_head_
                                                                           << " key/value heads cannot be split over "
                                                                           << par.ranks() << " tensor-parallel ranks");
  TRIAD_CHECK(rope_ && rope_->head_dim() == head_dim,
              "GroupedQueryAttention: the rotary embedding is not for heads of " << head_dim << " features");
  q = register_module("q", par.column_linear(d_model, n_head_ * head_dim, 1, false));
  k = register_module("k", par.column_linear(d_model, n_kv_head_ * head_dim, 1, false));
  v = register_module("v", par.column_linear(d_model, n_kv_head_ * head_dim, 1, false));
  o = register_module("o", par.row_linear(n_head_ * head_dim, d_model, false));
}

namespace {

// (B, T, n·hd) -> (B, n, T, hd)
Tensor split_heads(const Tensor& t, int64_t n, int64_t hd) {
  return transpose(reshape(t, {t.size(0), t.size(1), n, hd}), 1, 2);
}

}  // namespace

Tensor GroupedQueryAttention::attend(const Tensor& qh, const Tensor& kh, const Tensor& vh, const Tensor& key_start,
                                     const Tensor& cached) const {
  const double scale = 1.0 / std::sqrt(double(head_dim));
  // (B, NH, T, hd), each group of query heads reading its key/value head in place; the
  // tape's op, or the plain op with cached (inference only)
  const Tensor y = cached.defined() ? ops::causal_attention(qh, kh, vh, scale, key_start, cached).out
                                    : causal_attention(qh, kh, vh, scale, key_start);
  return reshape(transpose(y, 1, 2), {y.size(0), y.size(2), n_head * head_dim});
}

Tensor GroupedQueryAttention::forward(const Tensor& x) {
  TRIAD_CHECK(x.dim() == 3, "GroupedQueryAttention: expected input (B, T, C), got " << shape_str(x.shape()));
  const Tensor qh = rope_->apply(split_heads((*q)(x), n_head, head_dim));
  const Tensor kh = rope_->apply(split_heads((*k)(x), n_kv_head, head_dim));
  const Tensor vh = split_heads((*v)(x), n_kv_head, head_dim);
  return (*o)(attend(qh, kh, vh, Tensor()));
}

Tensor GroupedQueryAttention::forward(const Tensor& x, const LeftPadding& padding) {
  TRIAD_CHECK(x.dim() == 3, "GroupedQueryAttention: expected input (B, T, C), got " << shape_str(x.shape()));
  const Tensor qh = rope_->apply(split_heads((*q)(x), n_head, head_dim), padding.positions);
  const Tensor kh = rope_->apply(split_heads((*k)(x), n_kv_head, head_dim), padding.positions);
  const Tensor vh = split_heads((*v)(x), n_kv_head, head_dim);
  return (*o)(attend(qh, kh, vh, padding.key_start));
}

Tensor GroupedQueryAttention::forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache,
                                             int64_t pos, const Tensor& positions, const Tensor& key_start,
                                             const Tensor& device_pos) {
  const int64_t T = x.size(1);
  TRIAD_CHECK(pos + T <= k_cache.size(2), "GroupedQueryAttention: positions " << pos << ".." << pos + T
                                                                              << " exceed the cache capacity "
                                                                              << k_cache.size(2));
  auto rotate = [&](const Tensor& h) { return positions.defined() ? rope_->apply(h, positions) : rope_->apply(h, pos); };
  const Tensor kh = rotate(split_heads((*k)(x), n_kv_head, head_dim)), vh = split_heads((*v)(x), n_kv_head, head_dim);
  const Tensor qh = rotate(split_heads((*q)(x), n_head, head_dim));
  if (device_pos.defined()) {  // Note [Positions on the device]: one launch for every pos
    ops::copy_at_(k_cache, 2, device_pos, kh);
    ops::copy_at_(v_cache, 2, device_pos, vh);
    return (*o)(attend(qh, k_cache, v_cache, key_start, device_pos));
  }
  ops::copy_(ops::narrow(k_cache, 2, pos, T), kh);
  ops::copy_(ops::narrow(v_cache, 2, pos, T), vh);
  return (*o)(attend(qh, ops::narrow(k_cache, 2, 0, pos + T), ops::narrow(v_cache, 2, 0, pos + T), key_start));
}

SwiGLU::SwiGLU(int64_t d_model, int64_t intermediate, const Parallelism& par) : Module("SwiGLU") {
  gate = register_module("gate", par.column_linear(d_model, intermediate, 1, false));
  up = register_module("up", par.column_linear(d_model, intermediate, 1, false));
  down = register_module("down", par.row_linear(intermediate, d_model, false));
}

Tensor SwiGLU::forward(const Tensor& x) { return (*down)(swiglu((*gate)(x), (*up)(x))); }

LlamaBlock::LlamaBlock(int64_t d_model, int64_t n_head, int64_t n_kv_head, int64_t intermediate, double rms_eps,
                       std::shared_ptr<const RotaryEmbedding> rope, const Parallelism& par, std::shared_ptr<MoE> moe_)
    : Module("LlamaBlock"), par_(par.shared_from_this()) {
  norm1 = register_module("norm1", std::make_shared<RMSNorm>(d_model, rms_eps));
  attn = register_module("attn", std::make_shared<GroupedQueryAttention>(d_model, n_head, n_kv_head, std::move(rope), par));
  norm2 = register_module("norm2", std::make_shared<RMSNorm>(d_model, rms_eps));
  if (moe_)
    moe = register_module("moe", std::move(moe_));
  else
    mlp = register_module("mlp", std::make_shared<SwiGLU>(d_model, intermediate, par));
  par.mark_residual_layer(*norm1);
  par.mark_residual_layer(*norm2);
}

Tensor LlamaBlock::feed_forward(const Tensor& x) { return mlp ? (*mlp)(x) : par_->on_whole_sequence(*moe, x); }

Tensor LlamaBlock::residual_feed_forward(const Tensor& x, const Tensor& attn_out) {
  const AddNorm h = norm2->call([&] { return norm2->forward_add(x, attn_out); });
  return add(h.sum, feed_forward(h.y));
}

Tensor LlamaBlock::forward(const Tensor& x) { return residual_feed_forward(x, (*attn)((*norm1)(x))); }

Tensor LlamaBlock::forward_padded(const Tensor& x, const LeftPadding& padding) {
  return call(
      [&] { return residual_feed_forward(x, attn->call([&] { return attn->forward((*norm1)(x), padding); })); });
}

Tensor LlamaBlock::forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t pos,
                                  const Tensor& positions, const Tensor& key_start, const Tensor& device_pos) {
  return call([&] {
    return residual_feed_forward(
        x, attn->forward_cached((*norm1)(x), k_cache, v_cache, pos, positions, key_start, device_pos));
  });
}

}  // namespace triad::nn
