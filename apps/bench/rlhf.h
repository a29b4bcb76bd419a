// `triad-bench rlhf`: one PPO step (rlhf/rl_training.h, Note [RL step]) split into
// generation and training, at each ZeRO stage (--stages, default 0 and 3) on each rank
// count (--ranks, default 1 and 2).
//
// The parent (run without mpirun) writes the inputs into a temporary folder: a byte-level
// tokenizer, preference pairs whose prompts are --prompt tokens long, and the initial
// weights of the actor (the --model preset or --config, with --set overrides) and of a
// reward model of the same shape. Each (ranks, stage) runs as a worker under mpirun:
// `triad-rlhf ppo`'s loop for warmup + steps steps (batch --batch prompts, answers of up
// to --answer tokens, sampled at temperature 1), and then the actor alone trained on
// sequences of the same length (forward, backward, step). Per run, the medians over the
// timed steps of: generation tokens/s (tokens generated over the generate call's time, every
// rank's), PPO's training tokens/s (actor and critic, ppo_epochs passes), the actor's own
// training tokens/s, the time split of the step (generation, experience, training), and the
// ratio of generation's time per token to the actor's training time per token.
//
// Target (CPU): generation per token no slower than 2x the actor's training cost per token
// (DeepSpeed-Chat's hybrid engine generates at about a tenth of training's FLOP rate; per
// token, training costs 3 forwards). The parent prints a row per run and, last, one JSON
// object with every run and whether the target is met.
#pragma once

#include "common/cli_app.h"
#include <string>
#include <vector>

namespace triad::bench {

struct RlhfBenchOptions {
  std::string model = "tiny";
  std::string config;  // a triad-train config: its model, optimizer and clipping
  // --set dotted.key=value on that config or preset. The default: a 3.4M-parameter GPT.
  std::vector<std::string> overrides = {"model.n_layer=4", "model.d_model=256", "model.seq_len=128",
                                        "model.vocab_size=512"};
  std::vector<int> ranks = {1, 2};
  std::vector<int> stages = {0, 3};
  int64_t batch = 32;   // prompts per step, global (divisible by every rank count): 16 a rank at 2 ranks, DeepSpeed-Chat's per-device default
  int64_t prompt = 32;  // tokens per prompt
  int64_t answer = 64;  // generated tokens at most
  int steps = 3;
  int warmup = 1;
  int threads = 0;  // OpenMP threads per rank (0: cores / ranks, at least 1)
  // Internal: set on the processes the parent starts under mpirun.
  bool worker = false;
  int stage = 0;
  std::string work;  // the parent's folder of inputs
};

void add_rlhf_command(CLI::App& app, RlhfBenchOptions& options);
int run_rlhf_bench(const RlhfBenchOptions& options);

}  // namespace triad::bench
