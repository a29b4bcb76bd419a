#include "rlhf/sft_data.h"

#include "rlhf/step_examples.h"
#include "tensor/error.h"

namespace triad::rlhf {

namespace {

class SftData : public engine::TrainingData {
 public:
  SftData(StepExamples examples, const SftDataOptions& o, int32_t eot)
      : train_(std::move(examples.train)),
        val_(std::move(examples.held_out)),
        options_(o),
        eot_(eot),
        order_(int64_t(train_.size()), o.seed) {}

  io::Batch batch(int64_t step, int64_t global, int64_t first, int64_t rows) override {
    std::vector<int64_t> select;
    for (int64_t i = first; i < first + rows; ++i) select.push_back(order_.at(step * global + i));
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
  EpochOrder order_;
};

}  // namespace

std::unique_ptr<engine::TrainingData> sft_data(const SftDataOptions& o, const io::Tokenizer& tokenizer,
                                               int64_t model_seq_len) {
  TRIAD_CHECK(o.limits.max_seq_len - 1 <= model_seq_len,
              "SFT data: max_seq_len " << o.limits.max_seq_len << " makes inputs of up to " << o.limits.max_seq_len - 1
                                       << " tokens, longer than the model's seq_len " << model_seq_len);
  return std::make_unique<SftData>(step_examples(o.path, RlhfStep::sft, 0, o.data_split, tokenizer, o.limits,
                                                 o.val_fraction, o.seed, "SFT data"),
                                   o, tokenizer.eot());
}

}  // namespace triad::rlhf
