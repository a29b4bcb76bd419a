// What the data path and the programs need of a tokenizer (text -> token ids -> TokenFile, and
// back), whichever file it comes from. load_tokenizer picks the implementation by the file:
//   - triad's own byte-level BPE, {"format": "triad-bpe", ...} (io/triad_tokenizer.h), written
//     by `triad-data tokenizer`;
//   - a Hugging Face tokenizer.json of the `tokenizers` library (io/hf_tokenizer.h): GPT-2 and
//     Llama-3 style byte-level BPE, Llama-2's SentencePiece-style BPE.
// Both are immutable once loaded and safe to use from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace triad::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The token ids of `text`, with no special token added around it. Special tokens spelled
  // in the text: a Hugging Face tokenizer matches its added tokens (as its encode does);
  // triad's encodes every byte as text.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The text of `ids` (special tokens as their text). Throws Error on an id outside the
  // vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // One past the largest id.
  virtual int vocab_size() const = 0;
  // The end-of-text token: between documents of a corpus, where generation stops, padding.
  virtual int32_t eot() const = 0;
  // The special tokens a sequence starts with, as the model was trained (Hugging Face: those
  // the post-processor puts before a single sequence, e.g. Llama's <s>; none for GPT-2 and
  // triad's own).
  virtual std::vector<int32_t> prefix() const = 0;
};

// The tokenizer of `path`: a triad tokenizer file, a Hugging Face tokenizer.json, or a folder
// holding tokenizer.json. Throws Error naming the path when it is missing, not JSON, neither
// kind, or a bad file of its kind.
std::unique_ptr<const Tokenizer> load_tokenizer(const std::string& path);

// The ids of a prompt a model continues: prefix() then encode(text); with no prefix, eot()
// then encode(text) (a document follows an end-of-text in training).
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text);

}  // namespace triad::io
