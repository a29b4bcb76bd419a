#include "rlhf/step_examples.h"

#include <cmath>

#include "rlhf/data_split.h"
#include "tensor/error.h"

namespace triad::rlhf {

StepExamples step_examples(const std::string& path, RlhfStep step, int split_index, const std::string& data_split,
                           const io::Tokenizer& tokenizer, const SequenceLimits& limits, double val_fraction,
                           uint64_t seed, const std::string& what) {
  limits.validate();
  TRIAD_CHECK(val_fraction >= 0 && val_fraction < 1,
              what << ": val_fraction must be in [0, 1), got " << val_fraction);
  const std::vector<PreferenceRow> rows = read_preference_jsonl(path, step);
  std::vector<PreferenceRow> split;
  for (const int64_t i : data_split_indices(int64_t(rows.size()), data_split, split_index, seed))
    split.push_back(rows[size_t(i)]);
  TRIAD_CHECK(!split.empty(), what << ": data_split \"" << data_split << "\" gives step " << split_index + 1
                                   << " none of the " << rows.size() << " rows of " << path);
  StepExamples out;
  out.train = tokenize_preferences(split, tokenizer, limits, path);
  const auto held = size_t(std::llround(val_fraction * double(out.train.size())));
  TRIAD_CHECK(held < out.train.size(), what << ": holding out " << held << " of " << out.train.size()
                                            << " examples of " << path
                                            << " leaves none to train on (lower val_fraction)");
  out.held_out.assign(out.train.begin(), out.train.begin() + long(held));
  out.train.erase(out.train.begin(), out.train.begin() + long(held));
  return out;
}

int64_t EpochOrder::at(int64_t g) {
  const int64_t epoch = g / t_;
  if (epoch != epoch_) order_ = seeded_permutation(t_, seed_ + uint64_t(epoch)), epoch_ = epoch;
  return order_[size_t(g % t_)];
}

}  // namespace triad::rlhf
