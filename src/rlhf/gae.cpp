#include "rlhf/gae.h"

#include "rlhf/host_rows.h"

namespace triad::rlhf {

AdvantagesReturns gae(const Tensor& values, const Tensor& rewards, const Tensor& mask, double gamma, double lambda) {
  TRIAD_CHECK(values.dim() == 2 && rewards.shape() == values.shape(), "gae: expected values and rewards (B, A), got "
                                                                          << shape_str(values.shape()) << " and "
                                                                          << shape_str(rewards.shape()));
  TRIAD_CHECK(gamma >= 0 && gamma <= 1 && lambda >= 0 && lambda <= 1,
              "gae: gamma and lambda must be in [0, 1], got " << gamma << " and " << lambda);
  const int64_t B = values.size(0), A = values.size(1);
  const std::vector<double> m = host_mask(mask, values.shape(), "gae");
  std::vector<double> v = host_values(values), r = host_values(rewards);
  for (size_t i = 0; i < m.size(); ++i) {
    v[i] *= m[i];
    r[i] *= m[i];
  }
  std::vector<double> adv(size_t(B * A)), ret(size_t(B * A));
  for (int64_t b = 0; b < B; ++b) {
    double next_value = 0, next_adv = 0;
    for (int64_t t = A - 1; t >= 0; --t) {
      const size_t i = size_t(b * A + t);
      next_adv = r[i] + gamma * next_value - v[i] + gamma * lambda * next_adv;
      adv[i] = next_adv;
      ret[i] = next_adv + v[i];
      next_value = v[i];
    }
  }
  return {tensor_like(adv, values.shape(), values), tensor_like(ret, values.shape(), values)};
}

}  // namespace triad::rlhf
