// Reading a JSON object against what the program knows: each getter names a key, its
// type and its allowed values; finish() then rejects every key nobody asked for, suggesting
// the closest known one. Every message names the full dotted key, the value, and what is
// allowed:  [config] optimizer.params.lr must be a number >= 0, got "fast"
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace triad::engine {

class JsonReader {
 public:
  // `where` prefixes messages ("config"); `path` is this object's dotted key ("" at the top).
  JsonReader(const nlohmann::json& object, std::string where, std::string path = "");

  bool has(const std::string& key) const;
  const nlohmann::json& value(const std::string& key) const { return object_.at(key); }
  int64_t integer(const std::string& key, int64_t fallback, int64_t min, int64_t max);
  std::optional<int64_t> optional_integer(const std::string& key, int64_t min, int64_t max);
  double number(const std::string& key, double fallback, double min, double max);
  bool boolean(const std::string& key, bool fallback);
  std::string string(const std::string& key, const std::string& fallback);
  std::string choice(const std::string& key, const std::string& fallback, const std::vector<std::string>& allowed);
  std::vector<double> numbers(const std::string& key, const std::vector<double>& fallback, size_t count, double min,
                              double max);
  // A nested object (empty when absent).
  JsonReader object(const std::string& key);
  // Marks a key as known without reading it (read elsewhere).
  void known(const std::string& key);
  // Throws for any key of the object that no getter asked for.
  void finish() const;

  std::string dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // Rejects the key's value: "<key> must be <expected>, got <value>".
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;

  // While a KeyLog is alive on a thread, every key any reader on it asks for is added to
  // it as a dotted key (a test compares them with the documented schema).
  class KeyLog {
   public:
    KeyLog();
    ~KeyLog();
    KeyLog(const KeyLog&) = delete;
    KeyLog& operator=(const KeyLog&) = delete;
    const std::set<std::string>& keys() const { return keys_; }

   private:
    friend class JsonReader;
    std::set<std::string> keys_;
    KeyLog* outer_;
  };

 private:
  const nlohmann::json* get(const std::string& key);

  const nlohmann::json& object_;
  std::string where_, path_;
  std::vector<std::string> known_;
};

// The closest of `candidates` to `word` by edit distance, or "" when none is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace triad::engine
