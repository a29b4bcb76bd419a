// DeepSpeed's csv_monitor: one CSV file per metric, `<output_path>/<job_name>/<name>.csv`
// with the metric's name written with '_' for '/' and ' ' (Train/Samples/train_loss ->
// Train_Samples_train_loss.csv), a header `step,<last part of the name>` when the file is
// new, then one `<samples>,<value>` row per optimizer step: the x axis is the
// number of samples trained on, as DeepSpeed's is. Files are appended to (a resumed run goes
// on in the same files). Rank 0 writes.
#pragma once

#include <set>
#include <string>

namespace triad::engine {

struct CsvMonitorConfig {
  bool enabled = false;
  std::string output_path;                   // DeepSpeed's default "": job_name in the working folder
  std::string job_name = "DeepSpeedJobName";
};

class CsvMonitor {
 public:
  explicit CsvMonitor(CsvMonitorConfig config);  // creates the folder; Error naming it when it cannot
  void write(const std::string& name, double value, int64_t samples);
  const std::string& folder() const { return folder_; }

 private:
  std::string folder_;
  std::set<std::string> started_;
};

}  // namespace triad::engine
