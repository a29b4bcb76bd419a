// Preference data (rlhf/preference_data.h, rlhf/data_split.h): JSONL rows and their errors,
// DeepSpeed-Chat's split of one dataset between the three steps, and the SFT, reward and
// generation batches, with a byte-level tokenizer (token = byte, <|endoftext|> = 256) so
// that every expected token is written out here; and where a reward model's score of those
// sequences is read (rlhf/reward_scores.h): in training and in scoring, the same value.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/functions.h"
#include "io/triad_tokenizer.h"
#include "nn/gpt.h"
#include "nn/value_model.h"
#include "rlhf/data_split.h"
#include "rlhf/preference_data.h"
#include "rlhf/reward_scores.h"
#include "support/check.h"
#include "support/files.h"

BOOST_AUTO_TEST_SUITE(test_preference_data)

using namespace triad;
using namespace triad::rlhf;

namespace {

const io::Tokenizer& bytes_tokenizer() {
  static const io::TriadTokenizer tok = io::TriadTokenizer::train("ab", io::TriadTokenizer::kMinVocabSize);
  return tok;
}

std::vector<int64_t> row(const Tensor& t, int64_t r) { return ops::select(t, 0, r).to_vector<int64_t>(); }
std::vector<int64_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::vector<int64_t> cat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A small reward model over the byte vocabulary (257 tokens), f32 on the host.
nn::ValueModel reward_model() {
  nn::GPTConfig c;
  c.n_layer = 2, c.n_head = 2, c.d_model = 16, c.seq_len = 32, c.vocab_size = 257, c.init_seed = 3;
  return nn::ValueModel(std::make_shared<nn::GPT>(c), c.d_model, *nn::serial(), 5);
}

// Rows as generation leaves them (engine::BatchGeneration): prompts left-padded to P
// columns, then each answer, padded with `pad` to N columns; the answer mask 1 on the
// answer's tokens.
struct Samples {
  Tensor seq, answer_mask;
  nn::LeftPadding padding;
};
Samples samples(const std::vector<std::vector<int64_t>>& prompts, const std::vector<std::vector<int64_t>>& answers,
                int64_t N, int64_t pad) {
  size_t P = 0;
  for (const auto& p : prompts) P = std::max(P, p.size());
  std::vector<int64_t> seq, pads;
  std::vector<float> mask;
  for (size_t b = 0; b < prompts.size(); ++b) {
    pads.push_back(int64_t(P - prompts[b].size()));
    seq.insert(seq.end(), P - prompts[b].size(), pad);
    seq.insert(seq.end(), prompts[b].begin(), prompts[b].end());
    seq.insert(seq.end(), answers[b].begin(), answers[b].end());
    seq.insert(seq.end(), size_t(N) - answers[b].size(), pad);
    for (int64_t t = 0; t < N; ++t) mask.push_back(size_t(t) < answers[b].size());
  }
  const auto B = int64_t(prompts.size());
  return {Tensor::from_vector(seq, {B, int64_t(P) + N}), Tensor::from_vector(mask, {B, N}),
          nn::left_padding(pads, int64_t(P) + N)};
}

std::vector<double> f64_values(const Tensor& t) { return ops::to(t, DType::f64).to_vector<double>(); }

// A score as read by scoring against its training-time value: the same position of the same
// text, whose value in f32 differs with the batch's padding by rounding alone (Note
// [Left-padded batches]); a neighbouring token's value is 1e-3 or more away.
void check_same_score(const Tensor& scores, const std::vector<double>& trained) {
  const std::vector<double> scored = f64_values(scores);
  BOOST_REQUIRE_EQUAL(scored.size(), trained.size());
  for (size_t i = 0; i < scored.size(); ++i)
    BOOST_TEST(std::fabs(scored[i] - trained[i]) <= 1e-6, "row " << i << ": " << scored[i] << " vs " << trained[i]);
}

}  // namespace

