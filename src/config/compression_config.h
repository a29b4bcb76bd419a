// DeepSpeed's compression_training section as triad takes it (docs/compression.md):
// quantization-aware training of chosen linear layers (weight_quantization,
// activation_quantization) and layer reduction at initialisation (layer_reduction), which
// triad-train applies; the pruning sections are refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/json_reader.h"
#include "tensor/ops.h"

namespace triad::engine {

// One of weight_quantization.different_groups: the linear layers whose module names match
// one of `modules` (regular expressions searched in the name; "*" matches every layer) go
// from start_bits to target_bits through the quantization library's widths (8, 4, 2, 1).
struct WeightQuantGroup {
  std::string name;
  int start_bits = 8, target_bits = 8;
  int64_t quantization_period = 1;
  std::vector<std::string> modules;
};

// One of activation_quantization.different_groups: the inputs of the matching linear layers
// quantized per token to `bits` (8).
struct ActivationQuantGroup {
  std::string name;
  int bits = 8;
  std::vector<std::string> modules;
};

struct CompressionConfig {
  struct Weights {
    bool enabled = false;
    int64_t quantize_groups = 1;  // scales per row of a weight (groups along its input dimension)
    bool symmetric = true;
    int64_t schedule_offset = 0;  // optimizer steps before quantization starts
    std::vector<WeightQuantGroup> groups;
  } weights;
  struct Activations {
    bool enabled = false;
    int64_t schedule_offset = 0;
    std::vector<ActivationQuantGroup> groups;
  } activations;
  struct LayerReduction {
    bool enabled = false;
    int64_t keep_number_layer = 0;
    std::string module_name_prefix = "blocks";
    std::vector<int64_t> teacher_layer;  // the --init model's blocks the student's blocks start from
    std::vector<std::string> other_module_name;
  } layer_reduction;

  bool quantizes() const { return weights.enabled || activations.enabled; }
};

// The weight bits of group g after `step` optimizer steps: 0 (full precision) before
// schedule_offset; then start_bits, moving to the library's next smaller width (8, 4, 2, 1)
// once quantization_period steps have passed since schedule_offset, the next after twice
// as many more, and so on (DeepSpeed's quantizer doubles the period at each drop), down to
// target_bits.
int scheduled_weight_bits(const WeightQuantGroup& g, int64_t schedule_offset, int64_t step);

// Whether a module name matches one of the patterns (regular-expression search; "*": all).
bool matches_modules(const std::string& name, const std::vector<std::string>& patterns);

// Reads the section (r: compression_training); `n_layer` is the model's block count (the
// student's, for layer_reduction); keys accepted without effect add a line to `notices`.
// A group without modules takes every linear layer ("*"); target_bits defaults to
// start_bits, teacher_layer to blocks 0 .. keep_number_layer - 1. Throws Error naming the
// dotted key for a value triad does not take, and names each pruning section given enabled.
CompressionConfig parse_compression(JsonReader r, int64_t n_layer, std::vector<std::string>& notices);

}  // namespace triad::engine
