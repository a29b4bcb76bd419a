// Tokenizers (io/tokenizer.h). triad's byte-level BPE: the classic hand-checked merge
// sequence, pre-tokenization, agreement with a naive (recount everything each step) trainer,
// round trips on arbitrary bytes and English, determinism, files (save/load, and every way a
// file can be bad naming its path). Hugging Face tokenizer.json (io/hf_tokenizer.h): the ids
// and decoded text of the `tokenizers` library itself for four small tokenizers (GPT-2,
// Llama-3, Llama-2 and Llama-2 with Metaspace layouts) over a corpus of unicode, whitespace,
// numbers, contractions and special tokens (tests/reference/hf_tokenizers_reference.py), the
// split patterns by hand, loading by file or folder, and bad files named. Chat templates
// (io/chat_template.h) render what transformers' apply_chat_template renders
// (tests/reference/chat_template_reference.py), and what they do not support is named.
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "io/chat_template.h"
#include "io/hf_tokenizer.h"
#include "io/split_pattern.h"
#include "io/triad_tokenizer.h"
#include "support/check.h"
#include "support/files.h"

BOOST_AUTO_TEST_SUITE(test_tokenizer)

using namespace triad;
using io::TriadTokenizer;
using test::check_error;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;
namespace fs = std::filesystem;

namespace {

using Merges = std::vector<std::pair<int32_t, int32_t>>;

const std::string& english() {
  static const std::string text = read_bytes(test::data_path("io/english.txt"));
  BOOST_REQUIRE_MESSAGE(text.size() > 3000, "missing fixture tests/data/io/english.txt");
  return text;
}

// Expects `f` to throw triad::Error whose message contains every one of `parts`.
// The textbook trainer: every step recounts all pairs of all unique chunks.
Merges naive_train(std::string_view text, int vocab_size, std::map<std::string, std::vector<int32_t>>* words_out) {
  std::map<std::string, int64_t> counts;
  for (auto c : TriadTokenizer::pretokenize(text)) ++counts[std::string(c)];
  std::map<std::string, std::vector<int32_t>> words;
  for (const auto& [w, n] : counts) words[w] = std::vector<int32_t>(w.begin(), w.end());
  for (auto& [w, ids] : words)
    for (auto& id : ids) id = int32_t(uint8_t(id));
  Merges merges;
  while (int(merges.size()) < vocab_size - 257) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [w, ids] : words)
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += counts[w];
    if (pairs.empty()) break;
    auto best = pairs.begin();  // std::map order: the smallest pair wins ties
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [a, b] = best->first;
    const auto z = int32_t(256 + merges.size());
    merges.push_back({a, b});
    for (auto& [w, ids] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          out.push_back(z);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids = out;
    }
  }
  if (words_out) *words_out = words;
  return merges;
}

