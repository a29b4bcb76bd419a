// What the command-line programs print about themselves: process memory, medians, and the
// last-line JSON object benchmarks end with.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace triad::app {

// Peak resident set size of this process so far, in MiB.
double peak_rss_mb();
double median(std::vector<double> values);
// Prints `j` compactly on one line: the machine-readable last line of a benchmark.
void print_json_line(const nlohmann::json& j);
// Sets the OpenMP thread count (0 keeps the default) and returns the count in effect.
int set_threads(int threads);
// With more ranks on this node than cores, OpenMP threads that spin while waiting steal
// the cores other ranks need: switch them to passive waiting (unless OMP_WAIT_POLICY is
// set). Call after parallel::init and before the first OpenMP region.
void wait_passively_when_oversubscribed();

}  // namespace triad::app
