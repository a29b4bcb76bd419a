#include "nn/pipeline_partition.h"

#include <algorithm>
#include <limits>
#include <regex>

#include "tensor/error.h"

namespace triad::nn {

namespace {

std::vector<int> partition_uniform(int items, int parts) {
  std::vector<int> bounds(size_t(parts) + 1);
  const int chunk = items / parts, residual = items - chunk * parts;
  for (int p = 0; p <= parts; ++p) bounds[size_t(p)] = p * chunk + std::min(p, residual);
  return bounds;
}

// Cuts minimising (heaviest − lightest part); among equal spreads the last cut found wins.
std::vector<int> partition_balanced(const std::vector<double>& w, int parts) {
  const int n = int(w.size()), m = parts;
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto at = [m](int i, int j) { return size_t(i) * size_t(m + 1) + size_t(j); };
  std::vector<double> hi(size_t(n + 1) * size_t(m + 1), inf), lo(hi), cost(hi), prefix(size_t(n) + 1, 0.0);
  std::vector<int> cut(hi.size(), 0);
  for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + w[size_t(i)];
  hi[at(0, 0)] = 0, cost[at(0, 0)] = 0;
  for (int i = 1; i <= n; ++i)
    for (int j = 1; j <= std::min(i, m); ++j)
      for (int k = 0; k < i; ++k) {
        const double part = prefix[size_t(i)] - prefix[size_t(k)];
        const double top = std::max(hi[at(k, j - 1)], part), bottom = std::min(lo[at(k, j - 1)], part);
        const double spread = top - bottom;
        if (cost[at(i, j)] >= spread) {
          cost[at(i, j)] = spread, hi[at(i, j)] = top, lo[at(i, j)] = bottom, cut[at(i, j)] = k;
        }
      }
  std::vector<int> bounds(size_t(m) + 1);
  bounds[size_t(m)] = n;
  for (int j = m; j >= 1; --j) bounds[size_t(j) - 1] = cut[at(bounds[size_t(j)], j)];
  return bounds;
}

}  // namespace

std::vector<int> partition_layers(const std::vector<LayerInfo>& layers, int stages, const std::string& method) {
  const int n = int(layers.size());
  TRIAD_CHECK(stages >= 1, "[config] pipeline.stages must be >= 1, got " << stages);
  TRIAD_CHECK(stages <= n, "[config] pipeline.stages x virtual_stages (" << stages << ") exceeds the model's " << n
                                                                        << " layers: every stage needs one");
  if (method == "uniform") return partition_uniform(n, stages);
  std::vector<double> weights;
  if (method == "parameters") {
    for (const LayerInfo& l : layers) weights.push_back(double(l.parameters));
  } else if (method.rfind("type:", 0) == 0) {
    std::regex pattern;
    try {
      pattern = std::regex(method.substr(5), std::regex::icase);
    } catch (const std::regex_error& e) {
      throw Error("[config] pipeline.partition \"" + method + "\": not a valid regular expression (" + e.what() + ")");
    }
    for (const LayerInfo& l : layers) weights.push_back(std::regex_search(l.type, pattern) ? 1.0 : 0.0);
    TRIAD_CHECK(std::find(weights.begin(), weights.end(), 1.0) != weights.end(),
                "[config] pipeline.partition \"" << method << "\" matches none of the model's layer types");
  } else {
    throw Error("[config] pipeline.partition must be \"uniform\", \"parameters\" or \"type:REGEX\", got \"" + method +
                "\"");
  }
  return partition_balanced(weights, stages);
}

}  // namespace triad::nn
