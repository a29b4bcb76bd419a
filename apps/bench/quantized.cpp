// `triad-bench quantized` (bench/quantized.h).
#include "bench/quantized.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/workers.h"
#include "checkpoint/quantized_model.h"
#include "common/report.h"
#include "config/config.h"
#include "config/model_factory.h"
#include "cuda/runtime.h"
#include "engine/engine.h"
#include "engine/hybrid_engine.h"
#include "parallel/self_communicator.h"
#include "tensor/quantized_matmul.h"

namespace triad::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of one call of each case over `repeats` samples after one untimed one; a
// sample on a GPU is `inner` calls, the device finished. The samples of the cases interleave
// so that they see the same state of a shared host.
std::vector<double> median_seconds(const std::vector<std::function<void()>>& cases, int repeats, Device device,
                                   int inner) {
  std::vector<std::vector<double>> times(cases.size());
  for (int round = 0; round <= repeats; ++round)
    for (size_t c = 0; c < cases.size(); ++c) {
      if (device.is_cuda()) cuda::synchronize(device.index);
      const auto t0 = Clock::now();
      for (int i = 0; i < inner; ++i) cases[c]();
      if (device.is_cuda()) cuda::synchronize(device.index);
      if (round > 0) times[c].push_back(std::chrono::duration<double>(Clock::now() - t0).count() / inner);
    }
  std::vector<double> medians;
  for (const std::vector<double>& t : times) medians.push_back(app::median(t));
  return medians;
}

// An Engine on one process of the model `preset` (with `overrides`), in f32 or bf16.
std::unique_ptr<engine::Engine> generation_engine(const std::string& preset, const std::vector<std::string>& overrides,
                                                  const std::string& device, bool bf16) {
  nlohmann::json json = model_config_json(preset, "", overrides);
  json.erase("bf16");
  json.erase("fp16");
  json["device"] = device;
  if (bf16) json["bf16"] = {{"enabled", true}};
  const engine::TrainConfig train = engine::parse_config(json);
  return std::make_unique<engine::Engine>(train,
                                          engine::process_grid(train, std::make_shared<parallel::SelfCommunicator>()));
}

