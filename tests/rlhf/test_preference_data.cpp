// Preference data (rlhf/preference_data.h, rlhf/data_split.h): JSONL rows and their errors,
// DeepSpeed-Chat's split of one dataset between the three steps, and the SFT, reward and
// generation batches, with a byte-level tokenizer (token = byte, <|endoftext|> = 256) so
// that every expected token is written out here.
#define BOOST_TEST_MODULE preference_data
#include <boost/test/unit_test.hpp>
#include <set>

#include "io/triad_tokenizer.h"
#include "rlhf/data_split.h"
#include "rlhf/preference_data.h"
#include "support/check.h"
#include "support/files.h"

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
