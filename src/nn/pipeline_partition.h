// Cutting a list of layers (nn/layer_list.h) into pipeline stages, by DeepSpeed's
// PipelineModule partition methods:
//   "uniform"     the same number of layers per stage, the first stages taking one more
//                 when they do not divide (DeepSpeed's partition_uniform);
//   "parameters"  parameter counts balanced (partition_balanced: the linear partition
//                 that minimises the spread between the heaviest and lightest stage,
//                 ties going to the later cut, as DeepSpeed's dynamic programme does);
//   "type:REGEX"  the number of layers whose type matches REGEX (case-insensitive, found
//                 anywhere in the type name) balanced the same way.
// Every stage gets at least one layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace triad::nn {

struct LayerInfo {
  std::string type;
  int64_t parameters = 0;
};

// bounds (stages + 1 entries): stage s holds layers [bounds[s], bounds[s + 1]). Throws Error
// naming pipeline.partition or pipeline.stages for an unknown method, a bad or unmatched
// regex, or more stages than layers.
std::vector<int> partition_layers(const std::vector<LayerInfo>& layers, int stages, const std::string& method);

}  // namespace triad::nn
