// ember::cuda runtime queries. Compiled in every build; the CUDA calls exist only when the
// backend is built (EMBER_WITH_CUDA), so a CPU-only build answers "no devices".
#include "ember/cuda.h"
#include "ember/error.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ember::cuda {

#ifdef EMBER_WITH_CUDA
namespace {

// The device count, or the runtime's reason for having none. Asked once: the answer cannot
// change while the process runs.
struct Probe {
  int count = 0;
  std::string error;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    const cudaError_t status = cudaGetDeviceCount(&p.count);
    if (status != cudaSuccess) {
      p.count = 0;
      p.error = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
      (void)cudaGetLastError();  // clear the sticky error so later calls start clean
    }
    return p;
  }();
  return result;
}

void check(cudaError_t status, const char* what) {
  EMBER_CHECK(status == cudaSuccess, "[cuda] ", what, " failed: ", cudaGetErrorName(status), ": ",
              cudaGetErrorString(status));
}

}  // namespace

bool is_built() { return true; }

std::string runtime_version() {
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
}

std::string driver_version() {
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess || version == 0) {
    (void)cudaGetLastError();
    return "";
  }
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string compiled_architectures() { return EMBER_CUDA_ARCHITECTURES; }

int device_count() { return probe().count; }

std::string status() {
  const Probe& p = probe();
  if (p.count > 0) return std::to_string(p.count) + (p.count == 1 ? " device" : " devices");
  return p.error.empty() ? "no CUDA devices" : "no usable CUDA device (" + p.error + ")";
}

DeviceProperties get_device_properties(int index) {
  EMBER_CHECK(index >= 0 && index < device_count(), "[cuda] device ", index, " does not exist: ", status());
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  DeviceProperties out;
  out.index = index;
  out.name = prop.name;
  out.compute_major = prop.major;
  out.compute_minor = prop.minor;
  out.total_memory = static_cast<int64_t>(prop.totalGlobalMem);
  out.multiprocessors = prop.multiProcessorCount;
  return out;
}

void synchronize(int device) {
  const int count = device_count();
  EMBER_CHECK(device == -1 || (device >= 0 && device < count), "[cuda] synchronize: device ", device,
              " does not exist: ", status());
  if (count == 0) return;
  int current = 0;
  check(cudaGetDevice(&current), "cudaGetDevice");
  for (int d = device < 0 ? 0 : device; d < (device < 0 ? count : device + 1); ++d) {
    check(cudaSetDevice(d), "cudaSetDevice");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  check(cudaSetDevice(current), "cudaSetDevice");
}

#else  // built without CUDA

bool is_built() { return false; }
std::string runtime_version() { return ""; }
std::string driver_version() { return ""; }
std::string compiled_architectures() { return ""; }
int device_count() { return 0; }
std::string status() { return "ember was built without CUDA (configure with -DEMBER_CUDA=ON)"; }

DeviceProperties get_device_properties(int index) {
  EMBER_CHECK(false, "[cuda] device ", index, " does not exist: ", status());
  return {};
}

void synchronize(int device) {
  EMBER_CHECK(device == -1, "[cuda] synchronize: device ", device, " does not exist: ", status());
}

#endif

bool is_available() { return device_count() > 0; }

}  // namespace ember::cuda
