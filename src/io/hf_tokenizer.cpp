// Reading tokenizer.json into a pipeline of small steps (Note [HF tokenizer pipeline]), and
// running it. Words are merged once and cached (the cache is a pure function of the file).
#include "io/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <unordered_map>

#include "io/bpe_merges.h"
#include "io/split_pattern.h"
#include "io/unicode_class.h"
#include "tensor/error.h"

namespace triad::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxCachedWordBytes = 256;   // longer words (whole texts, with no pre-tokenizer) are not kept
constexpr int64_t kMaxId = int64_t(1) << 24;  // ids stay far inside int32
constexpr const char* kEndOfTextNames[] = {"<|endoftext|>", "</s>", "<|end_of_text|>"};

// GPT-2's map of the 256 bytes to printable characters: the printable Latin-1 bytes stand for
// themselves, the others for U+0100 on, in byte order.
struct ByteMap {
  std::array<std::string, 256> text;           // byte -> its character's UTF-8
  std::unordered_map<char32_t, uint8_t> byte;  // character -> byte
  ByteMap() {
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const auto c = char32_t(printable ? b : next++);
      append_utf8(text[size_t(b)], c);
      byte.emplace(c, uint8_t(b));
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out += to;
  }
  out.append(s, at, std::string::npos);
  s = std::move(out);
}

struct Normalizer {
  enum class Kind { prepend, replace } kind;
  std::string from, to;  // prepend: `to` before a non-empty text; replace: every `from` by `to`
};

enum class PrependScheme { always, first, never };

struct PreTokenizer {
  enum class Kind { byte_level, split, metaspace } kind;
  bool add_prefix_space = false, use_regex = false;  // byte_level
  SplitPattern pattern = SplitPattern::gpt2;         // split; byte_level with use_regex
  std::string replacement;                           // metaspace
  PrependScheme prepend = PrependScheme::always;     // metaspace
  bool split = false;                                // metaspace
};

struct Decoder {
  enum class Kind { byte_level, metaspace, replace, byte_fallback, fuse, strip } kind;
  std::string from, to;                           // replace; metaspace: from = replacement
  PrependScheme prepend = PrependScheme::always;  // metaspace
  std::string content;                            // strip: the character
  int64_t start = 0, stop = 0;                    // strip: how many to take at each end
};

struct AddedToken {
  std::string content, match;  // match: the text searched for (normalized content if normalized)
  int32_t id;
  bool normalized, lstrip, rstrip, single_word, special;
};

// Leftmost-longest search for a set of tokens, indexed by first byte.
class TokenMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->match.empty()) return;
    auto& list = by_byte_[uint8_t(t->match[0])];
    list.push_back(t);
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->match.size() > b->match.size(); });
    empty_ = false;
  }
  bool empty() const { return empty_; }

  struct Hit {
    size_t begin, end;  // the stretch of text the token takes (with stripped spaces)
    int32_t id;
  };
  std::vector<Hit> find(std::string_view s) const {
    std::vector<Hit> hits;
    size_t floor = 0;  // a token's lstrip stops at the previous token's end
    for (size_t i = 0; i < s.size();) {
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : by_byte_[uint8_t(s[i])]) {
        if (s.compare(i, t->match.size(), t->match) != 0) continue;
        if (t->single_word && !(word_boundary(s, i, true) && word_boundary(s, i + t->match.size(), false))) continue;
        hit = t;
        break;
      }
      if (!hit) {
        ++i;
        continue;
      }
      size_t begin = i, end = i + hit->match.size();
      if (hit->lstrip)
        while (begin > floor && is_space(s[begin - 1])) --begin;
      if (hit->rstrip)
        while (end < s.size() && is_space(s[end])) ++end;
      hits.push_back({begin, end, hit->id});
      floor = i = end;
    }
    return hits;
  }

 private:
  static bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
  // Whether the character before (at_start) or at position i is not a word character.
  static bool word_boundary(std::string_view s, size_t i, bool at_start) {
    if (at_start ? i == 0 : i == s.size()) return true;
    const unsigned char c = uint8_t(at_start ? s[i - 1] : s[i]);
    if (c >= 0x80) return false;  // a letter of another script, most likely
    return !(std::isalnum(c) || c == '_');
  }
  std::array<std::vector<const AddedToken*>, 256> by_byte_;
  bool empty_ = true;
};

}  // namespace