std::string random_bytes(std::mt19937_64& rng, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(len(rng), '\0');
  for (auto& c : s) c = char(byte(rng));
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(classic_bpe_example) {
  // "aaabdaaabac": aa (4) -> 256; then ab and (256, a) tie at 2 and the smaller pair ab wins
  // -> 257; then (256, 257) "aaab" (2) -> 258; then all pairs tie at 1: ac (97, 99) is smallest.
  const TriadTokenizer t3 = TriadTokenizer::train("aaabdaaabac", 260);
  BOOST_TEST(t3.vocab_size() == 260);
  BOOST_TEST(t3.eot() == 259);
  BOOST_CHECK(t3.merges() == (Merges{{'a', 'a'}, {'a', 'b'}, {256, 257}}));
  BOOST_CHECK(t3.encode("aaabdaaabac") == (std::vector<int32_t>{258, 'd', 258, 'a', 'c'}));
  BOOST_TEST(t3.token_bytes(258) == "aaab");

  const TriadTokenizer t4 = TriadTokenizer::train("aaabdaaabac", 261);
  BOOST_CHECK(t4.merges() == (Merges{{'a', 'a'}, {'a', 'b'}, {256, 257}, {'a', 'c'}}));
  BOOST_CHECK(t4.encode("aaabdaaabac") == (std::vector<int32_t>{258, 'd', 258, 259}));
  // Merges apply in rank order inside one chunk: x a a a b -> x aa a b -> x aa ab -> x aaab.
  BOOST_CHECK(t4.encode("xaaab") == (std::vector<int32_t>{'x', 258}));
}

BOOST_AUTO_TEST_CASE(training_stops_when_pairs_run_out) {
  const TriadTokenizer t = TriadTokenizer::train("aaabdaaabac", 1000);
  BOOST_TEST(t.vocab_size() < 1000);
  BOOST_TEST(t.eot() == t.vocab_size() - 1);
  BOOST_TEST(t.encode("aaabdaaabac").size() == 1u);
  BOOST_TEST(t.decode(t.encode("aaabdaaabac")) == "aaabdaaabac");
}

BOOST_AUTO_TEST_CASE(pretokenize_gpt2_style) {
  const auto chunks = TriadTokenizer::pretokenize("Hello world, it's 2024!  ok\n\nbye");
  const std::vector<std::string_view> expected = {"Hello", " world", ",",   " it", "'s", " 2024",
                                                  "!",     " ",      " ok", "\n",  "\n", "bye"};
  BOOST_CHECK_EQUAL_COLLECTIONS(chunks.begin(), chunks.end(), expected.begin(), expected.end());
  // UTF-8 letters stay in their word; trailing whitespace stays whole; long runs are cut.
  const auto utf8 = TriadTokenizer::pretokenize(" caf\xc3\xa9 \t\n");
  BOOST_TEST(utf8.size() == 2u);
  BOOST_TEST(utf8[0] == " caf\xc3\xa9");
  const std::string long_run(1000, 'a');
  for (auto c : TriadTokenizer::pretokenize(long_run)) BOOST_TEST(c.size() <= TriadTokenizer::kMaxChunkBytes);
  // Chunks always tile the text, whatever the bytes.
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100; ++i) {
    const std::string s = random_bytes(rng, 400);
    std::string joined;
    for (auto c : TriadTokenizer::pretokenize(s)) {
      BOOST_REQUIRE(!c.empty());
      joined += c;
    }
    BOOST_REQUIRE(joined == s);
  }
}

BOOST_AUTO_TEST_CASE(merges_never_cross_chunks) {
  const TriadTokenizer t = TriadTokenizer::train(english(), 700);
  for (int32_t id = 256; id < t.eot(); ++id) {
    const std::string& piece = t.token_bytes(id);
    for (size_t i = 0; i + 1 < piece.size(); ++i) {
      const auto c = uint8_t(piece[i]);
      const bool letter = std::isalpha(c) || c >= 0x80;
      BOOST_CHECK_MESSAGE(!(letter && piece[i + 1] == ' '), "token " << id << " '" << piece << "' crosses a word end");
    }
  }
}

BOOST_AUTO_TEST_CASE(matches_naive_trainer) {
  std::map<std::string, std::vector<int32_t>> words;
  const Merges expected = naive_train(english(), 600, &words);
  const TriadTokenizer t = TriadTokenizer::train(english(), 600);
  BOOST_REQUIRE_EQUAL(t.merges().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    BOOST_REQUIRE_MESSAGE(t.merges()[i] == expected[i], "merge " << i << " differs");
  // Encoding a chunk reproduces the segmentation training arrived at.
  for (const auto& [w, ids] : words) BOOST_REQUIRE(t.encode(w) == ids);

  // Small alphabets: many ties, long words, repeated letters (overlapping pairs like "aaa").
  std::mt19937_64 rng(3);
  for (const std::string alphabet : {"ab", "aab c", "ab  c\n.!"}) {
    std::string text;
    for (int i = 0; i < 3000; ++i) text += alphabet[rng() % alphabet.size()];
    const Merges want = naive_train(text, 400, &words);
    const TriadTokenizer u = TriadTokenizer::train(text, 400);
    BOOST_REQUIRE_MESSAGE(u.merges() == want, "merges differ on alphabet '" << alphabet << "'");
    for (const auto& [w, ids] : words) BOOST_REQUIRE(u.encode(w) == ids);
    BOOST_REQUIRE(u.decode(u.encode(text)) == text);
  }
}

BOOST_AUTO_TEST_CASE(round_trip_any_bytes) {
  const TriadTokenizer t = TriadTokenizer::train(english(), 512);
  BOOST_TEST(t.encode("").empty());
  BOOST_TEST(t.decode({}) == "");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_bytes(rng, 300);  // NULs, invalid UTF-8, control bytes
    BOOST_REQUIRE(t.decode(t.encode(s)) == s);
  }
  // Random mixes of English fragments and raw bytes.
  const std::string& e = english();
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0; k < 5; ++k) {
      const size_t at = rng() % e.size();
      s += e.substr(at, rng() % 40);
      s += random_bytes(rng, 3);
    }
    BOOST_REQUIRE(t.decode(t.encode(s)) == s);
  }
  for (const std::string s : {std::string(1000, ' '), std::string(1000, 'a'), std::string(300, '\0'),
                              std::string("\xff\xfe\x80\xc3"), std::string("a\0b", 3)})
    BOOST_TEST(t.decode(t.encode(s)) == s);
}

