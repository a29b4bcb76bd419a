// DeepSpeed's csv_monitor: one CSV file per metric, `<output_path>/<job_name>/<name>.csv`
// with the metric's name written with '_' for '/' and ' ' (Train/Samples/train_loss ->
// Train_Samples_train_loss.csv), a header `step,<last part of the name>` when the file is
// new, then one `<samples>,<value>` row per optimizer step: the x axis is the number of
// samples trained on, as DeepSpeed's is. Files are appended to (a resumed run goes on in
// the same files).
#pragma once

#include <set>
#include <string>

#include "monitor/monitor.h"

namespace triad::engine {

class CsvMonitor : public Monitor {
 public:
  explicit CsvMonitor(const MonitorConfig& config);  // creates the folder; Error naming it when it cannot
  void write(const std::string& name, double value, int64_t samples) override;
  const std::string& folder() const { return folder_; }

 private:
  std::string folder_;
  std::set<std::string> started_;  // files this run has checked for a header
};

}  // namespace triad::engine
