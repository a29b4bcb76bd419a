// Each matcher returns the length, in code points, of the pattern's match at position i.
#include "io/split_pattern.h"

#include <string>

#include "io/unicode_class.h"
#include "tensor/error.h"

namespace triad::io {

namespace {

constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Text {
  std::vector<char32_t> c;
  std::vector<CharClass> k;
  size_t n() const { return c.size(); }
  // The end of the run of class `cls` from i.
  size_t run(size_t i, CharClass cls) const {
    while (i < n() && k[i] == cls) ++i;
    return i;
  }
  bool is(size_t i, CharClass cls) const { return i < n() && k[i] == cls; }
  bool newline(size_t i) const { return i < n() && (c[i] == '\r' || c[i] == '\n'); }
};

char32_t lower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

// 's 't 're 've 'm 'll 'd at i: their length, or 0.
size_t contraction(const Text& t, size_t i, bool ignore_case) {
  if (t.c[i] != '\'' || i + 1 >= t.n()) return 0;
  const auto at = [&](size_t j) { return ignore_case ? lower(t.c[j]) : t.c[j]; };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= t.n()) return 0;
  const char32_t b = at(i + 2);
  return ((a == 'r' || a == 'v') && b == 'e') || (a == 'l' && b == 'l') ? 3 : 0;
}

// \s+(?!\S)|\s+ at a space: the run, less its last space when a non-space follows it.
size_t spaces(const Text& t, size_t i) {
  const size_t k = t.run(i, CharClass::space) - i;
  return (i + k == t.n() || k == 1) ? k : k - 1;
}

size_t match_gpt2(const Text& t, size_t i) {
  if (const size_t len = contraction(t, i, false)) return len;
  if (t.c[i] == ' ' && i + 1 < t.n() && t.k[i + 1] != CharClass::space) return t.run(i + 1, t.k[i + 1]) - i;
  if (t.k[i] != CharClass::space) return t.run(i, t.k[i]) - i;
  return spaces(t, i);
}

size_t match_llama3(const Text& t, size_t i) {
  if (const size_t len = contraction(t, i, true)) return len;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!t.newline(i) && t.k[i] != CharClass::letter && t.k[i] != CharClass::number && t.is(i + 1, CharClass::letter))
    return t.run(i + 1, CharClass::letter) - i;
  if (t.k[i] == CharClass::letter) return t.run(i, CharClass::letter) - i;
  // \p{N}{1,3}
  if (t.k[i] == CharClass::number) return std::min<size_t>(t.run(i, CharClass::number) - i, 3);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t start = std::string::npos;
  if (t.c[i] == ' ' && t.is(i + 1, CharClass::other))
    start = i + 1;
  else if (t.k[i] == CharClass::other)
    start = i;
  if (start != std::string::npos) {
    size_t end = t.run(start, CharClass::other);
    while (t.newline(end)) ++end;
    return end - i;
  }
  // \s*[\r\n]+: the space run up to and including its last \r or \n
  const size_t end = t.run(i, CharClass::space);
  for (size_t p = end; p > i; --p)
    if (t.newline(p - 1)) return p - i;
  return spaces(t, i);
}

}  // namespace

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::gpt2;
  if (regex == kLlama3Regex) return SplitPattern::llama3;
  return std::nullopt;
}

std::vector<std::string_view> split_by_pattern(SplitPattern pattern, std::string_view text) {
  const std::vector<CodePoint> cps = decode_utf8(text);
  Text t;
  t.c.reserve(cps.size());
  t.k.reserve(cps.size());
  for (const CodePoint& cp : cps) {
    t.c.push_back(cp.value);
    // A byte that is not UTF-8 decodes to U+FFFD, whose class is other.
    t.k.push_back(char_class(cp.value));
  }
  std::vector<std::string_view> out;
  size_t byte = 0;
  for (size_t i = 0; i < t.n();) {
    const size_t len = pattern == SplitPattern::gpt2 ? match_gpt2(t, i) : match_llama3(t, i);
    TRIAD_ASSERT(len > 0);
    size_t bytes = 0;
    for (size_t j = i; j < i + len; ++j) bytes += cps[j].bytes;
    out.push_back(text.substr(byte, bytes));
    byte += bytes;
    i += len;
  }
  return out;
}

}  // namespace triad::io
