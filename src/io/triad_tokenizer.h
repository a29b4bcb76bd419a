// triad's own byte-level BPE tokenizer (`triad-data tokenizer` trains it; its JSON file says
// "format": "triad-bpe"), one of the tokenizers behind io/tokenizer.h.
//
// Vocabulary layout (Note [BPE vocabulary]): ids 0..255 are the 256 single bytes, ids
// 256..256+M-1 are the M learned merges in the order they were learned (a merge's id is its
// rank: lower ids merge first), and the last id is the special token <|endoftext|>, eot().
// Because every byte has a token, decode(encode(s)) == s for every byte string, valid UTF-8
// or not.
//
// Note [Pre-tokenization]: text is first cut into chunks, GPT-2 style, over bytes: runs of
// letters (ASCII letters and every byte >= 0x80, so UTF-8 words stay whole), runs of digits,
// runs of other symbols, each optionally led by one space; English contractions ('s 't 're
// 've 'm 'll 'd); and runs of whitespace (a run followed by a word gives up its last space to
// it). Chunks longer than kMaxChunkBytes are cut. Merges never cross a chunk boundary, which
// keeps the vocabulary made of word pieces and lets encoding cache whole chunks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/tokenizer.h"

namespace triad::io {

class TriadTokenizer final : public Tokenizer {
 public:
  static constexpr int kMinVocabSize = 257;      // 256 bytes + <|endoftext|>
  static constexpr int kMaxVocabSize = 1 << 20;  // ids stay far inside int32
  static constexpr size_t kMaxChunkBytes = 128;
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Learns merges on `text` until the vocabulary has vocab_size entries: 256 byte tokens,
  // then merges, then <|endoftext|> (the last id). Each step merges the most frequent
  // adjacent pair, ties going to the smallest (left id, right id), so training is
  // deterministic. If the text runs out of pairs first, training stops early and
  // vocab_size() is smaller than asked. progress(done, total) is called after every merge
  // (total = vocab_size - 257). Throws Error naming vocab_size when it is outside
  // [kMinVocabSize, kMaxVocabSize].
  static TriadTokenizer train(std::string_view text, int vocab_size,
                              const std::function<void(int done, int total)>& progress = {});
  // The same over separate documents: no chunk spans two documents.
  static TriadTokenizer train(const std::vector<std::string_view>& documents, int vocab_size,
                              const std::function<void(int done, int total)>& progress = {});

  // Token ids of `text`; never emits eot() (the literal text "<|endoftext|>" is encoded as
  // ordinary bytes). Thread-safe: the chunk cache is shared behind a mutex.
  std::vector<int32_t> encode(std::string_view text) const override;
  // The bytes of `ids` concatenated; eot() decodes to "<|endoftext|>". Throws Error on an
  // id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const override;
  // The bytes of one token (eot(): "<|endoftext|>").
  const std::string& token_bytes(int32_t id) const;

  int vocab_size() const override { return int(pieces_.size()) + 1; }
  int32_t eot() const override { return int32_t(pieces_.size()); }
  // Nothing: a document follows an <|endoftext|> (or starts the corpus).
  std::vector<int32_t> prefix() const override { return {}; }
  int num_merges() const { return int(merges_.size()); }
  // merges()[i] = (left, right) is merged into id 256 + i.
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

  // JSON {"format": "triad-bpe", "version": 1, "vocab_size", "pretokenizer", "eot",
  // "merges": [[left, right], ...]}, written to a temporary file and renamed into place.
  void save(const std::string& path) const;
  // Throws Error naming the path when the file is missing, not JSON, or not a valid
  // tokenizer (unknown format/version, a merge referring to a later id, sizes that disagree).
  static TriadTokenizer load(const std::string& path);

  // The chunks of Note [Pre-tokenization], in order; their concatenation is `text`.
  static std::vector<std::string_view> pretokenize(std::string_view text);

 private:
  struct State;  // merge ranks and the chunk cache: pure functions of merges_, so copies share them
  explicit TriadTokenizer(std::vector<std::pair<int32_t, int32_t>> merges);
  std::vector<int32_t> encode_chunk(std::string_view chunk) const;

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<std::string> pieces_;  // bytes of every id below eot()
  std::shared_ptr<State> state_;
};

}  // namespace triad::io
