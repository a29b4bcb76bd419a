// triad-rlhf: the RLHF pipeline of DeepSpeed-Chat (SFT -> reward model -> PPO), and GRPO and
// DPO, from one config (rlhf/rlhf_config.h, Note [RLHF config]).
//
//   triad-rlhf sft    --config configs/rlhf-demo.json
//   triad-rlhf reward --config configs/rlhf-demo.json [--set reward.steps=100]...
//   triad-rlhf ppo    --config configs/rlhf-demo.json [--metrics ppo.jsonl] [--resume auto]
//   mpirun -np 4 triad-rlhf ppo --config ... --set zero_optimization.stage=3
#include <CLI/CLI.hpp>

#include "common/main_guard.h"
#include "common/report.h"
#include "config/config.h"
#include "parallel/runtime.h"
#include "rlhf/dpo_training.h"
#include "rlhf/reward_training.h"
#include "rlhf/rl_training.h"
#include "rlhf/rlhf_config.h"
#include "rlhf/sft_training.h"
#include "rlhf/step_run.h"

int main(int argc, char** argv) {
  triad::app::wait_passively_when_oversubscribed(argv);
  return triad::app::guarded_main([&] {
    CLI::App app{"triad-rlhf: RLHF steps (sft, reward, ppo) and GRPO, DPO, as a JSON config describes"};
    std::string step, config_path, tokenizer;
    std::vector<std::string> overrides;
    int threads = 0;
    triad::rlhf::RunOptions options;
    app.add_option("step", step, "sft, reward, ppo, grpo or dpo")
        ->required()
        ->check(CLI::IsMember({"sft", "reward", "ppo", "grpo", "dpo"}));
    app.add_option("--config", config_path, "the JSON config (Note [RLHF config])")->required();
    app.add_option("--set", overrides, "override a config key: dotted.key=value (repeatable)");
    app.add_option("--tokenizer", tokenizer,
                   "the tokenizer, over data.tokenizer: triad's tokenizer file, a Hugging Face tokenizer.json or its "
                   "folder");
    app.add_option("--metrics", options.metrics_path, "write one JSON object per step to this file");
    app.add_option("--resume", options.resume,
                   "continue from the step's checkpoints: auto (the latest that loads; a fresh start when there is "
                   "none), a checkpoint file, or a checkpoint folder");
    app.add_option("--threads", threads, "OpenMP threads per rank (default: cores / ranks on the node)");
    CLI11_PARSE(app, argc, argv);
    triad::parallel::CommunicatorPtr world;
    if (triad::parallel::launched_by_mpirun()) world = triad::parallel::init(argc, argv);

    try {  // Note [Checks on every rank] in rlhf/step_run.h
      triad::rlhf::StepConfig config;
      triad::rlhf::check_on_every_rank(
          [&] {
            nlohmann::json json = triad::engine::load_config_file(config_path);
            for (const std::string& o : overrides) triad::engine::apply_override(json, o);
            if (!tokenizer.empty())
              triad::engine::apply_override(json, "data.tokenizer=" + nlohmann::json(tokenizer).dump());
            config = triad::rlhf::parse_rlhf_config(json, step, world ? world->size() : 1);
          },
          world);
      triad::app::set_threads(triad::parallel::threads_per_rank(threads));
      if (step == "sft") triad::rlhf::train_sft(config, options, world);
      if (step == "reward") triad::rlhf::train_reward(config, options, world);
      if (step == "dpo") triad::rlhf::train_dpo(config, options, world);
      if (step == "ppo" || step == "grpo") triad::rlhf::train_rl(config, options, world);
    } catch (const triad::rlhf::ChecksFailed&) {
      return 1;  // every failing rank has named its error; every rank exits here
    }
    return 0;
  });
}
