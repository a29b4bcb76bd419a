// triad-estimate: model-state memory per device of ZeRO stages 0-3 (the ZeRO paper's Table 1,
// DeepSpeed's estimate_zero*_model_states_mem_needs), for a parameter count or for the model
// of a triad-train config. Prints a readable table and, as its last line, one JSON object.
//
//   triad-estimate --params 7.5e9 --dp 64 [--k 12] [--persistent-params N]
//   triad-estimate --config configs/gpt2-124m.json [--set model.n_layer=24]... --dp 1,4,64 [--tp 2]
//                  [--persistence-threshold 1e5]
// With --time it also predicts each stage's step time on each dp (estimate/step_time.h).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/main_guard.h"
#include "common/report.h"
#include "engine/config.h"
#include "estimate/step_time.h"
#include "nn/gpt.h"
#include "tensor/error.h"
#include "zero/estimate.h"

namespace {

using namespace triad;

constexpr double kGB = 1e9;

// A triad-train config without its batch arithmetic: the batch keys are replaced by a
// neutral micro batch of 1, so a config written for one dp does not fail under another.
// `micro_batch` receives the config's own train_micro_batch_size_per_gpu (0 when absent).
engine::TrainConfig parse_config_for_estimate(const std::string& path, const std::vector<std::string>& overrides,
                                              int64_t& micro_batch) {
  nlohmann::json json = engine::load_config_file(path);
  for (const std::string& s : overrides) engine::apply_override(json, s);
  micro_batch = 0;
  if (json.is_object()) {
    const auto micro = json.find("train_micro_batch_size_per_gpu");
    if (micro != json.end() && micro->is_number_integer()) micro_batch = micro->get<int64_t>();
    json.erase("train_batch_size");
    json.erase("gradient_accumulation_steps");
    json["train_micro_batch_size_per_gpu"] = 1;
  }
  return engine::parse_config(json, 1);
}

// A count as JSON: an integer when it is one (and exactly representable), else a double.
nlohmann::json count_json(double x) {
  if (x == std::floor(x) && std::fabs(x) < 9007199254740992.0) return int64_t(x);
  return x;
}

// A CLI11 check that the value is a number (a whole one when `integer`) for which `ok` holds,
// with a message a person can read: "--dp: must be at least 1, got 0".
CLI::Validator number_check(const std::string& must_be, std::function<bool(double)> ok, bool integer = false) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x) || !std::isfinite(x)) return "expected a number, got '" + text + "'";
        if (integer && x != std::floor(x)) return "expected a whole number, got " + text;
        if (!ok(x)) return "must be " + must_be + ", got " + text;
        return std::string();
      },
      integer ? "INT" : "NUMBER");
}

std::string stage_label(int stage) { return std::to_string(stage) + " " + zero::stage_name(stage); }

}  // namespace