// The model `config` describes (its initial weights, on the cpu) quantized by `recipe` as
// triad-compress zeroquant writes it, loaded as triad-generate loads it (engine::load_model:
// no f32 weight of a quantized layer or table held) and moved to `device`; the file goes to a
// temporary folder, removed after.
engine::LoadedModel quantized_model(const nlohmann::json& config, const engine::QuantRecipe& recipe, Device device) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("triad-bench-quantized-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "model.h5").string();
  engine::LoadedModel q;
  try {
    engine::save_quantized_model(engine::LoadedModel{engine::build_model(engine::parse_config(config)), config}, path,
                                 recipe);
    q = engine::load_model(path);
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  q.model->to(device);
  q.model->eval();
  return q;
}

using Generate =
    std::function<engine::BatchGeneration(const std::vector<std::vector<int32_t>>&, const engine::SamplingOptions&)>;

// Median generated tokens/s of greedy generate calls (one untimed first).
double tokens_per_s(const Generate& generate, Device device, const std::vector<std::vector<int32_t>>& prompts,
                    int64_t answer, int runs) {
  engine::SamplingOptions sampling;
  sampling.temperature = 0;
  sampling.max_new_tokens = answer;
  std::vector<double> rates;
  for (int r = 0; r <= runs; ++r) {
    if (device.is_cuda()) cuda::synchronize(device.index);
    const auto t0 = Clock::now();
    const engine::BatchGeneration g = generate(prompts, sampling);
    if (device.is_cuda()) cuda::synchronize(device.index);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    TRIAD_CHECK(g.logprobs.size(1) == answer, "generation stopped after " << g.logprobs.size(1) << " of " << answer);
    if (r > 0) rates.push_back(double(prompts.size()) * double(answer) / t);
  }
  return app::median(rates);
}

nlohmann::json generation_rows(const QuantizedOptions& o, Device device) {
  const std::string preset = !o.model.empty() ? o.model : device.is_cuda() ? "gpt2-124m" : "tiny";
  std::vector<std::string> overrides;
  if (o.model.empty() && device.is_cpu())  // the RLHF demo's actor, as triad-bench generate
    overrides = {"model.n_layer=2", "model.n_head=4", "model.d_model=128", "model.vocab_size=2048"};
  overrides.push_back("model.seq_len=" + std::to_string(o.prompt + o.answer));
  const std::unique_ptr<engine::Engine> f32 = generation_engine(preset, overrides, o.device, false);
  const std::unique_ptr<engine::Engine> bf16 = generation_engine(preset, overrides, o.device, true);
  nlohmann::json config = model_config_json(preset, "", overrides);
  config.erase("bf16");
  config.erase("fp16");
  engine::QuantRecipe recipe;  // W8A8
  recipe.group_size = o.group_size;
  const engine::LoadedModel w8a8 = quantized_model(config, recipe, device);
  recipe.quantize_embeddings = true;
  const engine::LoadedModel w8a8_emb = quantized_model(config, recipe, device);
  const int64_t vocab = engine::parse_config(config).model.vocab_size;
  std::printf(
      "\ngeneration: %s, prompts of %lld tokens + %lld greedy, generated tokens/s (W8A8 emb: the token "
      "table and tied head W8A8 too)\n",
      preset.c_str(), (long long)o.prompt, (long long)o.answer);
  std::printf("%6s %12s %12s %12s %12s %9s %9s %9s\n", "batch", "f32", "bf16", "W8A8", "W8A8 emb", "vs f32", "emb/f32",
              "vs bf16");
  const auto on_engine = [](engine::Engine& e) -> Generate {
    return
        [&e](const auto& prompts, const auto& sampling) { return engine::generate_batch(e, prompts, sampling, 0, 0); };
  };
  const auto on_model = [](nn::LanguageModel& m) -> Generate {
    return
        [&m](const auto& prompts, const auto& sampling) { return engine::generate_batch(m, prompts, sampling, 0, 0); };
  };
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t batch : o.batches) {
    const Tensor ids = random_token_ids(batch, o.prompt, vocab, 11);
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < o.prompt; ++t)
        prompts[size_t(b)].push_back(int32_t(ids.data<int64_t>()[b * o.prompt + t]));
    const int runs = 3;
    const double a = tokens_per_s(on_engine(*f32), device, prompts, o.answer, runs),
                 b = tokens_per_s(on_engine(*bf16), device, prompts, o.answer, runs),
                 q = tokens_per_s(on_model(*w8a8.model), device, prompts, o.answer, runs),
                 e = tokens_per_s(on_model(*w8a8_emb.model), device, prompts, o.answer, runs);
    std::printf("%6lld %12.0f %12.0f %12.0f %12.0f %9.2f %9.2f %9.2f\n", (long long)batch, a, b, q, e, q / a, e / a,
                q / b);
    rows.push_back({{"batch", batch},
                    {"f32_tokens_per_s", a},
                    {"bf16_tokens_per_s", b},
                    {"w8a8_tokens_per_s", q},
                    {"w8a8_emb_tokens_per_s", e},
                    {"w8a8_vs_f32", q / a},
                    {"w8a8_emb_vs_f32", e / a},
                    {"w8a8_vs_bf16", q / b}});
  }
  const engine::ModelBytes bq = engine::model_bytes(w8a8.model), be = engine::model_bytes(w8a8_emb.model);
  std::printf("model bytes: f32 %lld, W8A8 %lld (%.2fx smaller), W8A8 emb %lld (%.2fx smaller)\n",
              (long long)bq.full_precision, (long long)bq.resident, double(bq.full_precision) / double(bq.resident),
              (long long)be.resident, double(be.full_precision) / double(be.resident));
  return {{"model", preset},
          {"prompt", o.prompt},
          {"answer", o.answer},
          {"rows", rows},
          {"bytes", {{"f32", bq.full_precision}, {"w8a8", bq.resident}, {"w8a8_emb", be.resident}}}};
}

}  // namespace

