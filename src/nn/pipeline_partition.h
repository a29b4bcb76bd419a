// Cutting a list of layers (nn/layer_list.h) into consecutive pipeline stages, by the
// methods of DeepSpeed's PipelineModule (pipe/module.py, _partition_layers):
//   "uniform"     the same number of layers per stage; when they do not divide, the first
//                 stages take one more (DeepSpeed's partition_uniform).
//   "parameters"  parameter counts balanced: DeepSpeed's partition_balanced, a dynamic
//                 programme over (layers so far, stages so far) that keeps, for each, the
//                 cut with the least spread between its heaviest and lightest stage,
//                 the later cut winning ties. Its results, not a true optimum, are kept.
//   "type:REGEX"  the same programme on weights 1 for layers whose type REGEX matches
//                 (case-insensitive, anywhere in the name: std::regex_search) and 0 for
//                 the rest. The whole text after "type:" is the regex (DeepSpeed stops at
//                 a second ':').
// Method names are case-insensitive, as DeepSpeed lowercases them.
// Invariant of the result: stages + 1 increasing bounds from 0 to layers.size(), every
// stage holding at least one layer (which stages <= layers.size() makes possible).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace triad::nn {

struct LayerInfo {
  std::string type;        // e.g. "Block": what type:REGEX matches
  int64_t parameters = 0;  // what "parameters" balances
};

// Stage s of `stages` holds layers [bounds[s], bounds[s + 1]); bounds[0] = 0 and
// bounds[stages] = layers.size(). With interleaving, `stages` is the number of virtual
// stages (pipeline.stages × pipeline.virtual_stages). Throws Error naming
// pipeline.partition or pipeline.stages for: an unknown method, an invalid regex, a regex
// matching no layer, stages < 1, or more stages than layers.
std::vector<int> partition_layers(const std::vector<LayerInfo>& layers, int stages, const std::string& method);

}  // namespace triad::nn
