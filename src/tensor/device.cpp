#include "tensor/device.h"

#include "tensor/error.h"

namespace triad {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string n = s.substr(5);
    TRIAD_CHECK(!n.empty() && n.size() <= 9 && n.find_first_not_of("0123456789") == std::string::npos,
                "device '" << s << "': the index after 'cuda:' must be a number");
    return cuda(std::stoi(n));
  }
  throw Error("unknown device '" + s + "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace triad
