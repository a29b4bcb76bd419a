#include "monitor/tensorboard_monitor.h"

#include <unistd.h>

#include <cmath>

namespace triad::engine {

namespace {

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("localhost");
}

}  // namespace

TensorBoardMonitor::TensorBoardMonitor(const MonitorConfig& config) {
  const std::string folder = config.folder();
  create_monitor_folder("tensorboard", folder);
  const std::string name = "events.out.tfevents." + std::to_string(int64_t(std::floor(io::unix_time()))) + "." +
                           host_name() + "." + std::to_string(::getpid());
  file_ = std::make_unique<io::EventFileWriter>(folder + "/" + name);
}

void TensorBoardMonitor::write(const std::string& name, double value, int64_t samples) {
  file_->add_scalar(name, value, samples, io::unix_time());
}

}  // namespace triad::engine
