// Text corpora: folders (sorted, .dat and symlinks skipped), separator lines (fortune "%"),
// JSON Lines' "text" fields, documents kept apart with <|endoftext|> between them when encoded
// (after the tokenizer's prefix, Llama's <s>), and errors naming paths and lines.
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "io/text_corpus.h"
#include "io/triad_tokenizer.h"
#include "support/check.h"
#include "support/files.h"

BOOST_AUTO_TEST_SUITE(test_text_corpus)

using namespace triad;
using test::check_error;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> docs(const io::TextCorpus& c) {
  std::vector<std::string> out;
  for (auto d : c.documents()) out.emplace_back(d);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(files_are_documents) {
  TempDir dir;
  const std::string a = dir.write("a.txt", "first file\n"), b = dir.write("b.txt", "second");
  dir.write("empty.txt", "");
  const io::TextCorpus c = io::read_corpus({b, a, dir.file("empty.txt")});
  BOOST_CHECK(docs(c) == (std::vector<std::string>{"second", "first file\n"}));  // in the order given
  BOOST_TEST(c.text == "secondfirst file\n");
  BOOST_TEST(c.files.size() == 3u);
}

BOOST_AUTO_TEST_CASE(folders_sorted_skipping_dat_and_links) {
  TempDir dir;
  dir.write("b", "B\n");
  dir.write("a", "A\n");
  dir.write("a.dat", "index bytes\n");
  fs::create_symlink(dir.file("a"), dir.file("a.u8"));
  fs::create_directory(dir.file("sub"));
  dir.write("sub/c", "not read: folders are not recursed\n");
  const io::TextCorpus c = io::read_corpus({dir.path().string()});
  BOOST_CHECK(docs(c) == (std::vector<std::string>{"A\n", "B\n"}));
  BOOST_CHECK(c.files == (std::vector<std::string>{dir.file("a"), dir.file("b")}));
}

BOOST_AUTO_TEST_CASE(separator_lines_split_documents) {
  TempDir dir;
  const std::string f = dir.write("fortunes", "%\none\n%\ntwo\nlines\n%\n%\nthree %\n%%\nno newline at end");
  const std::string g = dir.write("crlf", "four\r\n%\r\nfive\r\n%");
  const io::TextCorpus c = io::read_corpus({f, g}, "%");
  BOOST_CHECK(docs(c) == (std::vector<std::string>{"one\n", "two\nlines\n", "three %\n%%\nno newline at end",
                                                   "four\r\n", "five\r\n"}));
  // Without a separator the same files are two documents, separators included.
  BOOST_TEST(io::read_corpus({f, g}).num_documents() == 2);
}

BOOST_AUTO_TEST_CASE(encode_puts_eot_between_documents) {
  TempDir dir;
  const std::string f = dir.write("f", "the cat\n%\nthe hat\n%\nthe bat sat\n");
  const io::TextCorpus c = io::read_corpus({f}, "%");
  BOOST_REQUIRE(c.num_documents() == 3);
  const io::TriadTokenizer tok = io::TriadTokenizer::train(c.documents(), 270);
  const std::vector<uint32_t> ids = io::encode_corpus(tok, c);
  BOOST_TEST(std::count(ids.begin(), ids.end(), uint32_t(tok.eot())) == 2);
  BOOST_TEST(ids.front() != uint32_t(tok.eot()));
  BOOST_TEST(ids.back() != uint32_t(tok.eot()));
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  BOOST_TEST(tok.decode(ids32) == "the cat\n<|endoftext|>the hat\n<|endoftext|>the bat sat\n");

  // No merge spans two documents: "xy" + "xy" has one pair to merge, "xyxy" would have two.
  const io::TextCorpus xy = io::read_corpus({dir.write("x1", "xy"), dir.write("x2", "xy")});
  const io::TriadTokenizer per_doc = io::TriadTokenizer::train(xy.documents(), 259);
  BOOST_TEST(per_doc.num_merges() == 1);
  BOOST_TEST(io::TriadTokenizer::train(xy.text, 259).num_merges() == 2);
  BOOST_TEST(io::encode_corpus(per_doc, xy) == (std::vector<uint32_t>{256, uint32_t(per_doc.eot()), 256}));
}

BOOST_AUTO_TEST_CASE(jsonl_text_fields_are_documents) {
  TempDir dir;
  const std::string f = dir.write("rows.jsonl",
                                  "{\"text\": \"first doc\", \"id\": 1}\n\n  \n{\"text\": \"caf\\u00e9\\n2\"}\n"
                                  "{\"text\": \"\"}\n{\"text\": \"last\"}");
  const io::TextCorpus c = io::read_corpus({f});
  const std::vector<std::string> expected{"first doc", "caf\xc3\xa9\n2", "last"};
  BOOST_REQUIRE(c.num_documents() == 3);
  for (int64_t i = 0; i < 3; ++i) BOOST_TEST(std::string(c.document(i)) == expected[size_t(i)]);
  const std::string no_text = dir.write("no_text.jsonl", "{\"text\": \"a\"}\n{\"prompt\": \"b\"}\n");
  check_error([&] { io::read_corpus({no_text}); }, {no_text, "line 2", "\"text\""});
  const std::string not_json = dir.write("not_json.jsonl", "{\"text\": \"a\"}\n\nplain text\n");
  check_error([&] { io::read_corpus({not_json}); }, {not_json, "line 3", "JSON object"});
}

BOOST_AUTO_TEST_CASE(encode_puts_the_prefix_before_each_document) {
  // Llama-2's tokenizer: <s> (1) starts each document, </s> (2) separates them.
  const auto tok = io::load_tokenizer(test::data_path("io/hf_llama2_tokenizer.json"));
  TempDir dir;
  const io::TextCorpus c = io::read_corpus({dir.write("a.jsonl", "{\"text\": \"the cat\"}\n{\"text\": \"a hat\"}\n")});
  std::vector<uint32_t> expected{1};
  for (int32_t id : tok->encode("the cat")) expected.push_back(uint32_t(id));
  expected.insert(expected.end(), {2, 1});
  for (int32_t id : tok->encode("a hat")) expected.push_back(uint32_t(id));
  BOOST_TEST(io::encode_corpus(*tok, c) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(errors_name_the_path) {
  TempDir dir;
  const std::string missing = dir.file("nope");
  check_error([&] { io::read_corpus({missing}); }, {missing});
  const std::string ok = dir.write("ok", "text");
  check_error([&] { io::read_corpus({ok, missing}, "%"); }, {missing});
  const std::string empty = dir.write("empty", "");
  check_error([&] { io::read_corpus({empty}); }, {"empty", empty});
  const std::string only_separators = dir.write("seps", "%\n%\n");
  check_error([&] { io::read_corpus({only_separators}, "%"); }, {"empty", only_separators});
  fs::create_directory(dir.file("void"));
  check_error([&] { io::read_corpus({dir.file("void")}); }, {"empty", dir.file("void")});
  check_error([&] { io::read_corpus({}); }, {"no corpus paths"});
}

BOOST_AUTO_TEST_CASE(english_fixture) {
  const io::TextCorpus c = io::read_corpus({test::data_path("io/english.txt")});
  BOOST_TEST(c.num_documents() == 1);
  BOOST_TEST(c.text.size() > 3000u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_text_corpus
