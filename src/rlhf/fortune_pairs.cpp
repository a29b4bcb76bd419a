#include "rlhf/fortune_pairs.h"

#include <cctype>

#include "tensor/error.h"
#include "tensor/random.h"

namespace triad::rlhf {

namespace {

std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) words.emplace_back(text.substr(start, i - start));
  }
  return words;
}

bool is_prose(const std::vector<std::string>& words) {
  size_t letters = 0, chars = 0;
  for (const std::string& w : words)
    for (const char c : w) {
      ++chars;
      letters += std::isalpha(static_cast<unsigned char>(c)) != 0;
    }
  return chars > 0 && double(letters) >= 0.6 * double(chars);
}

// The words joined by single spaces, each (the first too) led by a space when `lead`.
std::string join(std::vector<std::string>::const_iterator begin, std::vector<std::string>::const_iterator end,
                 bool lead) {
  std::string out;
  for (auto it = begin; it != end; ++it) {
    if (lead || it != begin) out += ' ';
    out += *it;
  }
  return out;
}

// Draws for fortune i: counters i * kDraws + k, k < kDraws.
constexpr uint64_t kDraws = 1 << 16;
uint64_t below(uint64_t seed, uint64_t counter, uint64_t n) {
  return uint64_t((unsigned __int128)random_bits(seed, counter) * n >> 64);
}

}  // namespace

void FortunePairOptions::validate() const {
  TRIAD_CHECK(prompt_words >= 1, "fortune pairs: prompt_words must be >= 1, got " << prompt_words);
  TRIAD_CHECK(min_answer_words >= 2, "fortune pairs: min_answer_words must be >= 2, got " << min_answer_words);
  TRIAD_CHECK(
      max_words >= prompt_words + min_answer_words && max_words < int64_t(kDraws / 4),
      "fortune pairs: max_words must be in [prompt_words + min_answer_words, " << kDraws / 4 << "), got " << max_words);
}

std::vector<PreferenceRow> make_fortune_pairs(const std::vector<std::string_view>& fortunes,
                                              const FortunePairOptions& options) {
  options.validate();
  std::vector<std::vector<std::string>> eligible;
  for (const std::string_view f : fortunes) {
    std::vector<std::string> w = words_of(f);
    const auto n = int64_t(w.size());
    if (n >= options.prompt_words + options.min_answer_words && n <= options.max_words && is_prose(w))
      eligible.push_back(std::move(w));
  }
  TRIAD_CHECK(!eligible.empty(), "fortune pairs: none of the " << fortunes.size() << " fortunes has "
                                                               << options.prompt_words + options.min_answer_words
                                                               << " to " << options.max_words << " words of prose");
  const uint64_t seed = options.seed;
  std::vector<PreferenceRow> rows;
  for (size_t i = 0; i < eligible.size(); ++i) {
    const std::vector<std::string>& w = eligible[i];
    const auto rest_begin = w.begin() + options.prompt_words;
    std::vector<std::string> rest(rest_begin, w.end()), garbled = rest;
    uint64_t counter = uint64_t(i) * kDraws;
    for (size_t k = garbled.size() - 1; k > 0; --k) std::swap(garbled[k], garbled[below(seed, counter++, k + 1)]);
    if (eligible.size() > 1)
      for (std::string& word : garbled) {
        const bool replace = below(seed, counter++, 3) == 0;
        const uint64_t other = (i + 1 + below(seed, counter++, eligible.size() - 1)) % eligible.size();
        const std::vector<std::string>& donor = eligible[other];
        const std::string& pick = donor[below(seed, counter++, donor.size())];
        if (replace) word = pick;
      }
    const std::string chosen = join(rest.begin(), rest.end(), true);
    const std::string rejected = join(garbled.begin(), garbled.end(), true);
    if (chosen != rejected) rows.push_back({join(w.begin(), rest_begin, false), chosen, rejected});
  }
  return rows;
}

}  // namespace triad::rlhf
