#include "bench/step.h"

#include <chrono>
#include <cstdio>

#include "common/report.h"
#include "engine/config.h"
#include "triad.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

void add_step_command(CLI::App& app, StepOptions& o) {
  CLI::App* cmd = app.add_subcommand("step", "time full training steps (forward, backward, AdamW) of a GPT");
  cmd->add_option("--model", o.model, "model preset: tiny, gpt2-124m, gpt2-350m")->capture_default_str();
  cmd->add_option("--config", o.config, "take the model from a triad-train config instead of a preset");
  cmd->add_option("--set", o.overrides, "override a key of --config: dotted.key=value (repeatable)");
  cmd->add_option("--batch", o.batch, "sequences per step")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o.threads, "OpenMP threads (0: default)")->capture_default_str();
  cmd->add_option("--steps", o.steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--checkpointing", o.checkpointing, "recompute each block in the backward pass");
  cmd->callback([&o] { run_step_bench(o); });
}

int run_step_bench(const StepOptions& o) {
  const int threads = app::set_threads(o.threads);
  nn::GPTConfig config = nn::GPTConfig::preset(o.model);
  std::string name = o.model;
  if (!o.config.empty()) {
    nlohmann::json json = engine::load_config_file(o.config);
    for (const std::string& s : o.overrides) engine::apply_override(json, s);
    const engine::TrainConfig train = engine::parse_config(json);
    config = train.model;
    name = o.config;
  }
  config.activation_checkpointing = config.activation_checkpointing || o.checkpointing;
  TRIAD_CHECK(o.seq <= config.seq_len, "--seq " << o.seq << " exceeds the model's seq_len " << config.seq_len);
  nn::GPT model(config);
  optim::AdamW opt(optim::decay_groups(model.parameters(), 0.1), {.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95});

  Generator data_gen(7);
  Tensor tokens = Tensor::empty({o.batch, o.seq + 1}, DType::f32);
  ops::uniform_(tokens, 0.0, double(config.vocab_size) - 1e-3, data_gen);
  const std::vector<float> raw = tokens.to_vector<float>();
  std::vector<int64_t> ids(raw.begin(), raw.end());
  const Tensor all = Tensor::from_vector(ids, {o.batch, o.seq + 1});
  const Tensor x = ops::contiguous(ops::narrow(all, 1, 0, o.seq)), y = ops::contiguous(ops::narrow(all, 1, 1, o.seq));

  const double n_params = double(model.num_parameters());
  const double flops_per_token = 6.0 * n_params + 6.0 * double(config.n_layer * config.d_model * o.seq);
  const double tokens_per_step = double(o.batch * o.seq);
  std::printf("triad-bench step: %s (%.1fM parameters), batch %lld x seq %lld, %d threads\n", name.c_str(),
              n_params / 1e6, (long long)o.batch, (long long)o.seq, threads);
  std::printf("%6s %10s %10s %10s %10s %10s\n", "step", "fwd_ms", "bwd_ms", "optim_ms", "step_ms", "loss");

  std::vector<double> step_ms, fwd_ms, bwd_ms, opt_ms;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const auto t0 = Clock::now();
    opt.zero_grad();
    const Tensor loss = model.loss(x, y);
    const double f = ms_since(t0);
    const auto t1 = Clock::now();
    backward(loss);
    const double b = ms_since(t1);
    const auto t2 = Clock::now();
    opt.step();
    const double u = ms_since(t2), total = ms_since(t0);
    std::printf("%6d %10.1f %10.1f %10.1f %10.1f %10.4f%s\n", s, f, b, u, total, loss.item(),
                s < o.warmup ? "  (warmup)" : "");
    if (s < o.warmup) continue;
    step_ms.push_back(total);
    fwd_ms.push_back(f);
    bwd_ms.push_back(b);
    opt_ms.push_back(u);
  }
  const double med = app::median(step_ms);
  const double tps = tokens_per_step / (med / 1e3);
  const double gflops = flops_per_token * tps / 1e9;
  std::printf("median: %.1f ms/step (fwd %.1f, bwd %.1f, optim %.1f), %.0f tokens/s, %.1f GFLOP/s, peak RSS %.0f MiB\n",
              med, app::median(fwd_ms), app::median(bwd_ms), app::median(opt_ms), tps, gflops, app::peak_rss_mb());
  app::print_json_line({{"bench", "step"},
                        {"model", name},
                        {"params", int64_t(n_params)},
                        {"batch", o.batch},
                        {"seq", o.seq},
                        {"threads", threads},
                        {"steps", o.steps},
                        {"step_ms_median", med},
                        {"fwd_ms_median", app::median(fwd_ms)},
                        {"bwd_ms_median", app::median(bwd_ms)},
                        {"optim_ms_median", app::median(opt_ms)},
                        {"tokens_per_s", tps},
                        {"achieved_gflops", gflops},
                        {"peak_rss_mb", app::peak_rss_mb()}});
  return 0;
}

}  // namespace triad::bench
