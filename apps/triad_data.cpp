// triad-data: prepares training data. `tokenizer` learns a byte-level BPE vocabulary from a
// text corpus, `encode` turns a corpus (text files, JSONL with a "text" field) into a token
// file with the tokenizer's end-of-text between documents (triad's tokenizer or a Hugging
// Face tokenizer.json, io/tokenizer.h), `inspect` checks a token file and shows its header
// and first tokens, and `pairs` makes preference pairs (JSONL: prompt, chosen, rejected)
// from a fortunes corpus for RLHF (rlhf/fortune_pairs.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/main_guard.h"
#include "io/text_corpus.h"
#include "io/token_file.h"
#include "io/tokenizer.h"
#include "io/triad_tokenizer.h"
#include "rlhf/fortune_pairs.h"
#include "rlhf/preference_data.h"
#include "tensor/error.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace triad;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A one-line progress bar on stderr, redrawn when the percentage changes (only on a terminal).
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2) != 0) {}
  void update(int done, int total) {
    if (!tty_ || total <= 0) return;
    const int percent = int(int64_t(done) * 100 / total);
    if (percent == last_percent_) return;
    last_percent_ = percent;
    constexpr int kWidth = 40;
    const int filled = percent * kWidth / 100;
    std::fprintf(stderr, "\r%s [%s%s] %3d%% %d/%d %.1f s", label_.c_str(), std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(kWidth - filled), ' ').c_str(), percent, done, total, seconds_since(t0_));
    std::fflush(stderr);
  }
  void finish() {
    if (tty_ && last_percent_ >= 0) std::fprintf(stderr, "\n");
  }

 private:
  std::string label_;
  bool tty_;
  int last_percent_ = -1;
  Clock::time_point t0_ = Clock::now();
};

void print_corpus(const io::TextCorpus& corpus, double seconds) {
  std::printf("corpus: %zu files, %lld documents, %.2f MB, read in %.2f s\n", corpus.files.size(),
              (long long)corpus.num_documents(), double(corpus.text.size()) / 1e6, seconds);
}

struct TokenizerOptions {
  std::vector<std::string> corpus;
  std::string separator;
  int vocab_size = 4096;
  std::string out;
};

void run_tokenizer(const TokenizerOptions& o) {
  auto t0 = Clock::now();
  const io::TextCorpus corpus = io::read_corpus(o.corpus, o.separator);
  print_corpus(corpus, seconds_since(t0));
  t0 = Clock::now();
  ProgressBar bar("merges");
  const io::TriadTokenizer tok = io::TriadTokenizer::train(corpus.documents(), o.vocab_size,
                                                           [&](int done, int total) { bar.update(done, total); });
  bar.finish();
  const double train_s = seconds_since(t0);
  tok.save(o.out);
  std::printf("trained a vocabulary of %d tokens (%d merges) in %.2f s\n", tok.vocab_size(), tok.num_merges(), train_s);
  if (tok.vocab_size() < o.vocab_size)
    std::printf("note: the corpus ran out of pairs to merge before --vocab-size %d\n", o.vocab_size);
  std::printf("wrote %s\n", o.out.c_str());
}

struct EncodeOptions {
  std::string tokenizer;
  std::vector<std::string> corpus;
  std::string separator;
  std::string out;
};

void run_encode(const EncodeOptions& o) {
  const std::unique_ptr<const io::Tokenizer> loaded = io::load_tokenizer(o.tokenizer);
  const io::Tokenizer& tok = *loaded;
  auto t0 = Clock::now();
  const io::TextCorpus corpus = io::read_corpus(o.corpus, o.separator);
  print_corpus(corpus, seconds_since(t0));
  t0 = Clock::now();
  const std::vector<uint32_t> tokens = io::encode_corpus(tok, corpus);
  const double encode_s = seconds_since(t0);
  io::write_token_file(o.out, tokens, uint32_t(tok.vocab_size()));
  const double text_bytes = double(corpus.text.size());
  const auto n = double(tokens.size());
  const int64_t added = (corpus.num_documents() - 1) + corpus.num_documents() * int64_t(tok.prefix().size());
  std::printf(
      "encoded %zu tokens (%lld end-of-text separators, %zu prefix tokens per document) in %.2f s (%.1f MB/s)\n",
      tokens.size(), (long long)(corpus.num_documents() - 1), tok.prefix().size(), encode_s,
      text_bytes / 1e6 / encode_s);
  std::printf("compression: %.3f bytes/token (%.0f text bytes, %lld tokens without separators and prefixes)\n",
              text_bytes / (n - double(added)), text_bytes, (long long)(int64_t(tokens.size()) - added));
  std::printf("wrote %s (vocab_size %d, %s tokens)\n", o.out.c_str(), tok.vocab_size(),
              tok.vocab_size() <= 65536 ? "uint16" : "uint32");
}

struct InspectOptions {
  std::string file;
  std::string tokenizer;
  int64_t count = 64;
};

