// DeepSpeed-Chat's step 2: a reward model (nn/value_model.h, from the SFT model's body)
// trained on the reward split's preference pairs with the pairwise loss (Note [Reward model
// loss]), its accuracy measured on the held-out pairs.
#pragma once

#include "parallel/communicator.h"
#include "rlhf/rlhf_config.h"
#include "rlhf/step_run.h"

namespace triad::rlhf {

// Each step reads train_batch_size pairs, row i of step k the training pair EpochOrder(k B +
// i); chosen and rejected run as one batch of 2 x micro rows. Every eval_interval steps and
// at the end the held-out accuracy (the fraction of held-out pairs whose chosen answer
// scores higher, each read at its <|endoftext|>: Note [Score position]) is printed and
// recorded. Saves checkpoints (checkpoint.dir) and
// output_dir/model.h5. Collective over `world` (all ranks data-parallel). Returns the last
// held-out accuracy (NaN when nothing is held out).
double train_reward(const StepConfig& config, const RunOptions& options, parallel::CommunicatorPtr world);

}  // namespace triad::rlhf
