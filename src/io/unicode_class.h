// The Unicode facts Hugging Face tokenizers' split patterns depend on: whether a code point is
// a letter (\p{L}), a number (\p{N}), white space (\s: Unicode's White_Space property) or
// something else, and UTF-8 decoding into code points with their byte lengths.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace triad::io {

enum class CharClass : uint8_t { letter, number, space, other };

// The class of code point `c` (letters: general category L*; numbers: N*; Unicode 14).
CharClass char_class(char32_t c);

// One code point of a UTF-8 text: its value and how many bytes it takes. A byte that does not
// start a valid UTF-8 sequence is a code point of its own (U+FFFD, class other) of 1 byte.
struct CodePoint {
  char32_t value;
  uint8_t bytes;
};
std::vector<CodePoint> decode_utf8(std::string_view text);

// The UTF-8 bytes of `c` appended to `out`.
void append_utf8(std::string& out, char32_t c);

}  // namespace triad::io
