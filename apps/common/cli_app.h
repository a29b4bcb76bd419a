// CLI11's App, declared only: the benchmarks' headers name it in their add_*_command
// declarations (and triad-estimate's step_time.h), so that only the files that add options
// include CLI11 itself (bench/commands.cpp, estimate/step_time.cpp, the mains).
#pragma once

namespace CLI {
class App;
}  // namespace CLI