BOOST_AUTO_TEST_CASE(round_trip_english_and_compression) {
  const TriadTokenizer t = TriadTokenizer::train(english(), 800);
  const auto ids = t.encode(english());
  BOOST_TEST(t.decode(ids) == english());
  BOOST_TEST(double(english().size()) / double(ids.size()) > 2.5);  // learned on this very text
  for (const int32_t id : ids) BOOST_TEST_REQUIRE((id >= 0 && id < t.eot()));
}

BOOST_AUTO_TEST_CASE(end_of_text_is_never_emitted) {
  const TriadTokenizer t = TriadTokenizer::train(english(), 400);
  const std::string s = "a<|endoftext|>b";
  const auto ids = t.encode(s);
  BOOST_TEST(std::count(ids.begin(), ids.end(), t.eot()) == 0);
  BOOST_TEST(t.decode(ids) == s);
  BOOST_TEST(t.decode({'x', t.eot(), 'y'}) == "x<|endoftext|>y");
  check_error([&] { t.decode({t.vocab_size()}); }, {"token id", std::to_string(t.vocab_size())});
  check_error([&] { t.decode({-1}); }, {"token id"});
}

BOOST_AUTO_TEST_CASE(deterministic_training) {
  TempDir dir;
  const TriadTokenizer a = TriadTokenizer::train(english(), 700), b = TriadTokenizer::train(english(), 700);
  BOOST_CHECK(a.merges() == b.merges());
  BOOST_CHECK(a.encode(english()) == b.encode(english()));
  a.save(dir.file("a.json"));
  b.save(dir.file("b.json"));
  BOOST_CHECK(read_bytes(dir.file("a.json")) == read_bytes(dir.file("b.json")));
}

BOOST_AUTO_TEST_CASE(progress_is_reported) {
  std::vector<std::pair<int, int>> calls;
  const TriadTokenizer t = TriadTokenizer::train(english(), 300, [&](int done, int total) {
    calls.push_back({done, total});
  });
  BOOST_REQUIRE_EQUAL(calls.size(), 300u - 257u);
  for (size_t i = 0; i < calls.size(); ++i) {
    BOOST_TEST(calls[i].first == int(i) + 1);
    BOOST_TEST(calls[i].second == 300 - 257);
  }
}

BOOST_AUTO_TEST_CASE(bad_vocab_size) {
  for (int v : {-1, 0, 256, TriadTokenizer::kMaxVocabSize + 1})
    check_error([&] { TriadTokenizer::train("some text", v); }, {"vocab_size", std::to_string(v)});
  BOOST_TEST(TriadTokenizer::train("some text", 257).vocab_size() == 257);
}

BOOST_AUTO_TEST_CASE(save_load) {
  TempDir dir;
  const TriadTokenizer t = TriadTokenizer::train(english(), 600);
  const std::string path = dir.file("tok.json");
  t.save(path);
  const TriadTokenizer u = TriadTokenizer::load(path);
  BOOST_CHECK(u.merges() == t.merges());
  BOOST_TEST(u.vocab_size() == t.vocab_size());
  BOOST_TEST(u.eot() == t.eot());
  BOOST_CHECK(u.encode(english()) == t.encode(english()));
  for (int32_t id = 0; id < t.vocab_size(); ++id) BOOST_REQUIRE(u.token_bytes(id) == t.token_bytes(id));
  // Saving over an existing file replaces it and leaves no temporary file behind.
  TriadTokenizer::train(english(), 300).save(path);
  BOOST_TEST(TriadTokenizer::load(path).vocab_size() == 300);
  BOOST_TEST(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 1);
}

