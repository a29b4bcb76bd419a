// DeepSpeed's partition methods (pipeline_partition.h): uniform counts and the balanced
// linear partition, in doubles as DeepSpeed's numpy programme, so ties break the same way.
#include "nn/pipeline_partition.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <regex>

#include "tensor/error.h"

namespace triad::nn {

namespace {

// bounds[s] = s·⌊n/parts⌋ + min(s, n mod parts).
std::vector<int> partition_uniform(int n, int parts) {
  std::vector<int> bounds(size_t(parts) + 1);
  const int chunk = n / parts, residual = n % parts;
  for (int s = 0; s <= parts; ++s) bounds[size_t(s)] = s * chunk + std::min(s, residual);
  return bounds;
}

// best[i][j]: the cut of the first i weights into j parts kept by the programme, as its
// spread (heaviest − lightest part), heaviest, lightest and last cut. Unreachable states
// hold infinities, as in DeepSpeed (lightest starts at +inf even for zero parts).
std::vector<int> partition_balanced(const std::vector<double>& w, int parts) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const int n = int(w.size());
  struct State {
    double spread = inf, heaviest = inf, lightest = inf;
    int cut = 0;
  };
  std::vector<std::vector<State>> best(size_t(n) + 1, std::vector<State>(size_t(parts) + 1));
  std::vector<double> prefix(size_t(n) + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + w[size_t(i)];
  best[0][0].spread = 0, best[0][0].heaviest = 0;
  for (int i = 1; i <= n; ++i)
    for (int j = 1; j <= std::min(i, parts); ++j)
      for (int k = 0; k < i; ++k) {
        const State& before = best[size_t(k)][size_t(j) - 1];
        const double part = prefix[size_t(i)] - prefix[size_t(k)];
        const double heaviest = std::max(before.heaviest, part), lightest = std::min(before.lightest, part);
        State& s = best[size_t(i)][size_t(j)];
        if (s.spread >= heaviest - lightest) s = {heaviest - lightest, heaviest, lightest, k};
      }
  std::vector<int> bounds(size_t(parts) + 1);
  bounds[size_t(parts)] = n;
  for (int j = parts; j >= 1; --j) bounds[size_t(j) - 1] = best[size_t(bounds[size_t(j)])][size_t(j)].cut;
  return bounds;
}

std::vector<double> type_weights(const std::vector<LayerInfo>& layers, const std::string& method) {
  const std::string pattern = method.substr(5);
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::icase);
  } catch (const std::regex_error& e) {
    throw Error("[config] pipeline.partition \"" + method + "\": \"" + pattern +
                "\" is not a valid regular expression (" + e.what() + ")");
  }
  std::vector<double> weights;
  for (const LayerInfo& l : layers) weights.push_back(std::regex_search(l.type, re) ? 1.0 : 0.0);
  TRIAD_CHECK(std::count(weights.begin(), weights.end(), 1.0) > 0,
              "[config] pipeline.partition \"" << method << "\" matches none of the model's layer types");
  return weights;
}

}  // namespace

std::vector<int> partition_layers(const std::vector<LayerInfo>& layers, int stages, const std::string& method) {
  const int n = int(layers.size());
  std::string lower = method;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  const bool by_type = lower.rfind("type:", 0) == 0;
  TRIAD_CHECK(lower == "uniform" || lower == "parameters" || by_type,
              "[config] pipeline.partition must be \"uniform\", \"parameters\" or \"type:REGEX\", got \"" << method
                                                                                                       << "\"");
  TRIAD_CHECK(stages >= 1, "[config] pipeline.stages must be >= 1, got " << stages);
  TRIAD_CHECK(stages <= n, "[config] pipeline.stages x pipeline.virtual_stages (" << stages << ") exceeds the model's "
                                                                                  << n << " layers: every stage needs "
                                                                                  << "at least one layer");
  std::vector<int> bounds;
  if (lower == "uniform") {
    bounds = partition_uniform(n, stages);
  } else if (lower == "parameters") {
    std::vector<double> weights;
    for (const LayerInfo& l : layers) weights.push_back(double(l.parameters));
    bounds = partition_balanced(weights, stages);
  } else {
    bounds = partition_balanced(type_weights(layers, method), stages);  // the regex as written, not lowered
  }
  for (int s = 0; s < stages; ++s) TRIAD_ASSERT(bounds[size_t(s)] < bounds[size_t(s) + 1]);
  return bounds;
}

}  // namespace triad::nn
