// Validation loss of compressed models on the baseline's held-out tokens (held_out_loss.h).
#include "checkpoint/held_out_loss.h"

#include "autograd/grad_mode.h"
#include "tensor/error.h"

namespace triad::engine {

namespace {

double val_fraction(const nlohmann::json& config) {
  return config.contains("data") ? config["data"].value("val_fraction", 0.05) : 0.05;
}

}  // namespace

HeldOutSplit held_out_split(const io::TokenFile& tokens, const nlohmann::json& config, int64_t seq_len) {
  const auto [train, val] = io::split_train_val(tokens.size(), val_fraction(config));
  TRIAD_CHECK(train.size() >= seq_len + 1, "token file '" << tokens.path() << "': its training part holds "
                                                          << train.size() << " tokens, fewer than a sequence of "
                                                          << seq_len << " and its next token");
  return HeldOutSplit{train, val};
}

std::vector<std::pair<Tensor, Tensor>> validation_batches(const io::TokenFile& tokens, const HeldOutSplit& split,
                                                          const nlohmann::json& config, int64_t count, int64_t rows,
                                                          int64_t seq_len) {
  TRIAD_CHECK(count > 0 && rows > 0,
              "validation batches: expected a positive count and rows, got " << count << " and " << rows);
  TRIAD_CHECK(split.val.size() >= seq_len + 1,
              "token file '" << tokens.path() << "': the held-out part (data.val_fraction " << val_fraction(config)
                             << " of the model's config) holds " << split.val.size()
                             << " tokens, fewer than a sequence of " << seq_len << " and its next token");
  const io::BatchSampler sampler(split.val, seq_len, config.value("seed", uint64_t(1234)) + 1);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int64_t i = 0; i < count; ++i) {
    io::Batch b = io::make_batch(tokens, sampler.offsets(i, rows), seq_len);
    batches.emplace_back(b.inputs, b.targets);
  }
  return batches;
}

double validation_loss(nn::LanguageModel& model, const std::vector<std::pair<Tensor, Tensor>>& batches) {
  TRIAD_CHECK(!batches.empty(), "validation loss: no batches");
  NoGradGuard no_grad;
  const bool training = model.is_training();
  model.eval();
  double total = 0;
  for (const auto& [x, y] : batches) total += model.loss(x, y).item();
  model.train(training);
  return total / double(batches.size());
}

}  // namespace triad::engine
