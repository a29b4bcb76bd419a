#include "config/moe_keys.h"

namespace triad::engine {

nn::MoEModelConfig parse_moe(JsonReader r, int64_t& expert_parallel_size) {
  nn::MoEModelConfig m;
  nn::MoEConfig& l = m.layer;
  if (r.has("num_experts") && r.value("num_experts").is_array()) {
    const nlohmann::json& list = r.value("num_experts");
    if (list.empty()) r.fail("num_experts", "a positive integer or a non-empty list of them");
    for (const auto& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1) r.fail("num_experts", "a list of positive integers");
      m.num_experts.push_back(v.get<int64_t>());
    }
    r.known("num_experts");
  } else {
    m.num_experts = {r.integer("num_experts", 1, 1, 1 << 20)};
  }
  m.every = r.integer("every", m.every, 1, 1024);
  l.k = r.integer("top_k", l.k, 1, 1 << 20);
  l.capacity_factor = r.number("capacity_factor", l.capacity_factor, 1e-9, 1e9);
  l.eval_capacity_factor = r.number("eval_capacity_factor", l.eval_capacity_factor, 1e-9, 1e9);
  l.min_capacity = r.integer("min_capacity", l.min_capacity, 0, 1 << 30);
  l.drop_tokens = r.boolean("drop_tokens", l.drop_tokens);
  l.use_rts = r.boolean("use_rts", l.use_rts);
  const std::string noise = r.choice("noisy_gate_policy", "None", {"None", "Jitter", "RSample"});
  l.noisy_gate_policy = noise == "Jitter"    ? nn::NoisyGatePolicy::jitter
                        : noise == "RSample" ? nn::NoisyGatePolicy::rsample
                                             : nn::NoisyGatePolicy::none;
  l.top2_2nd_expert_sampling = r.boolean("top2_2nd_expert_sampling", l.top2_2nd_expert_sampling);
  l.use_residual = r.boolean("use_residual", l.use_residual);
  l.aux_loss = r.choice("aux_loss", "deepspeed", {"deepspeed", "megatron"}) == "megatron"
                   ? nn::AuxLossNormalization::megatron
                   : nn::AuxLossNormalization::deepspeed;
  l.aux_loss_coeff = r.number("aux_loss_coeff", l.aux_loss_coeff, 0.0, 1e9);
  l.z_loss_coeff = r.number("z_loss_coeff", l.z_loss_coeff, 0.0, 1e9);
  if (r.has("norm_topk_prob")) l.norm_topk_prob = r.boolean("norm_topk_prob", true);
  expert_parallel_size = r.integer("expert_parallel_size", 1, 1, 1 << 16);
  r.finish();
  return m;
}

}  // namespace triad::engine
