// Where a tensor's bytes live: the host, or CUDA device N.
#pragma once

#include <string>

namespace triad {

enum class DeviceType : uint8_t { cpu = 0, cuda = 1 };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:N"; throws Error

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

}  // namespace triad
