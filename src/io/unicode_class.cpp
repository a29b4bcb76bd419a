// Character classes by binary search over generated range tables (unicode_classes.inc,
// written by scripts/unicode-classes), with ASCII answered directly.
#include "io/unicode_class.h"

#include <algorithm>
#include <iterator>

namespace triad::io {

namespace {

struct CodeRange {
  char32_t first, last;
};

#include "io/unicode_classes.inc"

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], char32_t c) {
  const auto it = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                   [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != std::begin(ranges) && c <= std::prev(it)->last;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

CharClass char_class(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::letter;
    if (c >= '0' && c <= '9') return CharClass::number;
    return is_white_space(c) ? CharClass::space : CharClass::other;
  }
  if (is_white_space(c)) return CharClass::space;
  if (in_ranges(kLetterRanges, c)) return CharClass::letter;
  if (in_ranges(kNumberRanges, c)) return CharClass::number;
  return CharClass::other;
}

std::vector<CodePoint> decode_utf8(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool valid = len > 0 && i + size_t(len) <= n;
    for (int k = 1; valid && k < len; ++k) {
      valid = (s[i + size_t(k)] & 0xC0) == 0x80;
      c = (c << 6) | (s[i + size_t(k)] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    valid = valid && c >= kMin[len] && c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
    if (!valid) {
      out.push_back({0xFFFD, 1});
      ++i;
      continue;
    }
    out.push_back({c, uint8_t(len)});
    i += size_t(len);
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

}  // namespace triad::io
