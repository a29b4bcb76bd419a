#include "rlhf/pair_rows.h"

#include "config/model_factory.h"

namespace triad::rlhf {

StepExamples pair_examples(const StepConfig& sc, const io::Tokenizer& tokenizer, const std::string& what) {
  const engine::TrainConfig& c = sc.model.train;
  const int64_t seq_len = engine::model_shape(c).seq_len;
  TRIAD_CHECK(sc.data.limits.max_seq_len <= seq_len,
              "[config] data.max_seq_len " << sc.data.limits.max_seq_len << " exceeds the model's seq_len " << seq_len);
  return step_examples(sc.data.path, RlhfStep::reward, 1, sc.data.data_split, tokenizer, sc.data.limits,
                       sc.data.val_fraction, c.seed, what);
}

std::vector<int64_t> micro_batch_pairs(EpochOrder& order, const engine::TrainConfig& c, int64_t step, int64_t m,
                                       int rank, int ranks) {
  std::vector<int64_t> pairs;
  for (int64_t i = 0; i < c.micro_batch_size; ++i)
    pairs.push_back(order.at(step * c.train_batch_size + (m * ranks + rank) * c.micro_batch_size + i));
  return pairs;
}

std::vector<HeldOutRound> held_out_rounds(int64_t held_out, int64_t micro, int rank, int ranks) {
  std::vector<HeldOutRound> rounds(size_t((held_out + ranks * micro - 1) / (ranks * micro)));
  for (size_t k = 0; k < rounds.size(); ++k)
    for (int64_t i = 0; i < micro; ++i) {
      const int64_t g = (int64_t(k) * micro + i) * ranks + rank;
      rounds[k].pairs.push_back(g < held_out ? g : 0);
      rounds[k].counted += g < held_out;
    }
  return rounds;
}

}  // namespace triad::rlhf
