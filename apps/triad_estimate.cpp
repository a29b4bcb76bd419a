// triad-estimate: model-state memory per device of ZeRO stages 0-3 (the ZeRO paper's Table 1,
// DeepSpeed's estimate_zero*_model_states_mem_needs), for a parameter count or for the model
// of a triad-train config. Prints a readable table and, as its last line, one JSON object.
//
//   triad-estimate --params 7.5e9 --dp 64 [--k 12] [--persistent-params N] [--offload-ratio 0.5]
//   triad-estimate --config configs/gpt2-124m.json [--set model.n_layer=24]... --dp 1,4,64 [--tp 2]
//                  [--persistence-threshold 1e5]
// With --time it also predicts each stage's step time on each dp (estimate/step_time.h).
//
// A pp × dp × tp layout of a config's GPT (any of --pp, --stage, --micro-batches,
// --schedule, --virtual-stages, or a config whose pipeline.stages > 1) prints instead, for
// each pipeline stage, one rank's model states, activations and p2p buffers
// (estimate/layout_memory.h), the schedule's bubble, and with --time the layout's step
// (estimate/layout_time.h):
//   triad-estimate --config configs/gpt2-124m.json --pp 4 --dp 2 --tp 1 --stage 1
//                  --micro-batches 8 --schedule 1f1b [--virtual-stages 2] [--time --flops 4e14]
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/main_guard.h"
#include "common/report.h"
#include "config/config.h"
#include "estimate/layout_config.h"
#include "estimate/layout_memory.h"
#include "estimate/layout_time.h"
#include "estimate/model_states.h"
#include "estimate/offload_states.h"
#include "estimate/step_time.h"
#include "nn/gpt.h"
#include "tensor/error.h"

