// The RLHF config (Note [RLHF config]): a step's section merges over the top level key by
// key, PPO's actor and critic subsections over that; defaults are DeepSpeed-Chat's; each
// model's checkpoints get their own folder, and PPO's engines count ppo_epochs optimizer
// steps per step; bad or missing keys are errors naming them.
#include <boost/test/unit_test.hpp>

#include "rlhf/rlhf_config.h"
#include "rlhf/step_run.h"
#include "support/check.h"

BOOST_AUTO_TEST_SUITE(test_rlhf_config)

using namespace triad;
using rlhf::parse_rlhf_config;

namespace {

nlohmann::json base() {
  return nlohmann::json::parse(R"({
    "model": {"n_layer": 1, "n_head": 2, "d_model": 16, "seq_len": 32, "vocab_size": 300},
    "data": {"path": "pairs.jsonl", "tokenizer": "tok.json", "max_prompt_seq_len": 8, "max_seq_len": 24},
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
    "checkpoint": {"dir": "ck"},
    "sft": {"steps": 5, "include_prompt": true},
    "reward": {"init": "sft.h5", "steps": 7, "optimizer": {"params": {"lr": 5e-4}}},
    "dpo": {"init": "sft.h5", "steps": 3, "beta": 0.2},
    "ppo": {"reward_model": "rm.h5", "steps": 4, "kl_ctl": 0.05, "enable_ema": true,
            "actor": {"init": "sft.h5", "optimizer": {"params": {"lr": 1e-5}}},
            "critic": {"init": "rm.h5", "optimizer": {"params": {"lr": 5e-6}}, "train_micro_batch_size_per_gpu": 2}},
    "grpo": {"reward_model": "rm.h5", "steps": 2, "group_size": 8, "actor": {"init": "sft.h5"}}
  })");
}

}  // namespace

BOOST_AUTO_TEST_CASE(sections_merge_over_the_top_level) {
  const rlhf::StepConfig sft = parse_rlhf_config(base(), "sft", 1);
  BOOST_TEST(sft.model.train.steps == 5);
  BOOST_TEST(sft.include_prompt);
  BOOST_TEST(sft.model.init.empty());
  BOOST_TEST(sft.model.train.optimizer.lr == 1e-3);
  BOOST_TEST(sft.data.data_split == "2,4,4");  // DeepSpeed-Chat's default
  BOOST_TEST(sft.data.limits.max_prompt_seq_len == 8);

  const rlhf::StepConfig reward = parse_rlhf_config(base(), "reward", 2);
  BOOST_TEST(reward.model.train.optimizer.lr == 5e-4);         // the section's rate
  BOOST_TEST(reward.model.train.optimizer.weight_decay == 0.1);  // the top level's other params kept
  BOOST_TEST(reward.model.train.gradient_accumulation_steps == 1);  // 8 = 4 x 1 x 2 ranks
  BOOST_TEST(reward.model.init == "sft.h5");

  BOOST_TEST(parse_rlhf_config(base(), "dpo", 1).dpo.beta == 0.2);
}

BOOST_AUTO_TEST_CASE(ppo_models_have_their_own_keys_and_folders) {
  const rlhf::StepConfig ppo = parse_rlhf_config(base(), "ppo", 1);
  BOOST_TEST(ppo.model.train.optimizer.lr == 1e-5);
  BOOST_TEST(ppo.critic.train.optimizer.lr == 5e-6);
  BOOST_TEST(ppo.critic.train.gradient_accumulation_steps == 4);  // 8 = 2 x 4
  BOOST_TEST(ppo.model.train.gradient_accumulation_steps == 2);   // 8 = 4 x 2
  BOOST_TEST(ppo.model.train.checkpoint.dir == "ck/actor");
  BOOST_TEST(ppo.critic.train.checkpoint.dir == "ck/critic");
  BOOST_TEST(ppo.model.init == "sft.h5");
  BOOST_TEST(ppo.critic.init == "rm.h5");
  BOOST_TEST(ppo.rl.kl_ctl == 0.05);
  BOOST_TEST(ppo.rl.enable_ema);
  // DeepSpeed-Chat's defaults.
  BOOST_TEST(ppo.rl.clip_reward_value == 5.0);
  BOOST_TEST(ppo.rl.cliprange == 0.2);
  BOOST_TEST(ppo.rl.cliprange_value == 0.2);
  BOOST_TEST(ppo.rl.gamma == 1.0);
  BOOST_TEST(ppo.rl.lam == 0.95);
  BOOST_TEST(ppo.rl.ppo_epochs == 1);
  BOOST_TEST(ppo.rl.ema_beta == 0.992);
  BOOST_TEST(ppo.rl.max_answer_seq_len == 16);  // max_seq_len - max_prompt_seq_len

  BOOST_TEST(ppo.model.train.steps == 4);

  // The engines count optimizer steps: ppo_epochs per PPO step.
  nlohmann::json j = base();
  j["ppo"]["ppo_epochs"] = 3;
  j["checkpoint"]["every"] = 2;
  const rlhf::StepConfig epochs = parse_rlhf_config(j, "ppo", 1);
  BOOST_TEST(epochs.model.train.steps == 12);
  BOOST_TEST(epochs.critic.train.steps == 12);
  BOOST_TEST(epochs.model.train.checkpoint.every == 6);

  const rlhf::StepConfig grpo = parse_rlhf_config(base(), "grpo", 1);
  BOOST_TEST(grpo.rl.group_size == 8);
  BOOST_TEST(grpo.rl.beta == 0.04);
}

