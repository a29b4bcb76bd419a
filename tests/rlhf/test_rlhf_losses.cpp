// The RLHF losses and estimators (src/rlhf/) on small hand-made tensors, each against its
// formula written out here: values, the gradients where they have a closed form, the
// reported statistics, and the errors bad input gets.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/meta.h"
#include "rlhf/dpo.h"
#include "rlhf/gae.h"
#include "rlhf/grpo.h"
#include "rlhf/kl_controller.h"
#include "rlhf/kl_reward.h"
#include "rlhf/ppo_losses.h"
#include "rlhf/reward_loss.h"
#include "rlhf/host_rows.h"
#include "rlhf/rl_epoch.h"
#include "tensor/host_reads.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_rlhf_losses)

using namespace triad;
using namespace triad::rlhf;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor leaf(const std::vector<double>& v, const Shape& s) {
  Tensor t = f64(v, s);
  set_requires_grad(t);
  return t;
}
Tensor ids(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }
double softplus(double x) { return std::log1p(std::exp(x)); }  // -log sigmoid(-x)
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
std::vector<double> values(const Tensor& t) { return ops::to(t, DType::f64).to_vector<double>(); }

// Element by element within an absolute tolerance.
void check_close(const std::vector<double>& a, const std::vector<double>& b, double tolerance) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::fabs(a[i] - b[i]) <= tolerance, "element " << i << ": " << a[i] << " vs " << b[i]);
}

}  // namespace

// Pair 0 diverges at 2; chosen ends (first pad) at 4, rejected at 3: span [2, 4), scores at 3
// and 2. Pair 1 is identical: span [T-1, T), both scores at the chosen's end 3 - 1.
BOOST_AUTO_TEST_CASE(reward_loss_follows_deepspeed_chat_spans_and_scores) {
  const int64_t pad = 0;
  const Tensor c_ids = ids({5, 6, 7, 8, 0, 0, /**/ 5, 6, 7, 0, 0, 0}, {2, 6});
  const Tensor r_ids = ids({5, 6, 9, 0, 0, 0, /**/ 5, 6, 7, 0, 0, 0}, {2, 6});
  const std::vector<double> rc = {0.1, 0.2, 0.9, -0.4, 0.3, 0.7, /**/ 0.5, 0.1, 1.5, 0.2, 0.3, 0.6};
  const std::vector<double> rr = {0.1, 0.2, 0.4, 0.6, -0.2, 0.1, /**/ 0.5, 0.1, 1.5, 0.2, 0.3, -0.6};
  const Tensor c = leaf(rc, {2, 6}), r = leaf(rr, {2, 6});
  const RewardLoss out = reward_loss(c, r, c_ids, r_ids, pad);
  const double l0 = 0.5 * (softplus(-(0.9 - 0.4)) + softplus(-(-0.4 - 0.6)));
  const double l1 = softplus(-(0.6 - -0.6));
  BOOST_TEST(out.loss.item() == 0.5 * (l0 + l1), boost::test_tools::tolerance(1e-14));
  BOOST_TEST(values(out.chosen_scores) == std::vector<double>({-0.4, 1.5}), boost::test_tools::per_element());
  BOOST_TEST(values(out.rejected_scores) == std::vector<double>({0.4, 1.5}), boost::test_tools::per_element());
  BOOST_TEST(out.accuracy == 0.0);  // -0.4 < 0.4, and 1.5 is not > 1.5
  backward(out.loss);
  // d/dc of 0.5 * mean softplus(-(c - r)) over the span = -0.5 sigmoid(-(c - r)) / span
  std::vector<double> expected(12, 0.0);
  expected[2] = -0.5 * sigmoid(-0.5) / 2;
  expected[3] = -0.5 * sigmoid(-(-1.0)) / 2;
  expected[11] = -0.5 * sigmoid(-1.2);
  const std::vector<double> gc = values(grad(c)), gr = values(grad(r));
  for (size_t i = 0; i < 12; ++i) {
    BOOST_TEST(gc[i] == expected[i], boost::test_tools::tolerance(1e-14));
    BOOST_TEST(gr[i] == -expected[i], boost::test_tools::tolerance(1e-14));
  }
}

