// triad-train: trains a model as a config describes.
//
//   triad-train --config configs/demo.json [--set optimizer.params.lr=1e-3]... [--steps N]
//               [--deepspeed ds_config.json]   (DeepSpeed's keys in a file of their own)
//               [--metrics run.jsonl] [--save-dir DIR] [--resume auto|PATH] [--init WEIGHTS]
//   mpirun -np 4 triad-train --config ... --set zero_optimization.stage=2   (data parallel)
//
// On SIGUSR1 or SIGTERM it finishes the step, writes a checkpoint and exits with status 75
// (Note [Preemption], train/preemption.h).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/main_guard.h"
#include "common/report.h"
#include "config/config.h"
#include "train/preemption.h"
#include "train/trainer.h"
#include "parallel/runtime.h"

int main(int argc, char** argv) {
  triad::app::wait_passively_when_oversubscribed(argv);
  return triad::app::guarded_main([&] {
    CLI::App app{"triad-train: train a GPT as a JSON config describes"};
    std::string config_path, deepspeed_path;
    std::vector<std::string> overrides;
    int64_t steps = 0;
    int threads = 0;
    triad::engine::TrainOptions options;
    app.add_option("--config", config_path, "the JSON config")->required();
    app.add_option("--deepspeed", deepspeed_path,
                   "a DeepSpeed config (ds_config.json) beside --config: batch, optimizer, scheduler, precision, "
                   "zero_optimization, ... (a key in both files must have one value there; HF Trainer's \"auto\" "
                   "takes --config's)");
    app.add_option("--set", overrides, "override a config key: dotted.key=value (repeatable)");
    app.add_option("--steps", steps, "optimizer steps (overrides the config's steps)");
    app.add_option("--metrics", options.metrics_path, "write one JSON object per step to this file");
    app.add_option("--save-dir", options.save_dir, "checkpoint folder (overrides checkpoint.dir)");
    app.add_option("--resume", options.resume,
                   "continue from a checkpoint: auto (the latest in the checkpoint folder that loads; a fresh "
                   "start when there is none), a checkpoint file, or a checkpoint folder");
    app.add_option("--init", options.init,
                   "start from a trained model's weights (a checkpoint or weights file) at step 0 with a fresh "
                   "optimizer: fine-tuning (a checkpoint to resume takes precedence)");
    app.add_option("--threads", threads, "OpenMP threads per rank (default: cores / ranks on the node)");
    CLI11_PARSE(app, argc, argv);
    triad::parallel::CommunicatorPtr dp;
    if (triad::parallel::launched_by_mpirun()) dp = triad::parallel::init(argc, argv);

    nlohmann::json json = triad::engine::load_config_file(config_path);
    if (!deepspeed_path.empty())
      json = triad::engine::merge_deepspeed_config(json, config_path, triad::engine::load_config_file(deepspeed_path),
                                                   deepspeed_path);
    for (const std::string& o : overrides) triad::engine::apply_override(json, o);
    if (steps > 0) json["steps"] = steps;
    const triad::engine::TrainConfig config = triad::engine::parse_config(json, dp ? dp->size() : 1);
    triad::app::set_threads(triad::parallel::threads_per_rank(threads));
    options.stop_on_signal = true;
    triad::engine::catch_preemption_signals();
    try {
      triad::engine::train(config, options, dp);
    } catch (const triad::engine::Preempted& p) {
      if (triad::parallel::world_rank() == 0) std::printf("%s; exiting with status %d\n", p.what(),
                                                          triad::engine::kPreemptedExit);
      return triad::engine::kPreemptedExit;
    }
    return 0;
  });
}
