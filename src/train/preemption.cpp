#include "train/preemption.h"

#include <csignal>

#include "tensor/error.h"

namespace triad::engine {

namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void record_signal(int signal) { g_signal = signal; }

}  // namespace

void catch_preemption_signals() {
  struct sigaction action = {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal must not fail a read or write the step is in
  for (int signal : {SIGUSR1, SIGTERM})
    TRIAD_CHECK(sigaction(signal, &action, nullptr) == 0, "sigaction(" << signal << ") failed");
}

int preemption_signal() { return g_signal; }

Preempted::Preempted(int64_t step, const std::string& checkpoint)
    : std::runtime_error("preempted: stopped after step " + std::to_string(step) + " on a signal; " +
                         (checkpoint.empty() ? std::string("no checkpoint folder (checkpoint.dir or --save-dir), "
                                                           "nothing saved")
                                             : "checkpoint " + checkpoint)),
      step_(step) {}

}  // namespace triad::engine