BOOST_AUTO_TEST_CASE(concurrent_encode) {
  const TriadTokenizer t = TriadTokenizer::train(english(), 500);
  const TriadTokenizer copy = t;  // copies share the chunk cache
  std::vector<int32_t> r1, r2;
  std::thread th([&] { r1 = t.encode(english()); });
  r2 = copy.encode(english());
  th.join();
  BOOST_CHECK(r1 == r2);
  BOOST_TEST(t.decode(r1) == english());
}

BOOST_AUTO_TEST_CASE(load_errors_name_the_file) {
  TempDir dir;
  const std::string missing = dir.file("missing.json");
  check_error([&] { TriadTokenizer::load(missing); }, {missing});

  const std::string good = dir.file("good.json");
  TriadTokenizer::train(english(), 400).save(good);
  const std::string text = read_bytes(good);

  const std::string truncated = dir.file("truncated.json");
  write_bytes(truncated, text.substr(0, text.size() / 2));
  check_error([&] { TriadTokenizer::load(truncated); }, {truncated, "JSON"});

  const std::string garbage = dir.file("garbage.json");
  write_bytes(garbage, std::string("\x00\x01\xff garbage", 11));
  check_error([&] { TriadTokenizer::load(garbage); }, {garbage});

  const std::string empty = dir.file("empty.json");
  write_bytes(empty, "");
  check_error([&] { TriadTokenizer::load(empty); }, {empty});

  const auto bad_json = [&](const std::string& name, const std::string& json, const std::string& what) {
    const std::string p = dir.file(name);
    write_bytes(p, json);
    check_error([&] { TriadTokenizer::load(p); }, {p, what});
  };
  bad_json("format.json", R"({"format": "other"})", "format");
  bad_json("version.json", R"({"format": "triad-bpe", "version": 9, "pretokenizer": "gpt2-bytes-128",
    "vocab_size": 257, "eot": 256, "merges": []})",
           "version 9");
  bad_json("forward.json", R"({"format": "triad-bpe", "version": 1, "pretokenizer": "gpt2-bytes-128",
    "vocab_size": 258, "eot": 257, "merges": [[97, 256]]})",
           "merge 0");
  bad_json("size.json", R"({"format": "triad-bpe", "version": 1, "pretokenizer": "gpt2-bytes-128",
    "vocab_size": 300, "eot": 299, "merges": [[97, 98]]})",
           "vocab_size 300");
  bad_json("pair.json", R"({"format": "triad-bpe", "version": 1, "pretokenizer": "gpt2-bytes-128",
    "vocab_size": 258, "eot": 257, "merges": [[97]]})",
           "merge 0");
  bad_json("missing_key.json", R"({"format": "triad-bpe", "version": 1, "pretokenizer": "gpt2-bytes-128",
    "vocab_size": 257, "merges": []})",
           "malformed");
  // The minimal valid file loads.
  const std::string ok = dir.file("ok.json");
  write_bytes(ok, R"({"format": "triad-bpe", "version": 1, "pretokenizer": "gpt2-bytes-128",
    "vocab_size": 257, "eot": 256, "merges": []})");
  BOOST_TEST(TriadTokenizer::load(ok).vocab_size() == 257);
}

// ---- Hugging Face tokenizer.json ----

namespace {

const char* const kHfFiles[] = {"hf_gpt2_tokenizer.json", "hf_llama3_tokenizer.json", "hf_llama2_tokenizer.json",
                                "hf_llama2_metaspace_tokenizer.json"};

const nlohmann::json& hf_reference() {
  static const nlohmann::json j = nlohmann::json::parse(read_bytes(test::data_path("io/hf_tokenizers_reference.json")));
  return j;
}

std::vector<std::string> split(io::SplitPattern p, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view piece : io::split_by_pattern(p, text)) out.emplace_back(piece);
  return out;
}

