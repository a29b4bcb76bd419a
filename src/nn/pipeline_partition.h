#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace triad::nn {

struct LayerInfo {
  std::string type;
  int64_t parameters = 0;
};
std::vector<int> partition_layers(const std::vector<LayerInfo>& layers, int stages, const std::string& method);

}  // namespace triad::nn
