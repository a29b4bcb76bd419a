// Hugging Face Trainer's "auto" values. The ds_config.json files kept for HF's Trainer write
// "auto" where the Trainer fills a value in from its own arguments and the model
// (transformers' HfTrainerDeepSpeedConfig); triad fills them in the same way from the
// training config and the model section, so such a file runs beside a triad config.
#pragma once

#include <nlohmann/json.hpp>

namespace triad::engine {

// The config with every "auto" at one of HF's keys replaced (c: the config itself; d: the
// model's hidden size, model.d_model):
//   train_batch_size, train_micro_batch_size_per_gpu,  removed: the batch keys left
//   gradient_accumulation_steps                       determine them (parse_config)
//   optimizer.params.betas, eps, weight_decay         [0.9, 0.999], 1e-8, 0.0 (the Trainer's
//                                                       defaults, triad's too)
//   scheduler.params.warmup_min_lr                    0
//   scheduler.params.warmup_max_lr                    c's optimizer.params.lr
//   scheduler.params.total_num_steps                  c's steps
//   fp16.enabled, bf16.enabled                        false
//   zero_optimization.reduce_bucket_size              d²
//   zero_optimization.stage3_prefetch_bucket_size     floor(0.9 d²)
//   zero_optimization.stage3_param_persistence_threshold   10 d
// An "auto" with nothing to take its value from is an Error naming the key and what to give:
// optimizer.params.lr, gradient_clipping and scheduler.params.warmup_num_steps (the
// Trainer's defaults are not triad's), the batch keys when neither train_batch_size nor
// train_micro_batch_size_per_gpu is left, warmup_max_lr without a learning rate,
// total_num_steps without steps, the ZeRO sizes without model.d_model. "auto" elsewhere is
// left to the key's own parser (distributed_backend takes it; a number's key rejects it).
nlohmann::json resolve_auto_values(const nlohmann::json& config);
// Whether a value is "auto".
bool is_auto_value(const nlohmann::json& value);

}  // namespace triad::engine
