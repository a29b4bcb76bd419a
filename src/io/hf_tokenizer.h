// Hugging Face tokenizers, read from the tokenizer.json of the `tokenizers` library, for the
// families triad's models cover (a Tokenizer of io/tokenizer.h):
//   - byte-level BPE, GPT-2 style (ByteLevel pre-tokenizer with GPT-2's split regex) and
//     Llama-3 style (a Split pre-tokenizer with Llama-3's regex, then ByteLevel without one);
//   - SentencePiece-style BPE, Llama-2 style: a normalizer that prepends "▁" and replaces " "
//     with "▁" (or a Metaspace pre-tokenizer), byte fallback to <0xXX> tokens, <unk>.
//
// Note [HF tokenizer pipeline]: encode(text) does what the library's encode(text,
// add_special_tokens=False) does. The added tokens (special or not) are found first, longest
// match leftmost, those with "normalized": false in the raw text; each stretch between them
// is normalized, searched for the "normalized": true ones (their content normalized the same
// way), pre-tokenized into words, and each word is merged by BPE: its characters (or, with
// byte fallback, the <0xXX> tokens of a character not in the vocabulary; else <unk>, runs
// fused with fuse_unk) merged pair by pair, the pair of lowest merge rank first, leftmost
// first among equals (with ignore_merges a word that is a vocabulary entry is taken whole).
// decode(ids) runs the decoder over the ids' token texts, except that bytes which are not
// UTF-8 are returned as they are where the library writes U+FFFD.
//
// Supported pieces (anything else is an Error naming the file and the piece):
//   model          BPE (vocab, merges as "a b" strings or [a, b] pairs, unk_token, fuse_unk,
//                  byte_fallback, ignore_merges; no dropout, continuing_subword_prefix or
//                  end_of_word_suffix)
//   normalizer     null, Sequence, Prepend, Replace (a String pattern)
//   pre_tokenizer  null, Sequence, ByteLevel (add_prefix_space, use_regex), Split (GPT-2's or
//                  Llama-3's regex, behavior Isolated), Metaspace (replacement,
//                  prepend_scheme always|first|never, split)
//   post_processor null, Sequence, ByteLevel, TemplateProcessing (its special tokens before
//                  the sequence become prefix())
//   decoder        Sequence, ByteLevel, Metaspace, Replace (a String pattern), ByteFallback,
//                  Fuse, Strip
// eot() is tokenizer_config.json's eos_token when that file is beside tokenizer.json, else the
// first of <|endoftext|>, </s>, <|end_of_text|> that is a special added token, else the first
// of them that is a token.
#pragma once

#include <memory>
#include <string>

#include "io/tokenizer.h"

namespace triad::io {

// The files of a Hugging Face tokenizer, as a model folder holds them (chat_template.jinja:
// the chat template, io/chat_template.h, as transformers 5 saves it).
inline constexpr const char* kHfTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                                    "special_tokens_map.json", "chat_template.jinja"};

class HfTokenizer final : public Tokenizer {
 public:
  // Reads tokenizer.json at `path` (and tokenizer_config.json beside it, when there is one).
  // Throws Error naming the file and what is wrong: not JSON, a model type or pipeline piece
  // that is not supported, a missing vocab or merges list, a merge of tokens not in the
  // vocabulary, an added token that collides with another or with the vocabulary, no
  // end-of-text token.
  static std::unique_ptr<HfTokenizer> load(const std::string& path);
  ~HfTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override;
  int32_t eot() const override;
  std::vector<int32_t> prefix() const override;

  // The id of a token's text (a vocabulary entry or an added token), or -1.
  int32_t token_id(const std::string& token) const;

 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace triad::io
