// DeepSpeed-Chat's step 1: supervised fine-tuning on the SFT split (rlhf/sft_data.h) through
// the training loop (train/trainer.h), from the step's init weights at step 0.
#pragma once

#include "parallel/communicator.h"
#include "rlhf/rlhf_config.h"
#include "rlhf/step_run.h"

namespace triad::rlhf {

// Returns the last validation loss on the held-out examples (NaN when none are held out).
double train_sft(const StepConfig& config, const RunOptions& options, parallel::CommunicatorPtr world);

}  // namespace triad::rlhf