int main(int argc, char** argv) {
  return triad::app::guarded_main([&] {
    CLI::App app{"triad-estimate: ZeRO model-state memory per device (parameters, gradients, optimizer state)"};
    double params = 0, k = zero::kAdamMixedPrecisionBytes, persistent = 0;
    double threshold = double(zero::kDefaultPersistenceThreshold);
    std::string config_path;
    std::vector<std::string> overrides;
    std::vector<int64_t> dps;
    CLI::Option* params_opt = app.add_option("--params", params, "number of parameters (Ψ), e.g. 7.5e9")
                                  ->check(number_check("positive", [](double x) { return x > 0; }));
    CLI::Option* config_opt = app.add_option("--config", config_path, "take Ψ from a triad-train config's model");
    app.add_option("--set", overrides, "override a key of --config: dotted.key=value (repeatable)")->needs(config_opt);
    app.add_option("--dp", dps, "data-parallel ranks; a list prints one column each: --dp 1,8,64")
        ->required()
        ->delimiter(',')
        ->check(number_check(
            "at least 1", [](double x) { return x >= 1; }, true));
    int tp = 1;
    app.add_option("--tp", tp,
                   "tensor-parallel ranks: the figures are per rank of a tp × dp grid (with --config, the split "
                   "layers divided by tp and the rest whole; with --params, Ψ / tp)")
        ->capture_default_str()
        ->check(number_check("at least 1", [](double x) { return x >= 1; }, true));
    app.add_option("--k", k, "bytes of optimizer state per parameter (12: mixed-precision Adam)")
        ->capture_default_str()
        ->check(number_check("positive", [](double x) { return x > 0; }));
    app.add_option("--persistent-params", persistent,
                   "with --params: elements that stage 3 keeps whole on every rank (small parameters)")
        ->needs(params_opt)
        ->check(number_check("non-negative", [](double x) { return x >= 0; }));
    app.add_option("--persistence-threshold", threshold,
                   "with --config: stage 3 keeps parameters of at most this many elements whole on every rank "
                   "(DeepSpeed's stage3_param_persistence_threshold; 0: none)")
        ->capture_default_str()
        ->needs(config_opt)
        ->check(number_check("non-negative", [](double x) { return x >= 0; }));
    params_opt->excludes(config_opt);
    estimate::TimeOptions time;
    estimate::add_time_options(app, time);
    CLI11_PARSE(app, argc, argv);

    TRIAD_CHECK(params_opt->count() > 0 || config_opt->count() > 0,
                "give the model size: --params N (e.g. 7.5e9) or --config FILE");
    nlohmann::json model_json;
    std::string header;
    int64_t persistent_count = -1;  // known only for a config's model
    estimate::TimeModel time_model;
    if (config_opt->count() > 0) {
      const engine::TrainConfig config = parse_config_for_estimate(config_path, overrides, time_model.micro_batch);
      const nn::GPTConfig& model = config.model;
      const auto sizes = model.parameter_sizes(tp);
      const zero::PersistentParams p = zero::persistent_parameters(sizes, int64_t(std::floor(threshold)));
      params = 0;
      for (const auto& [_, n] : sizes) params += double(n);
      persistent = double(p.elements);
      persistent_count = p.count;
      header = "GPT L" + std::to_string(model.n_layer) + " C" + std::to_string(model.d_model) + " NH" +
               std::to_string(model.n_head) + " V" + std::to_string(model.vocab_size) + " T" +
               std::to_string(model.seq_len) + " from " + config_path;
      model_json = {{"config", config_path},    {"n_layer", model.n_layer}, {"n_head", model.n_head},
                    {"d_model", model.d_model}, {"seq_len", model.seq_len}, {"vocab_size", model.vocab_size}};
      time_model.n_layer = model.n_layer, time_model.d_model = model.d_model, time_model.seq_len = model.seq_len;
      time_model.dtype = config.precision.dtype;
      time_model.overlap_comm = config.zero.overlap_comm;
      time_model.cluster = config.cluster;
    }
    TRIAD_CHECK(tp == 1 || !time.enabled, "--time predicts data-parallel steps only; leave out --tp " << tp);
    if (config_opt->count() == 0) params /= double(tp);
    if (tp > 1) header += (header.empty() ? "" : ", ") + std::string("per rank of tp=") + std::to_string(tp);
    // Everything is computed before anything is printed, so a bad value prints only its error.
    std::vector<std::array<zero::ModelStateBytes, 4>> results;
    for (int64_t dp : dps)
      results.push_back(zero::model_state_bytes_all(
          {.num_params = params, .dp = dp, .optimizer_bytes = k, .persistent_params = persistent}));
    time_model.params = params, time_model.persistent_params = persistent;
    estimate::StepTimes times;
    if (time.enabled) times = estimate::compute_step_times(time, time_model, dps);

    if (!header.empty()) std::printf("triad-estimate: %s\n", header.c_str());
    std::printf("%s%.0f parameters (%.4g %s)\n", header.empty() ? "triad-estimate: " : "  ", params,
                params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M");
    if (persistent_count >= 0)
      std::printf("  stage 3 keeps %lld parameters of <= %.0f elements (%.0f elements) whole on every rank\n",
                  (long long)persistent_count, std::floor(threshold), persistent);
    else if (persistent > 0)
      std::printf("  stage 3 keeps %.0f elements whole on every rank\n", persistent);
    std::printf("  16-bit parameters and gradients, K = %g bytes of optimizer state per parameter; GB = 1e9 bytes\n",
                k);

    nlohmann::json estimates = nlohmann::json::array();
    std::printf("\n%6s  %-12s %12s %12s %12s %12s\n", "dp", "stage", "params GB", "grads GB", "optim GB", "total GB");
    for (size_t i = 0; i < dps.size(); ++i) {
      for (const zero::ModelStateBytes& b : results[i]) {
        std::printf("%6lld  %-12s %12.3f %12.3f %12.3f %12.3f\n", (long long)dps[i], stage_label(b.stage).c_str(),
                    b.parameters / kGB, b.gradients / kGB, b.optimizer / kGB, b.total() / kGB);
        estimates.push_back({{"dp", dps[i]},
                             {"stage", b.stage},
                             {"params_bytes", b.parameters},
                             {"grads_bytes", b.gradients},
                             {"optimizer_bytes", b.optimizer},
                             {"total_bytes", b.total()},
                             {"total_gb", b.total() / kGB}});
      }
    }
    if (dps.size() > 1) {
      std::printf("\ntotal per device, GB\n%-12s", "stage");
      for (int64_t dp : dps) std::printf(" %12s", ("dp=" + std::to_string(dp)).c_str());
      std::printf("\n");
      for (int s = 0; s < 4; ++s) {
        std::printf("%-12s", stage_label(s).c_str());
        for (const auto& r : results) std::printf(" %12.3f", r[s].total() / kGB);
        std::printf("\n");
      }
    }

    nlohmann::json out = {{"program", "triad-estimate"},
                          {"params", count_json(params)},
                          {"k", k},
                          {"param_bytes", zero::kParamBytes},
                          {"grad_bytes", zero::kGradBytes},
                          {"persistent_params", count_json(persistent)},
                          {"dp", dps}, {"tp", tp},
                          {"estimates", estimates}};
    if (!model_json.is_null()) {
      out["model"] = model_json;
      out["persistence_threshold"] = count_json(std::floor(threshold));
      out["persistent_count"] = persistent_count;
    }
    if (time.enabled) out["time"] = estimate::print_step_times(times);
    triad::app::print_json_line(out);
    return 0;
  });
}
