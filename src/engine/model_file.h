// The trained-model file until HDF5 checkpoints replace it: one named-tensor file
// (io/tensor_file.h) holding every parameter by name and, as the i8 tensor "meta/config",
// the training config's JSON, so the file alone rebuilds the model. Written under a
// temporary name and renamed into place: an interrupted or failed run never clobbers the
// file an earlier run saved.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "nn/gpt.h"

namespace triad::engine {

void save_model(const std::string& path, const nn::GPT& model, const nlohmann::json& config);

struct LoadedModel {
  std::shared_ptr<nn::GPT> model;
  nlohmann::json config;
};
// Error naming the path when missing, corrupt, or not matching its own config.
LoadedModel load_model(const std::string& path);

}  // namespace triad::engine
