// Fortune preference pairs (rlhf/fortune_pairs.h): determinism under a seed, and the shape
// of every row (prompt words, the real ending, a corrupted ending of the same length drawn
// from the ending's words and other fortunes' words).
#include <boost/test/unit_test.hpp>
#include <map>
#include <set>
#include <sstream>

#include "rlhf/fortune_pairs.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_fortune_pairs)

using namespace triad;
using namespace triad::rlhf;

namespace {

const std::vector<std::string> kFortunes = {
    "The early bird gets the worm,\n  but the second mouse gets the cheese.",
    "Never put off till tomorrow what you can do the day after tomorrow.",
    "Too short to use.",
    " ___\n|___|  |  |\n|   |  |__|  +--+ 1234 5678",
    "A closed mouth gathers no foot, and a quiet\tmind gathers no regret at all.",
    "Whenever you find yourself on the side of the majority, it is time to pause and reflect.",
};

std::vector<std::string_view> views() { return {kFortunes.begin(), kFortunes.end()}; }

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

}  // namespace

BOOST_AUTO_TEST_CASE(rows_are_deterministic_under_a_seed) {
  const std::vector<PreferenceRow> a = make_fortune_pairs(views(), {}), b = make_fortune_pairs(views(), {});
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST(a[i].prompt == b[i].prompt);
    BOOST_TEST(a[i].chosen == b[i].chosen);
    BOOST_TEST(a[i].rejected == b[i].rejected);
  }
  FortunePairOptions other;
  other.seed = 99;
  const std::vector<PreferenceRow> c = make_fortune_pairs(views(), other);
  bool any_differs = false;
  for (size_t i = 0; i < std::min(a.size(), c.size()); ++i) any_differs |= a[i].rejected != c[i].rejected;
  BOOST_TEST(any_differs);
}

BOOST_AUTO_TEST_CASE(rows_keep_the_real_ending_and_garble_a_copy_of_it) {
  const std::vector<PreferenceRow> rows = make_fortune_pairs(views(), {});
  // The short fortune and the ASCII art are not eligible; the other four are.
  BOOST_REQUIRE_EQUAL(rows.size(), 4u);
  std::multiset<std::string> every_word;
  for (const std::string& f : kFortunes)
    for (const std::string& w : words(f)) every_word.insert(w);
  const std::vector<size_t> source = {0, 1, 4, 5};
  for (size_t i = 0; i < rows.size(); ++i) {
    const PreferenceRow& r = rows[i];
    const std::vector<std::string> fortune = words(kFortunes[source[i]]);
    BOOST_TEST(words(r.prompt) == std::vector<std::string>(fortune.begin(), fortune.begin() + 4),
               boost::test_tools::per_element());
    BOOST_TEST(r.chosen[0] == ' ');
    BOOST_TEST(r.rejected[0] == ' ');
    BOOST_TEST(words(r.prompt + r.chosen) == fortune, boost::test_tools::per_element());
    const std::vector<std::string> chosen = words(r.chosen), rejected = words(r.rejected);
    BOOST_TEST(rejected.size() == chosen.size());
    BOOST_TEST(r.rejected != r.chosen);
    // Every rejected word is one of the ending's or comes from another fortune.
    std::map<std::string, int> own;
    for (const std::string& w : chosen) ++own[w];
    int kept = 0;
    for (const std::string& w : rejected) {
      BOOST_TEST(every_word.count(w) > 0, "word '" << w << "' is from no fortune");
      if (own[w] > 0) --own[w], ++kept;
    }
    BOOST_TEST(kept >= 1);  // about two thirds of the words stay
  }
}

BOOST_AUTO_TEST_CASE(bad_options_and_no_eligible_fortune_are_errors) {
  FortunePairOptions o;
  o.prompt_words = 0;
  test::check_error([&] { make_fortune_pairs(views(), o); }, {"prompt_words must be >= 1, got 0"});
  test::check_error(
      [] {
        make_fortune_pairs({"one two three", "four"}, {});
      },
      {"none of the 2 fortunes has 8 to 40 words of prose"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_fortune_pairs