struct HfTokenizer::Impl {
  std::string where;

  // BPE
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> tokens;  // id -> text ("" where `known` is false)
  std::vector<bool> known;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> (rank, merged id)
  int32_t unk = -1;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::array<int32_t, 256> byte_tokens{};  // <0xXX> ids, -1 where missing

  std::vector<AddedToken> added;
  TokenMatcher raw_tokens, normalized_tokens;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<Decoder> decoders;
  std::vector<int32_t> prefix;
  int32_t eot = -1;

  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> cache;  // word -> ids

  [[noreturn]] void fail(const std::string& what) const { throw Error("tokenizer file '" + where + "': " + what); }

  std::string normalize(std::string s) const {
    for (const Normalizer& n : normalizers) {
      if (n.kind == Normalizer::Kind::prepend) {
        if (!s.empty()) s = n.to + s;
      } else {
        replace_all(s, n.from, n.to);
      }
    }
    return s;
  }

  // The words of a normalized stretch of text (`first`: it starts the original text).
  std::vector<std::string> pre_tokenize(std::string s, bool first) const {
    std::vector<std::string> words{std::move(s)};
    for (const PreTokenizer& p : pre_tokenizers) {
      std::vector<std::string> next;
      for (std::string& w : words) {
        switch (p.kind) {
          case PreTokenizer::Kind::split:
            for (std::string_view piece : split_by_pattern(p.pattern, w)) next.emplace_back(piece);
            break;
          case PreTokenizer::Kind::byte_level: {
            if (p.add_prefix_space && (w.empty() || w[0] != ' ')) w = " " + w;
            std::vector<std::string_view> pieces{w};
            if (p.use_regex) pieces = split_by_pattern(SplitPattern::gpt2, w);
            for (std::string_view piece : pieces) {
              std::string mapped;
              for (const char c : piece) mapped += byte_map().text[uint8_t(c)];
              next.push_back(std::move(mapped));
            }
            break;
          }
          case PreTokenizer::Kind::metaspace: {
            replace_all(w, " ", p.replacement);
            const bool at_start = first && &w == &words.front();  // the word at offset 0 of the text
            const bool prepend = p.prepend == PrependScheme::always || (p.prepend == PrependScheme::first && at_start);
            if (prepend && w.compare(0, p.replacement.size(), p.replacement) != 0) w = p.replacement + w;
            if (!p.split) {
              next.push_back(std::move(w));
              break;
            }
            size_t begin = 0;  // each replacement starts a new word
            for (size_t at = w.find(p.replacement, 1); at != std::string::npos; at = w.find(p.replacement, at + 1)) {
              if (at > begin) next.push_back(w.substr(begin, at - begin));
              begin = at;
            }
            next.push_back(w.substr(begin));
            break;
          }
        }
      }
      words = std::move(next);
    }
    std::erase_if(words, [](const std::string& w) { return w.empty(); });
    return words;
  }

  std::vector<int32_t> merge_word(const std::string& word) const {
    if (ignore_merges) {
      const auto it = vocab.find(word);
      if (it != vocab.end()) return {it->second};
    }
    std::vector<int32_t> ids;
    bool last_unk = false;
    for (const CodePoint& cp : decode_utf8(word)) {
      std::string c;
      append_utf8(c, cp.value);
      const auto it = vocab.find(c);
      if (it != vocab.end()) {
        ids.push_back(it->second);
        last_unk = false;
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (const char b : c) all = all && byte_tokens[uint8_t(b)] >= 0;
        if (all) {
          for (const char b : c) ids.push_back(byte_tokens[uint8_t(b)]);
          last_unk = false;
          continue;
        }
      }
      if (unk < 0) continue;  // no <unk>: the character is dropped, as the library does
      if (!(fuse_unk && last_unk)) ids.push_back(unk);
      last_unk = true;
    }
    return apply_merges(std::move(ids));
  }

