// Where a tensor's storage lives.
#pragma once

#include <cstdint>
#include <ostream>

namespace ember {

enum class DeviceType : uint8_t { kCPU, kCUDA };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  constexpr bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend constexpr bool operator==(Device a, Device b) = default;
};

inline constexpr Device kCPU{DeviceType::kCPU, 0};

inline std::ostream& operator<<(std::ostream& out, Device device) {
  if (device.is_cpu()) return out << "cpu";
  return out << "cuda:" << device.index;
}

}  // namespace ember
