// Note [Preemption]: a scheduler warns a job before it takes its nodes back: Slurm sends a
// signal ahead of the time limit (sbatch --signal=B:USR1@120, which jobs/slurm/train.sbatch
// passes on to the ranks through mpirun) and on scancel (SIGTERM). triad-train catches
// SIGUSR1 and SIGTERM (catch_preemption_signals), finishes the step it is in, and at the
// step's end the ranks agree that one of them was signalled (an all-reduce of the flag, so
// every rank stops after the same step); it then writes a checkpoint and ends with
// kPreemptedExit, which the Slurm script answers by requeueing the job (it resumes with
// --resume auto). Megatron's --exit-signal-handler is the model.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace triad::engine {

// EX_TEMPFAIL (sysexits.h): the run stopped early and may be started again.
constexpr int kPreemptedExit = 75;

// Installs handlers for SIGUSR1 and SIGTERM that only record the signal.
void catch_preemption_signals();
// The signal this process caught (0: none).
int preemption_signal();

// What train() throws once the ranks stopped for a signal, after the checkpoint is written.
class Preempted : public std::runtime_error {
 public:
  Preempted(int64_t step, const std::string& checkpoint);
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

}  // namespace triad::engine