BOOST_AUTO_TEST_CASE(jsonl_rows_and_their_errors_name_file_line_and_field) {
  test::TempDir dir;
  const std::string good = dir.write("good.jsonl",
                                     "{\"prompt\": \"Q1\", \"chosen\": \" yes\", \"rejected\": \" no\"}\n"
                                     "\n"
                                     "{\"prompt\": \"Q2\", \"chosen\": \" up\", \"rejected\": \" down\", \"x\": 1}\n");
  const std::vector<PreferenceRow> rows = read_preference_jsonl(good, RlhfStep::reward);
  BOOST_REQUIRE_EQUAL(rows.size(), 2u);
  BOOST_TEST(rows[1].prompt == "Q2");
  BOOST_TEST(rows[1].chosen == " up");
  BOOST_TEST(rows[1].rejected == " down");

  const std::string sft_only = dir.write("sft.jsonl", "{\"prompt\": \"Q\", \"chosen\": \" A\"}\n");
  BOOST_TEST(read_preference_jsonl(sft_only, RlhfStep::sft)[0].rejected.empty());
  test::check_error([&] { read_preference_jsonl(sft_only, RlhfStep::reward); },
                    {sft_only + ":1", "missing field \"rejected\""});
  const std::string rl = dir.write("rl.jsonl", "{\"prompt\": \"Q\"}\n{\"chosen\": \" A\"}\n");
  test::check_error([&] { read_preference_jsonl(rl, RlhfStep::rl); }, {rl + ":2", "missing field \"prompt\""});
  const std::string bad = dir.write("bad.jsonl", "{\"prompt\": \"Q\", \"chosen\": \" A\"}\n{\"prompt\": 3}\n");
  test::check_error([&] { read_preference_jsonl(bad, RlhfStep::rl); }, {bad + ":2", "\"prompt\" is not a string"});
  const std::string broken = dir.write("broken.jsonl", "{\"prompt\": \"Q\"\n");
  test::check_error([&] { read_preference_jsonl(broken, RlhfStep::rl); }, {broken + ":1", "not valid JSON"});
  test::check_error([&] { read_preference_jsonl(dir.write("list.jsonl", "[1]\n"), RlhfStep::rl); },
                    {"list.jsonl:1", "expected a JSON object"});
  test::check_error([&] { read_preference_jsonl(dir.write("empty.jsonl", "\n"), RlhfStep::rl); }, {"holds no row"});
  test::check_error([&] { read_preference_jsonl(dir.file("none.jsonl"), RlhfStep::rl); }, {"cannot open"});

  const std::string copy = dir.file("copy.jsonl");
  write_preference_jsonl(copy, rows);
  const std::vector<PreferenceRow> back = read_preference_jsonl(copy, RlhfStep::reward);
  BOOST_REQUIRE_EQUAL(back.size(), 2u);
  BOOST_TEST(back[0].prompt == "Q1");
  BOOST_TEST(back[0].rejected == " no");
}

