// The Hugging Face models triad imports and exports (triad-ckpt import/export,
// checkpoint/hf_checkpoint.h): how the tensor names, layouts and config.json keys of HF's
// GPT2LMHeadModel ("gpt2"), LlamaForCausalLM ("llama") and MixtralForCausalLM ("mixtral")
// map onto triad's parameter names and model config section. One table per architecture
// (hf_models.cpp).
//
// Note [HF name maps]
// - GPT-2: HF's names, with an optional "transformer." prefix (written on export, as
//   save_pretrained writes it), map one to one onto triad's GPT names (nn/gpt.h); HF's Conv1D
//   weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored (in, out) and triad's
//   Linear weights (out, in), so they are transposed both ways. The causal-mask buffers
//   h.{i}.attn.bias and h.{i}.attn.masked_bias are skipped. triad's head is tied to wte:
//   an lm_head.weight must equal wte.weight, and is not written back.
// - Llama: model.embed_tokens -> embed, model.layers.{i}.{input_layernorm,
//   post_attention_layernorm} -> blocks.{i}.{norm1,norm2}, self_attn.{q,k,v,o}_proj ->
//   blocks.{i}.attn.{q,k,v,o}, mlp.{gate,up,down}_proj -> blocks.{i}.mlp.{gate,up,down},
//   model.norm -> norm_f, lm_head -> head (absent with tie_word_embeddings: a copy of the
//   embedding). The same (out, in) layout and RoPE convention (rotate_half): no transposes,
//   no q/k permutation.
// - Mixtral: triad's Llama with model.moe, an MoE block in every layer: the Llama's names but
//   model.layers.{i}.block_sparse_moe.gate -> blocks.{i}.moe.gate.wg and
//   block_sparse_moe.experts.{e}.{w1,w3,w2} -> blocks.{i}.moe.experts.{e}.{gate,up,down}
//   (the names of the Hub's Mixtral checkpoints, which transformers' save_pretrained writes
//   too, though its module fuses the experts). Mixtral's router (softmax over the experts,
//   the top k, their weights renormalised to sum 1, no capacity) is triad's gate with
//   {"every": 1, "top_k": num_experts_per_tok, "drop_tokens": false,
//   "top2_2nd_expert_sampling": false, "norm_topk_prob": true}; its load-balancing loss
//   (E sum_e f_e P_e, over all k choices) is aux_loss "megatron" with aux_loss_coeff =
//   router_aux_loss_coef x k, written back as aux_loss_coeff / k. router_jitter_noise, noise on the MoE
//   input in training only, is not carried (an import trains without it; inference has none
//   either way); a sliding_window shorter than max_position_embeddings is refused (triad's
//   attention has no window).
// - triad's config of an imported model is its "model" section: arch plus, for gpt2,
//   n_layer, n_head, d_model, seq_len, vocab_size (config.json's n_layer, n_head, n_embd,
//   n_positions, vocab_size); for llama, n_layer, n_head, n_kv_head, d_model,
//   intermediate_size, seq_len, vocab_size, rms_norm_eps, rope_theta (config.json's
//   num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size,
//   intermediate_size, max_position_embeddings, vocab_size, rms_norm_eps, rope_theta; or
//   transformers 5's rope_parameters {"rope_type": "default", "rope_theta": ...}).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace triad::io {

// "gpt2", "llama" and "mixtral"; hf_architecture_names() lists them for messages.
bool is_hf_architecture(const std::string& arch);
std::string hf_architecture_names();

// The architecture that config.json's model_type names ("gpt2", "llama", "mixtral"). Throws Error naming
// `path` when model_type is absent or one triad does not convert ("mistral").
std::string arch_from_hf_config(const nlohmann::json& config, const std::string& path);

// The HF architecture of a model of `model`'s config: its arch, or "mixtral" for a llama with
// model.moe. Throws Error naming the model.moe key when MixtralForCausalLM cannot hold its
// MoE blocks (not every block, a pyramid of expert counts, a residual MLP, weights not
// renormalised: nn::MoEConfig::norm_topk_prob) or the
// arch has no MoE form in transformers.
std::string hf_architecture(const nlohmann::json& model);

// The config.json of a model of `model`'s config (complete; "arch" names the architecture),
// keyed as transformers' GPT2Config / LlamaConfig / MixtralConfig key it, so AutoModelForCausalLM builds
// the model triad has: architectures, model_type, the shape fields of Note [HF name maps],
// what triad's model fixes (activation, norms' epsilon, no RoPE scaling, no biases, ...),
// tie_word_embeddings (gpt2 true; llama false: triad's Llama has its own head), torch_dtype
// of `dtype`, bos_token_id and eos_token_id (null where the tokenizer is not known).
nlohmann::json hf_config(const nlohmann::json& model, DType dtype, const nlohmann::json& bos,
                         const nlohmann::json& eos);

// The model fields config.json gives (HF's defaults where HF has one and the file is
// silent). Throws Error naming config.json's path and key when the file describes a model
// triad does not build (another activation, a layer-norm epsilon triad's GPT does not use,
// RoPE scaling, biases a Llama of triad lacks).
nlohmann::json model_from_hf_config(const std::string& arch, const nlohmann::json& config, const std::string& path);
// Throws Error naming hf.path() and the tensor when a tensor's name is not one the
// architecture has (any layer index): another architecture's checkpoint.
void check_hf_names(const std::string& arch, const SafetensorsCheckpoint& hf);
// Whether config.json ties the output head to the token embedding (tie_word_embeddings, HF's
// default for the architecture when absent).
bool hf_ties_head(const std::string& arch, const nlohmann::json& config);
// Fills the fields of `model` that are unset and that the tensors' shapes show (d_model,
// vocab_size, n_layer, ...; n_kv_head once n_head is known).
void complete_model_from_tensors(const std::string& arch, const SafetensorsCheckpoint& hf, nlohmann::json& model);
// The fields `model` lacks, as "n_head (--n-head)"; empty when it is complete.
std::vector<std::string> missing_model_fields(const std::string& arch, const nlohmann::json& model);

// triad's f32 parameters, by triad name, from the HF tensors of a model of `model`'s
// config (complete). tie_head: a Llama without lm_head.weight takes a copy of the
// embedding. Throws Error naming hf.path() and the tensor when a tensor is missing, has a
// shape the config does not give, is not part of the architecture, or (GPT-2) is an
// lm_head.weight unequal to wte.weight.
NamedTensors from_hf(const std::string& arch, const nlohmann::json& model, const SafetensorsCheckpoint& hf,
                     bool tie_head);
// HF's tensors, by HF name, in `dtype`, from triad's parameters (any order). Throws Error
// naming a parameter the architecture does not have.
NamedTensors to_hf(const std::string& arch, const NamedTensors& triad, DType dtype);

}  // namespace triad::io
