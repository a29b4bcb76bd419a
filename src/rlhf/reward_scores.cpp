#include "rlhf/reward_scores.h"

#include "autograd/functions.h"
#include "autograd/meta.h"
#include "rlhf/host_rows.h"
#include "tensor/ops.h"

namespace triad::rlhf {

namespace {

// No token's id: what marks a row's padding for reward_loss.
constexpr int64_t kPadMark = -1;

// ids (B, L) with row b's columns from lengths[b] on set to kPadMark.
Tensor marked_padding(const Tensor& ids, const std::vector<int64_t>& lengths) {
  const int64_t B = ids.size(0), L = ids.size(1);
  std::vector<int64_t> v = ops::to(ids, DType::i64).to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = lengths[size_t(b)]; t < L; ++t) v[size_t(b * L + t)] = kPadMark;
  return Tensor::from_vector(v, {B, L});
}

// Row b's value at column columns[b] of values (B, L), each as it is (a gather where the
// values are).
Tensor values_at(const Tensor& values, const std::vector<int64_t>& columns) {
  const int64_t B = values.size(0), L = values.size(1);
  std::vector<int64_t> flat;
  for (int64_t b = 0; b < B; ++b) flat.push_back(b * L + columns[size_t(b)]);
  const Tensor index = ops::to(Tensor::from_vector(flat, {B}), values.device());
  return ops::reshape(ops::embedding(ops::reshape(detach(values), {B * L, 1}), index), {B});
}

}  // namespace

RewardLoss reward_batch_loss(nn::Module& model, const RewardBatch& batch, Device device) {
  return reward_values_loss(model(ops::to(cat({batch.chosen, batch.rejected}, 0), device)), batch);
}

RewardLoss reward_values_loss(const Tensor& values, const RewardBatch& batch) {
  const int64_t B = batch.chosen.size(0);
  return reward_loss(narrow(values, 0, 0, B), narrow(values, 0, B, B),
                     marked_padding(batch.chosen, batch.chosen_lengths),
                     marked_padding(batch.rejected, batch.rejected_lengths), kPadMark);
}

Tensor sample_scores(const Tensor& values, const Tensor& answer_mask) {
  TRIAD_CHECK(values.dim() == 2 && answer_mask.dim() == 2 && answer_mask.size(0) == values.size(0) &&
                  answer_mask.size(1) < values.size(1),
              "sample_scores: expected values (R, P + N) and an answer mask (R, N), got "
                  << shape_str(values.shape()) << " and " << shape_str(answer_mask.shape()));
  const int64_t R = values.size(0), T = values.size(1), N = answer_mask.size(1), P = T - N;
  const std::vector<double> mask = host_mask(answer_mask, {R, N}, "sample_scores");
  std::vector<int64_t> columns;
  for (int64_t b = 0; b < R; ++b) {
    int64_t n = 0;
    for (int64_t t = 0; t < N; ++t) n += mask[size_t(b * N + t)] > 0;
    TRIAD_CHECK(n > 0, "sample_scores: row " << b << " has no generated token");
    columns.push_back(P + n - 1);
  }
  return values_at(values, columns);
}

Tensor chosen_scores(nn::ValueModel& reward, const std::vector<PreferenceExample>& data,
                     const std::vector<int64_t>& select, const SequenceLimits& limits, int32_t eot, Device device) {
  const RewardBatch b = make_reward_batch(data, select, limits, eot, eot);
  std::vector<int64_t> columns;
  for (const int64_t length : b.chosen_lengths) columns.push_back(length - 1);
  return values_at(reward(ops::to(b.chosen, device)), columns);  // through its hooks (ZeRO-3)
}

}  // namespace triad::rlhf
