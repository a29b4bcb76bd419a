// Note [16-bit activations] end to end: a tiny GPT and a tiny Llama trained through the
// Engine with bf16.enabled (bf16 parameters, activations and gradients; f32 master weights
// and moments in ZeRO's shard) against the same models in f32 on the same batches: the
// logits are bf16 and the loss f32; the loss, every gradient and a few AdamW steps follow the
// f32 run within the bounds stated below; and a steady-state step converts no tensor
// between dtypes in its forward and backward (ops::conversion_count).
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/engine.h"
#include "support/check.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_mixed_precision)

using namespace triad;

namespace {

constexpr int64_t kB = 8, kT = 16, kV = 64;

engine::TrainConfig config(const std::string& arch, bool bf16) {
  nlohmann::json model = {{"arch", arch},  {"n_layer", 2},     {"n_head", 4},   {"d_model", 32},
                          {"seq_len", kT}, {"vocab_size", kV}, {"dropout", 0.0}};
  if (arch == "llama")
    model = {{"arch", arch},  {"n_layer", 2},  {"n_head", 4},      {"n_kv_head", 2},
             {"d_model", 32}, {"seq_len", kT}, {"vocab_size", kV}, {"intermediate_size", 64}};
  nlohmann::json j = {{"model", model},
                      {"data", {{"corpus", "unused.bin"}}},
                      {"train_batch_size", kB},
                      {"steps", 100},
                      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}, {"weight_decay", 0.1}}}}},
                      {"gradient_clipping", 1.0},
                      {"seed", 11}};
  if (bf16) j["bf16"] = {{"enabled", true}};
  return engine::parse_config(j);
}

// Batch `step`'s tokens (B, T + 1): inputs are the first T, targets the last T.
std::pair<Tensor, Tensor> batch(int64_t step) {
  Tensor u = Tensor::empty({kB, kT + 1});
  Generator gen(100 + uint64_t(step));
  ops::uniform_(u, 0.0, double(kV) - 0.5, gen);
  std::vector<int64_t> ids;
  for (double x : u.to_vector<double>()) ids.push_back(int64_t(x));
  const Tensor t = Tensor::from_vector(ids, {kB, kT + 1});
  return {ops::contiguous(ops::narrow(t, 1, 0, kT)), ops::contiguous(ops::narrow(t, 1, 1, kT))};
}

// ||a - b|| / ||b|| over a's and b's elements (any floating dtypes).
double relative_norm(const Tensor& a, const Tensor& b) {
  const Tensor d = ops::sub(ops::to(a, DType::f64), ops::to(b, DType::f64));
  return std::sqrt(ops::sum_squares({d}) / ops::sum_squares({ops::to(b, DType::f64)}));
}

}  // namespace