int run_quantized_bench(const QuantizedOptions& o) {
  TRIAD_CHECK(!o.shapes.empty() && o.shapes.size() % 2 == 0,
              "triad-bench quantized: --shapes takes (K, N) pairs, got " << o.shapes.size() << " numbers");
  const int threads = app::set_threads(o.threads);
  const Device device = engine::training_device(o.device);
  const std::string kernel = device.is_cuda() ? "cuda-dp4a" : int8_kernel_name(ops::cpu_int8_kernels().front());
  const std::string device_name = device.is_cuda() ? cuda::device_properties(device.index).name : "cpu";
  const int inner = device.is_cuda() ? 20 : 1;
  std::printf("triad-bench quantized: %s (%s), %d threads, groups of %lld, integer kernel %s\n", device.str().c_str(),
              device_name.c_str(), threads, (long long)o.group_size, kernel.c_str());
  std::printf("%6s %6s %6s %10s %10s %10s %10s %9s %9s %9s\n", "M", "K", "N", "f32 TOPS", "bf16 TOPS", "W8A8 TOPS",
              "W4A8 TOPS", "W8A8 x", "W4A8 x", "W8A8/bf16");
  nlohmann::json rows = nlohmann::json::array();
  double f32_total = 0, bf16_total = 0, w8_total = 0, w4_total = 0;
  Generator gen(1);
  for (size_t s = 0; s < o.shapes.size(); s += 2) {
    const int64_t k = o.shapes[s], n = o.shapes[s + 1];
    Tensor w = Tensor::empty({n, k});
    ops::normal_(w, 0.0, 0.02, gen);
    const QuantFormat f8{8, o.group_size}, f4{4, o.group_size};
    const PackedWeight w8 = ops::to(ops::pack_weight(ops::quantize_blocks(w, f8), n, k, f8), device);
    const PackedWeight w4 = ops::to(ops::pack_weight(ops::quantize_blocks(w, f4), n, k, f4), device);
    const Tensor wd = ops::to(w, device), wb = ops::to(wd, DType::bf16), bias = Tensor::zeros({n}, DType::f32, device);
    for (int64_t m : o.tokens) {
      Tensor x = Tensor::empty({m, k});
      ops::normal_(x, 0.0, 1.0, gen);
      const Tensor xd = ops::to(x, device), xb = ops::to(xd, DType::bf16);
      const std::vector<double> t = median_seconds(
          {[&] { ops::linear(xd, wd, bias); }, [&] { ops::linear(xb, wb, bias); },
           [&] { ops::quantized_linear(xd, w8, bias, 8); }, [&] { ops::quantized_linear(xd, w4, bias, 8); }},
          o.repeats, device, inner);
      const double ops_count = 2.0 * double(m) * double(n) * double(k);
      std::printf("%6lld %6lld %6lld %10.3f %10.3f %10.3f %10.3f %9.2f %9.2f %9.2f\n", (long long)m, (long long)k,
                  (long long)n, ops_count / t[0] / 1e12, ops_count / t[1] / 1e12, ops_count / t[2] / 1e12,
                  ops_count / t[3] / 1e12, t[0] / t[2], t[0] / t[3], t[1] / t[2]);
      f32_total += t[0], bf16_total += t[1], w8_total += t[2], w4_total += t[3];
      rows.push_back({{"m", m},
                      {"k", k},
                      {"n", n},
                      {"f32_tops", ops_count / t[0] / 1e12},
                      {"bf16_tops", ops_count / t[1] / 1e12},
                      {"w8a8_tops", ops_count / t[2] / 1e12},
                      {"w4a8_tops", ops_count / t[3] / 1e12},
                      {"w8a8_speedup", t[0] / t[2]},
                      {"w4a8_speedup", t[0] / t[3]},
                      {"w8a8_vs_bf16", t[1] / t[2]}});
    }
  }
  std::printf("all shapes: W8A8 %.2fx, W4A8 %.2fx the f32 GEMM's time; W8A8 %.2fx the bf16 GEMM's\n",
              f32_total / w8_total, f32_total / w4_total, bf16_total / w8_total);
  nlohmann::json generation;
  if (!o.batches.empty() && o.batches.front() > 0) generation = generation_rows(o, device);
  app::print_json_line({{"bench", "quantized"},
                        {"device", device.str()},
                        {"device_name", device_name},
                        {"threads", threads},
                        {"group_size", o.group_size},
                        {"kernel", kernel},
                        {"w8a8_speedup", f32_total / w8_total},
                        {"w4a8_speedup", f32_total / w4_total},
                        {"w8a8_vs_bf16", bf16_total / w8_total},
                        {"rows", rows},
                        {"generation", generation}});
  return 0;
}

}  // namespace triad::bench
