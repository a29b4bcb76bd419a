// DeepSpeed-Chat's step 1 data for the training loop (rlhf/sft_data.h, Note [SFT rows]):
// a step's rows depend on (step, row) alone, so a rank's share equals its slice of the
// whole global batch; each epoch visits every training example once; held-out examples
// are none of the training ones; bad options are named; and the training loop, fed this
// data, takes as its first loss the model's own loss on the first global batch.
#include <boost/test/unit_test.hpp>
#include <set>

#include "config/config.h"
#include "io/triad_tokenizer.h"
#include "train/trainer.h"
#include "nn/gpt.h"
#include "rlhf/sft_data.h"
#include "support/check.h"
#include "support/files.h"
#include "support/training.h"

BOOST_AUTO_TEST_SUITE(test_sft_data)

using namespace triad;
using namespace triad::rlhf;

namespace {

const io::Tokenizer& bytes_tokenizer() {  // token = byte, <|endoftext|> = 256
  static const io::TriadTokenizer tok = io::TriadTokenizer::train("ab", io::TriadTokenizer::kMinVocabSize);
  return tok;
}

// Ten rows "Q<i>?" -> " answer <i>", every one for step 1.
SftDataOptions ten_rows(const test::TempDir& dir) {
  std::string text;
  for (int i = 0; i < 10; ++i)
    text += "{\"prompt\": \"Q" + std::to_string(i) + "?\", \"chosen\": \" answer " + std::to_string(i) + "\"}\n";
  return {.path = dir.write("pairs.jsonl", text),
          .data_split = "1,0,0",
          .limits = {.max_prompt_seq_len = 8, .max_seq_len = 24},
          .val_fraction = 0.2,
          .seed = 7};
}

// Each row's targets without their trailing padding: the answer tokens and the
// <|endoftext|> that closes them, which tell the examples apart.
std::vector<std::vector<int64_t>> answers(const io::Batch& b) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < b.targets.size(0); ++r) {
    std::vector<int64_t> t = ops::select(b.targets, 0, r).to_vector<int64_t>();
    while (!t.empty() && t.back() == -100) t.pop_back();
    out.push_back(t);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(rows_are_a_function_of_step_and_row) {
  test::TempDir dir;
  const auto data = sft_data(ten_rows(dir), bytes_tokenizer(), 32);
  for (int64_t step = 0; step < 5; ++step) {
    std::vector<std::vector<int64_t>> whole = answers(data->batch(step, 4, 0, 4));
    std::vector<std::vector<int64_t>> parts = answers(data->batch(step, 4, 0, 1));
    for (const auto& a : answers(data->batch(step, 4, 1, 3))) parts.push_back(a);
    BOOST_TEST(whole == parts, "step " << step);
  }
}

BOOST_AUTO_TEST_CASE(an_epoch_visits_every_training_example_once_and_none_held_out) {
  test::TempDir dir;
  const auto data = sft_data(ten_rows(dir), bytes_tokenizer(), 32);
  std::set<std::vector<int64_t>> epoch;  // 8 training examples, global batch 4: steps 0 and 1
  for (int64_t step = 0; step < 2; ++step)
    for (const auto& a : answers(data->batch(step, 4, 0, 4))) epoch.insert(a);
  BOOST_TEST(epoch.size() == 8u);
  BOOST_REQUIRE(data->has_validation());
  std::set<std::vector<int64_t>> held;
  for (const auto& a : answers(data->validation(0, 2, 0, 2))) held.insert(a);
  BOOST_TEST(held.size() == 2u);
  for (const auto& a : held) BOOST_TEST(!epoch.count(a));
}

BOOST_AUTO_TEST_CASE(bad_options_are_named) {
  test::TempDir dir;
  SftDataOptions o = ten_rows(dir);
  test::check_error([&] { sft_data(o, bytes_tokenizer(), 16); }, {"max_seq_len 24", "seq_len 16"});
  o.val_fraction = 0.95;
  test::check_error([&] { sft_data(o, bytes_tokenizer(), 32); }, {"leaves none to train on"});
  o.val_fraction = 0.2;
  o.data_split = "0,1,1";
  test::check_error([&] { sft_data(o, bytes_tokenizer(), 32); }, {"gives step 1 none of the 10 rows"});
}

BOOST_AUTO_TEST_CASE(the_training_loop_takes_the_models_loss_on_the_first_global_batch) {
  test::TempDir dir;
  nlohmann::json j = test::small_gpt_config("", 1);
  j["model"]["vocab_size"] = io::TriadTokenizer::kMinVocabSize;
  j["model"]["seq_len"] = 32;
  j["train_batch_size"] = 4;
  const engine::TrainConfig c = engine::parse_config(j, 1);
  engine::train(c, {.metrics_path = dir.file("metrics.jsonl")}, nullptr, sft_data(ten_rows(dir), bytes_tokenizer(), 32));
  const std::vector<double> losses = test::metric_losses(dir.file("metrics.jsonl"));
  BOOST_REQUIRE_EQUAL(losses.size(), 1u);

  const io::Batch b = sft_data(ten_rows(dir), bytes_tokenizer(), 32)->batch(0, 4, 0, 4);
  nn::GPT model(c.model);
  BOOST_TEST(model.loss(b.inputs, b.targets).item() == losses[0], boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_SUITE_END()  // test_sft_data
