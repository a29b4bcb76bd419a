// DPO (Note [DPO]): the policy, from the SFT model, trained offline on the preference pairs
// of the reward split against the frozen SFT model as reference.
#pragma once

#include "parallel/communicator.h"
#include "rlhf/rlhf_config.h"
#include "rlhf/step_run.h"

namespace triad::rlhf {

// Each step reads train_batch_size pairs (row i of step k: EpochOrder(k B + i) over the
// training pairs); a sequence's log-probability is the sum over its answer tokens and
// <|endoftext|> (answer_mask). Every eval_interval steps and at the end the held-out margin
// and accuracy are printed and recorded. Saves checkpoints and output_dir/model.h5.
// Collective over `world`. Returns the last held-out mean margin (beta-scaled reward of the
// chosen answer minus the rejected one's; NaN when nothing is held out).
double train_dpo(const StepConfig& config, const RunOptions& options, parallel::CommunicatorPtr world);

}  // namespace triad::rlhf
