// What the command-line programs print about themselves: process memory, medians, and the
// last-line JSON object benchmarks end with.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace triad::app {

// Peak resident set size of this process so far, in MiB.
double peak_rss_mb();
double median(std::vector<double> values);
// Milliseconds from t0 to now.
double ms_since(std::chrono::steady_clock::time_point t0);
// The values with commas between them ("1,2,4"), as the options that take lists read them.
std::string join(const std::vector<int>& values);
// Prints `j` compactly on one line: the machine-readable last line of a benchmark.
void print_json_line(const nlohmann::json& j);
// Sets the OpenMP thread count (0 keeps the default) and returns the count in effect.
int set_threads(int threads);
// With more ranks on this node than cores, OpenMP threads that spin while waiting steal
// the cores other ranks need, so they must wait passively. The OpenMP runtime reads
// OMP_WAIT_POLICY when it loads, so this sets it and re-executes the program (argv
// unchanged) when the launcher reports more local ranks (OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS) than cores and the user has not chosen a policy. Call first in main.
void wait_passively_when_oversubscribed(char** argv);

}  // namespace triad::app
