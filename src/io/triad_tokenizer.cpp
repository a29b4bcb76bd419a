// triad's byte-level BPE: pre-tokenization, incremental training, cached encoding, JSON files.
//
// Training works on the unique chunks of the text with their counts. Pair counts are kept
// in a hash map and updated incrementally: merging (a, b) revisits only the chunks that
// contain it (an index pair -> chunks, appended to as new pairs appear), and the best pair
// comes from a max-heap with lazy deletion (an entry is live while its count equals the
// current count of its pair).
#include "io/triad_tokenizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "io/atomic_file.h"
#include "io/bpe_merges.h"
#include "tensor/error.h"

namespace triad::io {

namespace {

constexpr const char* kFormat = "triad-bpe";
constexpr int kFormatVersion = 1;
constexpr const char* kPretokenizer = "gpt2-bytes-128";  // Note [Pre-tokenization], kMaxChunkBytes = 128

enum class ByteClass : uint8_t { space, letter, digit, other };

ByteClass byte_class(unsigned char c) {
  if (c == ' ' || (c >= '\t' && c <= '\r')) return ByteClass::space;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return ByteClass::letter;
  if (c >= '0' && c <= '9') return ByteClass::digit;
  return ByteClass::other;
}

// Length of an English contraction ('s 't 're 've 'm 'll 'd) at the start of `s`, or 0.
size_t contraction_length(std::string_view s) {
  if (s.size() < 2 || s[0] != '\'') return 0;
  const char c = s[1];
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (s.size() >= 3 && ((c == 'r' && s[2] == 'e') || (c == 'v' && s[2] == 'e') || (c == 'l' && s[2] == 'l'))) return 3;
  return 0;
}

// Length of the chunk that starts `s` (non-empty).
size_t chunk_length(std::string_view s) {
  const size_t n = s.size();
  size_t len = contraction_length(s);
  if (len == 0) {
    size_t j = (s[0] == ' ' && n > 1 && byte_class(s[1]) != ByteClass::space) ? 1 : 0;
    const ByteClass c = byte_class(s[j]);
    if (c != ByteClass::space) {
      while (j < n && byte_class(s[j]) == c) ++j;
      len = j;
    } else {
      size_t k = 0;
      while (k < n && byte_class(s[k]) == ByteClass::space) ++k;
      // A run followed by a word leaves its last character to that word (or to itself).
      len = (k == n || k == 1) ? k : k - 1;
    }
  }
  return std::min(len, TriadTokenizer::kMaxChunkBytes);
}

template <class F>
void for_each_chunk(std::string_view text, F&& f) {
  while (!text.empty()) {
    const size_t len = chunk_length(text);
    f(text.substr(0, len));
    text.remove_prefix(len);
  }
}

// Merges every occurrence of (a, b) in `ids`, left to right, into z. Returns whether any was.
bool merge_pair(std::vector<int32_t>& ids, int32_t a, int32_t b, int32_t z) {
  size_t out = 0;
  bool merged = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
      ids[out++] = z;
      ++i;
      merged = true;
    } else {
      ids[out++] = ids[i];
    }
  }
  ids.resize(out);
  return merged;
}

[[noreturn]] void fail_tokenizer_file(const std::string& path, const std::string& what) {
  throw Error("tokenizer file '" + path + "': " + what);
}

void check_vocab_size(int vocab_size) {
  TRIAD_CHECK(vocab_size >= TriadTokenizer::kMinVocabSize && vocab_size <= TriadTokenizer::kMaxVocabSize,
              "TriadTokenizer::train: vocab_size must be in ["
                  << TriadTokenizer::kMinVocabSize << ", " << TriadTokenizer::kMaxVocabSize << "], got " << vocab_size);
}

}  // namespace

struct TriadTokenizer::State {
  std::unordered_map<uint64_t, int32_t> ranks;  // merge_pair_key(left, right) -> merged id
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> cache;  // chunk -> ids
};

std::vector<std::string_view> TriadTokenizer::pretokenize(std::string_view text) {
  std::vector<std::string_view> chunks;
  for_each_chunk(text, [&](std::string_view c) { chunks.push_back(c); });
  return chunks;
}

