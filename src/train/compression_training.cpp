// compression_training in triad-train: the quantization schedule and layer reduction
// (compression_training.h).
#include "train/compression_training.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/extreme_compression.h"
#include "nn/layers.h"
#include "tensor/error.h"

namespace triad::engine {

std::vector<std::string> QuantizationSchedule::apply(const nn::ModulePtr& model, int64_t step) {
  const auto& w = c_.weights;
  const auto& a = c_.activations;
  std::vector<int> bits;
  for (const WeightQuantGroup& g : w.groups)
    bits.push_back(w.enabled ? scheduled_weight_bits(g, w.schedule_offset, step) : 0);
  for (size_t i = 0; i < a.groups.size(); ++i)
    bits.push_back(a.enabled && step >= a.schedule_offset ? a.groups[i].bits : 0);
  for (const auto& [name, m] : model->named_modules(model)) {
    auto* linear = dynamic_cast<nn::Linear*>(m.get());
    if (!linear) continue;
    std::optional<QuantFormat> format;
    int abits = 16;
    for (size_t i = 0; i < w.groups.size(); ++i) {
      if (!matches_modules(name, w.groups[i].modules)) continue;
      if (bits[i] > 0) {
        const int64_t k = linear->weight.size(1), block = k / w.quantize_groups;
        TRIAD_CHECK(k % w.quantize_groups == 0 && block * bits[i] % 8 == 0,
                    "[config] compression_training.weight_quantization.shared_parameters.quantize_groups "
                        << w.quantize_groups << " does not split the input dimension " << k << " of " << name
                        << " into groups of whole bytes at " << bits[i] << " bits");
        format = QuantFormat{bits[i], block, w.symmetric};
      }
      break;
    }
    for (size_t i = 0; i < a.groups.size(); ++i) {
      if (!matches_modules(name, a.groups[i].modules)) continue;
      if (bits[w.groups.size() + i] > 0) abits = 8;
      break;
    }
    linear->use_fake_quantization(format, abits);
  }
  std::vector<std::string> changes;
  for (size_t i = 0; i < bits.size(); ++i) {
    if (i < bits_.size() && bits_[i] == bits[i]) continue;
    const bool weights = i < w.groups.size();
    const std::string& group = weights ? w.groups[i].name : a.groups[i - w.groups.size()].name;
    changes.push_back("compression: step " + std::to_string(step) + ", " + (weights ? "weight" : "activation") +
                      " group " + group + ": " + (bits[i] > 0 ? std::to_string(bits[i]) + " bits" : "full precision"));
  }
  bits_ = bits;
  return changes;
}

void reduce_layers(nn::LanguageModel& student, const std::string& init,
                   const CompressionConfig::LayerReduction& reduction) {
  init_student(student, *load_model(init).model, reduction.teacher_layer);
}

}  // namespace triad::engine