void run_inspect(const InspectOptions& o) {
  const io::TokenFile f = io::TokenFile::open(o.file);  // checks the whole file
  std::printf("file:        %s (%llu bytes)\n", o.file.c_str(), (unsigned long long)std::filesystem::file_size(o.file));
  std::printf("version:     %u\n", io::TokenFile::kVersion);
  std::printf("dtype:       %s\n", f.bytes_per_token() == 2 ? "uint16" : "uint32");
  std::printf("vocab_size:  %u\n", f.vocab_size());
  std::printf("count:       %lld tokens\n", (long long)f.size());
  std::printf("checksum:    %016llx (fnv1a64, verified)\n", (unsigned long long)f.checksum());
  std::printf("check:       ok (magic, version, size, checksum, every token < vocab_size)\n");
  if (o.tokenizer.empty()) return;

  const std::unique_ptr<const io::Tokenizer> loaded = io::load_tokenizer(o.tokenizer);
  const io::Tokenizer& tok = *loaded;
  TRIAD_CHECK(uint32_t(tok.vocab_size()) == f.vocab_size(),
              "tokenizer '" << o.tokenizer << "' has vocab_size " << tok.vocab_size() << ", but token file '" << o.file
                            << "' was written with vocab_size " << f.vocab_size());
  int64_t eots = 0;
  for (int64_t i = 0; i < f.size(); ++i) eots += f.at(i) == uint32_t(tok.eot());
  std::printf("documents:   %lld (%lld end-of-text tokens)\n", (long long)(f.size() > 0 ? eots + 1 : 0),
              (long long)eots);
  const int64_t n = std::min(o.count, f.size());
  std::vector<int64_t> ids64(static_cast<size_t>(n));
  f.read(0, n, ids64.data());
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  std::printf("first %lld tokens:", (long long)n);
  for (const int32_t id : ids) std::printf(" %d", id);
  std::printf("\n--- decoded ---\n%s\n---------------\n", tok.decode(ids).c_str());
}

struct PairsOptions {
  std::vector<std::string> corpus;
  std::string separator = "%";
  rlhf::FortunePairOptions pairs;
  std::string out;
};

void run_pairs(const PairsOptions& o) {
  o.pairs.validate();
  auto t0 = Clock::now();
  const io::TextCorpus corpus = io::read_corpus(o.corpus, o.separator);
  print_corpus(corpus, seconds_since(t0));
  const std::vector<rlhf::PreferenceRow> rows = rlhf::make_fortune_pairs(corpus.documents(), o.pairs);
  rlhf::write_preference_jsonl(o.out, rows);
  std::printf("wrote %s: %zu preference pairs from %lld documents (seed %llu)\n", o.out.c_str(), rows.size(),
              (long long)corpus.num_documents(), (unsigned long long)o.pairs.seed);
}

}  // namespace

int main(int argc, char** argv) {
  return triad::app::guarded_main([&] {
    CLI::App app{"triad-data: tokenizer training, corpus encoding, token-file inspection and RLHF preference pairs"};
    app.require_subcommand(1);

    TokenizerOptions tok;
    CLI::App* t = app.add_subcommand("tokenizer", "learn a byte-level BPE tokenizer from a text corpus");
    t->add_option("--corpus", tok.corpus, "text files or folders of them (*.dat and symlinks skipped)")
        ->required()
        ->expected(1, -1);
    t->add_option("--separator", tok.separator, "a line that separates documents (fortune files: %)");
    t->add_option("--vocab-size", tok.vocab_size, "vocabulary size: 256 bytes + merges + <|endoftext|>")
        ->required()
        ->check(CLI::Range(io::TriadTokenizer::kMinVocabSize, io::TriadTokenizer::kMaxVocabSize));
    t->add_option("--out", tok.out, "tokenizer JSON file to write")->required();
    t->callback([&tok] { run_tokenizer(tok); });

    EncodeOptions enc;
    CLI::App* e = app.add_subcommand("encode", "encode a text corpus into a token file");
    e->add_option("--tokenizer", enc.tokenizer,
                  "a triad tokenizer file, a Hugging Face tokenizer.json, or a folder holding tokenizer.json")
        ->required();
    e->add_option("--corpus", enc.corpus,
                  "text files (*.jsonl: one document per line's \"text\") or folders of them (*.dat and symlinks "
                  "skipped)")
        ->required()
        ->expected(1, -1);
    e->add_option("--separator", enc.separator, "a line that separates documents (fortune files: %)");
    e->add_option("--out", enc.out, "token file to write")->required();
    e->callback([&enc] { run_encode(enc); });

    InspectOptions ins;
    CLI::App* i = app.add_subcommand("inspect", "check a token file and show its header and first tokens");
    i->add_option("file", ins.file, "token file")->required();
    i->add_option("--tokenizer", ins.tokenizer,
                  "decode the first tokens with this tokenizer (triad's file, tokenizer.json or its folder)");
    i->add_option("--count", ins.count, "how many tokens to show")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    i->callback([&ins] { run_inspect(ins); });

    PairsOptions pairs;
    CLI::App* p = app.add_subcommand("pairs", "make RLHF preference pairs (JSONL) from a fortunes corpus");
    p->add_option("--corpus", pairs.corpus, "text files or folders of them (*.dat and symlinks skipped)")
        ->required()
        ->expected(1, -1);
    p->add_option("--separator", pairs.separator, "a line that separates fortunes")->capture_default_str();
    p->add_option("--prompt-words", pairs.pairs.prompt_words, "words of each fortune that make the prompt")
        ->capture_default_str();
    p->add_option("--min-answer-words", pairs.pairs.min_answer_words, "fewest words after the prompt")
        ->capture_default_str();
    p->add_option("--max-words", pairs.pairs.max_words, "longer fortunes are skipped")->capture_default_str();
    p->add_option("--seed", pairs.pairs.seed, "seed of the corruptions")->capture_default_str();
    p->add_option("--out", pairs.out, "JSONL file to write")->required();
    p->callback([&pairs] { run_pairs(pairs); });

    CLI11_PARSE(app, argc, argv);
    return 0;
  });
}
