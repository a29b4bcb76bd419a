// Monitors: where the trainer sends each step's scalars besides its log and metrics file,
// DeepSpeed's monitor sections: `csv_monitor` (monitor/csv_monitor.h) and `tensorboard`
// (monitor/tensorboard_monitor.h). Rank 0 writes; each event is a name in DeepSpeed's style
// ("Train/Samples/train_loss"), a value, and the number of samples trained on so far,
// DeepSpeed's x axis.
#pragma once

#include <cstdint>
#include <string>

namespace triad::engine {

struct MonitorConfig {
  bool enabled = false;
  std::string output_path;  // DeepSpeed's default "": job_name in the working folder
  std::string job_name = "DeepSpeedJobName";
  std::string folder() const;  // output_path/job_name
};

class Monitor {
 public:
  virtual ~Monitor() = default;
  virtual void write(const std::string& name, double value, int64_t samples) = 0;
  // After the events of one step; Error when they did not reach the file.
  virtual void flush() {}
};

// Creates `folder` and its parents, or throws Error naming the monitor and folder.
void create_monitor_folder(const std::string& monitor, const std::string& folder);

}  // namespace triad::engine