// The GPT-2 reference tokenizer's JSON with `edit` applied, written into `dir` as `name`.
std::string edited_gpt2(const TempDir& dir, const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_bytes(test::data_path("io/hf_gpt2_tokenizer.json")));
  edit(j);
  return dir.write(name, j.dump());
}

}  // namespace

BOOST_AUTO_TEST_CASE(hf_tokenizers_give_the_library_ids_and_text) {
  for (const char* name : kHfFiles) {
    BOOST_TEST_CONTEXT(name) {
      const auto tok = io::load_tokenizer(test::data_path(std::string("io/") + name));
      const nlohmann::json& ref = hf_reference().at(name);
      BOOST_TEST(tok->prefix() == ref.at("prefix").get<std::vector<int32_t>>(), boost::test_tools::per_element());
      BOOST_REQUIRE(ref.at("cases").size() >= 30u);
      for (const nlohmann::json& c : ref.at("cases")) {
        const std::string text = c.at("text");
        const auto ids = c.at("ids").get<std::vector<int32_t>>();
        BOOST_TEST_CONTEXT(text) {
          BOOST_TEST(tok->encode(text) == ids, boost::test_tools::per_element());
          BOOST_TEST(tok->decode(ids) == c.at("decoded").get<std::string>());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(hf_byte_level_decodes_back_to_the_text) {
  // Byte-level BPE loses nothing: every text of the corpus, and arbitrary UTF-8, comes back.
  const auto tok = io::load_tokenizer(test::data_path("io/hf_gpt2_tokenizer.json"));
  for (const nlohmann::json& c : hf_reference().at("hf_gpt2_tokenizer.json").at("cases"))
    BOOST_TEST(tok->decode(tok->encode(c.at("text").get<std::string>())) == c.at("text").get<std::string>());
  BOOST_TEST(tok->decode(tok->encode(english())) == english());
  BOOST_TEST(tok->vocab_size() == 512);
  BOOST_TEST(tok->eot() == 0);  // <|endoftext|>, the trainer's first token
}

BOOST_AUTO_TEST_CASE(hf_special_tokens_and_prompts) {
  const auto llama2 = io::load_tokenizer(test::data_path("io/hf_llama2_tokenizer.json"));
  BOOST_TEST(llama2->eot() == 2);  // </s>
  BOOST_TEST(llama2->vocab_size() == 600);
  const std::vector<int32_t> hello = llama2->encode("Hello");
  std::vector<int32_t> prompt{1};
  prompt.insert(prompt.end(), hello.begin(), hello.end());
  BOOST_TEST(io::encode_prompt(*llama2, "Hello") == prompt, boost::test_tools::per_element());
  const auto llama3 = io::load_tokenizer(test::data_path("io/hf_llama3_tokenizer.json"));
  BOOST_TEST(llama3->eot() == 513);  // <|end_of_text|>
  BOOST_TEST(llama3->encode("<|eot_id|>") == std::vector<int32_t>{514}, boost::test_tools::per_element());
  const auto gpt2 = io::load_tokenizer(test::data_path("io/hf_gpt2_tokenizer.json"));
  std::vector<int32_t> after_eot{0};
  for (int32_t id : gpt2->encode("Hi")) after_eot.push_back(id);
  BOOST_TEST(io::encode_prompt(*gpt2, "Hi") == after_eot, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(hf_split_patterns_by_hand) {
  using P = io::SplitPattern;
  using V = std::vector<std::string>;
  BOOST_TEST(
      split(P::gpt2, "Hello world's  end\n\nx 42") == (V{"Hello", " world", "'s", " ", " end", "\n", "\n", "x", " 42"}),
      boost::test_tools::per_element());
  BOOST_TEST(split(P::gpt2, "I'LL  \t") == (V{"I", "'", "LL", "  \t"}), boost::test_tools::per_element());
  BOOST_TEST(
      split(P::gpt2, "caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac!!") == (V{"caf\xc3\xa9", " \xe6\x9d\xb1\xe4\xba\xac", "!!"}),
      boost::test_tools::per_element());
  BOOST_TEST(split(P::llama3, "I'LL 1234567 (ok)\r\n\r\n y") ==
                 (V{"I", "'LL", " ", "123", "456", "7", " (", "ok", ")\r\n\r\n", " y"}),
             boost::test_tools::per_element());
  BOOST_TEST(split(P::llama3, "a \n\n b  ") == (V{"a", " \n\n", " b", "  "}), boost::test_tools::per_element());
  BOOST_TEST(!io::split_pattern_from_regex(R"(\s+)").has_value());
}

BOOST_AUTO_TEST_CASE(hf_tokenizer_from_a_folder_with_its_config) {
  TempDir dir;
  dir.write("tokenizer.json", read_bytes(test::data_path("io/hf_gpt2_tokenizer.json")));
  BOOST_TEST(io::load_tokenizer(dir.path().string())->eot() == 0);
  // tokenizer_config.json's eos_token (a string or an AddedToken object) names eot().
  const int32_t ab = io::HfTokenizer::load(dir.file("tokenizer.json"))->token_id("ing");
  BOOST_REQUIRE(ab > 0);
  dir.write("tokenizer_config.json", R"({"eos_token": {"content": "ing", "special": true}})");
  BOOST_TEST(io::load_tokenizer(dir.path().string())->eot() == ab);
  dir.write("tokenizer_config.json", R"({"eos_token": "no such token"})");
  check_error([&] { io::load_tokenizer(dir.path().string()); },
              {"tokenizer_config.json", "eos_token", "no such token"});
  TempDir empty;
  check_error([&] { io::load_tokenizer(empty.path().string()); }, {empty.path().string(), "tokenizer.json"});
  // A triad tokenizer file is told apart by its format.
  TriadTokenizer::train(english(), 300).save(empty.file("triad.json"));
  BOOST_TEST(io::load_tokenizer(empty.file("triad.json"))->vocab_size() == 300);
}

BOOST_AUTO_TEST_CASE(hf_bad_files_are_named) {
  TempDir dir;
  const auto bad = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                       const std::vector<std::string>& what) {
    const std::string path = edited_gpt2(dir, name, edit);
    std::vector<std::string> parts{path};
    parts.insert(parts.end(), what.begin(), what.end());
    check_error([&] { io::load_tokenizer(path); }, parts);
  };
  bad("unigram.json", [](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }, {"model type \"Unigram\"", "BPE"});
  bad("wordpiece.json", [](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }, {"WordPiece", "not supported"});
  bad("no_merges.json", [](nlohmann::json& j) { j["model"].erase("merges"); }, {"model.merges is missing"});
  bad("bad_merge.json", [](nlohmann::json& j) { j["model"]["merges"][3] = "zz qq"; }, {"model.merges[3]", "\"zz\""});
  // An added token collides: with the vocabulary's id of its text, with another text's id, with
  // another added token of the same text.
  bad("collide_text.json",
      [](nlohmann::json& j) {
        j["added_tokens"].push_back({{"id", 700}, {"content", "ing"}, {"special", false}});
      },
      {"added token \"ing\" (id 700) collides with model.vocab", "\"ing\" is id"});
  bad("collide_id.json",
      [](nlohmann::json& j) {
        j["added_tokens"].push_back({{"id", 5}, {"content", "<|tool|>"}, {"special", true}});
      },
      {"added token \"<|tool|>\" (id 5) collides with", "has id 5 in model.vocab"});
  bad("collide_added.json",
      [](nlohmann::json& j) {
        j["added_tokens"].push_back({{"id", 600}, {"content", "<|x|>"}});
        j["added_tokens"].push_back({{"id", 601}, {"content", "<|x|>"}});
      },
      {"added token \"<|x|>\" (id 601) collides with the added token of the same content, id 600"});
  bad("regex.json",
      [](nlohmann::json& j) {
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}};
      },
      {"pre_tokenizer.pattern", "GPT-2's and Llama-3's"});
  bad("normalizer.json",
      [](nlohmann::json& j) {
        j["normalizer"] = {{"type", "NFKC"}};
      },
      {"normalizer type \"NFKC\" is not supported"});
  bad("no_decoder.json", [](nlohmann::json& j) { j["decoder"] = nullptr; }, {"decoder is null"});
  bad("no_eot.json",
      [](nlohmann::json& j) {
        j["added_tokens"] = nlohmann::json::array();
        j["model"]["vocab"].erase("<|endoftext|>");
      },
      {"no end-of-text token"});
  const std::string neither = dir.write("neither.json", R"({"vocab": {}})");
  check_error([&] { io::load_tokenizer(neither); }, {neither, "neither a triad tokenizer", "tokenizer.json"});
  const std::string broken = dir.write("broken.json", "{\"model\": ");
  check_error([&] { io::load_tokenizer(broken); }, {broken, "not valid JSON"});
}

BOOST_AUTO_TEST_CASE(chat_templates_render_as_transformers_renders_them) {
  std::ifstream in(test::data_path("io/chat_templates_reference.json"));
  const nlohmann::json reference = nlohmann::json::parse(in);
  size_t checked = 0;
  for (const nlohmann::json& t : reference) {
    const std::string name = t["name"];
    const io::ChatTemplate chat(t["template"].get<std::string>(), name);
    for (const nlohmann::json& c : t["cases"]) {
      const nlohmann::json context = {{"messages", c["messages"]},
                                      {"add_generation_prompt", c["add_generation_prompt"]},
                                      {"bos_token", t["bos_token"]},
                                      {"eos_token", t["eos_token"]}};
      if (c.contains("error"))
        test::check_error([&] { chat.render(context); }, {name + " raised: " + c["error"].get<std::string>()});
      else
        BOOST_TEST(chat.render(context) == c["text"].get<std::string>(), name << ": " << c["messages"].dump());
      ++checked;
    }
  }
  BOOST_TEST(checked == 40u);
}

BOOST_AUTO_TEST_CASE(chat_template_subset_and_bad_templates) {
  const nlohmann::json context = {{"xs", {3, 1, 2}}, {"s", "  ab  "}};
  const auto render = [&](const std::string& source) { return io::ChatTemplate(source, "t").render(context); };
  BOOST_TEST(render("{{ xs[-1] }}{{ xs[1:] | length }}{{ 7 % 3 }}{{ -2 + 5 * 2 }}") == "2218");
  BOOST_TEST(render("{{ s.strip() | upper }}|{{ s.lstrip() }}|{{ 'b' in s }}{{ 4 not in xs }}") == "AB|ab  |TrueTrue");
  BOOST_TEST(render("{{ missing }}{{ 'u' if missing is undefined else 'd' }}{{ none is none }}") == "uTrue");
  BOOST_TEST(render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}") ==
             "13,21,32");
  // trim_blocks and lstrip_blocks, and "-" and "+" inside tags.
  BOOST_TEST(render("a\n  {% if true %}\nb\n  {% endif %}\nc") == "a\nb\nc");
  BOOST_TEST(render("a  {%- if true -%}  b  {%- endif %}") == "ab");
  BOOST_TEST(render("a\n  {%+ if true %}b{% endif %}") == "a\n  b");
  // A set inside a loop stays inside it; a namespace carries values out.
  BOOST_TEST(render("{% set n = 0 %}{% for x in xs %}{% set n = n + x %}{% endfor %}{{ n }}") == "0");
  BOOST_TEST(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}") ==
             "6");
  test::check_error([&] { render("{% macro m() %}{% endmacro %}"); },
                    {"t: the statement 'macro' at offset 0 is not supported", "io/chat_template.h"});
  test::check_error([&] { render("{{ s | title }}"); }, {"the filter 'title' is not supported"});
  test::check_error([&] { render("{{ s.split() }}"); }, {"the string method 'split' is not supported"});
  test::check_error([&] { render("ab {{ s "); }, {"a tag opened at offset 3 is not closed"});
  test::check_error([&] { render("{% for x in xs %}"); }, {"a for loop at offset 0 has no endfor"});
  test::check_error([&] { render("{% if true %}a"); }, {"an if at offset 0 has no endif"});
  test::check_error([&] { render("{{ 'a' + 1 }}"); }, {"'+' of a string and a number"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_tokenizer
