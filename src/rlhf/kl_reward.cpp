#include "rlhf/kl_reward.h"

#include <algorithm>

#include "rlhf/host_rows.h"

namespace triad::rlhf {

Tensor kl_rewards(const Tensor& logp, const Tensor& ref_logp, const Tensor& score, const Tensor& mask, double kl_coef,
                  double clip) {
  TRIAD_CHECK(logp.dim() == 2 && ref_logp.shape() == logp.shape() && score.shape() == Shape{logp.size(0)},
              "kl_rewards: expected logp and ref_logp (B, A) and score (B,), got "
                  << shape_str(logp.shape()) << ", " << shape_str(ref_logp.shape()) << " and "
                  << shape_str(score.shape()));
  TRIAD_CHECK(clip >= 0, "kl_rewards: clip must be >= 0, got " << clip);
  const int64_t B = logp.size(0), A = logp.size(1);
  const std::vector<double> lp = host_values(logp), ref = host_values(ref_logp), s = host_values(score);
  const std::vector<double> m = host_mask(mask, logp.shape(), "kl_rewards");
  std::vector<double> r(size_t(B * A), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    int64_t last = -1;
    for (int64_t t = 0; t < A; ++t) {
      const size_t i = size_t(b * A + t);
      if (m[i] == 0.0) continue;
      r[i] = -kl_coef * (lp[i] - ref[i]);
      last = t;
    }
    TRIAD_CHECK(last >= 0, "kl_rewards: row " << b << " has no answer token (its mask is all 0)");
    r[size_t(b * A + last)] += std::clamp(s[size_t(b)], -clip, clip);
  }
  return tensor_like(r, logp.shape(), logp);
}

}  // namespace triad::rlhf
