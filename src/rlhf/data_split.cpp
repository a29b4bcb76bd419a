#include "rlhf/data_split.h"

#include <cmath>
#include <numeric>
#include <sstream>

#include "tensor/error.h"
#include "tensor/random.h"

namespace triad::rlhf {

std::vector<double> parse_data_split(const std::string& data_split) {
  std::vector<double> weights;
  std::stringstream in(data_split);
  std::string part;
  while (std::getline(in, part, ',')) {
    size_t used = 0;
    double w = -1;
    try {
      w = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TRIAD_CHECK(used > 0 && part.find_first_not_of(" ", used) == std::string::npos && w >= 0 && std::isfinite(w),
                "data_split \"" << data_split << "\": \"" << part << "\" is not a non-negative number");
    weights.push_back(w);
  }
  TRIAD_CHECK(
      !weights.empty() && std::accumulate(weights.begin(), weights.end(), 0.0) > 0,
      "data_split \"" << data_split << "\": expected comma-separated weights with a positive sum, e.g. \"2,4,4\"");
  return weights;
}

std::vector<int64_t> split_bounds(int64_t n, const std::vector<double>& weights) {
  TRIAD_CHECK(n >= 0, "data split: the dataset size must be >= 0, got " << n);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> bounds = {0};
  for (const double w : weights) bounds.push_back(bounds.back() + int64_t(std::nearbyint(w / total * double(n))));
  const int64_t excess = bounds.back() - n;
  for (size_t i = 1; i < bounds.size(); ++i) bounds[i] -= excess;
  for (size_t i = 1; i < bounds.size(); ++i)
    TRIAD_CHECK(bounds[i] >= bounds[i - 1], "data split: moving the rounding error of " << n << " rows into split 0 "
                                                                                        << "leaves split " << i - 1
                                                                                        << " a negative size");
  return bounds;
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(size_t(std::max<int64_t>(n, 0)));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  for (int64_t i = n - 1; i > 0; --i) {
    // A uniform j in [0, i]: the high 64 bits of a 64 x 64-bit product.
    const auto j = int64_t((unsigned __int128)random_bits(seed, uint64_t(i)) * uint64_t(i + 1) >> 64);
    std::swap(perm[size_t(i)], perm[size_t(j)]);
  }
  return perm;
}

std::vector<int64_t> data_split_indices(int64_t n, const std::string& data_split, int index, uint64_t seed) {
  const std::vector<double> weights = parse_data_split(data_split);
  TRIAD_CHECK(index >= 0 && size_t(index) < weights.size(),
              "data_split \"" << data_split << "\" has " << weights.size() << " splits, asked for split " << index);
  const std::vector<int64_t> bounds = split_bounds(n, weights);
  const std::vector<int64_t> perm = seeded_permutation(n, seed);
  return {perm.begin() + bounds[size_t(index)], perm.begin() + bounds[size_t(index) + 1]};
}

}  // namespace triad::rlhf
