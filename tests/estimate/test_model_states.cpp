// ZeRO model-state memory estimate: the ZeRO paper's worked example (Ψ = 7.5B, n = 64,
// K = 12) exactly, the per-stage split, n = 1 collapsing every stage to plain data
// parallelism, GPT parameter counts against nn::GPT, the stage 3 persistence threshold, and
// the device, host and NVMe bytes of each offload choice.
#include <boost/test/unit_test.hpp>
#include <map>

#include "estimate/model_states.h"
#include "estimate/offload_states.h"
#include "nn/gpt.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_model_states)

using namespace triad;

namespace {

estimate::ModelStateInput paper_example() { return {.num_params = 7.5e9, .dp = 64, .optimizer_bytes = 12}; }

nn::GPTConfig small_gpt() {
  // Small enough to build; every parameter kind has its own size: biases and LayerNorms
  // (C..4C) < C² (2304) < wpe (3072) < 3C² < wte (4656) < 4C².
  return {.n_layer = 3, .n_head = 2, .d_model = 48, .seq_len = 64, .vocab_size = 97};
}

}  // namespace

BOOST_AUTO_TEST_CASE(paper_example_totals_are_exact) {
  // Figure 1 / section 5.1: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB, which round these (all four
  // exact in binary). Stage 2 is 2Ψ + 14Ψ/64 = 15e9 + 1.640625e9.
  const auto all = estimate::model_state_bytes_all(paper_example());
  BOOST_TEST(all[0].total() == 120e9);
  BOOST_TEST(all[1].total() == 31.40625e9);
  BOOST_TEST(all[2].total() == 16.640625e9);
  BOOST_TEST(all[3].total() == 1.875e9);
  for (int s = 0; s < 4; ++s) BOOST_TEST(all[s].stage == s);
}

BOOST_AUTO_TEST_CASE(paper_example_split_by_kind) {
  const auto all = estimate::model_state_bytes_all(paper_example());
  const double full16 = 15e9, shard16 = 15e9 / 64, full_opt = 90e9, shard_opt = 90e9 / 64;
  BOOST_TEST(all[0].parameters == full16);
  BOOST_TEST(all[0].gradients == full16);
  BOOST_TEST(all[0].optimizer == full_opt);
  BOOST_TEST(all[1].parameters == full16);
  BOOST_TEST(all[1].gradients == full16);
  BOOST_TEST(all[1].optimizer == shard_opt);
  BOOST_TEST(all[2].parameters == full16);
  BOOST_TEST(all[2].gradients == shard16);
  BOOST_TEST(all[2].optimizer == shard_opt);
  BOOST_TEST(all[3].parameters == shard16);
  BOOST_TEST(all[3].gradients == shard16);
  BOOST_TEST(all[3].optimizer == shard_opt);
}

BOOST_AUTO_TEST_CASE(one_rank_makes_every_stage_plain_data_parallel) {
  for (double k : {12.0, 8.0, 4.0}) {
    const estimate::ModelStateInput in{.num_params = 1.3e9, .dp = 1, .optimizer_bytes = k};
    const auto all = estimate::model_state_bytes_all(in);
    for (const auto& b : all) {
      BOOST_TEST(b.total() == (2 + 2 + k) * 1.3e9);
      BOOST_TEST(b.parameters == all[0].parameters);
      BOOST_TEST(b.gradients == all[0].gradients);
      BOOST_TEST(b.optimizer == all[0].optimizer);
    }
  }
}

BOOST_AUTO_TEST_CASE(k_scales_only_the_optimizer_state) {
  estimate::ModelStateInput in = paper_example();
  in.optimizer_bytes = 16;  // e.g. fp32 gradients accumulated beside Adam's 12
  const auto all = estimate::model_state_bytes_all(in);
  BOOST_TEST(all[0].total() == (2 + 2 + 16) * 7.5e9);
  BOOST_TEST(all[1].total() == 4 * 7.5e9 + 16 * 7.5e9 / 64);
  BOOST_TEST(all[2].total() == 2 * 7.5e9 + 18 * 7.5e9 / 64);
  BOOST_TEST(all[3].total() == 20 * 7.5e9 / 64);
}