namespace {

using namespace triad;

constexpr double kGB = 1e9;

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

std::string stage_label(int stage) { return std::to_string(stage) + " " + estimate::stage_name(stage); }

nlohmann::json model_json_of(const nn::GPTConfig& model, const std::string& path) {
  return {{"config", path},           {"n_layer", model.n_layer}, {"n_head", model.n_head},
          {"d_model", model.d_model}, {"seq_len", model.seq_len}, {"vocab_size", model.vocab_size}};
}

std::string model_header(const nn::GPTConfig& model, const std::string& path) {
  return "GPT L" + std::to_string(model.n_layer) + " C" + std::to_string(model.d_model) + " NH" +
         std::to_string(model.n_head) + " V" + std::to_string(model.vocab_size) + " T" + std::to_string(model.seq_len) +
         " from " + path;
}

estimate::TimeModel time_model_of(const engine::TrainConfig& config) {
  estimate::TimeModel t;
  t.n_layer = config.model.n_layer, t.d_model = config.model.d_model, t.seq_len = config.model.seq_len;
  t.dtype = config.precision.dtype;
  t.overlap_comm = config.zero.overlap_comm;
  t.cluster = config.cluster;
  return t;
}

// The pp x dp x tp layout of a config's GPT: per-stage memory, bubble, and with --time the step.
void run_layout(const std::string& path, const std::vector<std::string>& overrides, estimate::LayoutRequest request,
                const estimate::TimeOptions& time, double k, double threshold) {
  const engine::TrainConfig config = estimate::resolve_layout(path, overrides, request);
  // Everything is computed before anything is printed, so a bad value prints only its error.
  const estimate::LayoutMemory memory =
      estimate::estimate_layout_memory(config, request, time.seq, k, int64_t(std::floor(threshold)));
  estimate::LayoutTime layout_time;
  if (time.enabled) layout_time = estimate::compute_layout_time(time, time_model_of(config), memory);

  const double params = double(config.model.num_parameters());
  std::printf("triad-estimate: %s\n", model_header(config.model, path).c_str());
  std::printf(
      "  %.0f parameters (%.4g %s); 16-bit parameters and gradients, K = %g bytes of optimizer state per "
      "parameter; activations f32; GB = 1e9 bytes\n",
      params, params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M", k);
  nlohmann::json out = {{"program", "triad-estimate"},
                        {"params", count_json(params)},
                        {"k", k},
                        {"param_bytes", estimate::kParamBytes},
                        {"grad_bytes", estimate::kGradBytes},
                        {"persistence_threshold", count_json(std::floor(threshold))},
                        {"model", model_json_of(config.model, path)}};
  out["layout"] = estimate::print_layout_memory(memory);
  if (time.enabled) out["time"] = estimate::print_layout_time(layout_time);
  triad::app::print_json_line(out);
}

}  // namespace

int main(int argc, char** argv) {
  return triad::app::guarded_main([&] {
    CLI::App app{
        "triad-estimate: ZeRO model-state memory per device (parameters, gradients, optimizer state), "
        "and per pipeline stage of a pp x dp x tp layout of a config's GPT (with activations)"};
    double params = 0, k = estimate::kAdamMixedPrecisionBytes, persistent = 0;
    double threshold = double(estimate::kDefaultPersistenceThreshold);
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
    int tp = 0;
    app.add_option("--tp", tp,
                   "tensor-parallel ranks: the figures are per rank of a tp × dp grid (with --config, the split "
                   "layers divided by tp and the rest whole; with --params, Ψ / tp). Default: the config's "
                   "model.tensor_parallel, else 1")
        ->check(number_check(
            "at least 1", [](double x) { return x >= 1; }, true));
    // The pp x dp x tp layout of a config's GPT (estimate/layout_memory.h).
    const std::string layout_group = "Layout of a config's GPT (per pipeline stage)";
    estimate::LayoutRequest request;
    std::vector<CLI::Option*> layout_opts{
        app.add_option("--pp", request.pp, "pipeline stages (default: the config's pipeline.stages, else 1)")
            ->group(layout_group)
            ->check(number_check(
                "at least 1", [](double x) { return x >= 1; }, true)),
        app.add_option("--stage", request.zero_stage,
                       "ZeRO stage over dp (default: the config's zero_optimization.stage, else 0)")
            ->group(layout_group)
            ->check(number_check(
                "0, 1, 2 or 3", [](double x) { return x >= 0 && x <= 3; }, true)),
        app.add_option("--micro-batches", request.micro_batches,
                       "micro-batches per step, m (default: the config's gradient_accumulation_steps, else "
                       "train_batch_size / (micro batch x dp))")
            ->group(layout_group)
            ->check(number_check(
                "at least 1", [](double x) { return x >= 1; }, true)),
        app.add_option("--schedule", request.schedule,
                       "pipeline schedule: gpipe, 1f1b, interleaved, zb_h1 (default: the config's pipeline.schedule)")
            ->group(layout_group)
            ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb_h1"})),
        app.add_option("--virtual-stages", request.virtual_stages,
                       "chunks per rank of the interleaved schedule (default: the config's pipeline.virtual_stages)")
            ->group(layout_group)
            ->check(number_check(
                "at least 1", [](double x) { return x >= 1; }, true))};
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
    double offload_ratio = 1.0;
    app.add_option("--offload-ratio", offload_ratio,
                   "offload_optimizer.ratio: below 1, each choice with the optimizer on cpu gets a row with only "
                   "this share of its state on the host (partial offload)")
        ->capture_default_str()
        ->check(number_check("a number in [0, 1]", [](double x) { return x >= 0 && x <= 1; }));
    params_opt->excludes(config_opt);
    estimate::TimeOptions time;
    estimate::add_time_options(app, time);
    CLI11_PARSE(app, argc, argv);

    TRIAD_CHECK(params_opt->count() > 0 || config_opt->count() > 0,
                "give the model size: --params N (e.g. 7.5e9) or --config FILE");
    std::string layout_flags;
    for (const CLI::Option* o : layout_opts)
      if (o->count() > 0) layout_flags += (layout_flags.empty() ? "" : ", ") + o->get_name();
    TRIAD_CHECK(config_opt->count() > 0 || layout_flags.empty(),
                layout_flags << ": a pipeline layout needs the model's layers, how they are cut into stages and "
                                "what each keeps of a micro-batch; --params gives only a parameter count. Give "
                                "--config FILE (a triad-train config) instead");
    nlohmann::json model_json;
    std::string header;
    int64_t persistent_count = -1;  // known only for a config's model
    estimate::TimeModel time_model;
    if (config_opt->count() > 0) {
      request.tp = tp, request.dp = dps.front(), request.micro_batch = time.micro_batch;
      // A layout flag, a config that is a pipeline, or a tp step (--time) asks for the layout.
      estimate::LayoutRequest plain = request;
      plain.need_micro_batch = false;
      const engine::TrainConfig config = estimate::resolve_layout(config_path, overrides, plain);
      if (!layout_flags.empty() || plain.pp > 1 || (time.enabled && plain.tp > 1)) {
        TRIAD_CHECK(dps.size() == 1, "--dp: a layout takes one data-parallel size, got " << dps.size());
        TRIAD_CHECK(app.get_option("--accumulation")->count() == 0,
                    "--accumulation: in a layout the micro-batches per step are --micro-batches");
        run_layout(config_path, overrides, request, time, k, threshold);
        return 0;
      }
      tp = plain.tp;
      time_model = time_model_of(config);
      time_model.micro_batch = plain.micro_batch;
      const nn::GPTConfig& model = config.model;
      const auto sizes = model.parameter_sizes(tp);
      const estimate::PersistentParams p = estimate::persistent_parameters(sizes, int64_t(std::floor(threshold)));
      params = 0;
      for (const auto& [_, n] : sizes) params += double(n);
      persistent = double(p.elements);
      persistent_count = p.count;
      header = model_header(model, config_path);
      model_json = model_json_of(model, config_path);
    }
    if (tp == 0) tp = 1;
    TRIAD_CHECK(tp == 1 || !time.enabled, "--time with --tp " << tp
                                                              << ": the tensor-parallel step needs the model's "
                                                                 "layers; give --config FILE");
    if (config_opt->count() == 0) params /= double(tp);
    if (tp > 1) header += (header.empty() ? "" : ", ") + std::string("per rank of tp=") + std::to_string(tp);
    // Everything is computed before anything is printed, so a bad value prints only its error.
    std::vector<std::array<estimate::ModelStateBytes, 4>> results;
    std::vector<std::vector<estimate::PlacedStateBytes>> placed;
    for (int64_t dp : dps) {
      const estimate::ModelStateInput in{.num_params = params, .dp = dp, .optimizer_bytes = k, .persistent_params = persistent};
      results.push_back(estimate::model_state_bytes_all(in));
      placed.push_back(estimate::placed_state_bytes_all(in, {}, offload_ratio));
    }
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
      for (const estimate::ModelStateBytes& b : results[i]) {
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

    // Offload (estimate/offload_states.h), with DeepSpeed's default buffers.
    nlohmann::json offload = nlohmann::json::array();
    std::printf(
        "\noffload (NVMe buffers: optimizer 4 x 1e9, parameters 5 x 1e8 elements)\n%6s  %-12s %-9s %6s %-9s "
        "%12s %12s %12s\n",
        "dp", "stage", "optimizer", "ratio", "params", "device GB", "host GB", "NVMe GB");
    for (size_t i = 0; i < dps.size(); ++i)
      for (const estimate::PlacedStateBytes& p : placed[i]) {
        std::printf("%6lld  %-12s %-9s %6.3g %-9s %12.3f %12.3f %12.3f\n", (long long)dps[i],
                    stage_label(p.stage).c_str(), estimate::target_name(p.choice.optimizer), p.choice.ratio,
                    estimate::target_name(p.choice.params), p.device / kGB, p.host / kGB, p.nvme / kGB);
        offload.push_back({{"dp", dps[i]},
                           {"stage", p.stage},
                           {"offload_optimizer", estimate::target_name(p.choice.optimizer)},
                           {"offload_ratio", p.choice.ratio},
                           {"offload_param", estimate::target_name(p.choice.params)},
                           {"device_bytes", p.device},
                           {"host_bytes", p.host},
                           {"nvme_bytes", p.nvme}});
      }

    nlohmann::json out = {{"program", "triad-estimate"},
                          {"params", count_json(params)},
                          {"k", k},
                          {"param_bytes", estimate::kParamBytes},
                          {"grad_bytes", estimate::kGradBytes},
                          {"persistent_params", count_json(persistent)},
                          {"dp", dps},
                          {"tp", tp},
                          {"estimates", estimates},
                          {"offload", offload}};
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
