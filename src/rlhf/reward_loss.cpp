#include "rlhf/reward_loss.h"

#include <algorithm>
#include <vector>

#include "autograd/functions.h"
#include "autograd/meta.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

std::vector<int64_t> host_ids(const Tensor& ids) {
  return ops::to(ops::to(ids, Device::cpu()), DType::i64).to_vector<int64_t>();
}

// The position of the (n+1)-th pad in row `row` (length T), or T.
int64_t end_of(const std::vector<int64_t>& ids, int64_t row, int64_t T, int64_t pad_id, int64_t n) {
  int64_t seen = 0;
  for (int64_t t = 0; t < T; ++t)
    if (ids[size_t(row * T + t)] == pad_id && seen++ == n) return t;
  return T;
}

}  // namespace

RewardLoss reward_loss(const Tensor& chosen_values, const Tensor& rejected_values, const Tensor& chosen_ids,
                       const Tensor& rejected_ids, int64_t pad_id, int64_t num_padding_at_beginning) {
  const Shape& shape = chosen_values.shape();
  TRIAD_CHECK(chosen_values.dim() == 2 && rejected_values.shape() == shape && chosen_ids.shape() == shape &&
                  rejected_ids.shape() == shape,
              "reward_loss: expected chosen and rejected values and ids all (B, T), got values "
                  << shape_str(shape) << " and " << shape_str(rejected_values.shape()) << ", ids "
                  << shape_str(chosen_ids.shape()) << " and " << shape_str(rejected_ids.shape()));
  TRIAD_CHECK(num_padding_at_beginning >= 0,
              "reward_loss: num_padding_at_beginning must be >= 0, got " << num_padding_at_beginning);
  const int64_t B = shape[0], T = shape[1];
  TRIAD_CHECK(B > 0 && T > 0, "reward_loss: empty batch " << shape_str(shape));
  const std::vector<int64_t> c_ids = host_ids(chosen_ids), r_ids = host_ids(rejected_ids);
  const std::vector<double> c_val =
      ops::to(ops::to(detach(chosen_values), Device::cpu()), DType::f64).to_vector<double>();
  const std::vector<double> r_val =
      ops::to(ops::to(detach(rejected_values), Device::cpu()), DType::f64).to_vector<double>();

  std::vector<double> weight(size_t(B * T), 0.0), c_score(static_cast<size_t>(B)), r_score(static_cast<size_t>(B));
  int64_t correct = 0;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t c_ind = end_of(c_ids, i, T, pad_id, num_padding_at_beginning);
    int64_t divergence = -1;
    for (int64_t t = 0; t < T && divergence < 0; ++t)
      if (c_ids[size_t(i * T + t)] != r_ids[size_t(i * T + t)]) divergence = t;
    int64_t end, r_ind;
    if (divergence < 0) {
      end = T;
      divergence = T - 1;
      r_ind = c_ind;
    } else {
      r_ind = end_of(r_ids, i, T, pad_id, num_padding_at_beginning);
      end = std::max(c_ind, r_ind);
    }
    TRIAD_CHECK(divergence > 0, "reward_loss: pair " << i << " differs at its first token (chosen and rejected "
                                                     << "must share the prompt)");
    TRIAD_CHECK(divergence < end, "reward_loss: pair " << i << " first differs at position " << divergence
                                                       << ", at or after the end of both sequences (" << end << ")");
    TRIAD_CHECK(c_ind > 0 && r_ind > 0, "reward_loss: pair " << i << " starts with the pad token " << pad_id);
    for (int64_t t = divergence; t < end; ++t) weight[size_t(i * T + t)] = 1.0 / double((end - divergence) * B);
    c_score[size_t(i)] = c_val[size_t(i * T + c_ind - 1)];
    r_score[size_t(i)] = r_val[size_t(i * T + r_ind - 1)];
    correct += c_score[size_t(i)] > r_score[size_t(i)];
  }
  const Tensor w = ops::to(ops::to(Tensor::from_vector(weight, shape), chosen_values.device()), chosen_values.dtype());
  RewardLoss out;
  out.loss = sum(mul(neg(log_sigmoid(sub(chosen_values, rejected_values))), w));
  out.chosen_scores = Tensor::from_vector(c_score, {B});
  out.rejected_scores = Tensor::from_vector(r_score, {B});
  out.accuracy = double(correct) / double(B);
  return out;
}

}  // namespace triad::rlhf
