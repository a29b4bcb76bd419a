#include "tensor/random.h"

namespace triad {

Generator& default_generator() {
  static Generator g(0);
  return g;
}

Generator& tensor_parallel_generator() {
  static Generator g(0);
  return g;
}

}  // namespace triad
