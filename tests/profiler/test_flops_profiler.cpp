// The flops profiler on a tiny GPT: every module's MACs, flops and parameters against the
// closed forms of its layers (DeepSpeed's counting conventions, autograd/flop_count.h),
// latencies nested as the modules are, nothing counted outside the profiled forward, and
// DeepSpeed's number formatting and report layout.
#include <boost/test/unit_test.hpp>
#include <map>

#include "autograd/flop_count.h"
#include "profiler/flops_profiler.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_flops_profiler)

using namespace triad;
using engine::FlopsProfiler;
using engine::number_to_string;

namespace {

constexpr int64_t B = 3, T = 8, C = 16, H = 2, V = 40, L = 2;

std::shared_ptr<nn::GPT> tiny_gpt() {
  return std::make_shared<nn::GPT>(
      nn::GPTConfig{.n_layer = L, .n_head = H, .d_model = C, .seq_len = T, .vocab_size = V, .init_seed = 3});
}

Tensor tokens(int64_t salt) {
  std::vector<int64_t> ids(B * T);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7 + size_t(salt)) % V);
  return Tensor::from_vector(ids, {B, T});
}

std::map<std::string, FlopsProfiler::ModuleStats> by_name(const FlopsProfiler& p) {
  std::map<std::string, FlopsProfiler::ModuleStats> m;
  for (const auto& s : p.modules()) m[s.name] = s;
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(counts_match_the_closed_forms) {
  auto model = tiny_gpt();
  FlopsProfiler profiler(model, Device::cpu());
  model->loss(tokens(0), tokens(1));  // before start(): not counted
  profiler.start();
  model->loss(tokens(0), tokens(1));
  profiler.stop();
  model->loss(tokens(0), tokens(1));  // after stop(): not counted
  const int64_t N = B * T;  // rows
  const int64_t qkv = N * C * 3 * C, attention = 2 * B * T * T * C, proj = N * C * C, fc = N * C * 4 * C;
  const int64_t block_macs = qkv + attention + proj + 2 * fc;
  const int64_t block_flops = 5 * N * C + (2 * qkv + 3 * N * C) + (2 * attention + B * H * T * T) +
                              (2 * proj + N * C) + N * C + 5 * N * C + (2 * fc + 4 * N * C) + 4 * N * C +
                              (2 * fc + N * C) + N * C;
  const auto m = by_name(profiler);
  BOOST_TEST(m.at("blocks.0.attn.qkv").macs == qkv);
  BOOST_TEST(m.at("blocks.0.attn.qkv").flops == 2 * qkv + 3 * N * C);
  BOOST_TEST(m.at("blocks.0.attn").macs == qkv + attention + proj);
  // fc and GELU run as one op (Linear::forward_gelu) through fc's hooks, the residual add
  // inside ln2 (LayerNorm::forward_add): the block's total stays, the split moves.
  BOOST_TEST(m.at("blocks.1.mlp.fc").flops == 2 * fc + 4 * N * C + 4 * N * C);
  BOOST_TEST(m.at("blocks.1.mlp.act").flops == 0);
  BOOST_TEST(m.at("blocks.1.ln2").flops == N * C + 5 * N * C);
  BOOST_TEST(m.at("blocks.1").macs == block_macs);
  BOOST_TEST(m.at("blocks.1").flops == block_flops);
  BOOST_TEST(m.at("").macs == L * block_macs + N * C * V);
  BOOST_TEST(m.at("").flops == N * C + L * block_flops + 5 * N * C + 2 * N * C * V);
  BOOST_TEST(m.at("wpe").macs == 0);
  // Parameters: the module's own and its children's.
  BOOST_TEST(m.at("blocks.0.mlp.fc").params == C * 4 * C + 4 * C);
  BOOST_TEST(m.at("").params == model->num_parameters());
  BOOST_TEST(m.at("blocks").depth == 1);
  BOOST_TEST(m.at("blocks.0.attn.qkv").depth == 4);
  // Latencies nest: a module's is at least the sum of its children's.
  BOOST_TEST(m.at("blocks.0").seconds > 0.0);
  BOOST_TEST(m.at("blocks.0").seconds >= m.at("blocks.0.attn").seconds + m.at("blocks.0.mlp").seconds);
  BOOST_TEST(m.at("").seconds >= m.at("blocks.0").seconds + m.at("blocks.1").seconds);
  BOOST_TEST(!flop_count::enabled());
}

BOOST_AUTO_TEST_CASE(a_second_profile_starts_from_zero) {
  auto model = tiny_gpt();
  FlopsProfiler profiler(model, Device::cpu());
  for (int round = 0; round < 2; ++round) {
    profiler.start();
    model->loss(tokens(round), tokens(round + 1));
    profiler.stop();
    BOOST_TEST(by_name(profiler).at("blocks.0.attn.proj").macs == B * T * C * C);
  }
}

BOOST_AUTO_TEST_CASE(numbers_are_written_as_deepspeed_writes_them) {
  BOOST_TEST(number_to_string(336.23e6) == "336.23 M");
  BOOST_TEST(number_to_string(3139.93e9, "MACs") == "3.14 TMACs");
  BOOST_TEST(number_to_string(81.9e12, "FLOPS") == "81.9 TFLOPS");
  BOOST_TEST(number_to_string(0.07667, "s") == "76.67 ms");
  BOOST_TEST(number_to_string(34.09e-6, "s") == "34.09 us");
  BOOST_TEST(number_to_string(0, "MACs") == "0 MACs");
  BOOST_TEST(number_to_string(0) == "0");
  BOOST_TEST(number_to_string(64) == "64");
}

BOOST_AUTO_TEST_CASE(the_report_has_deepspeeds_sections_and_figures) {
  auto model = tiny_gpt();
  FlopsProfiler profiler(model, Device::cpu());
  profiler.start();
  model->loss(tokens(0), tokens(1));
  profiler.stop();
  const engine::ProfiledStep step{.step = 5, .world_size = 4, .data_parallel = 2, .model_parallel = 2,
                                  .micro_batch = B, .forward_s = 0.002, .backward_s = 0.004, .step_s = 0.001};
  const std::string report = profiler.report(step, {.top_modules = 2});
  const int64_t params = model->num_parameters();
  const auto row = [](const std::string& label, const std::string& value) {  // "{:<70}  {:<8}"
    return label + std::string(70 - label.size() + 2, ' ') + value;
  };
  for (const std::string& want :
       {std::string("Profile Summary at step 5:"), row("world size: ", "4"), row("model parallel size: ", "2"),
        row("params of model = params per GPU * mp_size: ", number_to_string(double(params * 2))),
        row("iter latency: ", "7 ms"), row("samples/second: ", "1714.29"),  // 3 x 4 / 7 ms
        std::string("Top 2 modules in terms of params, MACs or fwd latency"), std::string("depth 4:"),
        std::string("(qkv): Linear("), std::string("Detailed Profile per GPU")})
    BOOST_TEST(report.find(want) != std::string::npos, "the report lacks: " << want << "\n" << report);
  const std::string shallow = profiler.report(step, {.module_depth = 1, .detailed = false});
  BOOST_TEST(shallow.find("depth 1:") != std::string::npos);
  BOOST_TEST(shallow.find("depth 2:") == std::string::npos);
  BOOST_TEST(shallow.find("Detailed Profile") == std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()  // test_flops_profiler
