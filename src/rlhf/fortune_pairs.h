// A default preference dataset made from the fortunes corpus (/usr/share/games/fortunes,
// the demo corpus; scripts/setup-deps.sh installs it): a reward model learns to prefer a
// fortune's real ending over a garbled one, which a small model can learn quickly.
//
// Note [Fortune pairs]: every fortune (one document of io::read_corpus with separator "%")
// is cut into words at whitespace and its words joined by single spaces. A fortune of
// prompt_words + min_answer_words to max_words words, of which at least 60% of the
// non-space characters are letters (prose, not ASCII art), gives one row, in corpus order:
//   prompt   = its first prompt_words words
//   chosen   = " " + the rest of its words (the real ending)
//   rejected = " " + the same rest corrupted: its words shuffled, then every word at a
//              position drawn with probability 1/3 replaced by a word of another eligible
//              fortune (also drawn)
// Rows whose rejected text comes out equal to the chosen one are left out. All draws are
// random_bits(seed, counter) with counters derived from the fortune's position, so the
// rows are a pure function of (documents, options).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "rlhf/preference_data.h"

namespace triad::rlhf {

struct FortunePairOptions {
  int64_t prompt_words = 4;
  int64_t min_answer_words = 4;
  int64_t max_words = 40;
  uint64_t seed = 1234;
  void validate() const;  // Error naming the bad option
};

// The rows of Note [Fortune pairs]; Error when no fortune is eligible.
std::vector<PreferenceRow> make_fortune_pairs(const std::vector<std::string_view>& fortunes,
                                              const FortunePairOptions& options = {});

}  // namespace triad::rlhf
