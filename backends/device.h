// Where a tensor's storage lives.
#pragma once
#include <string>

#include <fmt/format.h>

namespace vitrine {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }
  /// Parses "cpu", "cuda", "cuda:1"; throws Error otherwise.
  static Device parse(const std::string& s);
};

inline const Device kCPU{DeviceType::CPU, 0};

}  // namespace vitrine
