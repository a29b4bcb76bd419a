// The pairwise loss of a reward model (DeepSpeed-Chat step 2), on per-token values.
//
// Note [Reward model loss]: chosen and rejected sequences of a pair share their prompt; the
// reward model gives a value at every token, r_c and r_r (B, T). DeepSpeed-Chat's
// RewardModel.forward, for each pair i (n = num_padding_at_beginning, 0 but for OPT-style
// models whose first token is a pad):
//   c_ind = the position of the (n+1)-th pad token of the chosen ids (T when it has fewer);
//   if the two id rows are identical:
//     end = T, divergence = T - 1, r_ind = c_ind   (the span is the last position alone)
//   else:
//     r_ind = the same for the rejected ids, end = max(c_ind, r_ind),
//     divergence = the first position where the ids differ;
//   loss_i = mean over t in [divergence, end) of -log sigmoid(r_c[t] - r_r[t]);
//   score_c = r_c[c_ind - 1], score_r = r_r[r_ind - 1]  (the last token before the pad).
// loss = mean over pairs of loss_i; accuracy = the fraction of pairs with score_c > score_r
// (strictly). The pad positions are found over the whole row, prompt included, as
// DeepSpeed-Chat does; with right-padded batches that is the end of each answer. pad_id must
// be a token no sequence holds before its padding, as DeepSpeed-Chat's pad differs from its
// end-of-conversation token: the score is then the value at the token ending the answer.
// triad's batches pad with <|endoftext|>, the token ending every answer, so its reward step
// marks each row's padding with an id no token has (reward_batch_loss, rlhf/reward_scores.h,
// Note [Score position]). Where DeepSpeed-Chat asserts, this throws Error: a pair diverging
// at position 0 (no shared first token), an empty span (ids that differ only after both
// ends), or a score position c_ind - 1 < 0.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace triad::rlhf {

struct RewardLoss {
  Tensor loss;             // shape (), differentiable in both value tensors
  Tensor chosen_scores;    // (B,) f64 on the host, for reporting
  Tensor rejected_scores;  // (B,) f64 on the host
  double accuracy = 0;     // fraction of pairs with chosen score > rejected score
};

// chosen_values, rejected_values (B, T) f32/f64 on one device; chosen_ids, rejected_ids
// (B, T) i64/i32 on any device.
RewardLoss reward_loss(const Tensor& chosen_values, const Tensor& rejected_values, const Tensor& chosen_ids,
                       const Tensor& rejected_ids, int64_t pad_id, int64_t num_padding_at_beginning = 0);

}  // namespace triad::rlhf
