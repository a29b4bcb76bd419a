#include "common/report.h"

#include <omp.h>

#include "parallel/runtime.h"
#include <sys/resource.h>

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

void print_json_line(const nlohmann::json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void wait_passively_when_oversubscribed() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (parallel::ranks_on_node() > int(std::thread::hardware_concurrency())) setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
}

int set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
  return omp_get_max_threads();
}

}  // namespace triad::app