BOOST_AUTO_TEST_CASE(reward_loss_counts_pads_at_the_beginning_and_rejects_bad_pairs) {
  // OPT-style: the first token is a pad; the second pad ends each sequence.
  const Tensor c_ids = ids({0, 5, 6, 7, 0, 0}, {1, 6}), r_ids = ids({0, 5, 8, 0, 0, 0}, {1, 6});
  const Tensor c = f64({0, 0, 1, 2, 0, 0}, {1, 6}), r = f64({0, 0, 3, 1, 0, 0}, {1, 6});
  const RewardLoss out = reward_loss(c, r, c_ids, r_ids, 0, 1);
  BOOST_TEST(out.loss.item() == 0.5 * (softplus(2.0) + softplus(-1.0)), boost::test_tools::tolerance(1e-14));
  BOOST_TEST(out.chosen_scores.item() == 2.0);
  BOOST_TEST(out.rejected_scores.item() == 3.0);
  test::check_error(
      [&] {
        reward_loss(c, r, ids({1, 5, 6, 7, 0, 0}, {1, 6}), ids({2, 5, 6, 7, 0, 0}, {1, 6}), 0);
      },
      {"pair 0 differs at its first token"});
  test::check_error(
      [&] {
        reward_loss(c, r, ids({1, 5, 0, 7, 0, 0}, {1, 6}), ids({1, 5, 0, 8, 0, 0}, {1, 6}), 0);
      },
      {"pair 0 first differs at position 3", "end of both sequences (2)"});
  test::check_error([&] { reward_loss(c, f64({0, 0}, {1, 2}), c_ids, r_ids, 0); }, {"reward_loss", "(1, 2)"});
}

BOOST_AUTO_TEST_CASE(kl_rewards_put_the_clipped_score_on_the_last_answer_token) {
  const Tensor logp = f64({-1.0, -2.0, -0.5, -3.0, /**/ -0.2, -0.4, -0.6, -0.8}, {2, 4});
  const Tensor ref = f64({-1.5, -1.0, -0.5, -9.0, /**/ -0.3, -0.1, -0.6, -0.8}, {2, 4});
  const Tensor mask = f64({1, 1, 1, 0, /**/ 1, 1, 1, 1}, {2, 4});
  const std::vector<double> r = values(kl_rewards(logp, ref, f64({7.0, -0.25}, {2}), mask, 0.1, 5.0));
  const std::vector<double> expected = {-0.1 * 0.5, -0.1 * -1.0, 0.0 + 5.0, 0.0,
                                        -0.1 * 0.1, -0.1 * -0.3, 0.0,       0.0 - 0.25};
  for (size_t i = 0; i < r.size(); ++i) BOOST_TEST(r[i] == expected[i], boost::test_tools::tolerance(1e-14));
  test::check_error(
      [&] {
        kl_rewards(logp, ref, f64({1, 1}, {2}), f64({1, 1, 1, 0, 0, 0, 0, 0}, {2, 4}));
      },
      {"kl_rewards: row 1 has no answer token"});
  test::check_error(
      [&] {
        kl_rewards(logp, ref, f64({1, 1}, {2}), f64({1, 1, 1, 0.5, 1, 1, 1, 1}, {2, 4}));
      },
      {"kl_rewards", "0 or 1, got 0.5"});
}

BOOST_AUTO_TEST_CASE(gae_matches_the_recursion_by_hand) {
  // gamma 1, lambda 0.95. Row 0: V = (1, 2, 3), r = (0, 0, 1):
  //   A2 = 1 - 3 = -2; A1 = 0 + 3 - 2 + 0.95 (-2) = -0.9; A0 = 0 + 2 - 1 + 0.95 (-0.9) = 0.145.
  // Row 1 ends after two tokens: V = (1, 2, [9 -> 0]), r = (0, 1, [5 -> 0]):
  //   A1 = 1 - 2 = -1; A0 = 0 + 2 - 1 + 0.95 (-1) = 0.05; A2 = 0.
  const Tensor v = f64({1, 2, 3, 1, 2, 9}, {2, 3}), r = f64({0, 0, 1, 0, 1, 5}, {2, 3});
  const AdvantagesReturns out = gae(v, r, f64({1, 1, 1, 1, 1, 0}, {2, 3}));
  const std::vector<double> adv = values(out.advantages), ret = values(out.returns);
  const std::vector<double> e_adv = {0.145, -0.9, -2, 0.05, -1, 0}, e_ret = {1.145, 1.1, 1, 1.05, 1, 0};
  for (size_t i = 0; i < adv.size(); ++i) {
    BOOST_TEST(adv[i] == e_adv[i], boost::test_tools::tolerance(1e-14));
    BOOST_TEST(ret[i] == e_ret[i], boost::test_tools::tolerance(1e-14));
  }
  // gamma 0.5, lambda 0 is one-step TD: A_t = r_t + 0.5 V_{t+1} - V_t.
  const std::vector<double> td = values(gae(v, r, f64({1, 1, 1, 1, 1, 1}, {2, 3}), 0.5, 0.0).advantages);
  const std::vector<double> e_td = {0 + 1 - 1, 0 + 1.5 - 2, 1 - 3, 0 + 1 - 1, 1 + 4.5 - 2, 5 - 9};
  for (size_t i = 0; i < td.size(); ++i) BOOST_TEST(td[i] == e_td[i], boost::test_tools::tolerance(1e-14));
}

