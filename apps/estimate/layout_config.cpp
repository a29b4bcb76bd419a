#include "estimate/layout_config.h"

#include "tensor/error.h"

namespace triad::estimate {

namespace {

// json[section][key] when it is an integer, else `otherwise` (what parse_config would find
// or reject later, with its own message).
int64_t integer_at(const nlohmann::json& json, const std::string& section, const std::string& key, int64_t otherwise) {
  const nlohmann::json* j = &json;
  if (!section.empty()) {
    const auto s = json.find(section);
    if (s == json.end() || !s->is_object()) return otherwise;
    j = &*s;
  }
  const auto v = j->find(key);
  return v != j->end() && v->is_number_integer() ? v->get<int64_t>() : otherwise;
}

nlohmann::json& section(nlohmann::json& json, const std::string& name) {
  if (!json.contains(name) || !json[name].is_object()) json[name] = nlohmann::json::object();
  return json[name];
}

}  // namespace

std::string layout_name(const LayoutRequest& r) {
  return "pp " + std::to_string(r.pp) + " x dp " + std::to_string(r.dp) + " x tp " + std::to_string(r.tp);
}

engine::TrainConfig resolve_layout(const std::string& path, const std::vector<std::string>& overrides,
                                   LayoutRequest& r) {
  nlohmann::json json = engine::load_config_file(path);
  for (const std::string& s : overrides) engine::apply_override(json, s);
  TRIAD_CHECK(json.is_object(), "config file '" << path << "' is not a JSON object");
  TRIAD_CHECK(r.dp >= 1, "--dp must be at least 1, got " << r.dp);

  if (r.tp == 0)
    r.tp = int(integer_at(json, "model", "tensor_parallel", integer_at(json, "tensor_parallel", "autotp_size", 1)));
  section(json, "model")["tensor_parallel"] = r.tp;
  if (json.contains("tensor_parallel") && json["tensor_parallel"].is_object())
    json["tensor_parallel"].erase("autotp_size");  // one source for tp: the layout's

  nlohmann::json& pipe = section(json, "pipeline");
  if (r.pp == 0) r.pp = int(integer_at(json, "pipeline", "stages", 1));
  if (r.schedule.empty())
    r.schedule = pipe.contains("schedule") && pipe["schedule"].is_string() ? pipe["schedule"].get<std::string>()
                                                                           : engine::PipelineConfig{}.schedule;
  if (r.virtual_stages == 0) r.virtual_stages = int(integer_at(json, "pipeline", "virtual_stages", 1));
  pipe["stages"] = r.pp, pipe["schedule"] = r.schedule, pipe["virtual_stages"] = r.virtual_stages;

  if (r.zero_stage < 0) r.zero_stage = int(integer_at(json, "zero_optimization", "stage", 0));
  section(json, "zero_optimization")["stage"] = r.zero_stage;

  const int64_t batch = integer_at(json, "", "train_batch_size", 0);
  const int64_t micro = integer_at(json, "", "train_micro_batch_size_per_gpu", 0);
  const int64_t acc = integer_at(json, "", "gradient_accumulation_steps", 0);
  if (r.micro_batch == 0) r.micro_batch = micro;
  if (r.micro_batch == 0 && batch > 0) {
    const int64_t m = r.micro_batches > 0 ? r.micro_batches : acc > 0 ? acc : 1;
    if (batch % (m * r.dp) == 0) r.micro_batch = batch / (m * r.dp);
  }
  if (r.micro_batch == 0) {
    TRIAD_CHECK(!r.need_micro_batch, "the micro batch of "
                                         << layout_name(r) << " is unknown: give --micro-batch B (the config has no "
                                         << "train_micro_batch_size_per_gpu, and train_batch_size " << batch
                                         << " does not divide into micro-batches of the layout)");
    r.micro_batch = 1;
  }
  if (r.micro_batches == 0) {
    if (acc > 0)
      r.micro_batches = int(acc);
    else if (batch > 0 && batch % (r.micro_batch * r.dp) == 0)
      r.micro_batches = int(batch / (r.micro_batch * r.dp));
    else
      r.micro_batches = 1;
  }
  json.erase("train_batch_size");
  json["train_micro_batch_size_per_gpu"] = r.micro_batch;
  json["gradient_accumulation_steps"] = r.micro_batches;

  engine::TrainConfig c;
  try {
    c = engine::parse_config(json, int64_t(r.pp) * r.tp * r.dp);
  } catch (const Error& e) {
    throw Error("the layout " + layout_name(r) + " (ZeRO stage " + std::to_string(r.zero_stage) + ", " +
                std::to_string(r.micro_batches) + " micro-batches of " + std::to_string(r.micro_batch) + ", schedule " +
                r.schedule + ") does not fit " + path + ": " + e.what());
  }
  TRIAD_CHECK(c.arch == "gpt2", "'" << path << "': model.arch is \"" << c.arch << "\", and triad-estimate prices the "
                                    << "layers of arch gpt2 models (give --params N for another model's ZeRO memory)");
  return c;
}

}  // namespace triad::estimate