// bf16 keeps 8 significant bits: each stored value is off by at most u = 2^-9 (0.2%)
// relative. Between the embedding and the loss a logit carries the roundings of about 25
// stored results, mostly of random signs; the loss sees the logits only through their
// differences, averaged over 128 tokens. Measured (both models): the first loss within
// 3e-5 relative of the f32 model's (bound 5e-3), the logits within 0.5% in norm (bound
// 2e-2), every parameter's gradient within 1.05% in norm (a sum over
// the batch of products of rounded activations; bound 5e-2). Over six AdamW steps (lr 1e-3)
// the losses stay within 5e-5 relative (bound 1e-3). Adam's normalized step moves a
// weight by about lr whatever its gradient's size, so a weight whose gradient is near zero
// may step the other way in the bf16 run: the largest difference measured is 4.0e-3 (six
// steps the other way would be about 1.2e-2; bound 1e-2), and the norm of the differences
// 6-7% of the norm of what the f32 run's steps moved (bound 0.2).
BOOST_AUTO_TEST_CASE(bf16_activations_follow_the_f32_model) {
  for (const std::string arch : {"gpt2", "llama"}) {
    BOOST_TEST_CONTEXT(arch) {
      engine::Engine e32(config(arch, false)), e16(config(arch, true));
      const auto p32 = e32.model().named_parameters(), p16 = e16.model().named_parameters();
      std::vector<Tensor> initial;
      for (const auto& [_, p] : p32) initial.push_back(ops::clone(p));
      BOOST_TEST_REQUIRE((p16.front().second.dtype() == DType::bf16));

      const auto [x, y] = batch(0);
      const Tensor logits = e16.model()(x);
      BOOST_TEST((logits.dtype() == DType::bf16));
      BOOST_TEST(relative_norm(logits, e32.model()(x)) < 2e-2);

      const Tensor l32 = e32.forward(x, y), l16 = e16.forward(x, y);
      BOOST_TEST((l16.dtype() == DType::f32));
      BOOST_TEST(std::fabs(l16.item() - l32.item()) / l32.item() < 5e-3);
      e32.backward(l32);
      e16.backward(l16);
      double worst = 0;
      for (size_t i = 0; i < p32.size(); ++i) {
        const Tensor g32 = grad(p32[i].second), g16 = grad(p16[i].second);
        BOOST_TEST_REQUIRE((g32.defined() && g16.defined()), p32[i].first);
        BOOST_TEST((g16.dtype() == DType::bf16), p16[i].first);
        const double r = relative_norm(g16, g32);
        worst = std::max(worst, r);
        BOOST_TEST(r < 5e-2, p32[i].first << ": gradient off by " << r);
      }
      BOOST_TEST_MESSAGE(arch << ": loss " << l32.item() << " vs " << l16.item() << ", logits off by "
                              << relative_norm(logits, e32.model()(x)) << ", worst gradient " << worst);
      e32.step();
      e16.step();

      double loss_gap = 0;
      for (int64_t step = 1; step < 6; ++step) {
        const auto [xs, ys] = batch(step);
        const Tensor a = e32.forward(xs, ys), b = e16.forward(xs, ys);
        loss_gap = std::max(loss_gap, std::fabs(b.item() - a.item()) / a.item());
        e32.backward(a);
        e16.backward(b);
        e32.step();
        e16.step();
      }
      // How far the bf16 run's parameters are from the f32 run's: the largest difference,
      // and the norm of the differences against the norm of what the f32 run's steps moved.
      double param_gap = 0, gap2 = 0, moved2 = 0;
      for (size_t i = 0; i < p32.size(); ++i) {
        const Tensor a = ops::to(p32[i].second, DType::f64), b = ops::to(p16[i].second, DType::f64);
        param_gap = std::max(param_gap, test::max_abs_diff(a, b));
        gap2 += ops::sum_squares({ops::sub(b, a)});
        moved2 += ops::sum_squares({ops::sub(a, ops::to(initial[i], DType::f64))});
      }
      const double drift = std::sqrt(gap2 / moved2);
      BOOST_TEST_MESSAGE(arch << ": parameters off by " << drift << " of the distance the steps moved them");
      BOOST_TEST_MESSAGE(arch << ": after 6 steps loss gap " << loss_gap << ", parameter gap " << param_gap);
      BOOST_TEST(loss_gap < 1e-3);
      BOOST_TEST(param_gap < 1e-2);
      BOOST_TEST(drift < 0.2);
    }
  }
}

// After a first step (which builds the optimizer's buffers), a step's forward and backward
// run every op on bf16 tensors as stored: no tensor is converted between dtypes. The
// optimizer's step widens each group's bf16 gradient once (unscaling and clipping read it
// in f32) and its AdamW update writes the bf16 parameters itself: one conversion a group.
BOOST_AUTO_TEST_CASE(a_steady_state_step_converts_nothing_between_layers) {
  for (const std::string arch : {"gpt2", "llama"}) {
    BOOST_TEST_CONTEXT(arch) {
      engine::Engine e(config(arch, true));
      uint64_t optimizer_conversions[2] = {0, 0};
      for (int64_t step = 0; step < 3; ++step) {
        const auto [x, y] = batch(step);
        const uint64_t before = ops::conversion_count();
        const Tensor loss = e.forward(x, y);
        e.backward(loss);
        const uint64_t between_layers = ops::conversion_count() - before;
        e.step();
        if (step > 0) {
          BOOST_TEST(between_layers == 0u, "step " << step << ": " << between_layers << " conversions");
          optimizer_conversions[step - 1] = ops::conversion_count() - before - between_layers;
        }
      }
      BOOST_TEST_MESSAGE(arch << ": the optimizer's step converts " << optimizer_conversions[0] << " tensors");
      BOOST_TEST(optimizer_conversions[0] == e.zero()->group_sizes().size());
      BOOST_TEST(optimizer_conversions[1] == optimizer_conversions[0]);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_mixed_precision
