// DeepSpeed's compression_training in triad-train (config/compression_config.h):
// quantization-aware training of the linear layers the groups name, their bits following
// the schedule step by step, and layer reduction of the --init model at initialisation.
#pragma once

#include <string>
#include <vector>

#include "config/compression_config.h"
#include "nn/language_model.h"

namespace triad::engine {

class QuantizationSchedule {
 public:
  explicit QuantizationSchedule(CompressionConfig config) : c_(std::move(config)) {}

  // Sets every nn::Linear of `model` for the optimizer step `step` (0: the first) about to
  // run: a layer in a weight group fake-quantizes its weight at the group's scheduled bits
  // (scheduled_weight_bits) with quantize_groups groups along each row, a layer in an
  // activation group its input per token at 8 bits from that schedule_offset on (the first
  // matching group of each kind counts); the others run in full precision. Returns one line
  // per group whose bits changed since the previous call. Throws Error naming
  // quantize_groups and the layer when the groups do not split its input dimension into
  // whole bytes of the bits.
  std::vector<std::string> apply(const nn::ModulePtr& model, int64_t step);

 private:
  CompressionConfig c_;
  std::vector<int> bits_;  // each weight group's, then each activation group's, at the last call
};

// layer_reduction: the student's parameters from the model of `init` (a checkpoint or
// weights file), block i from its block teacher_layer[i], the rest by name. Throws Error
// naming the parameter when the file's model lacks one.
void reduce_layers(nn::LanguageModel& student, const std::string& init,
                   const CompressionConfig::LayerReduction& reduction);

}  // namespace triad::engine
