#include "config/auto_values.h"

#include <cmath>
#include <string>
#include <vector>

#include "tensor/error.h"

namespace triad::engine {

namespace {

using json = nlohmann::json;

json::json_pointer pointer(const std::string& dotted) {
  std::string p = "/" + dotted;
  for (char& ch : p)
    if (ch == '.') ch = '/';
  return json::json_pointer(p);
}

// The value at a dotted key, or null when any part of the path is missing.
const json* find(const json& config, const std::string& key) {
  const json::json_pointer p = pointer(key);
  return config.contains(p) ? &config.at(p) : nullptr;
}

bool is_auto(const json& config, const std::string& key) {
  const json* v = find(config, key);
  return v && is_auto_value(*v);
}

void set(json& config, const std::string& key, const json& value) { config[pointer(key)] = value; }

[[noreturn]] void unresolved(const std::string& key, const std::string& why) {
  throw Error("[config] " + key + " is \"auto\", " + why);
}

// A number the config gives itself (not "auto"), or none.
const json* given_number(const json& config, const std::string& key) {
  const json* v = find(config, key);
  return v && v->is_number() ? v : nullptr;
}

}  // namespace

bool is_auto_value(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

json resolve_auto_values(const json& input) {
  json c = input;

  const std::vector<std::string> batch = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps"};
  std::vector<std::string> auto_batch;
  for (const std::string& key : batch)
    if (is_auto(c, key)) auto_batch.push_back(key), c.erase(key);
  if (!auto_batch.empty() && !c.contains("train_batch_size") && !c.contains("train_micro_batch_size_per_gpu")) {
    std::string keys;
    for (const std::string& k : auto_batch) keys += (keys.empty() ? "" : ", ") + k;
    throw Error("[config] " + keys + (auto_batch.size() > 1 ? " are" : " is") +
                " \"auto\": HF Trainer takes the batch sizes from its arguments; give "
                "train_micro_batch_size_per_gpu (and gradient_accumulation_steps) or train_batch_size in the "
                "training config");
  }

  for (const auto& [key, why] : std::vector<std::pair<std::string, std::string>>{
           {"optimizer.params.lr", "its learning_rate"},
           {"gradient_clipping", "its max_grad_norm (default 1.0; triad's default is 0, off)"},
           {"scheduler.params.warmup_num_steps", "its warmup_steps"}})
    if (is_auto(c, key))
      unresolved(key, "which HF Trainer fills in from " + why + ", and no config gives it: write " + key +
                          " in the training config");
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"optimizer.params.betas", json::array({0.9, 0.999})},
                                                 {"optimizer.params.eps", 1e-8},
                                                 {"optimizer.params.weight_decay", 0.0},
                                                 {"scheduler.params.warmup_min_lr", 0.0},
                                                 {"fp16.enabled", false},
                                                 {"bf16.enabled", false}})
    if (is_auto(c, key)) set(c, key, value);
  if (is_auto(c, "scheduler.params.warmup_max_lr")) {
    const json* lr = given_number(c, "optimizer.params.lr");
    if (!lr)
      unresolved("scheduler.params.warmup_max_lr",
                 "which HF Trainer fills in from the learning rate, and no config gives optimizer.params.lr");
    set(c, "scheduler.params.warmup_max_lr", *lr);
  }
  if (is_auto(c, "scheduler.params.total_num_steps")) {
    const json* steps = given_number(c, "steps");
    if (!steps)
      unresolved("scheduler.params.total_num_steps",
                 "which HF Trainer fills in from the run's steps, and no config gives steps");
    set(c, "scheduler.params.total_num_steps", *steps);
  }

  const std::vector<std::string> sized = {"zero_optimization.reduce_bucket_size",
                                          "zero_optimization.stage3_prefetch_bucket_size",
                                          "zero_optimization.stage3_param_persistence_threshold"};
  for (const std::string& key : sized) {
    if (!is_auto(c, key)) continue;
    const json* hidden = given_number(c, "model.d_model");
    if (!hidden || !hidden->is_number_integer() || hidden->get<int64_t>() < 1)
      unresolved(key, "which HF Trainer sizes from the model's hidden size, and the config gives no model.d_model");
    const int64_t d = hidden->get<int64_t>();
    const int64_t value = key == sized[0] ? d * d : key == sized[1] ? int64_t(std::floor(0.9 * double(d * d))) : 10 * d;
    set(c, key, value);
  }
  return c;
}

}  // namespace triad::engine
