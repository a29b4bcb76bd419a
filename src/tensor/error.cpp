#include "tensor/error.h"

namespace triad::detail {

void throw_internal(const char* cond, const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << "internal error at " << file << ":" << line << ": " << cond;
  if (!msg.empty()) os << " (" << msg << ")";
  throw InternalError(os.str());
}

}  // namespace triad::detail
