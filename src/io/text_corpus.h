// Text corpora for tokenizer training and encoding: files and folders of text, cut
// into documents. Documents are kept apart so that encoding puts <|endoftext|> between them
// and tokenizer training never learns a merge across two of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer.h"

namespace triad::io {

struct TextCorpus {
  std::string text;                    // all documents, concatenated
  std::vector<int64_t> document_ends;  // document i is text[document_ends[i-1], document_ends[i])
  std::vector<std::string> files;      // the files read, in order

  int64_t num_documents() const { return int64_t(document_ends.size()); }
  std::string_view document(int64_t i) const;
  std::vector<std::string_view> documents() const;  // views into `text`
};

// Reads every path in order. A path is a file or a folder; a folder contributes its regular
// files (not recursively), sorted by name, skipping symbolic links and names ending in ".dat"
// (fortune index files). Each file is one document, unless separator_line is non-empty: then
// a line equal to it (with or without a trailing '\r') ends a document and is dropped, and
// each document keeps its lines with their newlines (fortune files: separator_line "%").
// A file named *.jsonl is JSON Lines instead: each non-blank line is an object whose string
// field "text" is one document (other fields are ignored; a line that is not an object with
// a string "text" is an Error naming the file and line). Empty documents are dropped.
// Throws Error naming the path when it is missing or unreadable, and Error when the corpus
// holds no text.
TextCorpus read_corpus(const std::vector<std::string>& paths, const std::string& separator_line = "");

// The tokens of every document, each after the tokenizer's prefix() (Llama's <s>; none for
// GPT-2 and triad's tokenizer), with tokenizer.eot() between consecutive documents.
std::vector<uint32_t> encode_corpus(const Tokenizer& tokenizer, const TextCorpus& corpus);

}  // namespace triad::io
