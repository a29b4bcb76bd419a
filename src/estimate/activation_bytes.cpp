// Note [Activation bytes], term by term.
#include "estimate/activation_bytes.h"

#include "nn/tensor_split.h"
#include "tensor/error.h"

namespace triad::estimate {

namespace {

constexpr double kF32 = 4, kIndex = 8;

struct Dims {
  double B, T, Tr, C, NH, t, p;  // Tr: T', the residual stream's tokens on a rank
};

Dims dims(const ActivationShape& s) {
  TRIAD_CHECK(s.batch >= 1 && s.seq >= 1 && s.d_model >= 1 && s.n_head >= 1 && s.tp >= 1 && s.n_head % s.tp == 0 &&
                  s.vocab_rows >= 1 && (s.product_bytes == 2 || s.product_bytes == 4),
              "[estimate] bad activation shape: B " << s.batch << ", T " << s.seq << ", C " << s.d_model << ", NH "
                                                    << s.n_head << ", V_r " << s.vocab_rows << ", tp " << s.tp << ", p "
                                                    << s.product_bytes);
  TRIAD_CHECK(!s.sequence_parallel || s.seq % s.tp == 0,
              "[estimate] sequence parallelism: T " << s.seq << " is not divisible by tp " << s.tp);
  const double T = double(s.seq), t = double(s.tp);
  return {double(s.batch),  T, s.sequence_parallel ? T / t : T, double(s.d_model),
          double(s.n_head), t, double(s.product_bytes)};
}

// Linear layers defer their weight gradients except on the bf16 tensor-core path.
bool defers(const ActivationShape& s) { return s.product_bytes == 4; }

}  // namespace

ActivationShape activation_shape(const nn::GPTConfig& c, int64_t batch, int64_t seq, int tp, bool sequence_parallel,
                                 DType param_dtype, bool cuda) {
  ActivationShape s;
  s.batch = batch, s.seq = seq, s.d_model = c.d_model, s.n_head = c.n_head, s.tp = tp;
  s.sequence_parallel = sequence_parallel && tp > 1;
  s.vocab_rows = nn::vocab_rows_per_rank(c.vocab_size, tp, c.vocab_multiple);
  s.attention_dropout = c.dropout > 0;
  s.product_bytes = param_dtype == DType::bf16 && cuda ? 2 : 4;
  return s;
}

double residual_bytes(const ActivationShape& s) {
  const Dims d = dims(s);
  return kF32 * d.B * d.Tr * d.C;
}

LayerActivations embedding_activations(const ActivationShape&) { return {}; }

LayerActivations block_activations(const ActivationShape& s) {
  const Dims d = dims(s);
  const double BTC = d.B * d.T * d.C, norms = 2 * (kF32 * d.B * d.Tr * d.C + 2 * kF32 * d.B * d.Tr);
  const double attention = s.attention_dropout ? 3 * kF32 * BTC / d.t + 2 * kF32 * d.B * (d.NH / d.t) * d.T * d.T
                                               : 4 * d.p * BTC / d.t + kF32 * d.B * (d.NH / d.t) * d.T;
  // The fused attention's output is stored (B, T, C) (Note [Attention layout]); the composed
  // one's is made so, a copy unless it has one head per rank or one token.
  const double heads_copy = s.attention_dropout && d.NH / d.t > 1 && d.T > 1 ? d.p * BTC / d.t : 0.0;
  LayerActivations a;
  a.saved = norms + 2 * d.p * BTC                          // ln1, ln2; qkv and fc inputs
            + attention + heads_copy                       // attention; proj input
            + 4 * kF32 * BTC / d.t + 4 * d.p * BTC / d.t;  // GELU input; proj input
  if (defers(s)) a.deferred = 16 * BTC + 48 * BTC / d.t;   // bytes: 4 f32 tensors whole, 12 split
  return a;
}

LayerActivations head_activations(const ActivationShape& s) {
  const Dims d = dims(s);
  LayerActivations a;
  a.saved = kF32 * d.B * d.Tr * d.C + 2 * kF32 * d.B * d.Tr + d.p * d.B * d.T * d.C;
  return a;
}

LayerActivations fused_loss_activations(const ActivationShape& s) {
  const Dims d = dims(s);
  return {kF32 * d.B * d.T + kIndex, 0};
}

LayerActivations gpt_layer_activations(const ActivationShape& s, const std::string& type) {
  if (type == "GPTEmbedding") return embedding_activations(s);
  if (type == "Block") return block_activations(s);
  if (type == "GPTHead") return head_activations(s);
  throw Error("[estimate] no activation formula for a layer of type '" + type + "'");
}

}  // namespace triad::estimate
