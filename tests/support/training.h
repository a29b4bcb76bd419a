// Shared pieces of the training tests: a small GPT training config over a token file, and
// the losses a --metrics file recorded.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace triad::test {

// Two blocks of width 16 over a vocabulary of 16, AdamW with clipping, a global batch of 16
// sequences of 16 tokens; tests adjust keys as they need.
inline nlohmann::json small_gpt_config(const std::string& corpus, int64_t steps) {
  return {{"model", {{"n_layer", 2}, {"n_head", 2}, {"d_model", 16}, {"seq_len", 16}, {"vocab_size", 16}}},
          {"data", {{"corpus", corpus}, {"val_fraction", 0.1}}},
          {"train_batch_size", 16},
          {"steps", steps},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}, {"betas", {0.9, 0.95}}, {"weight_decay", 0.1}}}}},
          {"gradient_clipping", 1.0},
          {"eval_iters", 2},
          {"log_interval", 100}};
}

// The "loss" of every line of a metrics file, in order.
inline std::vector<double> metric_losses(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

}  // namespace triad::test
