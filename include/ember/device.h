// Where a tensor's storage lives.
#pragma once

#include <cstdint>
#include <ostream>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  friend constexpr bool operator==(Device a, Device b) = default;
};

inline constexpr Device kCPU{DeviceType::CPU, 0};

inline std::ostream& operator<<(std::ostream& out, Device device) {
  if (device.is_cpu()) return out << "cpu";
  return out << "cuda:" << device.index;
}

}  // namespace ember