BOOST_AUTO_TEST_CASE(data_split_sizes_follow_deepspeed_chat_rounding) {
  // "2,4,4": 10 rows -> 2, 4, 4; 7 rows -> round(1.4) = 1, round(2.8) = 3, 3.
  BOOST_TEST(split_bounds(10, parse_data_split("2,4,4")) == std::vector<int64_t>({0, 2, 6, 10}),
             boost::test_tools::per_element());
  BOOST_TEST(split_bounds(7, parse_data_split("2,4,4")) == std::vector<int64_t>({0, 1, 4, 7}),
             boost::test_tools::per_element());
  // Half to even, as Python's round: 5 rows "1,1" -> 2, 2 (sum 4); the missing row goes to split 0.
  BOOST_TEST(split_bounds(5, parse_data_split("1,1")) == std::vector<int64_t>({0, 3, 5}),
             boost::test_tools::per_element());
  // 2 rows "1,1,1": round(0.67) = 1 each, one too many, taken from split 0.
  BOOST_TEST(split_bounds(2, parse_data_split("1,1,1")) == std::vector<int64_t>({0, 0, 1, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(split_bounds(10, parse_data_split("10,0,0")) == std::vector<int64_t>({0, 10, 10, 10}),
             boost::test_tools::per_element());
  test::check_error([] { parse_data_split("2,x,4"); }, {"data_split \"2,x,4\"", "\"x\" is not a non-negative number"});
  test::check_error([] { parse_data_split("0,0"); }, {"positive sum"});
  test::check_error([] { parse_data_split("2,-1"); }, {"\"-1\""});
  test::check_error([] { data_split_indices(10, "2,4,4", 3, 1); }, {"has 3 splits, asked for split 3"});
}

BOOST_AUTO_TEST_CASE(data_split_is_a_seeded_partition) {
  std::set<int64_t> all;
  size_t total = 0;
  for (int step = 0; step < 3; ++step) {
    const std::vector<int64_t> part = data_split_indices(103, "2,4,4", step, 42);
    BOOST_TEST(part == data_split_indices(103, "2,4,4", step, 42), boost::test_tools::per_element());
    total += part.size();
    all.insert(part.begin(), part.end());
  }
  BOOST_TEST(total == 103u);
  BOOST_TEST(all.size() == 103u);  // disjoint and covering
  BOOST_TEST(*all.begin() == 0);
  BOOST_TEST(*all.rbegin() == 102);
  BOOST_TEST(data_split_indices(103, "2,4,4", 0, 42) != data_split_indices(103, "2,4,4", 0, 43));
  const std::vector<int64_t> perm = seeded_permutation(1000, 7);
  int64_t fixed = 0;
  for (size_t i = 0; i < perm.size(); ++i) fixed += perm[i] == int64_t(i);
  BOOST_TEST(fixed < 10);  // a shuffle, not the identity (about 1 fixed point expected)
}

BOOST_AUTO_TEST_CASE(long_prompts_are_dropped_and_all_dropped_is_an_error) {
  const std::vector<PreferenceRow> rows = {{"abcdef", " x", " y"}, {"ab", " xy", " z"}, {"abcd", " q", " r"}};
  const SequenceLimits limits{4, 8};
  const std::vector<PreferenceExample> ex = tokenize_preferences(rows, bytes_tokenizer(), limits, "rows.jsonl");
  BOOST_REQUIRE_EQUAL(ex.size(), 2u);
  BOOST_TEST(std::vector<int64_t>(ex[0].prompt.begin(), ex[0].prompt.end()) == bytes("ab"),
             boost::test_tools::per_element());
  BOOST_TEST(std::vector<int64_t>(ex[1].chosen.begin(), ex[1].chosen.end()) == bytes(" q"),
             boost::test_tools::per_element());
  test::check_error([&] { tokenize_preferences({rows[0]}, bytes_tokenizer(), limits, "rows.jsonl"); },
                    {"rows.jsonl: all 1 prompts are longer than max_prompt_seq_len 4 tokens"});
  test::check_error(
      [&] {
        tokenize_preferences(rows, bytes_tokenizer(), {4, 4}, "rows.jsonl");
      },
      {"max_seq_len (4) must exceed max_prompt_seq_len (4)"});
}

BOOST_AUTO_TEST_CASE(sft_batch_targets_the_answer_and_its_end_of_text) {
  const int32_t eot = bytes_tokenizer().eot(), pad = eot;
  const std::vector<PreferenceExample> ex =
      tokenize_preferences({{"ab", " xy", ""}, {"abc", " longer answer", ""}}, bytes_tokenizer(), {4, 10}, "t");
  const SftBatch b = make_sft_batch(ex, {0, 1}, {4, 10}, eot, pad);
  // Row 0: s = a b ' ' x y <eot> (6 tokens): inputs s[0..4], targets s[1..5] from the answer on.
  // Row 1: s = a b c ' ' l o n g e r (cut at 10): 9 inputs; targets from ' '.
  BOOST_TEST((b.inputs.shape() == Shape{2, 9}));
  BOOST_TEST(row(b.inputs, 0) == cat(bytes("ab xy"), {pad, pad, pad, pad}), boost::test_tools::per_element());
  BOOST_TEST(row(b.targets, 0) == cat(cat({-100}, bytes(" xy")), {eot, -100, -100, -100, -100}),
             boost::test_tools::per_element());
  BOOST_TEST(row(b.inputs, 1) == bytes("abc longe"), boost::test_tools::per_element());
  BOOST_TEST(row(b.targets, 1) == cat({-100, -100}, bytes(" longer")), boost::test_tools::per_element());
  const SftBatch with_prompt = make_sft_batch(ex, {0}, {4, 10}, eot, pad, true);
  BOOST_TEST(row(with_prompt.targets, 0) == cat(bytes("b xy"), {eot}), boost::test_tools::per_element());
  test::check_error([&] { make_sft_batch(ex, {2}, {4, 10}, eot, pad); }, {"example 2 is outside the 2 examples"});
  // Columns rounded up to a multiple of 4 (sequence parallelism over 4 ranks): more padding.
  const SftBatch four = make_sft_batch(ex, {0, 1}, {4, 10, 4}, eot, pad);
  BOOST_TEST((four.inputs.shape() == Shape{2, 12}));
  BOOST_TEST(row(four.inputs, 1) == cat(bytes("abc longe"), {pad, pad, pad}), boost::test_tools::per_element());
  BOOST_TEST(row(four.targets, 1) == cat(cat({-100, -100}, bytes(" longer")), {-100, -100, -100}),
             boost::test_tools::per_element());
  test::check_error([&] { make_sft_batch(ex, {0}, {4, 10, 0}, eot, pad); }, {"column_multiple must be >= 1, got 0"});
}

BOOST_AUTO_TEST_CASE(reward_batch_pairs_are_right_padded_to_one_length) {
  const int32_t eot = bytes_tokenizer().eot(), pad = eot;
  const std::vector<PreferenceExample> ex =
      tokenize_preferences({{"ab", " x", " yz"}, {"c", " longer", " no"}}, bytes_tokenizer(), {4, 10}, "t");
  const RewardBatch b = make_reward_batch(ex, {1, 0}, {4, 10}, eot, pad);
  BOOST_TEST((b.chosen.shape() == Shape{2, 9}));
  BOOST_TEST(row(b.chosen, 0) == cat(bytes("c longer"), {eot}), boost::test_tools::per_element());
  BOOST_TEST(row(b.rejected, 0) == cat(bytes("c no"), {eot, pad, pad, pad, pad}), boost::test_tools::per_element());
  BOOST_TEST(row(b.chosen, 1) == cat(bytes("ab x"), {eot, pad, pad, pad, pad}), boost::test_tools::per_element());
  BOOST_TEST(row(b.rejected, 1) == cat(bytes("ab yz"), {eot, pad, pad, pad}), boost::test_tools::per_element());
  BOOST_TEST(b.prompt_lengths == std::vector<int64_t>({1, 2}), boost::test_tools::per_element());
  const RewardBatch even = make_reward_batch(ex, {1, 0}, {4, 10, 2}, eot, pad);  // columns a multiple of 2
  BOOST_TEST((even.chosen.shape() == Shape{2, 10}));
  BOOST_TEST(row(even.chosen, 0) == cat(bytes("c longer"), {eot, pad}), boost::test_tools::per_element());
  BOOST_TEST(even.chosen_lengths == b.chosen_lengths, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(generation_batch_left_pads_prompts_with_masks_and_positions) {
  const int32_t pad = bytes_tokenizer().eot();
  const std::vector<PreferenceExample> ex =
      tokenize_preferences({{"abc", "", ""}, {"d", "", ""}}, bytes_tokenizer(), {4, 10}, "t");
  const GenerationBatch b = make_generation_batch(ex, {0, 1}, pad);
  BOOST_TEST(row(b.prompts, 1) == std::vector<int64_t>({pad, pad, 'd'}), boost::test_tools::per_element());
  BOOST_TEST(row(b.prompts, 0) == bytes("abc"), boost::test_tools::per_element());
  BOOST_TEST(row(b.attention_mask, 1) == std::vector<int64_t>({0, 0, 1}), boost::test_tools::per_element());
  BOOST_TEST(row(b.positions, 0) == std::vector<int64_t>({0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(row(b.positions, 1) == std::vector<int64_t>({0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(b.pads == std::vector<int64_t>({0, 2}), boost::test_tools::per_element());
}

// Note [Score position]: the reward model is trained on, and scores, the value at the
// <|endoftext|> ending each answer. A sample that stopped by generating it, left-padded and
// followed by padding, scores what training gave the same text (to f32 rounding); so do the
// dataset's chosen answers (chosen_reward).
BOOST_AUTO_TEST_CASE(a_stopped_sample_scores_what_training_read_at_its_end_of_text) {
  const int32_t eot = bytes_tokenizer().eot();
  const SequenceLimits limits{4, 16};
  const std::vector<PreferenceExample> ex =
      tokenize_preferences({{"ab", " xy", " z"}, {"abc", " longer", " no"}}, bytes_tokenizer(), limits, "t");
  nn::ValueModel model = reward_model();
  const RewardBatch b = make_reward_batch(ex, {0, 1}, limits, eot, eot);
  const RewardLoss r = reward_batch_loss(model, b, Device::cpu());

  // Training reads each row at its last token before the padding: its <|endoftext|>.
  const std::vector<double> v = f64_values(model(triad::cat({b.chosen, b.rejected}, 0)));
  const int64_t L = b.chosen.size(1);
  const std::vector<double> chosen = f64_values(r.chosen_scores), rejected = f64_values(r.rejected_scores);
  for (size_t i = 0; i < 2; ++i) {
    const int64_t c_end = b.chosen_lengths[i] - 1, r_end = b.rejected_lengths[i] - 1;
    BOOST_TEST(row(b.chosen, int64_t(i))[size_t(c_end)] == eot);
    BOOST_TEST(row(b.rejected, int64_t(i))[size_t(r_end)] == eot);
    BOOST_TEST(chosen[i] == v[i * size_t(L) + size_t(c_end)]);
    BOOST_TEST(rejected[i] == v[(2 + i) * size_t(L) + size_t(r_end)]);
    BOOST_TEST(std::fabs(chosen[i] - v[i * size_t(L) + size_t(c_end) - 1]) > 1e-3);  // the last answer token's
  }
  // DeepSpeed-Chat's span runs to the later end, the <|endoftext|> included: pair 0 ("ab xy",
  // "ab z") diverges at 3 and ends at 6, pair 1 ("abc longer", "abc no") at 4 and 11.
  const auto term = [&](size_t i, int64_t t) {
    return std::log1p(std::exp(-(v[i * size_t(L) + size_t(t)] - v[(2 + i) * size_t(L) + size_t(t)])));
  };
  double l0 = 0, l1 = 0;
  for (int64_t t = 3; t < 6; ++t) l0 += term(0, t) / 3;
  for (int64_t t = 4; t < 11; ++t) l1 += term(1, t) / 7;
  BOOST_TEST(r.loss.item() == 0.5 * (l0 + l1), boost::test_tools::tolerance(1e-6));

  // The same texts as stopped samples: answers of N = 9 columns after prompts left-padded to
  // 3, each with its <|endoftext|> and then padding.
  const std::vector<std::vector<int64_t>> prompts = {bytes("ab"), bytes("abc")};
  const int64_t N = 9;
  const Samples c = samples(prompts, {cat(bytes(" xy"), {eot}), cat(bytes(" longer"), {eot})}, N, eot);
  const Tensor values = model.forward(c.seq, c.padding);
  const Tensor scores = sample_scores(values, c.answer_mask);
  // Picked out as they are: row 0's value at its 4th answer column, row 1's at its 8th.
  const int64_t T = values.size(1), P = T - N;
  const std::vector<double> all = f64_values(values);
  BOOST_TEST((scores.shape() == Shape{2} && scores.dtype() == values.dtype()));
  BOOST_TEST(f64_values(scores) == std::vector<double>({all[size_t(P + 3)], all[size_t(T + P + 7)]}),
             boost::test_tools::per_element());
  check_same_score(scores, chosen);
  const Samples rj = samples(prompts, {cat(bytes(" z"), {eot}), cat(bytes(" no"), {eot})}, N, eot);
  check_same_score(sample_scores(model.forward(rj.seq, rj.padding), rj.answer_mask), rejected);
  // chosen_reward reads the dataset's chosen answers where training does.
  check_same_score(chosen_scores(model, ex, {0, 1}, limits, eot, Device::cpu()), chosen);
}

// A sequence without its <|endoftext|> is scored at its last token, as DeepSpeed-Chat does:
// a pair cut to max_seq_len in training, and a sample that ran to max_answer_seq_len; the
// same text scores the same either way.
BOOST_AUTO_TEST_CASE(a_truncated_sample_scores_what_training_read_at_the_cut) {
  const int32_t eot = bytes_tokenizer().eot();
  const SequenceLimits limits{4, 7};
  const std::vector<PreferenceExample> ex =
      tokenize_preferences({{"abc", " longer", " no"}}, bytes_tokenizer(), limits, "t");
  nn::ValueModel model = reward_model();
  const RewardBatch b = make_reward_batch(ex, {0}, limits, eot, eot);
  BOOST_TEST(row(b.chosen, 0) == bytes("abc lon"), boost::test_tools::per_element());  // cut: no <|endoftext|>
  const RewardLoss r = reward_batch_loss(model, b, Device::cpu());
  const std::vector<double> v = f64_values(model(triad::cat({b.chosen, b.rejected}, 0)));
  BOOST_TEST(r.chosen_scores.item() == v[6]);        // the last token, 'n'
  BOOST_TEST(r.rejected_scores.item() == v[7 + 6]);  // "abc no" + <|endoftext|>: 7 tokens, whole

  // Samples that stopped at max_answer_seq_len = 4 without generating <|endoftext|>, beside
  // one that stopped: each is read at its own end.
  const Samples s = samples({bytes("abc"), bytes("abc")}, {bytes(" lon"), cat(bytes(" no"), {eot})}, 4, eot);
  check_same_score(sample_scores(model.forward(s.seq, s.padding), s.answer_mask),
                   {r.chosen_scores.item(), r.rejected_scores.item()});
  check_same_score(chosen_scores(model, ex, {0}, limits, eot, Device::cpu()), {r.chosen_scores.item()});

  const Samples none = samples({bytes("abc")}, {std::vector<int64_t>()}, 2, eot);
  test::check_error([&] { sample_scores(model.forward(none.seq, none.padding), none.answer_mask); },
                    {"sample_scores: row 0 has no generated token"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_preference_data
