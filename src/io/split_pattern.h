// The split regexes of byte-level BPE tokenizers, matched by hand rather than by a regex
// engine: GPT-2's (the ByteLevel pre-tokenizer's own) and Llama-3's (a Split pre-tokenizer's
// pattern in its tokenizer.json). They need \p{L}, \p{N} and \s (io/unicode_class.h),
// contractions (case-insensitive in Llama-3's), \p{N}{1,3} and the lookahead of \s+(?!\S);
// each function follows the regex's alternatives in order with Oniguruma's leftmost-first,
// greedy-with-backtracking semantics, which is what the tokenizers library runs.
//
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//           \s*[\r\n]+|\s+(?!\S)|\s+
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace triad::io {

enum class SplitPattern { gpt2, llama3 };

// The pattern whose regex text is `regex` (as tokenizer.json spells it), or nullopt.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);

// `text` cut into the pattern's consecutive matches (every character falls in one: both
// patterns match at every position), in order; their concatenation is `text`. Bytes that are
// not UTF-8 count as characters of their own, neither letter, number nor space.
std::vector<std::string_view> split_by_pattern(SplitPattern pattern, std::string_view text);

}  // namespace triad::io