BOOST_AUTO_TEST_CASE(bad_configs_name_the_key) {
  const auto fails = [](const std::function<void(nlohmann::json&)>& edit, const std::string& step,
                        const std::vector<std::string>& parts) {
    nlohmann::json j = base();
    edit(j);
    test::check_error([&] { parse_rlhf_config(j, step, 1); }, parts);
  };
  fails([](auto& j) { j["data"].erase("path"); }, "sft", {"data.path"});
  fails([](auto& j) { j["data"]["max_seq_len"] = 8; }, "sft", {"data.max_seq_len (8)", "max_prompt_seq_len (8)"});
  fails([](auto& j) { j["reward"].erase("init"); }, "reward", {"reward.init"});
  fails([](auto& j) { j["ppo"]["critic"].erase("init"); }, "ppo", {"ppo.critic.init"});
  fails([](auto& j) { j["ppo"].erase("reward_model"); }, "ppo", {"ppo.reward_model"});
  fails([](auto& j) { j["ppo"]["cliprange"] = -1; }, "ppo", {"cliprange"});
  fails([](auto& j) { j["grpo"]["group_size"] = 1; }, "grpo", {"group_size"});
  fails([](auto& j) { j["ppo"]["kl_ctll"] = 0.1; }, "ppo", {"kl_ctll"});
  fails([](auto& j) { j["ppo"]["critic"]["optimzer"] = nlohmann::json::object(); }, "ppo", {"optimzer"});
  test::check_error([] { parse_rlhf_config(base(), "sftt", 1); }, {"unknown step 'sftt'"});
  // A recorded step (cuda_graph) is triad-train's, which SFT runs; the other loops refuse it.
  for (const std::string step : {"reward", "dpo", "ppo", "grpo"})
    fails([](auto& j) { j["cuda_graph"] = {{"enabled", true}}; }, step, {"cuda_graph.enabled", step + " step"});
  nlohmann::json sft = base();
  sft["cuda_graph"] = {{"enabled", true}};
  BOOST_TEST(parse_rlhf_config(sft, "sft", 1).model.train.cuda_graph.enabled);
}

// Every loop refuses sequence parallelism without tensor parallelism, naming the key and
// the layout, and takes it over tensor-parallel ranks. The reward model and DPO in pipeline
// stages take every pair batch data.max_seq_len columns (a multiple of the tensor-parallel
// ranks under sequence parallelism, or an error naming the keys).
BOOST_AUTO_TEST_CASE(layouts_the_loops_refuse_are_named) {
  nlohmann::json j = base();
  j["model"]["n_layer"] = 2;
  for (const std::string step : {"reward", "dpo", "ppo", "grpo"}) {
    BOOST_TEST_CONTEXT(step) {
      nlohmann::json staged = j, alone = j, sequence = j;
      staged["pipeline"] = {{"stages", 2}};
      if (step == "reward" || step == "dpo") {
        const rlhf::StepConfig c = parse_rlhf_config(staged, step, 2);
        BOOST_TEST(rlhf::pair_column_multiple(c.model.train, c.data.limits) == c.data.limits.max_seq_len);
        staged["model"]["tensor_parallel"] = 2;
        staged["model"]["sequence_parallel"] = true;
        staged["data"]["max_seq_len"] = c.data.limits.max_seq_len - 1;
        const rlhf::StepConfig odd = parse_rlhf_config(staged, step, 4);
        test::check_error([&] { rlhf::pair_column_multiple(odd.model.train, odd.data.limits); },
                          {"[config] data.max_seq_len " + std::to_string(c.data.limits.max_seq_len - 1) +
                               " must be a multiple of model.tensor_parallel 2"});
      }
      alone["model"]["sequence_parallel"] = true;
      test::check_error([&] { parse_rlhf_config(alone, step, 2); },
                        {"[config] model.sequence_parallel needs model.tensor_parallel > 1",
                         "got model.tensor_parallel 1"});
      sequence["model"]["tensor_parallel"] = 2;
      sequence["model"]["sequence_parallel"] = true;
      const engine::TrainConfig split = parse_rlhf_config(sequence, step, 2).model.train;
      BOOST_TEST(rlhf::column_multiple(split) == 2);
      BOOST_TEST(rlhf::column_multiple(parse_rlhf_config(j, step, 2).model.train) == 1);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_rlhf_config
