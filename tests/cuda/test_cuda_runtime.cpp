// The CUDA runtime queries: consistent answers with and without a GPU, clear errors for devices
// that do not exist. Runs in every build; the GPU-only checks skip when no device is usable.
#include <gtest/gtest.h>

#include "ember/cuda.h"
#include "ember/error.h"
#include "ember/info.h"
#include "ember/ops.h"

namespace ember {
namespace {

TEST(CudaRuntime, BuildFlagsAgree) {
  EXPECT_EQ(cuda::is_built(), build_info().cuda);
  if (cuda::is_built()) {
    EXPECT_FALSE(cuda::runtime_version().empty());
    // A machine with a usable GPU has a driver; its version is at least the runtime's major.
    if (cuda::is_available()) {
      EXPECT_FALSE(cuda::driver_version().empty());
    }
    EXPECT_NE(cuda::compiled_architectures().find("90"), std::string::npos) << cuda::compiled_architectures();
  } else {
    EXPECT_EQ(cuda::device_count(), 0);
    EXPECT_EQ(cuda::driver_version(), "");
    EXPECT_NE(cuda::status().find("built without CUDA"), std::string::npos) << cuda::status();
  }
}

TEST(CudaRuntime, MissingDevicesAreClearErrors) {
  const int count = cuda::device_count();
  EXPECT_GE(count, 0);
  EXPECT_EQ(cuda::is_available(), count > 0);
  EXPECT_FALSE(cuda::status().empty());
  try {
    cuda::get_device_properties(count);
    FAIL() << "device " << count << " should not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[cuda] device"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::get_device_properties(-1), Error);
  EXPECT_THROW(cuda::synchronize(count), Error);
  EXPECT_NO_THROW(cuda::synchronize());  // every device, or none
}

TEST(CudaRuntime, DevicePropertiesOnAGpu) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::status();
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceProperties p = cuda::get_device_properties(i);
    EXPECT_EQ(p.index, i);
    EXPECT_FALSE(p.name.empty());
    EXPECT_GE(p.compute_major, 5);
    EXPECT_GT(p.total_memory, int64_t{1} << 30);
    EXPECT_GT(p.multiprocessors, 0);
    EXPECT_NO_THROW(cuda::synchronize(i));
  }
}

TEST(CudaAllocator, WithoutADeviceAllocationIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  const Device gpu{DeviceType::kCUDA, 0};
  try {
    empty({2, 3}, gpu);
    FAIL() << "allocating on cuda:0 without a device should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[allocate] device cuda:0 is not available"), std::string::npos) << e.what();
  }
  EXPECT_THROW(memory_stats(gpu), Error);
  EXPECT_THROW(empty_cache(gpu), Error);
}

TEST(CudaAllocator, SteadyStateAllocationsComeFromTheCache) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::status();
  const Device gpu{DeviceType::kCUDA, 0};
  auto step = [&] {
    Tensor a = empty({1024, 1024}, gpu);
    Tensor b = empty({7}, gpu);
    Tensor c = empty({64, 3, 224, 224}, gpu);
    EXPECT_EQ(a.device(), gpu);
  };
  step();
  const MemoryStats before = memory_stats(gpu);
  for (int i = 0; i < 10; ++i) step();
  const MemoryStats after = memory_stats(gpu);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.bytes_in_use, 0);
  EXPECT_GT(after.cache_hits, before.cache_hits);
  empty_cache(gpu);
  EXPECT_EQ(memory_stats(gpu).bytes_reserved, 0);
}

}  // namespace
}  // namespace ember
