// The top of every program: runs `body`, and turns an escaping exception into one line
// "error: ..." on stderr and exit status 1 (DESIGN.md, Conventions).
#pragma once

#include <functional>

namespace triad::app {

int guarded_main(const std::function<int()>& body);

}  // namespace triad::app
