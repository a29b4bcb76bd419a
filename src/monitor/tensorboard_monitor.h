// DeepSpeed's tensorboard monitor: the events go to a TensorBoard event file
// `<output_path>/<job_name>/events.out.tfevents.<unix time>.<host>.<pid>` (io/event_file.h)
// as scalars whose step is the number of samples trained on, flushed after every step, so
// `tensorboard --logdir <output_path>` shows each metric as the run goes. A resumed run
// adds a file of its own beside the earlier ones; TensorBoard reads them as one run.
#pragma once

#include <memory>

#include "monitor/monitor.h"
#include "io/event_file.h"

namespace triad::engine {

class TensorBoardMonitor : public Monitor {
 public:
  explicit TensorBoardMonitor(const MonitorConfig& config);
  void write(const std::string& name, double value, int64_t samples) override;
  void flush() override { file_->flush(); }
  const std::string& path() const { return file_->path(); }

 private:
  std::unique_ptr<io::EventFileWriter> file_;
};

}  // namespace triad::engine
