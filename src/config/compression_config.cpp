// compression_training: parsing and the bit schedule (compression_config.h).
#include "config/compression_config.h"

#include <algorithm>
#include <regex>

#include "tensor/error.h"

namespace triad::engine {

namespace {

constexpr int kCompressionWidths[] = {8, 4, 2, 1};  // the quantization library's (ops::quantize_blocks)

int compression_width(JsonReader& r, const std::string& key, int fallback) {
  const int bits = int(r.integer(key, fallback, 1, 8));
  if (std::find(std::begin(kCompressionWidths), std::end(kCompressionWidths), bits) == std::end(kCompressionWidths))
    r.fail(key, "8, 4, 2 or 1 (the widths of triad's quantization library)");
  return bits;
}

std::vector<std::string> module_patterns(JsonReader& r) {
  if (!r.has("modules")) return {"*"};
  const nlohmann::json& v = r.value("modules");
  r.known("modules");
  if (!v.is_array() || v.empty()) r.fail("modules", "a non-empty list of module-name patterns");
  std::vector<std::string> out;
  for (const nlohmann::json& p : v) {
    if (!p.is_string()) r.fail("modules", "a list of strings");
    const std::string s = p.get<std::string>();
    if (s != "*") try {
        std::regex check(s);
      } catch (const std::regex_error&) {
        r.fail("modules", "regular expressions; '" + s + "' is not one");
      }
    out.push_back(s);
  }
  return out;
}

// The entries of r's "different_groups", each named by its key, its "params" read by
// `parse` and its module patterns; every reader is finished, so an unknown key is named.
template <class Group, class F>
std::vector<Group> parse_groups(JsonReader& r, F&& parse) {
  std::vector<Group> out;
  if (!r.has("different_groups")) return out;
  const nlohmann::json& groups = r.value("different_groups");
  JsonReader all = r.object("different_groups");
  for (const auto& [name, _] : groups.items()) {
    JsonReader g = all.object(name);
    JsonReader params = g.object("params");
    Group q = parse(params);
    q.name = name;
    params.finish();
    q.modules = module_patterns(g);
    g.finish();
    out.push_back(std::move(q));
  }
  all.finish();
  return out;
}

void parse_weights(JsonReader r, CompressionConfig::Weights& w, std::vector<std::string>& notices) {
  JsonReader shared = r.object("shared_parameters");
  w.enabled = shared.boolean("enabled", false);
  if (shared.boolean("quantizer_kernel", false))
    shared.fail("quantizer_kernel", "false (triad fake-quantizes through its quantization library)");
  w.schedule_offset = shared.integer("schedule_offset", 0, 0, INT64_MAX);
  w.quantize_groups = shared.integer("quantize_groups", 1, 1, INT64_MAX);
  if (shared.has("quantize_verbose")) {
    shared.boolean("quantize_verbose", false);
    notices.push_back("quantize_verbose: triad-train prints each group's bits when they change, verbose or not");
  }
  w.symmetric = shared.choice("quantization_type", "symmetric", {"symmetric", "asymmetric"}) == "symmetric";
  if (shared.has("quantize_weight_in_forward")) {
    shared.boolean("quantize_weight_in_forward", false);
    notices.push_back(
        "quantize_weight_in_forward: triad quantizes the weights in the forward either way (the "
        "full-precision weights train through the straight-through estimator)");
  }
  if (shared.choice("rounding", "nearest", {"nearest", "stochastic"}) == "stochastic")
    shared.fail("rounding", "nearest (stochastic rounding is not available in triad)");
  if (shared.has("fp16_mixed_quantize")) {
    JsonReader mixed = shared.object("fp16_mixed_quantize");
    if (mixed.boolean("enabled", false))
      mixed.fail("enabled", "false (fp16 mixed quantization is not available in triad)");
    if (mixed.has("quantize_change_ratio")) {
      mixed.number("quantize_change_ratio", 0.001, 0.0, 1.0);
      notices.push_back("quantize_change_ratio: it paces fp16 mixed quantization, which triad does not have");
    }
    mixed.finish();
  }
  shared.finish();
  w.groups = parse_groups<WeightQuantGroup>(r, [](JsonReader& params) {
    WeightQuantGroup q;
    q.start_bits = compression_width(params, "start_bits", 8);
    q.target_bits = compression_width(params, "target_bits", q.start_bits);
    if (q.target_bits > q.start_bits) params.fail("target_bits", "at most start_bits " + std::to_string(q.start_bits));
    q.quantization_period = params.integer("quantization_period", 1, 1, INT64_MAX);
    return q;
  });
  r.finish();
}

void parse_activations(JsonReader r, CompressionConfig::Activations& a) {
  JsonReader shared = r.object("shared_parameters");
  a.enabled = shared.boolean("enabled", false);
  if (shared.choice("quantization_type", "symmetric", {"symmetric", "asymmetric"}) != "symmetric")
    shared.fail("quantization_type", "symmetric (triad quantizes each token with one scale, as its integer GEMM does)");
  if (shared.choice("range_calibration", "dynamic", {"dynamic", "static"}) != "dynamic")
    shared.fail("range_calibration", "dynamic (each token's own range; static ranges are not available in triad)");
  a.schedule_offset = shared.integer("schedule_offset", 0, 0, INT64_MAX);
  shared.finish();
  a.groups = parse_groups<ActivationQuantGroup>(r, [](JsonReader& params) {
    ActivationQuantGroup q;
    q.bits = int(params.integer("bits", 8, 1, 32));
    if (q.bits != 8) params.fail("bits", "8 (triad's activation quantization)");
    return q;
  });
  r.finish();
}

void parse_layer_reduction(JsonReader r, CompressionConfig::LayerReduction& l, int64_t n_layer) {
  l.enabled = r.boolean("enabled", false);
  l.keep_number_layer = r.integer("keep_number_layer", n_layer, 1, INT64_MAX);
  l.module_name_prefix = r.string("module_name_prefix", "blocks");
  if (l.module_name_prefix != "blocks")
    r.fail("module_name_prefix", "\"blocks\" (the name of triad's transformer blocks)");
  if (r.has("teacher_layer")) {
    const nlohmann::json& v = r.value("teacher_layer");
    r.known("teacher_layer");
    if (!v.is_array()) r.fail("teacher_layer", "a list of block indices of the --init model");
    for (const nlohmann::json& i : v) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0) r.fail("teacher_layer", "block indices (integers >= 0)");
      if (!l.teacher_layer.empty() && i.get<int64_t>() <= l.teacher_layer.back())
        r.fail("teacher_layer", "increasing block indices");
      l.teacher_layer.push_back(i.get<int64_t>());
    }
  }
  if (r.has("other_module_name")) {
    const nlohmann::json& v = r.value("other_module_name");
    r.known("other_module_name");
    if (!v.is_array()) r.fail("other_module_name", "a list of module names");
    for (const nlohmann::json& s : v) {
      if (!s.is_string()) r.fail("other_module_name", "a list of module names");
      l.other_module_name.push_back(s.get<std::string>());
    }
  }
  if (l.enabled) {
    if (l.keep_number_layer != n_layer)
      r.fail("keep_number_layer", "the model's n_layer " + std::to_string(n_layer) + " (the student's blocks)");
    if (l.teacher_layer.empty())
      for (int64_t i = 0; i < l.keep_number_layer; ++i) l.teacher_layer.push_back(i);
    if (int64_t(l.teacher_layer.size()) != l.keep_number_layer)
      r.fail("teacher_layer",
             "one block index of the --init model per kept block (" + std::to_string(l.keep_number_layer) + ")");
  }
  r.finish();
}

}  // namespace

