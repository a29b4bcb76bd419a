// The Mixture-of-Experts layer (nn/moe.h): the gate against DeepSpeed's gating functions
// reimplemented in PyTorch (tests/reference/moe_reference.py: capacities, choices,
// locations, combine weights, auxiliary losses and their gradients), closed forms (the
// capacity's edges, drop accounting, dropless and top-k = E layers as dense per-token
// sums, the Residual MoE's mix), the routing draws, the expert-parallel seam, and
// finite-difference gradients of whole layers in f64.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "io/tensor_file.h"
#include "support/check.h"
#include "support/params_dtype.h"
#include "triad.h"

BOOST_AUTO_TEST_SUITE(test_moe)

using namespace triad;
using nn::MoEConfig;

namespace {

struct ReferenceFile {
  ReferenceFile() : path(test::data_path("moe_reference.tns")), data(io::read_tensor_file(path)) {}
  const Tensor& operator[](const std::string& name) const { return io::find_tensor(data, name, path); }
  bool has(const std::string& name) const {
    for (const auto& [n, t] : data)
      if (n == name) return true;
    return false;
  }
  std::string path;
  io::NamedTensors data;
};

Tensor randn(const Shape& shape, uint64_t seed, double scale = 1.0, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, dtype);
  Generator gen(seed);
  ops::normal_(t, 0.0, scale, gen);
  return t;
}

// DeepSpeed's combine_weights (S, E, C) from triad's routing and weights.
Tensor combine_tensor(const nn::GateOutput& g) {
  const nn::Routing& r = g.routing;
  const std::vector<double> w = g.weights.to_vector<double>();
  const std::vector<int64_t> expert = r.expert.to_vector<int64_t>(), location = r.location.to_vector<int64_t>();
  std::vector<double> c(size_t(r.tokens * r.experts * r.capacity), 0.0);
  for (int64_t s = 0; s < r.tokens; ++s)
    for (int64_t j = 0; j < r.k; ++j)
      if (const size_t at = size_t(s * r.k + j); location[at] >= 0)
        c[size_t(s * r.experts * r.capacity + expert[at] * r.capacity + location[at])] = w[at];
  return Tensor::from_vector(c, {r.tokens, r.experts, r.capacity});
}

std::vector<double> vec(const Tensor& t) { return t.to_vector<double>(); }
std::vector<int64_t> ints(const Tensor& t) { return t.to_vector<int64_t>(); }

// One dense evaluation per token: sum over its choices j of weight_j * expert_{e_j}(x_s),
// every expert run on every token (no capacity, no dispatch).
Tensor dense_mixture(nn::MoE& moe, const Tensor& x, const std::vector<int64_t>& experts,
                     const std::vector<double>& weights, int64_t k) {
  NoGradGuard no_grad;
  const int64_t S = x.size(0), d = x.size(1);
  std::vector<std::vector<double>> outs;
  for (const auto& [name, expert] : moe.experts->children()) outs.push_back(vec((*expert)(x)));
  std::vector<double> y(size_t(S * d), 0.0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < d; ++i)
        y[size_t(s * d + i)] +=
            weights[size_t(s * k + j)] * outs[size_t(experts[size_t(s * k + j)])][size_t(s * d + i)];
  return Tensor::from_vector(y, {S, d});
}

// The gate's softmax of x, on the host.
std::vector<double> gate_probs(nn::MoE& moe, const Tensor& x) {
  NoGradGuard no_grad;
  return vec(ops::softmax(ops::linear(ops::to(x, DType::f64), ops::to(moe.gate->wg->weight, DType::f64), Tensor())));
}

}  // namespace

// ---------------------------------------------------------------- DeepSpeed's numbers

BOOST_AUTO_TEST_CASE(capacity_follows_deepspeeds_float32_arithmetic) {
  const ReferenceFile ref;
  const std::vector<int64_t> cases = ref["capacity/cases"].to_vector<int64_t>();
  const std::vector<double> factors = vec(ref["capacity/factors"]);
  const std::vector<int64_t> values = ref["capacity/values"].to_vector<int64_t>();
  BOOST_REQUIRE(cases.size() == 4 * values.size() && !values.empty());
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t* c = &cases[4 * i];
    BOOST_TEST(nn::expert_capacity(c[0], c[1], c[2], factors[i], c[3]) == values[i],
               "S " << c[0] << " E " << c[1] << " k " << c[2] << " cf " << factors[i] << " min " << c[3]);
  }
  BOOST_TEST(values[0] == 16);  // S 25, E 2, cf 1.2: exactly 15
  BOOST_TEST(values[1] == 55);  // S 50, E 2, cf 2.2: 56 in double arithmetic
}

BOOST_AUTO_TEST_CASE(gate_matches_deepspeeds_gating_functions) {
  const ReferenceFile ref;
  for (const char* name : {"top1", "top1_rts", "top1_rsample_rts", "top1_dropless", "top2", "top2_sampled",
                           "top2_dropless", "top3", "top3_dropless"}) {
    BOOST_TEST_CONTEXT(name) {
      const std::string p = std::string(name) + "/";
      const std::vector<double> options = vec(ref[p + "options"]);
      Tensor logits = ops::clone(ref[p + "logits"]);
      set_requires_grad(logits);
      MoEConfig config{.num_experts = logits.size(1),
                       .k = int64_t(options[0]),
                       .capacity_factor = options[1],
                       .min_capacity = int64_t(options[2]),
                       .drop_tokens = options[3] != 0};
      nn::RoutingNoise noise;
      if (ref.has(p + "noise")) noise.logits = vec(ref[p + "noise"]);
      if (ref.has(p + "priority")) noise.priority = vec(ref[p + "priority"]);
      const nn::GateOutput g = nn::gate_tokens(logits, config, true, noise);
      const nn::Routing& r = g.routing;

      BOOST_TEST(r.capacity == ref[p + "capacity"].to_vector<int64_t>()[0]);
      BOOST_TEST(ints(r.expert) == ref[p + "expert"].to_vector<int64_t>(), boost::test_tools::per_element());
      BOOST_TEST(ints(r.location) == ref[p + "location"].to_vector<int64_t>(), boost::test_tools::per_element());
      BOOST_TEST(ints(r.load) == ref[p + "exp_counts"].to_vector<int64_t>(), boost::test_tools::per_element());
      BOOST_TEST(test::max_abs_diff(combine_tensor(g), ref[p + "combine"]) < 1e-6);
      BOOST_TEST(g.l_aux.item() == ref[p + "l_aux"].item(), boost::test_tools::tolerance(1e-6));
      BOOST_TEST(g.z_loss.item() == ref[p + "z_loss"].item(), boost::test_tools::tolerance(1e-6));

      // d/d logits of sum(combine.sum(-1) * probe) + 0.5 l_aux + 0.25 z_loss.
      const std::vector<double> probe = vec(ref[p + "probe"]);
      const std::vector<int64_t> expert = ints(r.expert);
      std::vector<double> picked(expert.size());
      for (size_t c = 0; c < picked.size(); ++c)
        picked[c] = probe[size_t((int64_t(c) / r.k) * r.experts + expert[c])];
      const Tensor loss =
          add(add(sum(mul(g.weights,
                          Tensor::from_vector(std::vector<float>(picked.begin(), picked.end()), g.weights.shape()))),
                  mul(g.l_aux, 0.5)),
              mul(g.z_loss, 0.25));
      backward(loss);
      BOOST_TEST(test::relative_error(grad(logits), ref[p + "grad_logits"]) < 1e-5);

      config.aux_loss = nn::AuxLossNormalization::megatron;
      BOOST_TEST(nn::gate_tokens(logits, config, true, noise).l_aux.item() == ref[p + "l_aux_megatron"].item(),
                 boost::test_tools::tolerance(1e-6));
    }
  }
}