TriadTokenizer::TriadTokenizer(std::vector<std::pair<int32_t, int32_t>> merges)
    : merges_(std::move(merges)), state_(std::make_shared<State>()) {
  pieces_.reserve(256 + merges_.size());
  for (int i = 0; i < 256; ++i) pieces_.emplace_back(1, char(i));
  state_->ranks.reserve(merges_.size());
  for (const auto& [a, b] : merges_) {
    const auto z = int32_t(pieces_.size());
    TRIAD_ASSERT(a >= 0 && a < z && b >= 0 && b < z);
    pieces_.push_back(pieces_[size_t(a)] + pieces_[size_t(b)]);
    state_->ranks.emplace(merge_pair_key(a, b), z);
  }
}

TriadTokenizer TriadTokenizer::train(std::string_view text, int vocab_size,
                                     const std::function<void(int, int)>& progress) {
  return train(std::vector<std::string_view>{text}, vocab_size, progress);
}

TriadTokenizer TriadTokenizer::train(const std::vector<std::string_view>& documents, int vocab_size,
                                     const std::function<void(int, int)>& progress) {
  check_vocab_size(vocab_size);
  const int total = vocab_size - kMinVocabSize;

  // The unique chunks ("words") and how often each occurs.
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  {
    std::unordered_map<std::string_view, int32_t> index;
    for (std::string_view doc : documents) {
      for_each_chunk(doc, [&](std::string_view c) {
        auto [it, inserted] = index.try_emplace(c, int32_t(words.size()));
        if (inserted) {
          words.emplace_back(c.begin(), c.end());
          for (auto& id : words.back()) id = int32_t(uint8_t(id));
          freq.push_back(0);
        }
        ++freq[size_t(it->second)];
      });
    }
  }

  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;  // pair -> words that may hold it
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& ids = words[w];
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const uint64_t k = merge_pair_key(ids[i], ids[i + 1]);
      counts[k] += freq[w];
      auto& list = where[k];
      if (list.empty() || list.back() != int32_t(w)) list.push_back(int32_t(w));
    }
  }

  // Highest count first; ties to the smallest (left, right), i.e. the smallest key.
  struct Entry {
    int64_t count;
    uint64_t key;
    bool operator<(const Entry& o) const { return count < o.count || (count == o.count && key > o.key); }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [k, c] : counts) heap.push({c, k});

  std::vector<std::pair<int32_t, int32_t>> merges;
  merges.reserve(size_t(total));
  std::vector<int32_t> seen(words.size(), -1);
  std::unordered_map<uint64_t, int64_t> delta;
  while (int(merges.size()) < total) {
    while (!heap.empty()) {
      const auto it = counts.find(heap.top().key);
      if (it != counts.end() && it->second == heap.top().count) break;
      heap.pop();
    }
    if (heap.empty()) break;  // every chunk is a single token: nothing left to merge
    const uint64_t best = heap.top().key;
    heap.pop();
    const auto a = int32_t(best >> 32), b = int32_t(best & 0xffffffffu);
    const auto z = int32_t(256 + merges.size());
    const auto step = int32_t(merges.size());
    merges.emplace_back(a, b);

    std::vector<int32_t> affected = std::move(where[best]);
    where.erase(best);
    delta.clear();
    for (const int32_t w : affected) {
      if (seen[size_t(w)] == step) continue;
      seen[size_t(w)] = step;
      auto& ids = words[size_t(w)];
      const int64_t f = freq[size_t(w)];
      for (size_t i = 0; i + 1 < ids.size(); ++i) delta[merge_pair_key(ids[i], ids[i + 1])] -= f;
      merge_pair(ids, a, b, z);
      for (size_t i = 0; i + 1 < ids.size(); ++i) {
        const uint64_t k = merge_pair_key(ids[i], ids[i + 1]);
        delta[k] += f;
        if (ids[i] == z || ids[i + 1] == z) {
          auto& list = where[k];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      auto it = counts.find(k);
      const int64_t c = (it == counts.end() ? 0 : it->second) + d;
      TRIAD_ASSERT(c >= 0);
      if (c == 0) {
        if (it != counts.end()) counts.erase(it);
      } else {
        if (it == counts.end())
          counts.emplace(k, c);
        else
          it->second = c;
        heap.push({c, k});
      }
    }
    if (progress) progress(int(merges.size()), total);
  }
  return TriadTokenizer(std::move(merges));
}

std::vector<int32_t> TriadTokenizer::encode_chunk(std::string_view chunk) const {
  std::vector<int32_t> ids(chunk.begin(), chunk.end());
  for (auto& id : ids) id = int32_t(uint8_t(id));
  const auto& ranks = state_->ranks;
  while (ids.size() >= 2) {
    int32_t best = INT32_MAX, a = 0, b = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = ranks.find(merge_pair_key(ids[i], ids[i + 1]));
      if (it != ranks.end() && it->second < best) {
        best = it->second;
        a = ids[i];
        b = ids[i + 1];
      }
    }
    if (best == INT32_MAX) break;
    merge_pair(ids, a, b, best);
  }
  return ids;
}

