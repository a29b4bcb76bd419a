#include "rlhf/log_probs.h"

#include <algorithm>
#include <vector>

#include "autograd/functions.h"
#include "autograd/meta.h"
#include "autograd/record.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

// The rows [t0, t0 + rows) of sequence b, a contiguous (rows, W) block of the logits.
struct Chunk {
  int64_t b, t0, rows;
};

std::vector<Chunk> chunks(int64_t batch, int64_t steps, int64_t width, int64_t chunk_elements) {
  const int64_t per = std::max<int64_t>(1, chunk_elements / width);
  std::vector<Chunk> out;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t0 = 0; t0 < steps; t0 += per) out.push_back({b, t0, std::min(per, steps - t0)});
  return out;
}

Tensor unsqueeze1(const Tensor& t) { return ops::unsqueeze(t, 1); }

}  // namespace

TokenLogProbs next_token_log_probs(const Tensor& logits_in, const Tensor& ids, const Tensor& mask, int64_t classes,
                                   int64_t chunk_elements) {
  TRIAD_CHECK(logits_in.dim() == 3 && ids.dim() == 2 && ids.size(0) == logits_in.size(0) &&
                  ids.size(1) == logits_in.size(1) && logits_in.size(1) >= 2,
              "next_token_log_probs: expected logits (B, T, W) and ids (B, T) with T >= 2, got "
                  << shape_str(logits_in.shape()) << " and " << shape_str(ids.shape()));
  TRIAD_CHECK(logits_in.dtype() == DType::f32 || logits_in.dtype() == DType::f64,
              "next_token_log_probs: logits must be f32 or f64, got " << dtype_name(logits_in.dtype()));
  TRIAD_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32,
              "next_token_log_probs: ids must be i64 or i32, got " << dtype_name(ids.dtype()));
  TRIAD_CHECK(chunk_elements > 0, "next_token_log_probs: chunk_elements must be positive, got " << chunk_elements);
  const Tensor logits = contiguous(logits_in);
  const int64_t B = logits.size(0), T = logits.size(1), W = logits.size(2), S = T - 1;
  const int64_t V = classes < 0 ? W : classes;
  TRIAD_CHECK(V >= 1 && V <= W, "next_token_log_probs: classes " << classes << " outside [1, " << W << "]");
  const Device device = logits.device();
  const DType dtype = logits.dtype();

  const std::vector<int64_t> host_ids = ops::to(ops::to(ids, Device::cpu()), DType::i64).to_vector<int64_t>();
  for (size_t i = 0; i < host_ids.size(); ++i)
    TRIAD_CHECK(host_ids[i] >= 0 && host_ids[i] < V, "next_token_log_probs: id " << host_ids[i] << " at (" << i / T
                                                                                 << ", " << i % T << ") is outside [0, "
                                                                                 << V << ")");
  const Tensor m = mask.defined() ? mask_like(mask, Tensor::empty({B, S}, dtype, device), "next_token_log_probs")
                                  : Tensor::ones({B, S}, dtype, device);
  const std::vector<Chunk> parts = chunks(B, S, W, chunk_elements);
  // Flattened positions (row * W + target) and the targets of each chunk, on the device.
  auto positions = [=](const Chunk& c) {
    std::vector<int64_t> p(size_t(c.rows));
    for (int64_t i = 0; i < c.rows; ++i) p[size_t(i)] = i * W + host_ids[size_t(c.b * T + c.t0 + i + 1)];
    return ops::to(Tensor::from_vector(p, {c.rows}), device);
  };
  auto targets = [=](const Chunk& c) {
    std::vector<int64_t> p(host_ids.begin() + c.b * T + c.t0 + 1, host_ids.begin() + c.b * T + c.t0 + 1 + c.rows);
    return ops::to(Tensor::from_vector(p, {c.rows}), device);
  };
  auto rows_of = [=](const Tensor& full, const Chunk& c) {
    return ops::narrow(ops::select(full, 0, c.b), 0, c.t0, c.rows);
  };

  Tensor lse = Tensor::empty({B, S}, dtype, device), logp = Tensor::empty({B, S}, dtype, device);
  Tensor entropy = Tensor::empty({B, S}, dtype, device);
  {
    NoGradGuard no_grad;
    for (const Chunk& c : parts) {
      const Tensor x = rows_of(logits, c);  // (rows, W), contiguous
      const Tensor l = ops::cross_entropy(x, targets(c), -1, V).lse;
      const Tensor picked = ops::view(ops::embedding(ops::view(x, {c.rows * W, 1}), positions(c)), {c.rows});
      const Tensor xv = ops::narrow(x, 1, 0, V);
      const Tensor p = ops::exp(ops::sub(xv, unsqueeze1(l)));
      ops::copy_(rows_of(lse, c), l);
      ops::copy_(rows_of(logp, c), ops::sub(picked, l));
      ops::copy_(rows_of(entropy, c), ops::sub(l, ops::sum(ops::mul(p, xv), 1)));
    }
  }
  const Tensor h = entropy;
  std::vector<Tensor> out =
      record("next_token_log_probs", {logits}, {ops::mul(logp, m), ops::mul(entropy, m)}, [=](const Grads& g) {
        Tensor grad = Tensor::zeros(logits.shape(), dtype, device);
        const Tensor glp = g[0].defined() ? ops::mul(g[0], m) : Tensor();
        const Tensor gh = g[1].defined() ? ops::mul(g[1], m) : Tensor();
        for (const Chunk& c : parts) {
          const Tensor x = rows_of(logits, c), xv = ops::narrow(x, 1, 0, V);
          const Tensor log_p = ops::sub(xv, unsqueeze1(rows_of(lse, c)));
          // d = -p (glp + gh (log p + entropy)) + [v = target] glp
          Tensor coef;
          if (gh.defined()) coef = ops::mul(ops::add(log_p, unsqueeze1(rows_of(h, c))), unsqueeze1(rows_of(gh, c)));
          if (glp.defined())
            coef = coef.defined() ? ops::add(coef, unsqueeze1(rows_of(glp, c))) : unsqueeze1(rows_of(glp, c));
          const Tensor gx = rows_of(grad, c);
          ops::copy_(ops::narrow(gx, 1, 0, V), ops::neg(ops::mul(ops::exp(log_p), coef)));
          if (glp.defined()) {
            const Tensor onehot = ops::embedding_backward(ops::unsqueeze(rows_of(glp, c), 1), positions(c), c.rows * W);
            ops::add_(gx, ops::view(onehot, {c.rows, W}));
          }
        }
        return Grads{grad};
      });
  return {out[0], out[1]};
}

Tensor sequence_log_probs(const Tensor& token_logp, const Tensor& mask) {
  TRIAD_CHECK(token_logp.dim() == 2,
              "sequence_log_probs: expected token log-probs (B, A), got " << shape_str(token_logp.shape()));
  return sum(mul(token_logp, mask_like(mask, token_logp, "sequence_log_probs")), 1);
}

}  // namespace triad::rlhf
