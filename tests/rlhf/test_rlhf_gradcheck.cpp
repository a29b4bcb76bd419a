// Finite-difference gradient checks in f64 for the RLHF losses (src/rlhf/) on random
// inputs, away from the kinks of clamp and max (where the one-sided derivatives differ).
// The composed functions they are written with are checked in autograd/test_gradcheck.
#include <boost/test/unit_test.hpp>

#include "rlhf/dpo.h"
#include "support/gradcheck.h"
#include "rlhf/grpo.h"
#include "rlhf/log_probs.h"
#include "rlhf/ppo_losses.h"
#include "rlhf/reward_loss.h"

BOOST_AUTO_TEST_SUITE(test_rlhf_gradcheck)

using namespace triad;
using namespace triad::rlhf;
using test::grad_leaf;
using test::gradcheck;
using test::randn64;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor ids(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }

}  // namespace

BOOST_AUTO_TEST_CASE(reward_loss_gradients) {
  const Tensor c_ids = ids({3, 4, 5, 6, 7, 0, /**/ 3, 4, 5, 0, 0, 0, /**/ 3, 3, 3, 3, 0, 0}, {3, 6});
  const Tensor r_ids = ids({3, 4, 9, 0, 0, 0, /**/ 3, 4, 8, 8, 8, 8, /**/ 3, 3, 3, 3, 0, 0}, {3, 6});
  gradcheck("reward_loss", [&](auto& in) { return reward_loss(in[0], in[1], c_ids, r_ids, 0).loss; },
            {grad_leaf(randn64({3, 6}, 4)), grad_leaf(randn64({3, 6}, 5))});
}

BOOST_AUTO_TEST_CASE(ppo_gradients) {
  // Log-ratios in (-0.15, 0.15): inside the clip range 0.2, and log-ratios of +-0.4: outside.
  const Tensor old = randn64({2, 5}, 6);
  const Tensor shift = f64({0.1, -0.12, 0.05, 0.4, -0.4, 0.14, -0.05, 0.4, -0.4, 0.0}, {2, 5});
  const Tensor adv = randn64({2, 5}, 7), mask = f64({1, 1, 1, 1, 1, 1, 1, 1, 1, 0}, {2, 5});
  gradcheck("ppo_actor_loss", [&](auto& in) { return ppo_actor_loss(in[0], old, adv, mask).loss; },
            {grad_leaf(ops::add(old, shift))});
  const Tensor old_v = randn64({2, 5}, 8), ret = randn64({2, 5}, 9);
  gradcheck("ppo_critic_loss", [&](auto& in) { return ppo_critic_loss(in[0], old_v, ret, mask).loss; },
            {grad_leaf(ops::add(old_v, shift))});
}

BOOST_AUTO_TEST_CASE(grpo_and_dpo_gradients) {
  const Tensor old = randn64({4, 3}, 10), ref = randn64({4, 3}, 11);
  const Tensor shift = f64({0.1, -0.1, 0.05, 0.3, -0.3, 0.12, -0.05, 0.3, -0.3, 0.0, 0.15, 0.02}, {4, 3});
  const Tensor adv = grpo_advantages(f64({1, 0, 0, 1}, {4}), 2);
  const Tensor mask = f64({1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0}, {4, 3});
  gradcheck("grpo_loss", [&](auto& in) { return grpo_loss(in[0], old, ref, adv, mask, 0.1).loss; },
            {grad_leaf(ops::add(old, shift))});
  gradcheck("dpo_loss",
            [&](auto& in) {
              return dpo_loss(in[0], in[1], f64({-3, -1, -2}, {3}), f64({-2, -2, -4}, {3}), 0.5).loss;
            },
            {grad_leaf(randn64({3}, 12, 2.0)), grad_leaf(randn64({3}, 13, 2.0))});
}

BOOST_AUTO_TEST_CASE(log_prob_and_entropy_gradients) {
  // W = 7 columns of which V = 5 are classes; a chunk of 2 rows, so sequences span chunks.
  const Tensor token_ids = ids({0, 4, 2, 1, 3, /**/ 2, 2, 0, 4, 1}, {2, 5});
  const Tensor mask = f64({1, 1, 0, 1, /**/ 1, 1, 1, 0}, {2, 4});
  const Tensor logits = grad_leaf(randn64({2, 5, 7}, 14));
  gradcheck("logp", [&](auto& in) { return next_token_log_probs(in[0], token_ids, mask, 5, 14).logp; }, {logits});
  gradcheck("entropy", [&](auto& in) { return next_token_log_probs(in[0], token_ids, mask, 5, 14).entropy; }, {logits});
  gradcheck("logp and entropy",
            [&](auto& in) {
              const TokenLogProbs r = next_token_log_probs(in[0], token_ids, mask, 5, 14);
              return add(r.logp, mul(r.entropy, 0.3));
            },
            {logits});
  gradcheck("sequence_log_probs",
            [&](auto& in) { return sequence_log_probs(next_token_log_probs(in[0], token_ids).logp, mask); }, {logits});
}

BOOST_AUTO_TEST_SUITE_END()  // test_rlhf_gradcheck
