#include "config/json_reader.h"

#include <algorithm>
#include <cmath>

#include "tensor/error.h"

namespace triad::engine {

namespace {

const nlohmann::json& empty_object() {
  static const nlohmann::json e = nlohmann::json::object();
  return e;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string show(const nlohmann::json& v) { return v.dump(); }

std::string range_text(double min, double max) {
  const bool has_min = std::isfinite(min), has_max = std::isfinite(max);
  std::ostringstream os;
  if (has_min && has_max)
    os << "in [" << min << ", " << max << "]";
  else if (has_min)
    os << ">= " << min;
  else if (has_max)
    os << "<= " << max;
  return os.str();
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(3, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

namespace {
thread_local JsonReader::KeyLog* key_log = nullptr;
}  // namespace

JsonReader::KeyLog::KeyLog() : outer_(key_log) { key_log = this; }
JsonReader::KeyLog::~KeyLog() { key_log = outer_; }

void JsonReader::known(const std::string& key) {
  known_.push_back(key);
  if (key_log) key_log->keys_.insert(dotted(key));
}

JsonReader::JsonReader(const nlohmann::json& object, std::string where, std::string path)
    : object_(object.is_null() ? empty_object() : object), where_(std::move(where)), path_(std::move(path)) {
  TRIAD_CHECK(object_.is_object(), "[" << where_ << "] " << (path_.empty() ? std::string("the document") : path_)
                                       << " must be an object, got " << show(object_));
}

void JsonReader::fail(const std::string& key, const std::string& expected) const {
  throw Error("[" + where_ + "] " + dotted(key) + " must be " + expected + ", got " + show(object_.at(key)));
}

bool JsonReader::has(const std::string& key) const { return object_.contains(key); }

const nlohmann::json* JsonReader::get(const std::string& key) {
  known(key);
  auto it = object_.find(key);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

int64_t JsonReader::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  return optional_integer(key, min, max).value_or(fallback);
}

std::optional<int64_t> JsonReader::optional_integer(const std::string& key, int64_t min, int64_t max) {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  const std::string expected = "an integer " + range_text(double(min), max == INT64_MAX ? INFINITY : double(max));
  if (v->is_number_integer() || v->is_number_unsigned()) {
    const int64_t i = v->get<int64_t>();
    if (i < min || i > max) fail(key, expected);
    return i;
  }
  if (v->is_number_float()) {  // 1e6 is an integer to a user
    const double d = v->get<double>();
    if (d != std::floor(d) || d < double(min) || d > double(max)) fail(key, expected);
    return int64_t(d);
  }
  fail(key, expected);
}

double JsonReader::number(const std::string& key, double fallback, double min, double max) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  const std::string expected = "a number " + range_text(min, max);
  if (!v->is_number()) fail(key, expected);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) fail(key, expected);
  return d;
}

bool JsonReader::boolean(const std::string& key, bool fallback) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, "true or false");
  return v->get<bool>();
}

std::string JsonReader::string(const std::string& key, const std::string& fallback) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, "a string");
  return v->get<std::string>();
}

std::string JsonReader::choice(const std::string& key, const std::string& fallback,
                               const std::vector<std::string>& allowed) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i)
    list += (i ? (i + 1 == allowed.size() ? " or " : ", ") : "") + ("\"" + allowed[i] + "\"");
  if (!v->is_string()) fail(key, "one of " + list);
  const std::string s = v->get<std::string>();
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) fail(key, "one of " + list);
  return s;
}

std::vector<double> JsonReader::numbers(const std::string& key, const std::vector<double>& fallback, size_t count,
                                        double min, double max) {
  const nlohmann::json* v = get(key);
  if (!v) return fallback;
  const std::string expected = "a list of " + std::to_string(count) + " numbers " + range_text(min, max);
  if (!v->is_array() || v->size() != count) fail(key, expected);
  std::vector<double> out;
  for (const auto& e : *v) {
    if (!e.is_number() || e.get<double>() < min || e.get<double>() > max) fail(key, expected);
    out.push_back(e.get<double>());
  }
  return out;
}

JsonReader JsonReader::object(const std::string& key) {
  const nlohmann::json* v = get(key);
  if (!v) return JsonReader(empty_object(), where_, dotted(key));
  if (!v->is_object()) fail(key, "an object");
  return JsonReader(*v, where_, dotted(key));
}

void JsonReader::finish() const {
  for (const auto& [key, _] : object_.items()) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    const std::string hint = closest_match(key, known_);
    throw Error("[" + where_ + "] unknown key " + dotted(key) +
                (hint.empty() ? "" : " (did you mean " + dotted(hint) + "?)"));
  }
}

}  // namespace triad::engine
