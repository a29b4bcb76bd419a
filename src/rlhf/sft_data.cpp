#include "rlhf/sft_data.h"

#include <cmath>

#include "rlhf/data_split.h"
#include "tensor/error.h"

namespace triad::rlhf {

namespace {

class SftData : public engine::TrainingData {
 public:
  SftData(std::vector<PreferenceExample> train, std::vector<PreferenceExample> val, const SftDataOptions& o,
          int32_t eot)
      : train_(std::move(train)), val_(std::move(val)), options_(o), eot_(eot) {}

  io::Batch batch(int64_t step, int64_t global, int64_t first, int64_t rows) override {
    const int64_t t = int64_t(train_.size());
    std::vector<int64_t> select;
    for (int64_t i = first; i < first + rows; ++i) {
      const int64_t g = step * global + i, epoch = g / t;
      if (epoch != epoch_) order_ = seeded_permutation(t, options_.seed + uint64_t(epoch)), epoch_ = epoch;
      select.push_back(order_[size_t(g % t)]);
    }
    return to_batch(train_, select);
  }
  bool has_validation() const override { return !val_.empty(); }
  io::Batch validation(int64_t index, int64_t global, int64_t first, int64_t rows) override {
    std::vector<int64_t> select;
    for (int64_t i = first; i < first + rows; ++i) select.push_back((index * global + i) % int64_t(val_.size()));
    return to_batch(val_, select);
  }
  std::string describe() const override {
    return std::to_string(train_.size()) + " SFT examples, " + std::to_string(val_.size()) + " held out (" +
           options_.path + ")";
  }

 private:
  io::Batch to_batch(const std::vector<PreferenceExample>& examples, const std::vector<int64_t>& select) const {
    SftBatch b = make_sft_batch(examples, select, options_.limits, eot_, eot_, options_.include_prompt);
    return {b.inputs, b.targets};
  }

  std::vector<PreferenceExample> train_, val_;
  SftDataOptions options_;
  int32_t eot_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;  // perm of epoch_
};

}  // namespace

std::unique_ptr<engine::TrainingData> sft_data(const SftDataOptions& o, const io::Tokenizer& tokenizer,
                                               int64_t model_seq_len) {
  o.limits.validate();
  TRIAD_CHECK(o.val_fraction >= 0 && o.val_fraction < 1,
              "SFT data: val_fraction must be in [0, 1), got " << o.val_fraction);
  TRIAD_CHECK(o.limits.max_seq_len - 1 <= model_seq_len,
              "SFT data: max_seq_len " << o.limits.max_seq_len << " makes inputs of up to " << o.limits.max_seq_len - 1
                                       << " tokens, longer than the model's seq_len " << model_seq_len);
  const std::vector<PreferenceRow> rows = read_preference_jsonl(o.path, RlhfStep::sft);
  std::vector<PreferenceRow> split;
  for (const int64_t i : data_split_indices(int64_t(rows.size()), o.data_split, 0, o.seed))
    split.push_back(rows[size_t(i)]);
  TRIAD_CHECK(!split.empty(), "SFT data: data_split \"" << o.data_split << "\" gives step 1 none of the "
                                                        << rows.size() << " rows of " << o.path);
  std::vector<PreferenceExample> examples = tokenize_preferences(split, tokenizer, o.limits, o.path);
  const auto held = size_t(std::llround(o.val_fraction * double(examples.size())));
  TRIAD_CHECK(held < examples.size(), "SFT data: holding out " << held << " of " << examples.size()
                                                               << " examples of " << o.path
                                                               << " leaves none to train on (lower val_fraction)");
  std::vector<PreferenceExample> val(examples.begin(), examples.begin() + long(held));
  examples.erase(examples.begin(), examples.begin() + long(held));
  return std::make_unique<SftData>(std::move(examples), std::move(val), o, tokenizer.eot());
}

}  // namespace triad::rlhf