// ---------------------------------------------------------------- closed forms

BOOST_AUTO_TEST_CASE(capacity_edges) {
  BOOST_TEST(nn::expert_capacity(12, 4, 1, 1.0, 4) == 4);  // 3, raised to min_capacity
  BOOST_TEST(nn::expert_capacity(12, 4, 1, 1.0, 0) == 3);
  BOOST_TEST(nn::expert_capacity(13, 4, 1, 1.0, 0) == 4);   // 3.25 rounds up
  BOOST_TEST(nn::expert_capacity(12, 4, 2, 1.0, 0) == 6);   // x k
  BOOST_TEST(nn::expert_capacity(12, 4, 3, 0.5, 0) == 5);   // 4.5
  BOOST_TEST(nn::expert_capacity(1, 8, 1, 1.0, 0) == 1);    // an eighth of a token still gets a slot
  BOOST_TEST(nn::expert_capacity(25, 2, 1, 1.2, 0) == 16);  // f32 rounding, as DeepSpeed's
  BOOST_TEST(nn::expert_capacity(50, 2, 1, 2.2, 0) == 55);
}

BOOST_AUTO_TEST_CASE(over_capacity_choices_are_dropped_and_counted) {
  // Every token prefers expert 0 (logit 5 against 0): 8 tokens, 2 experts, C = 4 slots.
  std::vector<float> l(16, 0.0f);
  for (int s = 0; s < 8; ++s) l[size_t(2 * s)] = 5.0f;
  const Tensor logits = Tensor::from_vector(l, {8, 2});
  MoEConfig config{.num_experts = 2, .min_capacity = 0, .use_rts = false};
  nn::Routing r = nn::gate_tokens(logits, config, true).routing;
  BOOST_TEST(r.capacity == 4);
  BOOST_TEST(ints(r.load) == (std::vector<int64_t>{8, 0}), boost::test_tools::per_element());
  BOOST_TEST(r.kept() == (std::vector<int64_t>{4, 0}), boost::test_tools::per_element());
  BOOST_TEST(r.dropped() == 4);
  // Without RTS the first tokens keep their places, in token order.
  BOOST_TEST(ints(r.location) == (std::vector<int64_t>{0, 1, 2, 3, -1, -1, -1, -1}), boost::test_tools::per_element());
  config.min_capacity = 6;
  BOOST_TEST(nn::gate_tokens(logits, config, true).routing.dropped() == 2);
  config.eval_capacity_factor = 2.0;  // eval mode: C = 8
  BOOST_TEST(nn::gate_tokens(logits, config, false).routing.dropped() == 0);
  config.drop_tokens = false;  // dropless: C = the largest load, whatever min_capacity says
  r = nn::gate_tokens(logits, config, true).routing;
  BOOST_TEST(r.capacity == 8);
  BOOST_TEST(r.dropped() == 0);

  // Random token selection keeps the 4 tokens of largest priority, in token order.
  config = {.num_experts = 2, .min_capacity = 0};
  nn::RoutingNoise noise;
  noise.priority.assign(16, 0.0);
  for (int s : {6, 1, 7, 3}) noise.priority[size_t(2 * s)] = 0.5 + 0.01 * s;
  r = nn::gate_tokens(logits, config, true, noise).routing;
  BOOST_TEST(ints(r.location) == (std::vector<int64_t>{-1, 0, -1, 1, -1, -1, 2, 3}), boost::test_tools::per_element());

  // The layer: dropped tokens get exactly 0 from the experts, and the stats say so.
  Generator gen(3);
  nn::MoE moe(4, {.num_experts = 2, .min_capacity = 0, .use_rts = false}, nn::gelu_mlp_expert(4), nn::local_experts(),
              gen);
  ops::fill_(moe.gate->wg->weight, 0.0);
  ops::copy_(ops::narrow(moe.gate->wg->weight, 0, 0, 1), Tensor::full({1, 4}, 5.0));  // x . (5,5,5,5) for expert 0
  const Tensor x = ops::add(ops::mul(randn({8, 4}, 11), 0.1), 1.0);                   // positive: expert 0
  const nn::MoEOutput out = moe.apply(x);
  BOOST_TEST(out.stats.loads() == (std::vector<int64_t>{8, 0}), boost::test_tools::per_element());
  BOOST_TEST(out.stats.capacity == 4);
  BOOST_TEST(out.stats.dropped() == 4);
  BOOST_TEST(out.stats.dropped_fraction() == 0.5);
  BOOST_TEST(ops::max_abs(ops::narrow(out.out, 0, 4, 4)) == 0.0);
  BOOST_TEST(ops::max_abs(ops::narrow(out.out, 0, 0, 4)) > 0.0);
}