BOOST_AUTO_TEST_CASE(ppo_actor_loss_clips_the_ratio_on_the_side_the_advantage_favours) {
  // Token ratios 1, 1.5, 1.5, 0.5 (and a masked one) with advantages 2, 1, -1, 1.
  const std::vector<double> old = {-1.0, -2.0, -2.0, -1.0, -1.0};
  const std::vector<double> lp = {-1.0, -2.0 + std::log(1.5), -2.0 + std::log(1.5), -1.0 + std::log(0.5), 0.0};
  const Tensor logp = leaf(lp, {1, 5});
  const Tensor adv = f64({2, 1, -1, 1, 100}, {1, 5}), mask = f64({1, 1, 1, 1, 0}, {1, 5});
  const ActorLoss out = ppo_actor_loss(logp, f64(old, {1, 5}), adv, mask, 0.2);
  // max(-A r, -A clip(r)): -2; max(-1.5, -1.2) = -1.2; max(1.5, 1.2) = 1.5; max(-0.5, -0.8) = -0.5.
  BOOST_TEST(out.loss.item() == (-2 - 1.2 + 1.5 - 0.5) / 4, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(out.clip_fraction.item() == 0.25);  // token 1 only: the clip takes its gradient away
  const double l15 = std::log(1.5), l05 = std::log(0.5);
  BOOST_TEST(out.approx_kl.item() == 0.5 * (2 * l15 * l15 + l05 * l05) / 4, boost::test_tools::tolerance(1e-14));
  // The mask's token count given (as an RL step gives it, read nowhere) divides the same.
  const ActorLoss given = ppo_actor_loss(detach(logp), f64(old, {1, 5}), adv, mask, 0.2, 4.0);
  BOOST_TEST(given.loss.item() == out.loss.item());
  BOOST_TEST(given.approx_kl.item() == out.approx_kl.item());
  backward(out.loss);
  // d/dlogp of -A r = -A r where unclipped, 0 where the clipped branch wins.
  const std::vector<double> g = values(grad(logp)), e = {-2.0 / 4, 0, 1.5 / 4, -0.5 / 4, 0};
  for (size_t i = 0; i < g.size(); ++i) BOOST_TEST(g[i] == e[i], boost::test_tools::tolerance(1e-14));
}

BOOST_AUTO_TEST_CASE(ppo_critic_loss_takes_the_larger_of_clipped_and_unclipped_errors) {
  // v - old = 0.1 (inside), 0.5 (clipped to 0.2), -0.5 (clipped to -0.2).
  const Tensor v = leaf({1.1, 1.5, 0.5}, {1, 3}), old = f64({1, 1, 1}, {1, 3});
  const Tensor ret = f64({2, 1, 1}, {1, 3}), mask = f64({1, 1, 1}, {1, 3});
  const CriticLoss out = ppo_critic_loss(v, old, ret, mask, 0.2);
  // errors: 0.81 | max(0.25, 0.04) = 0.25 | max(0.25, 0.04) = 0.25
  BOOST_TEST(out.loss.item() == 0.5 * (0.81 + 0.25 + 0.25) / 3, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(out.clip_fraction.item() == 0.0);
  backward(out.loss);
  const std::vector<double> g = values(grad(v)), e = {-0.9 / 3, 0.5 / 3, -0.5 / 3};
  for (size_t i = 0; i < g.size(); ++i) BOOST_TEST(g[i] == e[i], boost::test_tools::tolerance(1e-14));
  // The clipped error wins where the clip moves v away from the return: v = 1.5, R = 2.
  const Tensor v2 = leaf({1.5}, {1, 1});
  const CriticLoss out2 = ppo_critic_loss(v2, f64({1}, {1, 1}), f64({2}, {1, 1}), f64({1}, {1, 1}), 0.2);
  BOOST_TEST(out2.loss.item() == 0.5 * 0.64, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(out2.clip_fraction.item() == 1.0);
  backward(out2.loss);
  BOOST_TEST(grad(v2).item() == 0.0);
}

BOOST_AUTO_TEST_CASE(grpo_standardizes_within_groups_with_the_sample_std) {
  // Groups (1, 2, 3): mean 2, std 1; (5, 5, 5): std 0; (0, 4, 8): mean 4, std sqrt(32 / 2) = 4.
  const std::vector<double> a = values(grpo_advantages(f64({1, 2, 3, 5, 5, 5, 0, 4, 8}, {9}), 3));
  const double eps = 1e-4;
  const std::vector<double> e = {-1 / (1 + eps), 0, 1 / (1 + eps), 0, 0, 0, -4 / (4 + eps), 0, 4 / (4 + eps)};
  for (size_t i = 0; i < e.size(); ++i) BOOST_TEST(a[i] == e[i], boost::test_tools::tolerance(1e-14));
  test::check_error([&] { grpo_advantages(f64({1, 2, 3}, {3}), 2); }, {"group_size must be >= 2 and divide the 3"});
  test::check_error([&] { grpo_advantages(f64({1, 2}, {2}), 1); }, {"group_size"});
}

BOOST_AUTO_TEST_CASE(grpo_loss_is_the_policy_gradient_plus_k3_kl) {
  // old = logp (one update per generation): ratio 1, loss = mean(-A + beta kl).
  const std::vector<double> lp = {-1.0, -2.0, -0.5, -1.5};
  const Tensor logp = leaf(lp, {2, 2});
  const Tensor ref = f64({-1.2, -2.0, -0.1, 7.0}, {2, 2}), mask = f64({1, 1, 1, 0}, {2, 2});
  const Tensor adv = f64({0.5, -1.0}, {2});
  const double beta = 0.04;
  const GrpoLoss out = grpo_loss(logp, detach(logp), ref, adv, mask, beta, 0.2);
  auto k3 = [](double d) { return std::exp(d) - d - 1; };  // d = ref - logp
  const double kl = (k3(-0.2) + k3(0.0) + k3(0.4)) / 3;
  BOOST_TEST(out.kl.item() == kl, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(out.loss.item() == (-0.5 - 0.5 + 1.0) / 3 + beta * kl, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(out.clip_fraction.item() == 0.0);
  backward(out.loss);
  // d/dlogp: -A (ratio 1) + beta (1 - exp(ref - logp)).
  const std::vector<double> g = values(grad(logp));
  const std::vector<double> e = {(-0.5 + beta * (1 - std::exp(-0.2))) / 3, (-0.5 + beta * (1 - 1)) / 3,
                                 (1.0 + beta * (1 - std::exp(0.4))) / 3, 0};
  for (size_t i = 0; i < g.size(); ++i) BOOST_TEST(g[i] == e[i], boost::test_tools::tolerance(1e-14));
  BOOST_TEST(values(k3_kl(f64({-1, -2}, {2}), f64({-1, -2}, {2}))) == std::vector<double>({0, 0}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(dpo_loss_and_its_reported_rewards) {
  const Tensor pc = leaf({-10, -4}, {2}), pr = leaf({-12, -3}, {2});
  const Tensor rc = f64({-11, -4}, {2}), rr = f64({-11, -5}, {2});
  const double beta = 0.1;
  const DpoLoss out = dpo_loss(pc, pr, rc, rr, beta);
  // margins beta ((pc - rc) - (pr - rr)): 0.1 (1 + 1) = 0.2 and 0.1 (0 - 2) = -0.2
  BOOST_TEST(out.loss.item() == 0.5 * (softplus(-0.2) + softplus(0.2)), boost::test_tools::tolerance(1e-14));
  check_close(values(out.chosen_rewards), std::vector<double>({0.1, 0.0}), 1e-14);
  check_close(values(out.rejected_rewards), std::vector<double>({-0.1, 0.2}), 1e-14);
  BOOST_TEST(out.accuracy == 0.5);
  BOOST_TEST(out.margin == 0.0, boost::test_tools::tolerance(1e-14));
  backward(out.loss);
  // d/dpc = -beta sigmoid(-z) / B, d/dpr = +beta sigmoid(-z) / B
  const std::vector<double> gc = values(grad(pc)), gr = values(grad(pr));
  const std::vector<double> s = {sigmoid(-0.2), sigmoid(0.2)};
  for (size_t i = 0; i < 2; ++i) {
    BOOST_TEST(gc[i] == -beta * s[i] / 2, boost::test_tools::tolerance(1e-14));
    BOOST_TEST(gr[i] == beta * s[i] / 2, boost::test_tools::tolerance(1e-14));
  }
  // At initialisation the policy is the reference: loss log 2, gradient beta / 2 per pair.
  const Tensor p0 = leaf({-5}, {1});
  const DpoLoss init = dpo_loss(p0, f64({-6}, {1}), f64({-5}, {1}), f64({-6}, {1}), beta);
  BOOST_TEST(init.loss.item() == std::log(2.0), boost::test_tools::tolerance(1e-15));
  backward(init.loss);
  BOOST_TEST(grad(p0).item() == -beta / 2, boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(adaptive_kl_controller_follows_ziegler_et_al) {
  KlController c = KlController::adaptive(0.2, 6.0, 10000);
  c.update(9.0, 256);  // error clamp(0.5) = 0.2: x (1 + 0.2 * 256 / 10000)
  BOOST_TEST(c.value() == 0.2 * (1 + 0.2 * 0.0256), boost::test_tools::tolerance(1e-15));
  const double before = c.value();
  c.update(5.4, 100);  // error -0.1
  BOOST_TEST(c.value() == before * (1 - 0.1 * 0.01), boost::test_tools::tolerance(1e-15));
  KlController f = KlController::fixed(0.1);
  f.update(100.0, 1000);
  BOOST_TEST(f.value() == 0.1);
  BOOST_TEST(!f.is_adaptive());
  test::check_error([] { KlController::adaptive(0.1, 0.0, 100); }, {"target > 0"});
}

// Parts of any shapes and dtypes are read from the device together, each element exactly,
// in one read (host_values; host_copies keeps their shapes and dtypes); a batch of DeviceSums reads each as its read() alone does, bit
// for bit, in one read, and reads nothing when none holds a part on a device.
BOOST_AUTO_TEST_CASE(figures_are_read_together_in_one_wait) {
  const Tensor f32 = Tensor::from_vector(std::vector<float>{0.1f, -3.5f, 1e-30f, 7.0f}, {2, 2});
  const Tensor bf16 = ops::to(Tensor::from_vector(std::vector<double>{-2.375, 0.5, 96.0}, {3}), DType::bf16);
  const Tensor i64 = Tensor::from_vector(std::vector<int64_t>{-4}, {1});
  uint64_t before = host_reads();
  const std::vector<double> parts = host_values({f32, bf16, Tensor::full({}, 0.25, DType::f64), i64});
  BOOST_TEST(host_reads() - before == 1u);
  BOOST_TEST(parts == std::vector<double>({double(0.1f), -3.5, double(1e-30f), 7.0, -2.375, 0.5, 96.0, 0.25, -4.0}),
             boost::test_tools::per_element());
  BOOST_TEST(host_values(std::vector<Tensor>{}).empty());
  before = host_reads();
  const std::vector<Tensor> copies = host_copies({f32, bf16});  // the same, on the host
  BOOST_TEST(host_reads() - before == 1u);
  BOOST_REQUIRE_EQUAL(copies.size(), 2u);
  BOOST_TEST((copies[0].shape() == f32.shape() && copies[0].dtype() == DType::f32 && copies[0].device().is_cpu()));
  BOOST_TEST((copies[1].shape() == bf16.shape() && copies[1].dtype() == DType::bf16));
  BOOST_TEST(host_values(copies[0]) == host_values(f32), boost::test_tools::per_element());
  BOOST_TEST(host_values(copies[1]) == std::vector<double>({-2.375, 0.5, 96.0}), boost::test_tools::per_element());

  DeviceSum a, b, c, none;
  a.add(Tensor::full({}, 0.1, DType::f32));
  a.add(Tensor::full({1}, 0.2, DType::f32));  // summed in f32 where they are
  a.add(1.5);
  b.add(ops::to(Tensor::full({}, -2.375), DType::bf16));
  c.add(3.0);
  before = host_reads();
  const std::vector<double> sums = DeviceSum::read({&a, &b, &c, &none});
  BOOST_TEST(host_reads() - before == 1u);
  BOOST_TEST(sums == std::vector<double>({1.5 + double(0.1f + 0.2f), -2.375, 3.0, 0.0}),
             boost::test_tools::per_element());
  BOOST_TEST(sums == std::vector<double>({a.read(), b.read(), c.read(), none.read()}),
             boost::test_tools::per_element());
  before = host_reads();
  BOOST_TEST(DeviceSum::read({&c, &none}) == std::vector<double>({3.0, 0.0}), boost::test_tools::per_element());
  BOOST_TEST(host_reads() == before);
}

BOOST_AUTO_TEST_SUITE_END()  // test_rlhf_losses