std::vector<int32_t> TriadTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::string key;
  for_each_chunk(text, [&](std::string_view chunk) {
    key.assign(chunk);
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      const auto it = state_->cache.find(key);
      if (it != state_->cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = encode_chunk(chunk);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->cache.size() >= kMaxCachedWords) state_->cache.clear();
    state_->cache.emplace(key, std::move(ids));
  });
  return out;
}

const std::string& TriadTokenizer::token_bytes(int32_t id) const {
  static const std::string eot_text(kEndOfText);
  TRIAD_CHECK(id >= 0 && id < vocab_size(),
              "TriadTokenizer::decode: token id " << id << " is outside the vocabulary [0, " << vocab_size() << ")");
  return id == eot() ? eot_text : pieces_[size_t(id)];
}

std::string TriadTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) out += token_bytes(id);
  return out;
}

void TriadTokenizer::save(const std::string& path) const {
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : merges_) merges.push_back({a, b});
  const nlohmann::json j = {
      {"format", kFormat}, {"version", kFormatVersion},        {"vocab_size", vocab_size()}, {"pretokenizer", kPretokenizer},
      {"eot", eot()},      {"merges", std::move(merges)}};
  const std::string text = j.dump() + "\n";
  write_file_atomically(path, {{text.data(), text.size()}}, "tokenizer file");
}

TriadTokenizer TriadTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIAD_CHECK(in.good(), "cannot open tokenizer file '" << path << "': " << std::strerror(errno));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail_tokenizer_file(path, std::string("not valid JSON (") + e.what() + ")");
  }
  const auto bad = [&](const std::string& what) { fail_tokenizer_file(path, what); };
  try {
    if (!j.is_object() || j.value("format", "") != kFormat)
      bad("not a triad tokenizer (expected \"format\": \"triad-bpe\")");
    const int version = j.at("version").get<int>();
    if (version != kFormatVersion) bad("version " + std::to_string(version) + ", expected " + std::to_string(kFormatVersion));
    const std::string pre = j.at("pretokenizer").get<std::string>();
    if (pre != kPretokenizer) bad("pretokenizer \"" + pre + "\", expected \"" + kPretokenizer + "\"");
    const auto& list = j.at("merges");
    if (!list.is_array()) bad("\"merges\" must be an array of [left, right] id pairs");
    std::vector<std::pair<int32_t, int32_t>> merges;
    merges.reserve(list.size());
    for (const auto& m : list) {
      const auto z = int64_t(256 + merges.size());
      if (!m.is_array() || m.size() != 2 || !m[0].is_number_integer() || !m[1].is_number_integer())
        bad("merge " + std::to_string(merges.size()) + " is not a pair of integer ids");
      const auto a = m[0].get<int64_t>(), b = m[1].get<int64_t>();
      if (a < 0 || a >= z || b < 0 || b >= z)
        bad("merge " + std::to_string(merges.size()) + " refers to an id outside [0, " + std::to_string(z) + ")");
      merges.emplace_back(int32_t(a), int32_t(b));
    }
    const int vocab_size = j.at("vocab_size").get<int>();
    const int expected = int(256 + merges.size() + 1);
    if (vocab_size != expected)
      bad("vocab_size " + std::to_string(vocab_size) + " disagrees with " + std::to_string(merges.size()) +
          " merges (expected " + std::to_string(expected) + ")");
    if (vocab_size > kMaxVocabSize) bad("vocab_size " + std::to_string(vocab_size) + " is too large");
    if (j.at("eot").get<int>() != vocab_size - 1) bad("eot must be the last id, " + std::to_string(vocab_size - 1));
    return TriadTokenizer(std::move(merges));
  } catch (const nlohmann::json::exception& e) {
    fail_tokenizer_file(path, std::string("malformed (") + e.what() + ")");
  }
}

}  // namespace triad::io
