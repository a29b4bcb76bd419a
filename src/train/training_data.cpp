#include "train/training_data.h"

#include "config/model_factory.h"
#include "io/token_file.h"
#include "io/tokenizer.h"
#include "tensor/error.h"

namespace triad::engine {

namespace {

std::vector<int64_t> rows_of(const std::vector<int64_t>& offsets, int64_t first, int64_t n) {
  TRIAD_CHECK(first >= 0 && n >= 0 && first + n <= int64_t(offsets.size()),
              "rows [" << first << ", " << first + n << ") outside a global batch of " << offsets.size());
  return std::vector<int64_t>(offsets.begin() + first, offsets.begin() + first + n);
}

class CorpusData : public TrainingData {
 public:
  explicit CorpusData(const TrainConfig& c) : tokens_(open(c)), T_(model_shape(c).seq_len) {
    const auto [train, val] = io::split_train_val(tokens_.size(), c.data.val_fraction);
    train_ = std::make_unique<io::BatchSampler>(train, T_, c.seed);
    if (val.size() > 0) {
      TRIAD_CHECK(val.size() >= T_ + 1, "the validation split of '"
                                            << c.data.corpus << "' holds " << val.size() << " tokens, fewer than "
                                            << "model.seq_len + 1 = " << T_ + 1 << " (raise data.val_fraction)");
      val_ = std::make_unique<io::BatchSampler>(val, T_, c.seed + 1);
    }
  }

  io::Batch batch(int64_t step, int64_t global, int64_t first, int64_t rows) override {
    if (step != step_ || global != int64_t(offsets_.size())) offsets_ = train_->offsets(step, global), step_ = step;
    return io::make_batch(tokens_, rows_of(offsets_, first, rows), T_);
  }
  bool has_validation() const override { return val_ != nullptr; }
  io::Batch validation(int64_t index, int64_t global, int64_t first, int64_t rows) override {
    return io::make_batch(tokens_, rows_of(val_->offsets(index, global), first, rows), T_);
  }
  std::string describe() const override {
    return std::to_string(train_->range().size()) + " training tokens, " +
           std::to_string(val_ ? val_->range().size() : 0) + " validation tokens";
  }

 private:
  static io::TokenFile open(const TrainConfig& c) {
    TRIAD_CHECK(!c.data.corpus.empty(), "[config] data.corpus is required: a token file made by `triad-data encode`");
    io::TokenFile tokens = io::TokenFile::open(c.data.corpus);
    const int64_t vocab = model_shape(c).vocab_size;
    TRIAD_CHECK(int64_t(tokens.vocab_size()) <= vocab, "token file '" << c.data.corpus << "' has a vocabulary of "
                                                                      << tokens.vocab_size()
                                                                      << " but model.vocab_size is " << vocab);
    if (!c.data.tokenizer.empty()) {
      const int tokenizer_vocab = io::load_tokenizer(c.data.tokenizer)->vocab_size();
      TRIAD_CHECK(tokenizer_vocab == int(tokens.vocab_size()),
                  "tokenizer '" << c.data.tokenizer << "' has " << tokenizer_vocab << " tokens but token file '"
                                << c.data.corpus << "' was made with " << tokens.vocab_size());
    }
    return tokens;
  }

  io::TokenFile tokens_;
  int64_t T_;
  std::unique_ptr<io::BatchSampler> train_, val_;
  int64_t step_ = -1;
  std::vector<int64_t> offsets_;  // of step_'s global batch
};

}  // namespace

std::unique_ptr<TrainingData> corpus_data(const TrainConfig& config) { return std::make_unique<CorpusData>(config); }

}  // namespace triad::engine