BOOST_AUTO_TEST_CASE(top2_places_second_choices_after_all_first_choices) {
  // 3 tokens, 3 experts; probabilities favour expert 0 then 1 for tokens 0 and 1, expert 1
  // then 0 for token 2. Expert 0: first choices of tokens 0, 1 at 0, 1; the second choice of
  // token 2 at 2 (after both). Expert 1: token 2's first choice at 0, then 0's and 1's second
  // choices at 1 and 2.
  const Tensor logits = Tensor::from_vector(std::vector<float>{3, 2, 0, 3, 2, 0, 2, 3, 0}, {3, 3});
  MoEConfig config{.num_experts = 3, .k = 2, .min_capacity = 0, .drop_tokens = false};
  nn::GateOutput g = nn::gate_tokens(logits, config, true);
  BOOST_TEST(ints(g.routing.expert) == (std::vector<int64_t>{0, 1, 0, 1, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(ints(g.routing.location) == (std::vector<int64_t>{0, 1, 1, 2, 0, 2}), boost::test_tools::per_element());
  BOOST_TEST(g.routing.capacity == 3);
  // The two weights are the two probabilities renormalised: e^3 / (e^3 + e^2) and the rest.
  const double w0 = std::exp(3.0) / (std::exp(3.0) + std::exp(2.0));
  const std::vector<double> w = vec(g.weights);
  BOOST_TEST(w[0] == w0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(w[1] == 1 - w0, boost::test_tools::tolerance(1e-6));
  // Capacity 2 (cf 1: ceil(3 / 3 * 2)): token 2's second choice and token 1's are dropped,
  // and their first choices carry weight 1.
  config.drop_tokens = true;
  g = nn::gate_tokens(logits, config, true);
  BOOST_TEST(g.routing.capacity == 2);
  BOOST_TEST(ints(g.routing.location) == (std::vector<int64_t>{0, 1, 1, -1, 0, -1}), boost::test_tools::per_element());
  const std::vector<double> expected = {w0, 1 - w0, 1, 0, 1, 0}, weights = vec(g.weights);
  for (size_t c = 0; c < expected.size(); ++c) BOOST_TEST(std::fabs(weights[c] - expected[c]) < 1e-6);
}

// norm_topk_prob: true renormalises a single choice to weigh 1 (Mixtral's top-1), false
// leaves top-2's weights at the probabilities; unset is DeepSpeed's (k >= 2 only).
BOOST_AUTO_TEST_CASE(norm_topk_prob_chooses_whether_the_weights_sum_to_one) {
  const Tensor logits = Tensor::from_vector(std::vector<float>{3, 2, 0, 3, 2, 0, 2, 3, 0}, {3, 3});
  const double e = std::exp(3.0) + std::exp(2.0) + 1.0, p0 = std::exp(3.0) / e, p1 = std::exp(2.0) / e;
  MoEConfig config{.num_experts = 3, .k = 1, .min_capacity = 0, .drop_tokens = false};
  std::vector<double> w = vec(nn::gate_tokens(logits, config, true).weights);
  for (double x : w) BOOST_TEST(x == p0, boost::test_tools::tolerance(1e-6));
  config.norm_topk_prob = true;
  w = vec(nn::gate_tokens(logits, config, true).weights);
  for (double x : w) BOOST_TEST(x == 1.0, boost::test_tools::tolerance(1e-6));
  // Capacity 1 (cf 1: ceil(3 / 3)): expert 0's second token is dropped and weighs 0.
  config.drop_tokens = true;
  w = vec(nn::gate_tokens(logits, config, true).weights);
  BOOST_TEST(w[1] == 0.0);
  config = {.num_experts = 3, .k = 2, .min_capacity = 0, .drop_tokens = false, .norm_topk_prob = false};
  w = vec(nn::gate_tokens(logits, config, true).weights);
  const std::vector<double> expected = {p0, p1, p0, p1, p0, p1};
  for (size_t c = 0; c < expected.size(); ++c) BOOST_TEST(w[c] == expected[c], boost::test_tools::tolerance(1e-6));
  BOOST_TEST(config.renormalizes() == false);
  BOOST_TEST((MoEConfig{.k = 1}.renormalizes()) == false);
  BOOST_TEST((MoEConfig{.num_experts = 2, .k = 2}.renormalizes()) == true);
}

BOOST_AUTO_TEST_CASE(dropless_layer_is_a_dense_per_token_mixture) {
  for (int64_t k : {1, 2, 3}) {
    BOOST_TEST_CONTEXT("k " << k) {
      Generator gen(21);
      const MoEConfig config{.num_experts = 4, .k = k, .drop_tokens = false, .top2_2nd_expert_sampling = false};
      nn::MoE moe(6, config, nn::swiglu_expert(6, 10), nn::local_experts(), gen);
      const Tensor x = randn({2, 9, 6}, 22);
      const nn::MoEOutput out = moe.apply(x);
      BOOST_TEST(out.stats.dropped() == 0);
      BOOST_TEST(out.out.shape() == x.shape());
      // The top-k experts of each token by probability (k = 2: the second by logit, the same
      // order), weights renormalised for k >= 2.
      const Tensor x2 = ops::reshape(x, {18, 6});
      const std::vector<double> p = gate_probs(moe, x2);
      std::vector<int64_t> experts;
      std::vector<double> weights;
      for (int64_t s = 0; s < 18; ++s) {
        std::vector<int64_t> order = {0, 1, 2, 3};
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return p[size_t(s * 4 + a)] > p[size_t(s * 4 + b)]; });
        double total = 0;
        for (int64_t j = 0; j < k; ++j) total += p[size_t(s * 4 + order[size_t(j)])];
        for (int64_t j = 0; j < k; ++j) {
          experts.push_back(order[size_t(j)]);
          weights.push_back(p[size_t(s * 4 + order[size_t(j)])] / (k == 1 ? 1.0 : total));
        }
      }
      const Tensor expected = dense_mixture(moe, x2, experts, weights, k);
      BOOST_TEST(test::max_abs_diff(ops::reshape(out.out, {18, 6}), expected) < 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(top_k_of_all_experts_is_the_softmax_mixture) {
  for (int64_t E : {2, 4}) {  // E = 2 goes through top-2 gating, 4 through top-k
    BOOST_TEST_CONTEXT("E = k = " << E) {
      Generator gen(31);
      nn::MoE moe(5, {.num_experts = E, .k = E, .capacity_factor = 1.0, .min_capacity = 0}, nn::gelu_mlp_expert(5),
                  nn::local_experts(), gen);
      const Tensor x = randn({12, 5}, 32);
      const nn::MoEOutput out = moe.apply(x);
      BOOST_TEST(out.stats.dropped() == 0);  // C = ceil(12 / E * E) = 12: room for every token
      const std::vector<double> p = gate_probs(moe, x);
      std::vector<int64_t> experts;
      for (int64_t s = 0; s < 12; ++s)
        for (int64_t e = 0; e < E; ++e) experts.push_back(e);
      BOOST_TEST(test::max_abs_diff(out.out, dense_mixture(moe, x, experts, p, E)) < 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(residual_moe_mixes_the_mlp_by_a_two_way_softmax) {
  Generator gen(41);
  nn::MoE moe(6, {.num_experts = 3, .drop_tokens = false, .use_residual = true}, nn::swiglu_expert(6, 8),
              nn::local_experts(), gen);
  BOOST_REQUIRE(moe.mlp && moe.coefficient);
  const Tensor x = randn({7, 6}, 42);
  const Tensor y = moe.apply(x).out;
  const std::vector<double> p = gate_probs(moe, x);
  std::vector<int64_t> experts;
  std::vector<double> weights;
  for (int64_t s = 0; s < 7; ++s) {
    const auto row = p.begin() + s * 3;
    const int64_t e = std::max_element(row, row + 3) - row;
    experts.push_back(e);
    weights.push_back(row[e]);
  }
  NoGradGuard no_grad;
  const Tensor moe_part = dense_mixture(moe, x, experts, weights, 1);
  const Tensor c = ops::to(ops::softmax((*moe.coefficient)(x)), DType::f64);  // (7, 2)
  const Tensor mlp = ops::to((*moe.mlp)(x), DType::f64);
  const Tensor expected = ops::add(ops::mul(moe_part, ops::narrow(c, 1, 0, 1)), ops::mul(mlp, ops::narrow(c, 1, 1, 1)));
  BOOST_TEST(test::max_abs_diff(y, expected) < 1e-5);
  BOOST_TEST(moe.named_parameters().size() == 1 + 3 * 3 + 3 + 2);  // gate, experts, mlp, coefficient
}

BOOST_AUTO_TEST_CASE(losses_are_scaled_and_returned) {
  // A uniform router (zero gate weight): every probability is 1/4 and every token takes the
  // first of the tied experts, so ce = (1, 0, 0, 0), me = 1/4 each, and DeepSpeed's
  // l_aux = 4 (1/4 1) = 1; the z-loss is log(4)^2.
  Generator gen(51);
  nn::MoE moe(4, {.num_experts = 4, .use_rts = false, .aux_loss_coeff = 0.5, .z_loss_coeff = 0.1},
              nn::gelu_mlp_expert(4), nn::local_experts(), gen);
  ops::fill_(moe.gate->wg->weight, 0.0);
  const nn::MoEOutput out = moe.apply(randn({8, 4}, 52));
  BOOST_TEST(out.l_aux.item() == 1.0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(out.z_loss.item() == std::log(4.0) * std::log(4.0), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(out.loss.item() == 0.5 + 0.1 * std::log(4.0) * std::log(4.0), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(out.stats.loads() == (std::vector<int64_t>{8, 0, 0, 0}), boost::test_tools::per_element());
}

// ---------------------------------------------------------------- draws

BOOST_AUTO_TEST_CASE(routing_draws_come_from_the_generator) {
  const Tensor x = randn({10, 4}, 61);
  auto offset_after = [&](const MoEConfig& config, bool training) {
    Generator gen(62);
    nn::TopKGate gate(4, config, gen);
    gate.train(training);
    const uint64_t before = gen.state().offset;
    gate.route(x);
    return gen.state().offset - before;
  };
  // RTS (S E uniforms); RSample (S E Gumbel) in training only; Jitter (S d) in training only.
  BOOST_TEST(offset_after({.num_experts = 3}, true) == 30u);
  BOOST_TEST(offset_after({.num_experts = 3}, false) == 30u);
  BOOST_TEST(offset_after({.num_experts = 3, .use_rts = false}, true) == 0u);
  BOOST_TEST(offset_after({.num_experts = 3, .drop_tokens = false}, true) == 0u);
  BOOST_TEST(offset_after({.num_experts = 3, .noisy_gate_policy = nn::NoisyGatePolicy::rsample}, true) == 60u);
  BOOST_TEST(offset_after({.num_experts = 3, .noisy_gate_policy = nn::NoisyGatePolicy::rsample}, false) == 30u);
  BOOST_TEST(offset_after({.num_experts = 3, .use_rts = false, .noisy_gate_policy = nn::NoisyGatePolicy::jitter},
                          true) == 40u);
  BOOST_TEST(offset_after({.num_experts = 3, .k = 2}, true) == 30u);  // second-expert sampling
  BOOST_TEST(offset_after({.num_experts = 3, .k = 2}, false) == 0u);  // in training only
  BOOST_TEST(offset_after({.num_experts = 3, .k = 2, .top2_2nd_expert_sampling = false}, true) == 0u);

  // The same seed routes the same way; RTS keeps the top-C priorities the generator drew.
  const MoEConfig config{.num_experts = 2, .min_capacity = 0};
  Generator a(70), b(70);
  nn::TopKGate ga(4, config, a), gb(4, config, b);
  ops::fill_(ga.wg->weight, 0.0);  // every token to expert 0, over capacity (C = 5 of 10)
  ops::fill_(gb.wg->weight, 0.0);
  const GeneratorState state = a.state();
  const nn::Routing ra = ga.route(x).routing, rb = gb.route(x).routing;
  BOOST_TEST(ints(ra.location) == ints(rb.location), boost::test_tools::per_element());
  a.set_state(state);
  nn::RoutingNoise noise;
  const uint64_t first = a.advance(20);
  for (uint64_t i = 0; i < 20; ++i) noise.priority.push_back(random_uniform(a.state().seed, first + i));
  const Tensor probs = Tensor::full({10, 2}, 0.5), logits = Tensor::zeros({10, 2});
  const nn::Routing expected = nn::route_tokens(probs, logits, {.k = 1, .min_capacity = 0}, noise);
  BOOST_TEST(ints(ra.location) == ints(expected.location), boost::test_tools::per_element());
  BOOST_TEST(ra.dropped() == 5);
}

// ---------------------------------------------------------------- the expert-parallel seam

namespace {

// The dropless seam of one process, recording what it counts and moves.
class RecordingExchange : public nn::ExpertExchange {
 public:
  nn::ExpertRows count_rows(const std::vector<int64_t>& sent, Device device) const override {
    counted.push_back(sent);
    return nn::ExpertExchange::count_rows(sent, device);
  }
  Tensor to_experts(const Tensor& rows, const nn::ExpertRows& counts) const override {
    moved.push_back(rows.shape());
    return nn::ExpertExchange::to_experts(rows, counts);
  }
  mutable std::vector<std::vector<int64_t>> counted;
  mutable std::vector<Shape> moved;
};

// rows (n, d) with a zero row n appended: the padded layout's gathers, spelled out.
Tensor moe_test_with_zero_row(const Tensor& rows) {
  return cat({rows, Tensor::zeros({1, rows.size(1)}, rows.dtype(), rows.device())}, 0);
}

// A layer's output for x (B, T, d) and its router losses as the padded layout computes them,
// stage by stage from the layer's gate output g and the gather indices `at`: the tokens and
// the experts' outputs gathered with a zero row appended by a copy.
struct MoETestPadded {
  Tensor out, router_loss;
};
MoETestPadded moe_test_padded(nn::MoE& layer, const Tensor& x, const nn::GateOutput& g, const ops::MoEIndices& at,
                              const MoEConfig& config) {
  const int64_t d = x.size(2);
  const Tensor tokens = reshape(x, {-1, d});
  const Tensor outputs = (*layer.experts)(embedding(moe_test_with_zero_row(tokens), at.source));  // (E, C, d)
  const Tensor routed = embedding(moe_test_with_zero_row(reshape(outputs, {-1, d})), at.slot);
  return {reshape(sum(mul(routed, unsqueeze(g.weights, 2)), 1), x.shape()),
          add(mul(g.l_aux, config.aux_loss_coeff), mul(g.z_loss, config.z_loss_coeff))};
}

}  // namespace

// Dropless, each expert gets exactly the rows routed to it: the exchange counts the loads
// and moves S k rows, no padding.
BOOST_AUTO_TEST_CASE(dropless_experts_run_on_exactly_their_rows) {
  const MoEConfig config{.num_experts = 3, .k = 2, .drop_tokens = false, .top2_2nd_expert_sampling = false};
  Generator gen(81);
  auto exchange = std::make_shared<RecordingExchange>();
  nn::MoE moe(4, config, nn::gelu_mlp_expert(4), exchange, gen);
  const nn::MoEOutput o = moe.apply(randn({6, 4}, 82));
  BOOST_REQUIRE(exchange->counted.size() == 1u);
  BOOST_TEST(exchange->counted[0] == o.stats.loads(), boost::test_tools::per_element());
  BOOST_REQUIRE(exchange->moved.size() == 1u);
  BOOST_TEST(exchange->moved[0] == (Shape{6 * 2, 4}));
  int64_t largest = 0;
  for (const int64_t n : o.stats.loads()) largest = std::max(largest, n);
  BOOST_TEST(o.stats.capacity == largest);
  BOOST_TEST(o.stats.dropped() == 0);
}

// The dropless layer equals the padded layout it replaced (every expert on `capacity` =
// the largest load slots, the empty ones zero rows) on one process: outputs and every
// gradient, within f32 rounding (a GEMM over fewer rows may take another of Eigen's
// kernels for a row, and round its sum otherwise).
BOOST_AUTO_TEST_CASE(dropless_layer_equals_the_padded_layout) {
  for (const int64_t k : {int64_t(1), int64_t(2)}) {
    const MoEConfig config{.num_experts = 4, .k = k, .drop_tokens = false};
    Generator g1(83), g2(83);
    nn::MoE a(6, config, nn::gelu_mlp_expert(6), nn::local_experts(), g1);
    nn::MoE b(6, config, nn::gelu_mlp_expert(6), nn::local_experts(), g2);
    a.train(), b.train();
    const Tensor xa = set_requires_grad(randn({2, 9, 6}, 84)), xb = set_requires_grad(ops::clone(xa));
    const Tensor w = randn({2, 9, 6}, 85);
    const nn::MoEOutput oa = a.apply(xa);
    backward(add(sum(mul(oa.out, w)), oa.loss));
    // The padded layout, stage by stage, with the same routing draws.
    const nn::GateOutput g = b.gate->route(reshape(xb, {-1, 6}));
    const nn::Routing& r = g.routing;
    const MoETestPadded padded =
        moe_test_padded(b, xb, g, ops::moe_indices(r.expert, r.location, r.experts, r.capacity), config);
    const Tensor& out = padded.out;
    backward(add(sum(mul(out, w)), padded.router_loss));
    BOOST_TEST_CONTEXT("k " << k) {
      BOOST_TEST(test::relative_error(oa.out, out) < 1e-6);
      BOOST_TEST(test::relative_error(grad(xa), grad(xb)) < 1e-6);
      const auto pa = a.named_parameters(), pb = b.named_parameters();
      for (size_t i = 0; i < pa.size(); ++i)
        BOOST_TEST(test::relative_error(grad(pa[i].second), grad(pb[i].second)) < 1e-6, pa[i].first);
    }
  }
}

// When dropping, dispatch and combine read an empty slot's or a dropped choice's row past
// the end of the rows (Note [MoE gathers]): the layer equals the gathers of the rows with a
// zero row appended (a copy of them) bit for bit, outputs and every gradient, with slots
// left empty (k = 1, capacity factor 2) and choices dropped (k = 2, capacity factor 0.5).
BOOST_AUTO_TEST_CASE(gathers_past_the_end_equal_gathers_of_an_appended_zero_row) {
  for (const auto& [k, factor] : {std::pair<int64_t, double>{1, 2.0}, {2, 0.5}}) {
    const MoEConfig config{.num_experts = 4, .k = k, .capacity_factor = factor, .min_capacity = 0};
    Generator g1(87), g2(87);
    nn::MoE a(6, config, nn::gelu_mlp_expert(6), nn::local_experts(), g1);
    nn::MoE b(6, config, nn::gelu_mlp_expert(6), nn::local_experts(), g2);
    a.train(), b.train();
    const Tensor xa = set_requires_grad(randn({2, 9, 6}, 88)), xb = set_requires_grad(ops::clone(xa));
    const Tensor w = randn({2, 9, 6}, 89);
    const nn::MoEOutput oa = a.apply(xa);
    backward(add(sum(mul(oa.out, w)), oa.loss));
    const nn::GateOutput g = b.gate->route(reshape(xb, {-1, 6}));
    const MoETestPadded padded = moe_test_padded(b, xb, g, g.indices, config);
    const Tensor& out = padded.out;
    backward(add(sum(mul(out, w)), padded.router_loss));
    BOOST_TEST_CONTEXT("k " << k) {
      BOOST_TEST(oa.stats.capacity * 4 != 18 * k);  // slots and choices differ: empty slots or drops
      BOOST_TEST(test::max_abs_diff(oa.out, out) == 0.0);
      BOOST_TEST(test::max_abs_diff(grad(xa), grad(xb)) == 0.0);
      const auto pa = a.named_parameters(), pb = b.named_parameters();
      for (size_t i = 0; i < pa.size(); ++i)
        BOOST_TEST(test::max_abs_diff(grad(pa[i].second), grad(pb[i].second)) == 0.0, pa[i].first);
    }
  }
}

// ---------------------------------------------------------------- gradients

namespace {

// Central differences of L = sum(out * w) + loss for every entry of every input (x and the
// parameters, set to N(0, 0.5) in f64), with the same draws every evaluation. Returns the
// stats of the forward.
nn::MoEStats check_layer_gradients(const std::string& name, nn::MoE& moe, const Tensor& x, Generator& gen) {
  test::params_to(moe, DType::f64);
  Generator init(91);
  for (auto& [n, p] : moe.named_parameters()) ops::normal_(p, 0.0, 0.5, init);
  std::vector<Tensor> inputs = {x};
  for (const Tensor& p : moe.parameters()) inputs.push_back(p);
  const GeneratorState state = gen.state();
  const Tensor w = randn(x.shape(), 92, 1.0, DType::f64);
  auto loss = [&] {
    gen.set_state(state);  // the same draws every evaluation
    const nn::MoEOutput out = moe.apply(x);
    return add(sum(mul(out.out, w)), out.loss);
  };
  for (const Tensor& t : inputs) set_grad(t, Tensor());
  gen.set_state(state);
  const nn::MoEOutput out = moe.apply(x);
  backward(add(sum(mul(out.out, w)), out.loss));
  NoGradGuard no_grad;
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const std::vector<double> analytic = grad(t).to_vector<double>();
    double* p = t.data<double>();
    double max_diff = 0, scale = 1e-12;
    for (int64_t j = 0; j < t.numel(); ++j) {
      const double orig = p[j];
      p[j] = orig + eps;
      const double lp = loss().item();
      p[j] = orig - eps;
      const double lm = loss().item();
      p[j] = orig;
      const double num = (lp - lm) / (2 * eps);
      max_diff = std::max(max_diff, std::fabs(num - analytic[size_t(j)]));
      scale = std::max({scale, std::fabs(num), std::fabs(analytic[size_t(j)])});
    }
    BOOST_TEST(scale > 1e-6, name << ": input " << i << " has no gradient");
    BOOST_TEST(max_diff / scale < 1e-6, name << ": input " << i << " relative error " << max_diff / scale);
  }
  return out.stats;
}

}  // namespace

BOOST_AUTO_TEST_CASE(layer_gradients_match_finite_differences) {
  {  // top-2 with drops, GELU experts, both losses
    Generator gen(101);
    nn::MoE moe(4,
                {.num_experts = 3,
                 .k = 2,
                 .capacity_factor = 0.75,
                 .min_capacity = 0,
                 .aux_loss_coeff = 0.3,
                 .z_loss_coeff = 0.2},
                nn::gelu_mlp_expert(4), nn::local_experts(), gen);
    Tensor x = randn({6, 4}, 102, 1.0, DType::f64);
    set_requires_grad(x);
    BOOST_TEST(check_layer_gradients("top-2 GELU", moe, x, gen).dropped() > 0);
  }
  {  // top-1 with random token selection, SwiGLU experts, Residual MoE
    Generator gen(111);
    nn::MoE moe(
        4, {.num_experts = 2, .capacity_factor = 0.5, .min_capacity = 0, .use_residual = true, .z_loss_coeff = 0.1},
        nn::swiglu_expert(4, 6), nn::local_experts(), gen);
    Tensor x = randn({2, 4, 4}, 112, 1.0, DType::f64);
    set_requires_grad(x);
    BOOST_TEST(check_layer_gradients("top-1 RTS SwiGLU residual", moe, x, gen).dropped() > 0);
  }
  {  // top-3 of 4, dropping by probability, Megatron's loss
    Generator gen(121);
    nn::MoE moe(4,
                {.num_experts = 4,
                 .k = 3,
                 .capacity_factor = 0.75,
                 .min_capacity = 0,
                 .aux_loss = nn::AuxLossNormalization::megatron},
                nn::gelu_mlp_expert(4), nn::local_experts(), gen);
    Tensor x = randn({6, 4}, 122, 1.0, DType::f64);
    set_requires_grad(x);
    BOOST_TEST(check_layer_gradients("top-3 GELU", moe, x, gen).dropped() > 0);
  }
}

// ---------------------------------------------------------------- errors

BOOST_AUTO_TEST_CASE(bad_configurations_and_inputs_are_named) {
  auto make = [](const MoEConfig& config) { nn::MoE(4, config, nn::gelu_mlp_expert(4)); };
  test::check_error([&] { make({.num_experts = 0}); }, {"[moe] num_experts must be positive"});
  test::check_error([&] { make({.num_experts = 2, .k = 3}); }, {"[moe] k must be in [1, num_experts = 2], got 3"});
  test::check_error([&] { make({.num_experts = 2, .capacity_factor = 0}); }, {"capacity_factor must be positive"});
  test::check_error([&] { make({.num_experts = 2, .k = 2, .noisy_gate_policy = nn::NoisyGatePolicy::rsample}); },
                    {"RSample applies to top-1 gating only"});
  struct ThreeRanks : nn::ExpertExchange {
    int ranks() const override { return 3; }
  };
  test::check_error([&] { nn::MoE(4, {.num_experts = 4}, nn::gelu_mlp_expert(4), std::make_shared<ThreeRanks>()); },
                    {"num_experts (4) must be divisible by the expert-parallel size (3)"});
  nn::MoE moe(4, {.num_experts = 2}, nn::gelu_mlp_expert(4));
  test::check_error([&] { moe.apply(Tensor::zeros({3, 5})); }, {"MoE: expected x (..., 4), got (3, 5)"});
  test::check_error([&] { moe(Tensor::zeros({3, 5})); }, {"MoE: expected x (..., 4), got (3, 5)"});
}

// ---------------------------------------------------------------- in models

BOOST_AUTO_TEST_CASE(router_loss_rides_on_the_output_into_the_backward) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, -2, 3}, {3});
  Tensor w = Tensor::from_vector(std::vector<double>{0.5, 2}, {2});
  set_requires_grad(x);
  set_requires_grad(w);
  auto grads = [&](double seed, double router) {
    set_grad(x, Tensor());
    set_grad(w, Tensor());
    const nn::RouterLossGradient scope(Tensor::full({}, router, DType::f64));
    const Tensor y = nn::attach_router_loss(mul(x, 3.0), sum(mul(w, w)));  // router loss |w|^2
    BOOST_TEST(vec(y) == (std::vector<double>{3, -6, 9}), boost::test_tools::per_element());
    backward(sum(y), Tensor::full({}, seed, DType::f64));
    return std::pair(vec(grad(x)), vec(grad(w)));
  };
  BOOST_TEST(!nn::router_loss_gradient().defined());  // 1
  const auto [gx, gw] = grads(1.0, 1.0);
  BOOST_TEST(gx == (std::vector<double>{3, 3, 3}), boost::test_tools::per_element());
  BOOST_TEST(gw == (std::vector<double>{1, 4}), boost::test_tools::per_element());  // 2w
  const auto [hx, hw] = grads(0.25, 0.25);  // a trainer's seed: a quarter of everything
  BOOST_TEST(hx == (std::vector<double>{0.75, 0.75, 0.75}), boost::test_tools::per_element());
  BOOST_TEST(hw == (std::vector<double>{0.25, 1}), boost::test_tools::per_element());
  BOOST_TEST(!nn::router_loss_gradient().defined());  // restored
}

BOOST_AUTO_TEST_CASE(moe_blocks_are_placed_as_megatron_deepspeed_places_them) {
  nn::MoEModelConfig m;
  BOOST_TEST(!m.enabled());
  BOOST_TEST(m.at(3).num_experts == 0);
  m.num_experts = {8};  // every 2 (the default): blocks 1, 3, 5
  std::vector<int64_t> experts;
  for (int64_t i = 0; i < 6; ++i) experts.push_back(m.at(i).num_experts);
  BOOST_TEST(experts == (std::vector<int64_t>{0, 8, 0, 8, 0, 8}), boost::test_tools::per_element());
  m.num_experts = {2, 4, 8};  // PR-MoE's pyramid
  m.every = 2;
  experts.clear();
  for (int64_t i = 0; i < 6; ++i) experts.push_back(m.at(i).num_experts);
  BOOST_TEST(experts == (std::vector<int64_t>{0, 2, 0, 4, 0, 8}), boost::test_tools::per_element());
  BOOST_TEST(m.moe_blocks(6) == 3);
  m.validate(6);
  m.every = 3;
  test::check_error([&] { m.validate(6); }, {"[model.moe] num_experts must be one count or a list of one per MoE "
                                             "block (2 blocks of 6 at every 3), got a list of 3"});
  m.every = 7;
  test::check_error([&] { m.validate(6); }, {"[model.moe] every must be in [1, n_layer = 6], got 7"});
  m = nn::MoEModelConfig{.num_experts = {2}, .every = 1, .layer = {.k = 3}};
  test::check_error([&] { m.validate(2); }, {"[moe] k must be in [1, num_experts = 2], got 3"});
}

namespace {

// A GPT with an MoE block of 3 experts, top-2 with drops, both router losses; or the same
// as a Llama with SwiGLU experts and a residual MLP.
nn::GPTConfig moe_gpt() {
  nn::GPTConfig c;
  c.n_layer = 2, c.n_head = 2, c.d_model = 8, c.seq_len = 6, c.vocab_size = 11;
  c.moe = {.num_experts = {3},
           .every = 2,
           .layer = {.k = 2, .capacity_factor = 0.75, .min_capacity = 0, .aux_loss_coeff = 0.3, .z_loss_coeff = 0.2}};
  return c;
}

nn::LlamaConfig moe_llama() {
  nn::LlamaConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_kv_head = 1, c.d_model = 8, c.intermediate = 6, c.seq_len = 6, c.vocab_size = 11;
  c.moe = {.num_experts = {2, 3},
           .every = 1,
           .layer = {.capacity_factor = 0.5, .min_capacity = 0, .use_residual = true, .z_loss_coeff = 0.1}};
  return c;
}

// The training objective of a model with MoE blocks, lm_loss + the router losses of its
// layers, with the layers' draws replayed from `state`.
std::vector<nn::MoE*> moe_layers(const std::shared_ptr<nn::LanguageModel>& model) {
  std::vector<nn::MoE*> layers;
  for (const auto& [name, m] : model->named_modules(model))
    if (auto* moe = dynamic_cast<nn::MoE*>(m.get())) layers.push_back(moe);
  return layers;
}

double objective(const std::shared_ptr<nn::LanguageModel>& model, const Tensor& idx, const Tensor& tgt,
                 const GeneratorState& state) {
  default_generator().set_state(state);
  EnableGradGuard grad;  // the totals count forwards that record a graph
  double l = model->loss(idx, tgt).item();
  for (nn::MoE* moe : moe_layers(model)) l += moe->take_totals().loss;
  return l;
}

// Central differences of the objective in f64 against one backward from the LM loss, for a
// sample of every parameter's entries, within `tolerance` relative.
void check_model_gradients(const std::string& name, const std::shared_ptr<nn::LanguageModel>& model,
                           double tolerance) {
  test::params_to(*model, DType::f64);
  model->train();
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 5, 2, 9, 3, 3, 7, 0, 10, 4, 6, 8}, {2, 6});
  const Tensor tgt = Tensor::from_vector(std::vector<int64_t>{5, 2, 9, 3, 3, 7, 0, 10, 4, 6, 8, 1}, {2, 6});
  const GeneratorState state = default_generator().state();
  objective(model, idx, tgt, state);  // clears the totals
  model->zero_grad();
  default_generator().set_state(state);
  backward(model->loss(idx, tgt));
  for (nn::MoE* moe : moe_layers(model)) moe->take_totals();
  const double eps = 1e-6;
  int64_t dropped = 0;
  for (const auto& [pname, p] : model->named_parameters()) {
    const std::vector<double> analytic = grad(p).defined() ? vec(grad(p)) : std::vector<double>(size_t(p.numel()));
    double* v = p.data<double>();
    double max_diff = 0, scale = 1e-12;
    for (int64_t j = 0; j < p.numel(); j += std::max<int64_t>(1, p.numel() / 7)) {
      const double orig = v[j];
      v[j] = orig + eps;
      const double lp = objective(model, idx, tgt, state);
      v[j] = orig - eps;
      const double lm = objective(model, idx, tgt, state);
      v[j] = orig;
      const double num = (lp - lm) / (2 * eps);
      max_diff = std::max(max_diff, std::fabs(num - analytic[size_t(j)]));
      scale = std::max({scale, std::fabs(num), std::fabs(analytic[size_t(j)])});
    }
    BOOST_TEST(max_diff / scale < tolerance, name << ": " << pname << " relative error " << max_diff / scale);
  }
  default_generator().set_state(state);
  EnableGradGuard grad;
  model->loss(idx, tgt);
  for (nn::MoE* moe : moe_layers(model)) dropped += moe->take_totals().dropped;
  BOOST_TEST(dropped > 0, name << ": the capacity drops no choice");
}

}  // namespace

BOOST_AUTO_TEST_CASE(model_gradients_include_the_router_losses) {
  const auto gpt = std::make_shared<nn::GPT>(moe_gpt());
  BOOST_TEST(!std::static_pointer_cast<nn::Block>((*gpt->blocks)[0])->moe);
  BOOST_TEST_REQUIRE(std::static_pointer_cast<nn::Block>((*gpt->blocks)[1])->moe != nullptr);
  BOOST_TEST(!std::static_pointer_cast<nn::Block>((*gpt->blocks)[1])->mlp);
  check_model_gradients("GPT", gpt, 1e-6);
  // The Llama's rotary tables stay f32: its q and k weights' gradients carry their rounding.
  check_model_gradients("Llama", std::make_shared<nn::Llama>(moe_llama()), 1e-4);
}

BOOST_AUTO_TEST_CASE(moe_models_count_and_name_their_parameters) {
  const nn::GPTConfig g = moe_gpt();
  nn::GPT gpt(g);
  BOOST_TEST(gpt.num_parameters() == g.num_parameters());
  const int64_t C = 8, dense = 12 * C * C + 13 * C, expert = 8 * C * C + 5 * C;
  BOOST_TEST(g.num_parameters() == 11 * C + 6 * C + 2 * dense + 2 * C - expert + 3 * C + 3 * expert);
  std::vector<std::string> names;
  for (const auto& [name, p] : gpt.named_parameters()) names.push_back(name);
  std::vector<std::string> listed;
  for (const auto& [name, n] : g.parameter_sizes()) listed.push_back(name);
  BOOST_TEST(names == listed, boost::test_tools::per_element());
  BOOST_TEST(std::count(names.begin(), names.end(), "blocks.1.moe.experts.2.proj.weight") == 1);
  const nn::LlamaConfig l = moe_llama();
  nn::Llama llama(l);
  BOOST_TEST(llama.num_parameters() == l.num_parameters());
  names.clear(), listed.clear();
  for (const auto& [name, p] : llama.named_parameters()) names.push_back(name);
  for (const auto& [name, shape] : l.parameter_shapes()) listed.push_back(name);
  BOOST_TEST(names == listed, boost::test_tools::per_element());
  // A pipeline stage builds the same layers: the block's list entry counts what it holds.
  const nn::LayerList layers = nn::gpt_layers(g);
  BOOST_TEST(layers.layers[2].parameters == 4 * C * C + 8 * C + 3 * C + 3 * expert);
}

// Rank 2 of 3 expert-parallel ranks holds expert 2 of each MoE layer (Note [Expert
// parallelism]): named by its global index, with the weights the one-process model gives
// it, and marked for ZeRO (TensorSplit::expert); every other parameter as the whole model's.
BOOST_AUTO_TEST_CASE(a_model_over_expert_parallel_ranks_names_its_experts_by_global_index) {
  struct ThirdOfThree : nn::ExpertExchange {
    int ranks() const override { return 3; }
    int rank() const override { return 2; }
  };
  const nn::GPT whole(moe_gpt());
  const nn::GPT part(moe_gpt(), std::make_shared<nn::Parallelism>(std::make_shared<ThirdOfThree>()));
  std::map<std::string, Tensor> reference;
  for (const auto& [name, p] : whole.named_parameters()) reference.emplace(name, p);
  const auto params = part.named_parameters();
  const auto splits = part.named_splits();
  std::vector<std::string> experts;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].first;
    const bool expert = name.find(".moe.experts.") != std::string::npos;
    BOOST_TEST(splits[i].second.expert == expert, name);
    if (expert) experts.push_back(name);
    BOOST_TEST_REQUIRE(reference.count(name) == 1u, name);
    BOOST_TEST(ops::max_abs(ops::sub(params[i].second, reference.at(name))) == 0.0, name);
  }
  const std::vector<std::string> expected{"blocks.1.moe.experts.2.fc.weight", "blocks.1.moe.experts.2.fc.bias",
                                          "blocks.1.moe.experts.2.proj.weight", "blocks.1.moe.experts.2.proj.bias"};
  BOOST_TEST(experts == expected, boost::test_tools::per_element());
  BOOST_TEST(reference.size() == params.size() + 2 * 4);  // experts 0 and 1 live on the other ranks
}

BOOST_AUTO_TEST_CASE(training_forwards_add_to_the_totals_once) {
  nn::GPTConfig c = moe_gpt();
  c.moe.layer.capacity_factor = 4.0;
  nn::GPT gpt(c);
  nn::MoE& moe = *std::static_pointer_cast<nn::Block>((*gpt.blocks)[1])->moe;
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 5, 2, 9, 3, 3}, {1, 6});
  gpt.train();
  gpt.loss(idx, idx);
  gpt.loss(idx, idx);
  {
    NoGradGuard no_grad;  // activation checkpointing's first pass: not counted
    gpt.loss(idx, idx);
  }
  gpt.eval();
  gpt.loss(idx, idx);
  const nn::MoETotals t = moe.take_totals();
  BOOST_TEST(t.forwards == 2);
  BOOST_TEST(t.choices == 2 * 6 * 2);
  BOOST_TEST(std::accumulate(t.load.begin(), t.load.end(), int64_t(0)) == t.choices);
  BOOST_TEST(t.dropped == 0);
  BOOST_TEST(t.loss == 0.3 * t.l_aux + 0.2 * t.z_loss, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(t.l_aux > 0);
  BOOST_TEST(moe.take_totals().forwards == 0);
}

// The loads stay on the device between reads; past 256 forwards they are folded into the
// totals, so a run that never takes them holds a bounded number, and nothing is lost.
BOOST_AUTO_TEST_CASE(totals_count_every_forward_across_folds) {
  Generator gen(91);
  nn::MoE moe(4, {.num_experts = 2, .min_capacity = 0, .use_rts = false}, nn::gelu_mlp_expert(4), nn::local_experts(),
              gen);
  ops::fill_(moe.gate->wg->weight, 0.0);
  ops::copy_(ops::narrow(moe.gate->wg->weight, 0, 0, 1), Tensor::full({1, 4}, 5.0));  // every token to expert 0
  const Tensor x = ops::add(ops::mul(randn({8, 4}, 92), 0.1), 1.0);
  moe.train();
  for (int i = 0; i < 300; ++i) moe(x);  // C = 4 of 8 tokens each time
  const nn::MoETotals t = moe.take_totals();
  BOOST_TEST(t.forwards == 300);
  BOOST_TEST(t.choices == 300 * 8);
  BOOST_TEST(t.load == (std::vector<int64_t>{300 * 8, 0}), boost::test_tools::per_element());
  BOOST_TEST(t.dropped == 300 * 4);
}

BOOST_AUTO_TEST_SUITE_END()  // test_moe