BOOST_AUTO_TEST_CASE(bad_inputs_are_errors_naming_the_value) {
  auto with = [](auto change) {
    estimate::ModelStateInput in = paper_example();
    change(in);
    return in;
  };
  test::check_error([&] { estimate::model_state_bytes_all(with([](auto& in) { in.num_params = 0; })); },
                    {"parameter count", "positive"});
  test::check_error([&] { estimate::model_state_bytes_all(with([](auto& in) { in.num_params = -5; })); }, {"-5"});
  test::check_error([&] { estimate::model_state_bytes_all(with([](auto& in) { in.dp = 0; })); },
                    {"data-parallel ranks", "0"});
  test::check_error([&] { estimate::model_state_bytes_all(with([](auto& in) { in.optimizer_bytes = -1; })); },
                    {"(K)", "-1"});
  test::check_error([&] { estimate::model_state_bytes_all(with([](auto& in) { in.persistent_params = 8e9; })); },
                    {"persistent"});
  test::check_error([&] { estimate::model_state_bytes(4, paper_example()); }, {"stage", "0, 1, 2 or 3", "4"});
  test::check_error([&] { estimate::persistent_parameters(small_gpt().parameter_sizes(), -1); }, {"threshold", "-1"});
}

BOOST_AUTO_TEST_CASE(gpt2_124m_parameter_count) {
  const nn::GPTConfig c = nn::GPTConfig::preset("gpt2-124m");
  BOOST_TEST(c.num_parameters() == 124439808);
  // The rank holds the vocabulary padded to 50304 rows (47 of them padding).
  int64_t sum = 0;
  for (const auto& [_, numel] : c.parameter_sizes()) sum += numel;
  BOOST_TEST(sum == 124439808 + 47 * 768);
}