  // The merges by rank, leftmost first among equal ranks, over a linked list of symbols with a
  // heap of candidate pairs (an entry is live while its pair is still at its place), so a long
  // word (a whole document, under Llama-2's normalizer) costs O(n log n).
  std::vector<int32_t> apply_merges(std::vector<int32_t> ids) const {
    const auto n = int64_t(ids.size());
    std::vector<int64_t> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
    std::vector<bool> alive(static_cast<size_t>(n), true);
    for (int64_t i = 0; i < n; ++i) next[size_t(i)] = i + 1 < n ? i + 1 : -1, prev[size_t(i)] = i - 1;
    struct Candidate {
      int32_t rank;
      int64_t pos;
      int32_t left, right, merged;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    const auto consider = [&](int64_t pos) {
      if (pos < 0 || next[size_t(pos)] < 0) return;
      const int32_t a = ids[size_t(pos)], b = ids[size_t(next[size_t(pos)])];
      const auto it = merges.find(merge_pair_key(a, b));
      if (it != merges.end()) heap.push({it->second.first, pos, a, b, it->second.second});
    };
    for (int64_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const int64_t right = next[size_t(c.pos)];
      if (!alive[size_t(c.pos)] || right < 0 || ids[size_t(c.pos)] != c.left || ids[size_t(right)] != c.right) continue;
      ids[size_t(c.pos)] = c.merged;
      alive[size_t(right)] = false;
      next[size_t(c.pos)] = next[size_t(right)];
      if (next[size_t(right)] >= 0) prev[size_t(next[size_t(right)])] = c.pos;
      consider(prev[size_t(c.pos)]);
      consider(c.pos);
    }
    std::vector<int32_t> out;
    for (int64_t i = n > 0 ? 0 : -1; i >= 0; i = next[size_t(i)]) out.push_back(ids[size_t(i)]);
    return out;
  }

  void encode_word(const std::string& word, std::vector<int32_t>& out) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      const auto it = cache.find(word);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (word.size() > kMaxCachedWordBytes) return;
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.size() >= kMaxCachedWords) cache.clear();
    cache.emplace(word, std::move(ids));
  }

  // A stretch of raw text between tokens with "normalized": false.
  void encode_stretch(std::string_view raw, bool first, std::vector<int32_t>& out) {
    const std::string text = normalize(std::string(raw));
    size_t at = 0;
    const auto words = [&](size_t end) {
      if (end > at)
        for (const std::string& w : pre_tokenize(text.substr(at, end - at), first && at == 0)) encode_word(w, out);
    };
    for (const TokenMatcher::Hit& h : normalized_tokens.find(text)) {
      words(h.begin);
      out.push_back(h.id);
      at = h.end;
    }
    words(text.size());
  }

  std::string decode(const std::vector<std::string>& pieces) const {
    std::vector<std::string> t = pieces;
    for (const Decoder& d : decoders) {
      switch (d.kind) {
        case Decoder::Kind::byte_level: {
          std::string bytes;
          for (const std::string& piece : t) {
            std::string mapped;
            bool all = true;
            for (const CodePoint& cp : decode_utf8(piece)) {
              const auto it = byte_map().byte.find(cp.value);
              if (it == byte_map().byte.end()) {
                all = false;
                break;
              }
              mapped += char(it->second);
            }
            bytes += all ? mapped : piece;
          }
          t = {bytes};
          break;
        }
        case Decoder::Kind::metaspace:
          for (size_t i = 0; i < t.size(); ++i)
            replace_all(t[i], d.from, i == 0 && d.prepend != PrependScheme::never ? "" : " ");
          break;
        case Decoder::Kind::replace:
          for (std::string& piece : t) replace_all(piece, d.from, d.to);
          break;
        case Decoder::Kind::byte_fallback: {
          std::vector<std::string> next;
          std::string bytes;
          bool in_bytes = false;
          for (std::string& piece : t) {
            const bool byte = piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' &&
                              std::isxdigit(uint8_t(piece[3])) && std::isxdigit(uint8_t(piece[4]));
            if (byte) {
              bytes += char(std::stoi(piece.substr(3, 2), nullptr, 16));
              in_bytes = true;
              continue;
            }
            if (in_bytes) next.push_back(std::move(bytes)), bytes.clear(), in_bytes = false;
            next.push_back(std::move(piece));
          }
          if (in_bytes) next.push_back(std::move(bytes));
          t = std::move(next);
          break;
        }
        case Decoder::Kind::fuse: {
          std::string all;
          for (const std::string& piece : t) all += piece;
          t = {all};
          break;
        }
        case Decoder::Kind::strip:
          for (std::string& piece : t) {
            const size_t w = d.content.size();
            for (int64_t k = 0; k < d.start && piece.compare(0, w, d.content) == 0; ++k) piece.erase(0, w);
            for (int64_t k = 0; k < d.stop && piece.size() >= w && piece.compare(piece.size() - w, w, d.content) == 0;
                 ++k)
              piece.erase(piece.size() - w);
          }
          break;
      }
    }
    std::string out;
    for (const std::string& piece : t) out += piece;
    return out;
  }

  // ---- reading tokenizer.json ----

  const json& member(const json& j, const std::string& key, const std::string& what) const {
    if (!j.is_object() || !j.contains(key)) fail(what + " has no \"" + key + "\"");
    return j.at(key);
  }
  std::string string_of(const json& j, const std::string& key, const std::string& what) const {
    const json& v = member(j, key, what);
    if (!v.is_string()) fail(what + "." + key + " must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  bool flag(const json& j, const std::string& key, bool fallback, const std::string& what) const {
    if (!j.contains(key) || j.at(key).is_null()) return fallback;
    if (!j.at(key).is_boolean()) fail(what + "." + key + " must be true or false, got " + j.at(key).dump());
    return j.at(key).get<bool>();
  }
  // A Replace's {"String": s} pattern (a Regex one is not supported).
  std::string string_pattern(const json& j, const std::string& what) const {
    const json& p = member(j, "pattern", what);
    if (!p.is_object() || !p.contains("String") || !p.at("String").is_string())
      fail(what + ".pattern must be {\"String\": ...} (a Regex pattern is not supported), got " + p.dump());
    return p.at("String").get<std::string>();
  }
  const json& list(const json& j, const std::string& key, const std::string& what) const {
    const json& v = member(j, key, what);
    if (!v.is_array()) fail(what + "." + key + " must be a list");
    return v;
  }
  PrependScheme prepend_scheme(const json& j, const std::string& what) const {
    if (!j.contains("prepend_scheme"))
      return flag(j, "add_prefix_space", true, what) ? PrependScheme::always : PrependScheme::never;
    const std::string s = string_of(j, "prepend_scheme", what);
    if (s == "always") return PrependScheme::always;
    if (s == "first") return PrependScheme::first;
    if (s == "never") return PrependScheme::never;
    fail(what + ".prepend_scheme must be always, first or never, got \"" + s + "\"");
  }
  std::string type_of(const json& j, const std::string& what) const {
    if (!j.is_object()) fail(what + " must be an object or null, got " + j.dump());
    return string_of(j, "type", what);
  }

  void read_normalizer(const json& j, const std::string& what) {
    if (j.is_null()) return;
    const std::string type = type_of(j, what);
    if (type == "Sequence") {
      const json& items = list(j, "normalizers", what);
      for (size_t i = 0; i < items.size(); ++i)
        read_normalizer(items[i], what + ".normalizers[" + std::to_string(i) + "]");
    } else if (type == "Prepend") {
      normalizers.push_back({Normalizer::Kind::prepend, "", string_of(j, "prepend", what)});
    } else if (type == "Replace") {
      normalizers.push_back({Normalizer::Kind::replace, string_pattern(j, what), string_of(j, "content", what)});
    } else {
      fail(what + " type \"" + type + "\" is not supported (triad reads Sequence, Prepend, Replace)");
    }
  }

  void read_pre_tokenizer(const json& j, const std::string& what) {
    if (j.is_null()) return;
    const std::string type = type_of(j, what);
    PreTokenizer p{};
    if (type == "Sequence") {
      const json& items = list(j, "pretokenizers", what);
      for (size_t i = 0; i < items.size(); ++i)
        read_pre_tokenizer(items[i], what + ".pretokenizers[" + std::to_string(i) + "]");
      return;
    } else if (type == "ByteLevel") {
      p.kind = PreTokenizer::Kind::byte_level;
      p.add_prefix_space = flag(j, "add_prefix_space", false, what);
      p.use_regex = flag(j, "use_regex", true, what);
    } else if (type == "Split") {
      p.kind = PreTokenizer::Kind::split;
      const json& pattern = member(j, "pattern", what);
      const std::string regex = pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()
                                    ? pattern["Regex"].get<std::string>()
                                    : "";
      const std::optional<SplitPattern> known = split_pattern_from_regex(regex);
      if (!known)
        fail(what + ".pattern " + pattern.dump() +
             " is not supported: triad matches GPT-2's and Llama-3's split regexes");
      p.pattern = *known;
      const std::string behavior = string_of(j, "behavior", what);
      if (behavior != "Isolated" || flag(j, "invert", false, what))
        fail(what + " must have behavior Isolated and invert false, got " + behavior);
    } else if (type == "Metaspace") {
      p.kind = PreTokenizer::Kind::metaspace;
      p.replacement = string_of(j, "replacement", what);
      p.prepend = prepend_scheme(j, what);
      p.split = flag(j, "split", true, what);
    } else {
      fail(what + " type \"" + type + "\" is not supported (triad reads Sequence, ByteLevel, Split, Metaspace)");
    }
    pre_tokenizers.push_back(std::move(p));
  }

  void read_decoder(const json& j, const std::string& what) {
    if (j.is_null()) fail(what + " is null: triad needs a decoder (ByteLevel, Metaspace, or a Sequence)");
    const std::string type = type_of(j, what);
    Decoder d{};
    if (type == "Sequence") {
      const json& items = list(j, "decoders", what);
      for (size_t i = 0; i < items.size(); ++i) read_decoder(items[i], what + ".decoders[" + std::to_string(i) + "]");
      return;
    } else if (type == "ByteLevel") {
      d.kind = Decoder::Kind::byte_level;
    } else if (type == "Metaspace") {
      d.kind = Decoder::Kind::metaspace;
      d.from = string_of(j, "replacement", what);
      d.prepend = prepend_scheme(j, what);
    } else if (type == "Replace") {
      d.kind = Decoder::Kind::replace;
      d.from = string_pattern(j, what);
      d.to = string_of(j, "content", what);
    } else if (type == "ByteFallback") {
      d.kind = Decoder::Kind::byte_fallback;
    } else if (type == "Fuse") {
      d.kind = Decoder::Kind::fuse;
    } else if (type == "Strip") {
      d.kind = Decoder::Kind::strip;
      d.content = string_of(j, "content", what);
      const json& start = member(j, "start", what);
      const json& stop = member(j, "stop", what);
      if (!start.is_number_unsigned() || !stop.is_number_unsigned())
        fail(what + ".start and .stop must be integers >= 0");
      d.start = start.get<int64_t>();
      d.stop = stop.get<int64_t>();
    } else {
      fail(what + " type \"" + type +
           "\" is not supported (triad reads Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip)");
    }
    decoders.push_back(std::move(d));
  }

  void read_post_processor(const json& j, const std::string& what) {
    if (j.is_null()) return;
    const std::string type = type_of(j, what);
    if (type == "Sequence") {
      const json& items = list(j, "processors", what);
      for (size_t i = 0; i < items.size(); ++i)
        read_post_processor(items[i], what + ".processors[" + std::to_string(i) + "]");
    } else if (type == "TemplateProcessing") {
      const json& special = member(j, "special_tokens", what);
      for (const json& item : list(j, "single", what)) {
        if (item.contains("Sequence")) break;
        const std::string name = string_of(member(item, "SpecialToken", what + ".single"), "id", what + ".single");
        const json& ids =
            list(member(special, name, what + ".special_tokens"), "ids", what + ".special_tokens." + name);
        for (const json& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= int64_t(tokens.size()) ||
              !known[size_t(id.get<int64_t>())])
            fail(what + ".special_tokens." + name + " has id " + id.dump() + ", which is not a token");
          prefix.push_back(id.get<int32_t>());
        }
      }
    } else if (type != "ByteLevel") {
      fail(what + " type \"" + type + "\" is not supported (triad reads Sequence, ByteLevel, TemplateProcessing)");
    }
  }

  void set_token(int32_t id, const std::string& text) {
    if (size_t(id) >= tokens.size()) {
      tokens.resize(size_t(id) + 1);
      known.resize(size_t(id) + 1, false);
    }
    tokens[size_t(id)] = text;
    known[size_t(id)] = true;
  }

  void read_model(const json& m) {
    if (!m.is_object()) fail("\"model\" must be an object");
    const std::string type = m.contains("type") ? string_of(m, "type", "model") : "BPE";
    if (type != "BPE")
      fail("model type \"" + type +
           "\" is not supported: triad reads BPE models (byte-level as GPT-2 and Llama-3, SentencePiece-style as "
           "Llama-2)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && !m[key].is_null() && !(m[key].is_string() && m[key].get<std::string>().empty()))
        fail(std::string("model.") + key + " " + m[key].dump() + " is not supported (triad reads null)");
    if (m.contains("dropout") && !m["dropout"].is_null())
      fail("model.dropout " + m["dropout"].dump() + " is not supported (it randomizes encoding; triad reads null)");
    byte_fallback = flag(m, "byte_fallback", false, "model");
    fuse_unk = flag(m, "fuse_unk", false, "model");
    ignore_merges = flag(m, "ignore_merges", false, "model");

    const json& v = member(m, "vocab", "model");
    if (!v.is_object()) fail("model.vocab must be an object of token: id");
    for (const auto& [text, id] : v.items()) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(kMaxId))
        fail("model.vocab[\"" + text + "\"] must be an id in [0, " + std::to_string(kMaxId) + "), got " + id.dump());
      const auto i = id.get<int32_t>();
      if (size_t(i) < known.size() && known[size_t(i)])
        fail("model.vocab gives id " + std::to_string(i) + " to both \"" + tokens[size_t(i)] + "\" and \"" + text +
             "\"");
      vocab.emplace(text, i);
      set_token(i, text);
    }
    byte_tokens.fill(-1);
    if (byte_fallback) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        const auto it = vocab.find(name);
        if (it != vocab.end()) byte_tokens[size_t(b)] = it->second;
      }
    }
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      const std::string u = string_of(m, "unk_token", "model");
      const auto it = vocab.find(u);
      if (it == vocab.end()) fail("model.unk_token \"" + u + "\" is not in model.vocab");
      unk = it->second;
    }

    if (!m.contains("merges") || m["merges"].is_null())
      fail("model.merges is missing: a BPE model needs its list of merges");
    const json& list = m["merges"];
    if (!list.is_array()) fail("model.merges must be a list of \"left right\" strings or [left, right] pairs");
    merges.reserve(list.size());
    for (size_t r = 0; r < list.size(); ++r) {
      const json& item = list[r];
      std::string a, b;
      if (item.is_string()) {
        const std::string s = item.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          fail("model.merges[" + std::to_string(r) + "] \"" + s + "\" is not two tokens separated by one space");
        a = s.substr(0, space), b = s.substr(space + 1);
      } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
        a = item[0].get<std::string>(), b = item[1].get<std::string>();
      } else {
        fail("model.merges[" + std::to_string(r) + "] " + item.dump() + " is not a pair of tokens");
      }
      const auto ia = vocab.find(a), ib = vocab.find(b), iz = vocab.find(a + b);
      for (const auto& [it, t] : {std::pair{ia, a}, std::pair{ib, b}, std::pair{iz, a + b}})
        if (it == vocab.end())
          fail("model.merges[" + std::to_string(r) + "] (\"" + a + "\", \"" + b + "\"): \"" + t +
               "\" is not in model.vocab");
      merges.try_emplace(merge_pair_key(ia->second, ib->second), int32_t(r), iz->second);
    }
  }

  void read_added_tokens(const json& list) {
    if (list.is_null()) return;
    if (!list.is_array()) fail("added_tokens must be a list");
    std::unordered_map<std::string, int32_t> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string what = "added_tokens[" + std::to_string(i) + "]";
      const json& t = list[i];
      const std::string content = string_of(t, "content", what);
      const json& id = member(t, "id", what);
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(kMaxId))
        fail(what + " (\"" + content + "\") must have an id in [0, " + std::to_string(kMaxId) + "), got " + id.dump());
      const auto n = id.get<int32_t>();
      const std::string name = "added token \"" + content + "\" (id " + std::to_string(n) + ")";
      if (content.empty()) fail(what + " has an empty content");
      const auto in_vocab = vocab.find(content);
      if (in_vocab != vocab.end() && in_vocab->second != n)
        fail(name + " collides with model.vocab, where \"" + content + "\" is id " + std::to_string(in_vocab->second));
      if (in_vocab == vocab.end() && size_t(n) < known.size() && known[size_t(n)])
        fail(name + " collides with \"" + tokens[size_t(n)] + "\", which has id " + std::to_string(n) +
             (vocab.count(tokens[size_t(n)]) ? " in model.vocab" : " among the added tokens"));
      if (const auto it = seen.find(content); it != seen.end())
        fail(name + " collides with the added token of the same content, id " + std::to_string(it->second));
      seen.emplace(content, n);
      set_token(n, content);
      added.push_back({content, content, n, flag(t, "normalized", false, what), flag(t, "lstrip", false, what),
                       flag(t, "rstrip", false, what), flag(t, "single_word", false, what),
                       flag(t, "special", false, what)});
    }
  }

  int32_t find_token(const std::string& text) const {
    for (const AddedToken& t : added)
      if (t.content == text) return t.id;
    const auto it = vocab.find(text);
    return it == vocab.end() ? -1 : it->second;
  }

  void read_eot(const std::string& config_path) {
    if (fs::exists(config_path)) {
      std::ifstream in(config_path, std::ios::binary);
      const json c = json::parse(in, nullptr, false);
      if (c.is_discarded() || !c.is_object()) throw Error("'" + config_path + "' is not a JSON object");
      if (c.contains("eos_token") && !c["eos_token"].is_null()) {
        const json& e = c["eos_token"];
        const std::string name = e.is_string() ? e.get<std::string>()
                                 : e.is_object() && e.contains("content") && e["content"].is_string()
                                     ? e["content"].get<std::string>()
                                     : "";
        if (name.empty()) throw Error("'" + config_path + "': eos_token must be a token's text, got " + e.dump());
        eot = find_token(name);
        if (eot < 0) throw Error("'" + config_path + "': eos_token \"" + name + "\" is not a token of '" + where + "'");
        return;
      }
    }
    for (const char* name : kEndOfTextNames)  // a special token first, then any
      for (const AddedToken& t : added)
        if (t.special && t.content == name) {
          eot = t.id;
          return;
        }
    for (const char* name : kEndOfTextNames)
      if ((eot = find_token(name)) >= 0) return;
    fail(
        "no end-of-text token: it has none of <|endoftext|>, </s>, <|end_of_text|>, and no tokenizer_config.json "
        "with an eos_token is beside it");
  }
};

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->where = path;
  std::ifstream in(path, std::ios::binary);
  TRIAD_CHECK(in.good(), "cannot open tokenizer file '" << path << "': " << std::strerror(errno));
  const json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) impl->fail("not valid JSON");
  if (!j.is_object()) impl->fail("not a JSON object");
  impl->read_model(impl->member(j, "model", "the file"));
  impl->read_added_tokens(j.value("added_tokens", json()));
  impl->read_normalizer(j.value("normalizer", json()), "normalizer");
  impl->read_pre_tokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer");
  impl->read_post_processor(j.value("post_processor", json()), "post_processor");
  impl->read_decoder(j.value("decoder", json()), "decoder");
  for (AddedToken& t : impl->added) {
    if (t.normalized && !impl->normalizers.empty()) t.match = impl->normalize(t.content);
    (t.normalized ? impl->normalized_tokens : impl->raw_tokens).add(&t);
  }
  impl->read_eot((fs::path(path).parent_path() / "tokenizer_config.json").string());
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(impl)));
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t at = 0;
  for (const TokenMatcher::Hit& h : impl_->raw_tokens.find(text)) {
    if (h.begin > at) impl_->encode_stretch(text.substr(at, h.begin - at), at == 0, out);
    out.push_back(h.id);
    at = h.end;
  }
  if (text.size() > at) impl_->encode_stretch(text.substr(at), at == 0, out);
  return out;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) {
    TRIAD_CHECK(id >= 0 && id < vocab_size() && impl_->known[size_t(id)],
                "decode: token id " << id << " is not in the vocabulary of '" << impl_->where << "'");
    pieces.push_back(impl_->tokens[size_t(id)]);
  }
  return impl_->decode(pieces);
}

int HfTokenizer::vocab_size() const { return int(impl_->tokens.size()); }
int32_t HfTokenizer::eot() const { return impl_->eot; }
std::vector<int32_t> HfTokenizer::prefix() const { return impl_->prefix; }
int32_t HfTokenizer::token_id(const std::string& token) const { return impl_->find_token(token); }

}  // namespace triad::io
