#include "autograd/flop_count.h"

namespace triad::flop_count {

FlopCount& totals() {
  static FlopCount count;
  return count;
}

bool& enabled() {
  static bool on = false;
  return on;
}

}  // namespace triad::flop_count
