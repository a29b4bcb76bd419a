#include "rlhf/rlhf_config.h"

#include <algorithm>
#include <vector>

#include "config/json_reader.h"

namespace triad::rlhf {

namespace {

const std::vector<std::string> kSteps = {"sft", "reward", "dpo", "ppo", "grpo"};

// The keys of each section that are the step's own (the rest are training keys).
const std::vector<std::string> kOwnKeys = {"init",       "include_prompt", "beta",        "reward_model",
                                           "kl_ctl",     "clip_reward_value", "cliprange", "cliprange_value",
                                           "gamma",      "lam",            "ppo_epochs",  "max_answer_seq_len",
                                           "temperature", "top_p",         "top_k",       "enable_ema",
                                           "ema_beta",   "unsup_coef",     "kl_target",   "kl_horizon",
                                           "group_size", "actor",          "critic"};

bool is_own(const std::string& key) { return std::find(kOwnKeys.begin(), kOwnKeys.end(), key) != kOwnKeys.end(); }

// Objects merge key by key; any other value of `over` replaces base's.
void merge_into(nlohmann::json& base, const nlohmann::json& over) {
  for (auto it = over.begin(); it != over.end(); ++it) {
    if (it.value().is_object() && base.contains(it.key()) && base[it.key()].is_object())
      merge_into(base[it.key()], it.value());
    else
      base[it.key()] = it.value();
  }
}

// A section's own keys and its training keys, apart.
std::pair<nlohmann::json, nlohmann::json> split_section(const nlohmann::json& section, const std::string& name) {
  TRIAD_CHECK(section.is_object(), "[config] " << name << " must be an object, got " << section.dump());
  nlohmann::json own = nlohmann::json::object(), training = nlohmann::json::object();
  for (auto it = section.begin(); it != section.end(); ++it) (is_own(it.key()) ? own : training)[it.key()] = it.value();
  return {own, training};
}

// `per_step`: optimizer steps per step of the run (PPO's and GRPO's ppo_epochs), by which
// steps and checkpoint.every are counted in the engine (its schedule, checkpoint names).
engine::TrainConfig train_config(nlohmann::json top, const std::vector<nlohmann::json>& layers, int64_t ranks,
                                 int64_t per_step = 1) {
  for (const nlohmann::json& layer : layers) merge_into(top, layer);
  if (per_step > 1) {
    if (top.contains("steps") && top["steps"].is_number_integer()) top["steps"] = top["steps"].get<int64_t>() * per_step;
    if (top.contains("checkpoint") && top["checkpoint"].is_object() && top["checkpoint"].contains("every") &&
        top["checkpoint"]["every"].is_number_integer())
      top["checkpoint"]["every"] = top["checkpoint"]["every"].get<int64_t>() * per_step;
  }
  return engine::parse_config(top, ranks);
}

RlhfData read_data(const nlohmann::json& json) {
  TRIAD_CHECK(json.contains("data") && json["data"].is_object(),
              "[config] data: an RLHF config needs a data section with path and tokenizer");
  engine::JsonReader r(json["data"], "config", "data");
  RlhfData d;
  d.path = r.string("path", "");
  d.tokenizer = r.string("tokenizer", "");
  d.data_split = r.string("data_split", d.data_split);
  d.limits.max_prompt_seq_len = r.integer("max_prompt_seq_len", d.limits.max_prompt_seq_len, 1, 1 << 20);
  d.limits.max_seq_len = r.integer("max_seq_len", d.limits.max_seq_len, 2, 1 << 20);
  d.val_fraction = r.number("val_fraction", d.val_fraction, 0.0, 0.5);
  r.finish();
  TRIAD_CHECK(!d.path.empty(), "[config] data.path: the preference dataset (JSONL) is missing");
  TRIAD_CHECK(!d.tokenizer.empty(), "[config] data.tokenizer: the tokenizer is missing");
  TRIAD_CHECK(d.limits.max_seq_len > d.limits.max_prompt_seq_len,
              "[config] data.max_seq_len (" << d.limits.max_seq_len << ") must exceed data.max_prompt_seq_len ("
                                            << d.limits.max_prompt_seq_len << ")");
  return d;
}

std::string read_init(engine::JsonReader& r, bool required) {
  const std::string init = r.string("init", "");
  TRIAD_CHECK(!required || !init.empty(), "[config] " << r.dotted("init") << ": the weights this model starts "
                                                      << "from are missing (a checkpoint or weights file)");
  return init;
}

void read_rl(engine::JsonReader& r, RlOptions& o, bool grpo) {
  o.reward_model = r.string("reward_model", "");
  TRIAD_CHECK(!o.reward_model.empty(), "[config] " << r.dotted("reward_model")
                                                   << ": the trained reward model (triad-rlhf reward's weights) is "
                                                      "missing");
  o.cliprange = r.number("cliprange", o.cliprange, 0.0, 10.0);
  o.ppo_epochs = r.integer("ppo_epochs", o.ppo_epochs, 1, 1000);
  o.max_answer_seq_len = r.integer("max_answer_seq_len", o.max_answer_seq_len, 0, 1 << 20);
  o.temperature = r.number("temperature", o.temperature, 1e-6, 100.0);
  o.top_p = r.number("top_p", o.top_p, 1e-6, 1.0);
  o.top_k = r.integer("top_k", o.top_k, 0, 1 << 30);
  o.enable_ema = r.boolean("enable_ema", o.enable_ema);
  o.ema_beta = r.number("ema_beta", o.ema_beta, 0.0, 1.0);
  if (grpo) {
    o.group_size = r.integer("group_size", o.group_size, 2, 1 << 20);
    o.beta = r.number("beta", o.beta, 0.0, 1e6);
  } else {
    o.clip_reward_value = r.number("clip_reward_value", o.clip_reward_value, 0.0, 1e9);
    o.unsup_coef = r.number("unsup_coef", o.unsup_coef, 0.0, 1e6);
    o.kl_ctl = r.number("kl_ctl", o.kl_ctl, 0.0, 1e6);
    o.cliprange_value = r.number("cliprange_value", o.cliprange_value, 0.0, 1e9);
    o.gamma = r.number("gamma", o.gamma, 0.0, 1.0);
    o.lam = r.number("lam", o.lam, 0.0, 1.0);
    o.kl_target = r.number("kl_target", o.kl_target, 0.0, 1e6);
    o.kl_horizon = r.integer("kl_horizon", o.kl_horizon, 1, int64_t(1) << 40);
  }
}

}  // namespace

// cuda_graph.enabled records triad-train's step (Note [Recorded steps] in
// engine/step_recording.h), which SFT runs; the other steps train through loops of their own.
void check_recorded(const engine::TrainConfig& train, const std::string& step) {
  TRIAD_CHECK(!train.cuda_graph.enabled || step == "sft",
              "[config] cuda_graph.enabled: the " << step << " step's training is not recorded as a CUDA graph "
                                                  << "(SFT's is; generation replays its own graphs)");
}

StepConfig parse_rlhf_config(const nlohmann::json& json, const std::string& step, int64_t ranks) {
  TRIAD_CHECK(std::find(kSteps.begin(), kSteps.end(), step) != kSteps.end(),
              "triad-rlhf: unknown step '" << step << "' (sft, reward, dpo, ppo or grpo)");
  TRIAD_CHECK(json.is_object(), "[config] an RLHF config must be a JSON object");
  StepConfig c;
  c.step = step;
  c.data = read_data(json);
  nlohmann::json top = json;
  top["data"] = {{"tokenizer", c.data.tokenizer}};  // saved with each model, for triad-generate
  for (const std::string& s : kSteps) top.erase(s);
  const nlohmann::json section = json.contains(step) ? json[step] : nlohmann::json::object();
  const auto [own, training] = split_section(section, step);
  engine::JsonReader r(own, "config", step);
  if (step == "sft" || step == "reward" || step == "dpo") {
    c.model.init = read_init(r, step != "sft");
    if (step == "sft") c.include_prompt = r.boolean("include_prompt", false);
    if (step == "dpo") c.dpo.beta = r.number("beta", c.dpo.beta, 1e-9, 1e6);
    c.model.train = train_config(top, {training}, ranks);
    check_recorded(c.model.train, step);
  } else {
    read_rl(r, c.rl, step == "grpo");
    const std::vector<std::string> models = step == "ppo" ? std::vector<std::string>{"actor", "critic"}
                                                          : std::vector<std::string>{"actor"};
    for (const std::string& name : models) {
      const nlohmann::json sub = own.contains(name) ? own[name] : nlohmann::json::object();
      r.known(name);
      const auto [sub_own, sub_training] = split_section(sub, step + "." + name);
      engine::JsonReader sr(sub_own, "config", step + "." + name);
      ModelRun& run = name == "actor" ? c.model : c.critic;
      run.init = read_init(sr, true);
      sr.finish();
      run.train = train_config(top, {training, sub_training}, ranks, c.rl.ppo_epochs);
      check_recorded(run.train, step);
      // Each trained model keeps its checkpoints in a folder of its own.
      if (!run.train.checkpoint.dir.empty()) run.train.checkpoint.dir += "/" + name;
    }
    if (c.rl.max_answer_seq_len == 0)
      c.rl.max_answer_seq_len = c.data.limits.max_seq_len - c.data.limits.max_prompt_seq_len;
  }
  r.finish();
  return c;
}

}  // namespace triad::rlhf
