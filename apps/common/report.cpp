#include "common/report.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace triad::app {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string join(const std::vector<int>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s;
}

void print_json_line(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void wait_passively_when_oversubscribed(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (local == nullptr) local = std::getenv("MPI_LOCALNRANKS");
  if (local == nullptr || std::atoi(local) <= int(std::thread::hardware_concurrency())) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  // The executable's own path, not /proc/self/exe: the process keeps its name (ps, top and
  // pgrep show triad-train, not exe).
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);  // returns only on failure: then run on, spinning
  }
  std::fprintf(stderr, "warning: could not restart with OMP_WAIT_POLICY=PASSIVE; threads will spin\n");
}

int set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
  return omp_get_max_threads();
}

}  // namespace triad::app