int scheduled_weight_bits(const WeightQuantGroup& g, int64_t schedule_offset, int64_t step) {
  if (step < schedule_offset) return 0;
  const int64_t since = step - schedule_offset;
  int bits = g.start_bits;
  for (int64_t period = g.quantization_period; bits > g.target_bits && since >= period; period *= 2)
    bits = *std::find_if(std::begin(kCompressionWidths), std::end(kCompressionWidths), [&](int w) { return w < bits; });
  return bits;
}

bool matches_modules(const std::string& name, const std::vector<std::string>& patterns) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return p == "*" || std::regex_search(name, std::regex(p)); });
}

CompressionConfig parse_compression(JsonReader r, int64_t n_layer, std::vector<std::string>& notices) {
  CompressionConfig c;
  for (const char* pruning : {"sparse_pruning", "row_pruning", "head_pruning", "channel_pruning"})
    if (r.has(pruning)) {
      const nlohmann::json& v = r.value(pruning);
      r.known(pruning);
      const bool enabled =
          v.is_object() && v.contains("shared_parameters") && v["shared_parameters"].value("enabled", false);
      if (enabled) r.fail(pruning, "disabled: DeepSpeed's " + std::string(pruning) + " is not available in triad");
    }
  if (r.has("weight_quantization")) parse_weights(r.object("weight_quantization"), c.weights, notices);
  if (r.has("activation_quantization")) parse_activations(r.object("activation_quantization"), c.activations);
  if (r.has("layer_reduction")) parse_layer_reduction(r.object("layer_reduction"), c.layer_reduction, n_layer);
  r.finish();
  return c;
}

}  // namespace triad::engine
