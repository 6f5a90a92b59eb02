// The CUDA runtime as ember sees it: whether this build has the CUDA backend, which devices it can
// use, and synchronization. Every function works in a build without CUDA and on a machine
// without a GPU (no devices, and `status()` says why).
#pragma once

#include <cstdint>
#include <string>

namespace ember::cuda {

struct DeviceProperties {
  int index = 0;
  std::string name;
  int compute_major = 0;  // compute capability, e.g. 9.0 for H100
  int compute_minor = 0;
  int64_t total_memory = 0;  // bytes
  int multiprocessors = 0;
};

// True when ember was compiled with the CUDA backend (-DEMBER_CUDA=ON, or AUTO with nvcc found).
bool is_built();
// The CUDA runtime version ember was compiled against, e.g. "13.0"; empty without CUDA.
std::string runtime_version();
// The CUDA version the installed driver supports, e.g. "13.0"; empty without CUDA or a driver.
std::string driver_version();
// The GPU architectures compiled into the kernels, e.g. "sm_90 + compute_90 (PTX)".
std::string compiled_architectures();
// Usable devices: 0 without CUDA, without a driver, or without a GPU.
int device_count();
bool is_available();
// One line on the state of the runtime: "2 devices", or why there are none.
std::string status();
// Throws ember::Error when `index` is not a usable device.
DeviceProperties get_device_properties(int index);
// Waits for all work queued on `device` (every usable device when -1). A no-op without devices.
void synchronize(int device = -1);

}  // namespace ember::cuda
