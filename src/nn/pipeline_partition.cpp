#include "nn/pipeline_partition.h"

#include "tensor/error.h"

namespace triad::nn {

std::vector<int> partition_layers(const std::vector<LayerInfo>& layers, int stages, const std::string& method) {
  const int n = int(layers.size());
  TRIAD_CHECK(stages <= n, "[config] pipeline.stages (" << stages << ") exceeds the model's " << n << " layers");
  std::vector<int> b;
  for (int s = 0; s <= stages; ++s) b.push_back(int(int64_t(s) * n / stages));
  (void)method;
  return b;
}

}  // namespace triad::nn
