#include "monitor/csv_monitor.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tensor/error.h"

namespace triad::engine {

CsvMonitor::CsvMonitor(const MonitorConfig& config) : folder_(config.folder()) {
  create_monitor_folder("csv_monitor", folder_);
}

void CsvMonitor::write(const std::string& name, double value, int64_t samples) {
  std::string file = name;
  for (char& ch : file)
    if (ch == '/' || ch == ' ') ch = '_';
  const std::string path = folder_ + "/" + file + ".csv";
  std::error_code ec;
  const bool fresh = started_.insert(file).second &&
                     (!std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0);
  std::ofstream out(path, std::ios::app);
  TRIAD_CHECK(out.good(), "[csv_monitor] cannot write '" << path << "'");
  if (fresh) out << "step," << name.substr(name.find_last_of('/') + 1) << "\n";
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  out << samples << "," << number << "\n";
  TRIAD_CHECK(out.good(), "[csv_monitor] writing '" << path << "' failed");
}

}  // namespace triad::engine
