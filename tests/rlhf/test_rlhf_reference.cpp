// The RLHF losses (src/rlhf/) against PyTorch (tests/reference/rlhf_reference.py): values,
// reported statistics and gradients on the same float64 inputs.
#include <boost/test/unit_test.hpp>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/meta.h"
#include "io/tensor_file.h"
#include "rlhf/dpo.h"
#include "rlhf/gae.h"
#include "rlhf/grpo.h"
#include "rlhf/kl_reward.h"
#include "rlhf/log_probs.h"
#include "rlhf/ppo_losses.h"
#include "rlhf/reward_loss.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_rlhf_reference)

using namespace triad;
using namespace triad::rlhf;

namespace {

constexpr double kTolerance = 1e-12;  // f64 on both sides: only summation order differs

struct Reference {
  std::string path = test::data_path("rlhf_reference.tns");
  io::NamedTensors data = io::read_tensor_file(path);
  const Tensor& operator[](const std::string& name) const { return io::find_tensor(data, name, path); }
  // A fresh leaf holding the named tensor.
  Tensor leaf(const std::string& name) const {
    Tensor t = ops::clone((*this)[name]);
    set_requires_grad(t);
    return t;
  }
  void check(const std::string& name, const Tensor& value) const {
    const double err = test::relative_error(value, (*this)[name]);
    BOOST_TEST(err < kTolerance, name << ": relative error " << err);
  }
  void check(const std::string& name, double value) const {
    BOOST_TEST(value == (*this)[name].item(), name << boost::test_tools::tolerance(kTolerance));
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(log_probs_and_entropy) {
  Reference ref;
  const Tensor logits = ref.leaf("logprobs/logits");
  const TokenLogProbs r = next_token_log_probs(logits, ref["logprobs/ids"], ref["logprobs/mask"],
                                               int64_t(ref["logprobs/classes"].item()), 7 * 3);
  ref.check("logprobs/logp", r.logp);
  ref.check("logprobs/entropy", r.entropy);
  backward(add(sum(mul(r.logp, ref["logprobs/w_logp"])), sum(mul(r.entropy, ref["logprobs/w_entropy"]))));
  ref.check("logprobs/grad_logits", grad(logits));
}

BOOST_AUTO_TEST_CASE(reward_model_loss) {
  Reference ref;
  const Tensor c = ref.leaf("reward/chosen"), r = ref.leaf("reward/rejected");
  const RewardLoss out =
      reward_loss(c, r, ref["reward/chosen_ids"], ref["reward/rejected_ids"], int64_t(ref["reward/pad"].item()));
  ref.check("reward/loss", out.loss);
  ref.check("reward/chosen_scores", out.chosen_scores);
  ref.check("reward/rejected_scores", out.rejected_scores);
  ref.check("reward/accuracy", out.accuracy);
  backward(out.loss);
  ref.check("reward/grad_chosen", grad(c));
  ref.check("reward/grad_rejected", grad(r));
}

BOOST_AUTO_TEST_CASE(ppo_actor_and_critic_losses) {
  Reference ref;
  const Tensor logp = ref.leaf("actor/logp");
  const ActorLoss a = ppo_actor_loss(logp, ref["actor/old_logp"], ref["actor/advantages"], ref["actor/mask"]);
  ref.check("actor/loss", a.loss);
  ref.check("actor/clip_fraction", a.clip_fraction.item());
  ref.check("actor/approx_kl", a.approx_kl.item());
  backward(a.loss);
  ref.check("actor/grad_logp", grad(logp));

  const Tensor v = ref.leaf("critic/values");
  const CriticLoss c = ppo_critic_loss(v, ref["critic/old_values"], ref["critic/returns"], ref["critic/mask"]);
  ref.check("critic/loss", c.loss);
  ref.check("critic/clip_fraction", c.clip_fraction.item());
  backward(c.loss);
  ref.check("critic/grad_values", grad(v));
}

BOOST_AUTO_TEST_CASE(kl_reward_and_gae) {
  Reference ref;
  ref.check("kl_reward/rewards", kl_rewards(ref["kl_reward/logp"], ref["kl_reward/ref_logp"], ref["kl_reward/score"],
                                            ref["kl_reward/mask"]));
  const AdvantagesReturns g = gae(ref["gae/values"], ref["gae/rewards"], ref["gae/mask"]);
  ref.check("gae/advantages", g.advantages);
  ref.check("gae/returns", g.returns);
}

BOOST_AUTO_TEST_CASE(grpo_advantages_and_loss) {
  Reference ref;
  const Tensor adv = grpo_advantages(ref["grpo/rewards"], 3);
  ref.check("grpo/advantages", adv);
  const Tensor logp = ref.leaf("grpo/logp");
  const GrpoLoss out = grpo_loss(logp, ref["grpo/old_logp"], ref["grpo/ref_logp"], adv, ref["grpo/mask"]);
  ref.check("grpo/loss", out.loss);
  ref.check("grpo/kl", out.kl.item());
  backward(out.loss);
  ref.check("grpo/grad_logp", grad(logp));
}

BOOST_AUTO_TEST_CASE(dpo_loss_and_rewards) {
  Reference ref;
  const Tensor pc = ref.leaf("dpo/policy_chosen"), pr = ref.leaf("dpo/policy_rejected");
  const DpoLoss out = dpo_loss(pc, pr, ref["dpo/reference_chosen"], ref["dpo/reference_rejected"]);
  ref.check("dpo/loss", out.loss);
  ref.check("dpo/chosen_rewards", out.chosen_rewards);
  ref.check("dpo/rejected_rewards", out.rejected_rewards);
  backward(out.loss);
  ref.check("dpo/grad_policy_chosen", grad(pc));
  ref.check("dpo/grad_policy_rejected", grad(pr));
}

BOOST_AUTO_TEST_SUITE_END()  // test_rlhf_reference
