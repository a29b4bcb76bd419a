#include "monitor/monitor.h"

#include <filesystem>

#include "tensor/error.h"

namespace triad::engine {

std::string MonitorConfig::folder() const { return (std::filesystem::path(output_path) / job_name).string(); }

void create_monitor_folder(const std::string& monitor, const std::string& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  TRIAD_CHECK(!ec, "[" << monitor << "] cannot create the folder '" << folder << "': " << ec.message());
}

}  // namespace triad::engine
