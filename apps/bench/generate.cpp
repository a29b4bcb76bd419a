#include "bench/generate.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "bench/workers.h"
#include "common/report.h"
#include "config/config.h"
#include "config/model_factory.h"
#include "cuda/runtime.h"
#include "engine/engine.h"
#include "engine/hybrid_engine.h"
#include "parallel/self_communicator.h"
#include "triad.h"

namespace triad::bench {

namespace {

constexpr double kGpuTarget = 50000.0;  // generated tokens/s at batch 32 on a GPU

}  // namespace

int run_generate_bench(const GenerateOptions& o) {
  const int threads = app::set_threads(o.threads);
  nlohmann::json json = model_config_json(o.model, o.config, o.overrides);
  json.erase("bf16");
  json.erase("fp16");
  const Device device = engine::training_device(o.device);
  const DType dtype = o.dtype.empty() ? (device.is_cuda() ? DType::bf16 : DType::f32) : dtype_from_name(o.dtype);
  json["device"] = o.device;
  if (dtype == DType::bf16) json["bf16"] = {{"enabled", true}};
  const engine::TrainConfig train = engine::parse_config(json);
  const int64_t seq_len = engine::model_shape(train).seq_len;
  TRIAD_CHECK(o.prompt + o.answer <= seq_len,
              "--prompt " << o.prompt << " + --answer " << o.answer << " exceed the model's seq_len " << seq_len);
  const engine::GridPtr grid = engine::process_grid(train, std::make_shared<parallel::SelfCommunicator>());
  // The Engine trains a Llama as its list of layers (one pipeline stage); generation takes it
  // whole, as RLHF's actor does (Note [Built models] in engine/engine.h).
  engine::Engine engine = train.arch == "llama"
                              ? engine::Engine(train, [&](auto par) { return engine::build_model(train, par); }, grid)
                              : engine::Engine(train, grid);

  const Tensor ids = random_token_ids(o.batch, o.prompt, engine::model_shape(train).vocab_size, 11);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(o.batch));
  for (int64_t b = 0; b < o.batch; ++b)
    for (int64_t t = 0; t < o.prompt; ++t) prompts[size_t(b)].push_back(int32_t(ids.data<int64_t>()[b * o.prompt + t]));
  const engine::SamplingOptions sampling{.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p,
                                         .max_new_tokens = o.answer, .seed = 5};

  const std::string device_name = device.is_cuda() ? cuda::device_properties(device.index).name : "cpu";
  double n_params = 0;
  for (const Tensor& p : engine.model().parameters()) n_params += double(p.numel());
  std::printf("triad-bench generate: %.2fM parameters, %lld prompts of %lld tokens + %lld, %s on %s (%s), %d threads\n",
              n_params / 1e6, (long long)o.batch, (long long)o.prompt, (long long)o.answer, dtype_name(dtype),
              device.str().c_str(), device_name.c_str(), threads);
  // Times --warmup + --runs calls with graphs on or off; keeps the first call's result.
  struct Timed {
    std::vector<double> ms, tps, step_ms;
    engine::BatchGeneration first;
  };
  auto time_calls = [&](bool graph) {
    engine::SamplingOptions options = sampling;
    options.cuda_graph = graph;
    Timed timed;
    if (device.is_cuda()) std::printf("%s CUDA graphs:\n", graph ? "with" : "without");
    std::printf("%5s %10s %12s %10s\n", "run", "ms", "tokens/s", "ms/step");
    for (int r = 0; r < o.warmup + o.runs; ++r) {
      if (device.is_cuda()) cuda::synchronize(device.index);
      const auto start = std::chrono::steady_clock::now();
      engine::BatchGeneration g = engine::generate_batch(engine, prompts, options, 0, 0);
      if (device.is_cuda()) cuda::synchronize(device.index);
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      const int64_t steps = g.logprobs.size(1);
      TRIAD_CHECK(steps == o.answer, "generation stopped after " << steps << " of " << o.answer << " steps");
      const double tokens = double(o.batch * steps);
      if (r == 0) timed.first = std::move(g);
      if (r < o.warmup) continue;
      timed.ms.push_back(t);
      timed.tps.push_back(tokens / (t / 1e3));
      timed.step_ms.push_back(t / double(steps));
      std::printf("%5d %10.2f %12.0f %10.3f\n", r - o.warmup, t, timed.tps.back(), timed.step_ms.back());
    }
    return timed;
  };
  const Timed timed = time_calls(o.cuda_graph);
  const std::vector<double>&ms = timed.ms, &tps = timed.tps, &step_ms = timed.step_ms;
  const double med_tps = app::median(tps);
  std::printf("median: %.2f ms per call, %.0f generated tokens/s, %.3f ms per step", app::median(ms), med_tps,
              app::median(step_ms));
  if (device.is_cuda()) std::printf(" (target %.0f: %s)", kGpuTarget, med_tps >= kGpuTarget ? "met" : "not met");
  std::printf("\n");
  nlohmann::json eager_json;  // --check-eager's figures
  bool equal = true;
  if (o.check_eager) {
    const Timed eager = time_calls(false);
    auto same = [](const Tensor& a, const Tensor& b) {
      return a.shape() == b.shape() && a.dtype() == b.dtype() &&
             std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
    };
    equal = same(timed.first.tokens, eager.first.tokens) && same(timed.first.logprobs, eager.first.logprobs) &&
            same(timed.first.answer_mask, eager.first.answer_mask);
    const double eager_tps = app::median(eager.tps);
    std::printf(
        "without CUDA graphs%s: median %.0f generated tokens/s; graphs/eager %.2f; tokens, "
        "log-probabilities and masks %s\n",
        device.is_cuda() ? "" : " (the cpu runs no graphs: the same path twice)", eager_tps, med_tps / eager_tps,
        equal ? "equal" : "DIFFER");
    eager_json = {{"eager_tokens_per_s_median", eager_tps},
                  {"eager_step_ms_median", app::median(eager.step_ms)},
                  {"graph_vs_eager", med_tps / eager_tps},
                  {"graph_equals_eager", equal}};
  }
  nlohmann::json line = {{"bench", "generate"},
                        {"device", device.str()},
                        {"device_name", device_name},
                        {"dtype", dtype_name(dtype)},
                        {"parameters", n_params},
                        {"batch", o.batch},
                        {"prompt", o.prompt},
                        {"answer", o.answer},
                        {"temperature", o.temperature},
                        {"top_k", o.top_k},
                        {"top_p", o.top_p},
                        {"runs", o.runs},
                        {"threads", threads},
                        {"call_ms_median", app::median(ms)},
                        {"step_ms_median", app::median(step_ms)},
                        {"tokens_per_s_median", med_tps},
                        {"target_tokens_per_s", device.is_cuda() ? nlohmann::json(kGpuTarget) : nlohmann::json()},
                        {"target_met", device.is_cuda() ? nlohmann::json(med_tps >= kGpuTarget) : nlohmann::json()},
                        {"cuda_graph", o.cuda_graph}};
  if (o.check_eager) line.update(eager_json);
  app::print_json_line(line);
  TRIAD_CHECK(equal, "generation with CUDA graphs differs from generation without");
  return 0;
}

}  // namespace triad::bench
