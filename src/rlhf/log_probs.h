// Log-probabilities of the tokens a sequence actually continues with, and the policy's
// entropy, from a language model's logits: what PPO, GRPO and DPO read off the actor and
// the reference model.
//
// Note [Next-token log-probs]: for logits (B, T, W) of sequences ids (B, T),
//   logp[b, t]    = log softmax(logits[b, t])[ids[b, t + 1]]          t < T - 1
//   entropy[b, t] = -sum_v p_v log p_v,  p = softmax(logits[b, t])
// over the first V = classes columns (a padded vocabulary's other columns take no part),
// both (B, T - 1), multiplied by mask (B, T - 1) (0 where a position does not count; its
// gradient is 0 too). This is DeepSpeed-Chat's gather_log_probs(logits[:, :-1], seq[:, 1:]).
//
// Memory: the (B, T, V) log-softmax is never stored. The forward keeps only lse and the
// entropy per row ((B, T - 1) each); rows are processed in chunks of about chunk_elements
// logits, whose temporaries are all that lives beside the logits. The backward allocates
// the one (B, T, W) gradient, writes it chunk by chunk (recomputing softmax from lse), and
// nothing else of that size:
//   d logp / d logits_v    = [v = target] - p_v
//   d entropy / d logits_v = -p_v (log p_v + entropy)
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace triad::rlhf {

struct TokenLogProbs {
  Tensor logp;     // (B, T - 1)
  Tensor entropy;  // (B, T - 1)
};

// logits (B, T, W), f32 or f64, any device (a copy is made first when not contiguous);
// ids (B, T) of i64/i32 in [0, V), any device; mask (B, T - 1) or undefined for all ones.
// Throws Error naming the shapes, or the id out of range, on bad input.
TokenLogProbs next_token_log_probs(const Tensor& logits, const Tensor& ids, const Tensor& mask = Tensor(),
                                   int64_t classes = -1, int64_t chunk_elements = int64_t(1) << 22);

// The sum over t of token_logp (B, A) * mask (B, A): a sequence's log-probability over its
// answer tokens (DPO's summed log-probs). Differentiable; (B,).
Tensor sequence_log_probs(const Tensor& token_logp, const Tensor& mask);

}  // namespace triad::rlhf