BOOST_AUTO_TEST_CASE(gpt_count_matches_the_model_both_ways) {
  for (const nn::GPTConfig& c : {small_gpt(), nn::GPTConfig::preset("tiny")}) {
    const nn::GPT model(c);
    // Closed form and the per-parameter enumeration both equal the built model's count.
    BOOST_TEST(c.num_parameters() == model.num_parameters());
    std::map<std::string, int64_t> built, listed;
    for (const auto& [name, p] : model.named_parameters()) built[name] = p.numel();
    for (const auto& [name, numel] : c.parameter_sizes()) {
      BOOST_TEST(listed.count(name) == 0u, "listed twice: " << name);
      listed[name] = numel;
    }
    BOOST_TEST(built.size() == listed.size());
    for (const auto& [name, numel] : built) {
      BOOST_TEST_CONTEXT(name) {
        BOOST_TEST_REQUIRE(listed.count(name) == 1u);
        BOOST_TEST(listed[name] == numel);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(persistence_threshold_moves_exactly_the_small_parameters) {
  const nn::GPTConfig c = small_gpt();
  const int64_t C = c.d_model, L = c.n_layer;
  const nn::GPT model(c);
  const auto params = model.named_parameters();

  // The threshold is inclusive (DeepSpeed: numel <= threshold); check against the model.
  for (int64_t threshold : {int64_t(0), C - 1, C, 3 * C, C * C - 1, C * C, 3 * C * C, 4 * C * C, int64_t(1) << 40}) {
    BOOST_TEST_CONTEXT("threshold " << threshold) {
      estimate::PersistentParams expect;
      for (const auto& [name, p] : params)
        if (p.numel() <= threshold) ++expect.count, expect.elements += p.numel();
      const estimate::PersistentParams got = estimate::persistent_parameters(c.parameter_sizes(), threshold);
      BOOST_TEST(got.count == expect.count);
      BOOST_TEST(got.elements == expect.elements);
    }
  }
  // Between 4C and C²: exactly the biases and LayerNorms, L·13C + 2C elements.
  const estimate::PersistentParams small = estimate::persistent_parameters(c.parameter_sizes(), 5 * C);
  BOOST_TEST(small.count == L * 8 + 2);
  BOOST_TEST(small.elements == L * 13 * C + 2 * C);
  // At C²: the attention output projections join them.
  const estimate::PersistentParams with_proj = estimate::persistent_parameters(c.parameter_sizes(), C * C);
  BOOST_TEST(with_proj.count == L * 9 + 2);
  BOOST_TEST(with_proj.elements == L * (13 * C + C * C) + 2 * C);

  // GPT-2 124M under DeepSpeed's default 1e5: biases and LayerNorms only (C² = 589,824 > 1e5).
  const estimate::PersistentParams gpt2 =
      estimate::persistent_parameters(nn::GPTConfig::preset("gpt2-124m").parameter_sizes());
  BOOST_TEST(gpt2.count == 12 * 8 + 2);
  BOOST_TEST(gpt2.elements == 12 * 13 * 768 + 2 * 768);

  // The persistent elements add their 16-bit parameter and gradient to stage 3 only.
  const double psi = double(c.num_parameters());
  const estimate::ModelStateInput plain{.num_params = psi, .dp = 8};
  estimate::ModelStateInput kept = plain;
  kept.persistent_params = double(small.elements);
  const auto a = estimate::model_state_bytes_all(plain), b = estimate::model_state_bytes_all(kept);
  for (int s = 0; s < 3; ++s) BOOST_TEST(b[s].total() == a[s].total());
  BOOST_TEST(b[3].parameters == a[3].parameters + 2.0 * double(small.elements));
  BOOST_TEST(b[3].gradients == a[3].gradients + 2.0 * double(small.elements));
  BOOST_TEST(b[3].optimizer == a[3].optimizer);
  BOOST_TEST(b[3].total() == a[3].total() + 4.0 * double(small.elements));
}

// Offload (estimate/offload_states.h) on the paper's example: S = 7.5e9 / 64 = 117187500
// elements per rank, every figure exact in binary. Offloading moves bytes between device,
// host and NVMe without changing their sum, except the nvme buffers' host copies and, with the
// optimizer on nvme at stages 2-3, the gradient shard's f32 copy (2 more bytes per element),
// and with the optimizer on cpu the host store's copy buffers (f32 gradient, 16-bit parameters),
// of which a ratio below 1 keeps its share.
BOOST_AUTO_TEST_CASE(offload_columns_place_each_state_by_closed_form) {
  using estimate::OffloadTarget;
  const estimate::ModelStateInput in = paper_example();
  const double s = 117187500.0;
  const auto all = estimate::placed_state_bytes_all(in);
  BOOST_TEST_REQUIRE(all.size() == 1u + 3u + 3u + 5u);
  for (const estimate::PlacedStateBytes& p : all) {
    const estimate::ModelStateBytes b = estimate::model_state_bytes(p.stage, in);
    const bool gradients = p.choice.optimizer == OffloadTarget::nvme && p.stage >= 2;
    const double buffers = (p.choice.optimizer == OffloadTarget::nvme ? b.optimizer : 0.0) +
                           (p.choice.params == OffloadTarget::nvme ? 2 * s : 0.0) + (gradients ? 2 * s + 4 * s : 0.0) +
                           (p.choice.optimizer == OffloadTarget::cpu ? 6 * s : 0.0);
    BOOST_TEST(p.device + p.host + p.nvme == b.total() + buffers);
  }
  const estimate::PlacedStateBytes z2cpu = all[1 + 3 + 1];  // stage 2, optimizer on cpu
  BOOST_TEST(z2cpu.stage == 2);
  BOOST_TEST(z2cpu.device == 2 * 7.5e9 + 2 * s);
  BOOST_TEST(z2cpu.host == 12 * s + 6 * s);
  BOOST_TEST(z2cpu.nvme == 0);
  const estimate::PlacedStateBytes infinity = all.back();  // stage 3, both to nvme
  BOOST_TEST(infinity.stage == 3);
  BOOST_TEST(infinity.device == 0);                 // the gradients' shard is on NVMe too
  BOOST_TEST(infinity.nvme == 12 * s + 2 * s + 4 * s);
  BOOST_TEST(infinity.host == 12 * s + 2 * s + 4 * s);  // the default buffers outsize a shard
  const auto small = estimate::placed_state_bytes(
      3, {.optimizer = OffloadTarget::nvme, .params = OffloadTarget::nvme}, {.num_params = 7.5e9, .dp = 64,
      .optimizer_bytes = 12, .persistent_params = 1e6}, {.optimizer_elements = 4e6, .param_elements = 5e6});
  BOOST_TEST(small.host == 12 * 4e6 + 2 * 5e6 + 4 * 4e6);
  BOOST_TEST(small.device == 2e6 + 2e6);  // the persistent parameters and gradients
  BOOST_TEST(small.nvme == 18 * s);
  const auto z3cpu = estimate::placed_state_bytes(3, {.optimizer = OffloadTarget::cpu, .params = OffloadTarget::cpu}, in);
  BOOST_TEST(z3cpu.device == 2 * s);
  BOOST_TEST(z3cpu.host == 14 * s + 6 * s);
  test::check_error([&] { estimate::placed_state_bytes(2, {.params = OffloadTarget::nvme}, in); },
                    {"offloading parameters runs at stage 3, not stage 2"});
  test::check_error([&] { estimate::placed_state_bytes(0, {.optimizer = OffloadTarget::cpu}, in); },
                    {"stages 1-3, not stage 0"});
  // Partial offload (Note [Partial offload]): ratio 0.25 keeps three quarters of the 12S on
  // the device and a quarter of the host store's 18S on the host; each cpu choice gets such
  // a row after its own.
  const auto quarter = estimate::placed_state_bytes_all(in, {}, 0.25);
  BOOST_TEST_REQUIRE(quarter.size() == all.size() + 4u);
  const estimate::PlacedStateBytes z2quarter = quarter[1 + 4 + 2];  // stage 2, optimizer on cpu, ratio 0.25
  BOOST_TEST((z2quarter.stage == 2 && z2quarter.choice.optimizer == OffloadTarget::cpu));
  BOOST_TEST(z2quarter.choice.ratio == 0.25);
  BOOST_TEST(z2quarter.device == 2 * 7.5e9 + 2 * s + 9 * s);
  BOOST_TEST(z2quarter.host == 4.5 * s);
  const auto z3quarter = estimate::placed_state_bytes(
      3, {.optimizer = OffloadTarget::cpu, .params = OffloadTarget::cpu, .ratio = 0.25}, in);
  BOOST_TEST(z3quarter.device == 2 * s + 9 * s);
  BOOST_TEST(z3quarter.host == 2 * s + 4.5 * s);
  BOOST_TEST(estimate::placed_state_bytes(2, {.optimizer = OffloadTarget::cpu, .ratio = 0.0}, in).device ==
             estimate::placed_state_bytes(2, {}, in).device);
  test::check_error([&] { estimate::placed_state_bytes(2, {.optimizer = OffloadTarget::nvme, .ratio = 0.5}, in); },
                    {"ratio below 1 (partial offload) runs with the optimizer on cpu, not nvme"});
  test::check_error([&] { estimate::placed_state_bytes(2, {.optimizer = OffloadTarget::cpu, .ratio = 1.5}, in); },
                    {"ratio must be a number in [0, 1], got 1.5"});
}

BOOST_AUTO_TEST_SUITE_END()  // test_model_states
