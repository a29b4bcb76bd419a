// The options of a Mixture-of-Experts layer (nn/moe.h), with DeepSpeed's `MoE` defaults
// (deepspeed/moe/layer.py) and the loss options of Megatron-core's router. One struct for
// the gate and the layer, so that a model (and later the config parser) states a layer once.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace triad::nn {

// Noise on the gate in training (DeepSpeed's noisy_gate_policy): none; Jitter, the input of
// the gate multiplied by U(1 - 1e-2, 1 + 1e-2); RSample, Gumbel noise on the logits that
// choose a top-1 expert (the gate weights stay the clean probabilities).
enum class NoisyGatePolicy { none, jitter, rsample };

// How the load-balancing loss is normalised (Note [MoE auxiliary loss] in nn/moe_gate.h).
enum class AuxLossNormalization { deepspeed, megatron };

struct MoEConfig {
  int64_t num_experts = 1;
  int64_t k = 1;                      // experts per token, 1 <= k <= num_experts
  double capacity_factor = 1.0;       // in training
  double eval_capacity_factor = 1.0;  // in eval mode
  int64_t min_capacity = 4;           // slots per expert at least, when dropping
  bool drop_tokens = true;            // false: dropless, every choice gets a slot
  bool use_rts = true;                // top-1: random token selection over capacity
  NoisyGatePolicy noisy_gate_policy = NoisyGatePolicy::none;
  bool top2_2nd_expert_sampling = true;  // top-2: Gumbel noise picks the second expert
  bool use_residual = false;             // Residual MoE: a dense MLP beside the experts
  AuxLossNormalization aux_loss = AuxLossNormalization::deepspeed;
  double aux_loss_coeff = 0.01;  // Megatron-DeepSpeed's scale of DeepSpeed's l_aux
  double z_loss_coeff = 0.0;     // router z-loss (ST-MoE), off by default
  // Whether a token's weights are its kept choices' probabilities renormalised to sum 1.
  // Unset: DeepSpeed's, for k >= 2 and not for top-1 (a single choice weighs its
  // probability); true for every k (Mixtral's, and Megatron's softmax over the top k: a
  // single choice weighs 1); false for every k (each weight its probability, as HF's
  // norm_topk_prob false). The key of Hugging Face's MoE configs.
  std::optional<bool> norm_topk_prob;

  // Throws triad::Error naming the field ("[moe] k must be in [1, num_experts] ...").
  void validate() const;
  double capacity_factor_for(bool training) const { return training ? capacity_factor : eval_capacity_factor; }
  bool renormalizes() const { return norm_topk_prob.value_or(k > 1); }
};

// Which blocks of a transformer (the GPT, the Llama) are MoE layers, and how: the config
// file's model.moe. Block i (from 0) is an MoE layer when (i + 1) % every == 0, as
// Megatron-DeepSpeed's --expert-interval places them (every 2: blocks 1, 3, 5, ...; every
// 1: all). Its expert count is num_experts's one value, or PR-MoE's pyramid: one value per
// MoE block, in order. The rest of the layer's options are `layer`'s (its num_experts is
// set per block).
struct MoEModelConfig {
  std::vector<int64_t> num_experts;  // empty: a dense model
  int64_t every = 2;
  MoEConfig layer;

  bool enabled() const { return !num_experts.empty(); }
  // The MoE blocks of a model of n_layer blocks.
  int64_t moe_blocks(int64_t n_layer) const { return enabled() ? n_layer / every : 0; }
  // Block `block`'s layer options, or num_experts 0 for a dense block.
  MoEConfig at(int64_t block) const;
  // Throws triad::Error naming the key ("[model.moe] ...").
  void validate(int64_t n_layer) const;
};

}  // namespace triad::nn
