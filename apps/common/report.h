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
// the cores other ranks need, so they must wait passively. The OpenMP runtime reads
// OMP_WAIT_POLICY when it loads, so this sets it and re-executes the program (argv
// unchanged) when the launcher reports more local ranks (OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS) than cores and the user has not chosen a policy. Call first in main.
void wait_passively_when_oversubscribed(char** argv);

}  // namespace triad::app
