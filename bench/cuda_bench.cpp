// ember's CUDA rows for scripts/gpu-check, timed as bench/cuda_torch.py times PyTorch's (the same
// names, shapes, byte and flop counts): fresh random inputs per row, 3 warm-up calls, then 25 calls
// each between a pair of CUDA events on the default stream; a row's time is their median.
//
//   ember_cuda_bench [--json FILE] [--filter SUBSTRING]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ember/cuda.h"
#include "ember/models/mnist.h"
#include "ember/ops.h"
#include "ember/optim.h"

namespace {

using ember::Tensor;

constexpr int64_t kM = int64_t{1} << 20;
constexpr int64_t kN = 64 * kM;  // the elementwise and reduction rows
constexpr int64_t kS = 8192;     // the square rows
constexpr int64_t kK = 4096;     // the float32 product

struct Row {
  std::string name;
  double bytes, flops;
  std::function<std::function<void()>()> setup;  // makes the inputs, returns the call to time
};

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

// Drawn on the CPU (random draws have no CUDA kernel yet) and copied over.
Tensor gpu_randn(const ember::Shape& shape, ember::DType dtype) { return ember::randn(shape).to(dtype).cuda(); }

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, filter;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--json") json_path = argv[i + 1];
    if (flag == "--filter") filter = argv[i + 1];
  }
  if (!ember::cuda::is_available()) {
    std::fprintf(stderr, "no GPU: %s\n", ember::cuda::status().c_str());
    return 1;
  }
  using ember::kBFloat16;
  using ember::kFloat32;
  const std::vector<Row> rows = {
      {"d2d_copy_f32_256M", 2.0 * 4 * 256 * kM, 0,
       [] {
         Tensor a = gpu_randn({256 * kM}, kFloat32), b = ember::empty_like(a);
         return std::function<void()>([a, b]() mutable { b.copy_(a); });
       }},
      {"add_f32_64M", 3.0 * 4 * kN, 0,
       [] {
         Tensor a = gpu_randn({kN}, kFloat32), b = gpu_randn({kN}, kFloat32);
         return std::function<void()>([a, b] { (void)(a + b); });
       }},
      {"add_bf16_64M", 3.0 * 2 * kN, 0,
       [] {
         Tensor a = gpu_randn({kN}, kBFloat16), b = gpu_randn({kN}, kBFloat16);
         return std::function<void()>([a, b] { (void)(a + b); });
       }},
      {"add_bcast_f32_8192x8192", (2.0 * kS * kS + kS) * 4, 0,
       [] {
         Tensor a = gpu_randn({kS, kS}, kFloat32), b = gpu_randn({kS}, kFloat32);
         return std::function<void()>([a, b] { (void)(a + b); });
       }},
      {"gelu_f32_64M", 2.0 * 4 * kN, 0,
       [] {
         Tensor a = gpu_randn({kN}, kFloat32);
         return std::function<void()>([a] { (void)ember::gelu(a); });
       }},
      {"sum_f32_64M", 4.0 * kN, 0,
       [] {
         Tensor a = gpu_randn({kN}, kFloat32);
         return std::function<void()>([a] { (void)a.sum(); });
       }},
      {"softmax_f32_8192x8192", 2.0 * 4 * kS * kS, 0,
       [] {
         Tensor a = gpu_randn({kS, kS}, kFloat32);
         return std::function<void()>([a] { (void)ember::softmax(a, -1); });
       }},
      {"layernorm_f32_8192x8192", 2.0 * 4 * kS * kS, 0,
       [] {
         Tensor a = gpu_randn({kS, kS}, kFloat32), w = gpu_randn({kS}, kFloat32), b = gpu_randn({kS}, kFloat32);
         return std::function<void()>([a, w, b] { (void)ember::layer_norm(a, {kS}, w, b); });
       }},
      {"matmul_f32_4096", 3.0 * 4 * kK * kK, 2.0 * kK * kK * kK,
       [] {
         Tensor a = gpu_randn({kK, kK}, kFloat32), b = gpu_randn({kK, kK}, kFloat32);
         return std::function<void()>([a, b] { (void)ember::matmul(a, b); });
       }},
      {"matmul_bf16_8192", 3.0 * 2 * kS * kS, 2.0 * kS * kS * kS,
       [] {
         Tensor a = gpu_randn({kS, kS}, kBFloat16), b = gpu_randn({kS, kS}, kBFloat16);
         return std::function<void()>([a, b] { (void)ember::matmul(a, b); });
       }},
      {"cross_entropy_f32_4096x32000", 4.0 * 4096 * 32000, 0,
       [] {
         Tensor scores = gpu_randn({4096, 32000}, kFloat32);
         Tensor target = ember::randint(0, 32000, {4096}).cuda();
         return std::function<void()>(
             [scores, target] { (void)ember::cross_entropy(scores, target, -100, ember::Reduction::kNone); });
       }},
      {"adam_step_f32_10M", 7.0 * 4 * 10'000'000, 0,
       [] {
         std::vector<Tensor> params;
         for (int i = 0; i < 100; ++i) {
           Tensor p = gpu_randn({100'000}, kFloat32).requires_grad_();
           p.set_grad(gpu_randn({100'000}, kFloat32));
           params.push_back(p);
         }
         auto optimizer = std::make_shared<ember::optim::Adam>(params, ember::optim::AdamOptions{.lr = 1e-3});
         return std::function<void()>([optimizer] { optimizer->step(); });
       }},
      // ResNet's 3 x 3 convolutions of 64 channels at 56 x 56, batch 32 (7.4 GFLOP each way).
      {"conv2d_f32_resnet_b32", 2.0 * 4 * 32 * 64 * 56 * 56, 2.0 * 32 * 64 * 56 * 56 * 64 * 9,
       [] {
         Tensor x = gpu_randn({32, 64, 56, 56}, kFloat32), w = gpu_randn({64, 64, 3, 3}, kFloat32);
         return std::function<void()>([x, w] { (void)ember::conv2d(x, w, std::nullopt, 1, 1); });
       }},
      {"conv2d_bf16_resnet_b32", 2.0 * 2 * 32 * 64 * 56 * 56, 2.0 * 32 * 64 * 56 * 56 * 64 * 9,
       [] {
         Tensor x = gpu_randn({32, 64, 56, 56}, kBFloat16), w = gpu_randn({64, 64, 3, 3}, kBFloat16);
         return std::function<void()>([x, w] { (void)ember::conv2d(x, w, std::nullopt, 1, 1); });
       }},
      // The forward and both gradients.
      {"conv2d_train_f32_resnet_b32", 5.0 * 4 * 32 * 64 * 56 * 56, 3 * 2.0 * 32 * 64 * 56 * 56 * 64 * 9,
       [] {
         Tensor x = gpu_randn({32, 64, 56, 56}, kFloat32).requires_grad_();
         Tensor w = gpu_randn({64, 64, 3, 3}, kFloat32).requires_grad_();
         Tensor grad = gpu_randn({32, 64, 56, 56}, kFloat32);
         return std::function<void()>([x, w, grad] { ember::conv2d(x, w, std::nullopt, 1, 1).backward(grad); });
       }},
      // ResNet's stem pooling: 3 x 3, stride 2, padding 1, 112 -> 56, with the indices for the backward.
      {"maxpool2d_f32_resnet_b32", (4.0 + 4 + 8 / 4.0) * 32 * 64 * 56 * 56, 0,
       [] {
         Tensor x = gpu_randn({32, 64, 112, 112}, kFloat32).requires_grad_();
         return std::function<void()>([x] { (void)ember::max_pool2d(x, 3, ember::Pair{2}, 1); });
       }},
      // One training step of the MNIST CNN (ember train mnist's model), batch 64, Adam: about 60
      // kernels, so the launches and the host's work between them, not the bytes, set the time.
      {"train_step_mnist_cnn_b64", 0, 0,
       [] {
         auto model = ember::models::mnist_cnn();
         model->to(ember::Device(ember::DeviceType::kCUDA, 0));
         auto optimizer = std::make_shared<ember::optim::Adam>(model->parameters(), ember::optim::AdamOptions{});
         Tensor x = gpu_randn({64, 1, 28, 28}, kFloat32), y = ember::randint(0, 10, {64}).cuda();
         return std::function<void()>([model, optimizer, x, y] {
           optimizer->zero_grad();
           ember::cross_entropy(model->forward(x), y).backward();
           optimizer->step();
         });
       }},
  };

  const ember::cuda::DeviceProperties props = ember::cuda::get_device_properties(0);
  std::string out = "{\"peer\": \"ember\", \"device\": \"" + props.name + "\", \"rows\": [";
  bool first = true;
  for (const Row& row : rows) {
    if (!filter.empty() && row.name.find(filter) == std::string::npos) continue;
    try {
      std::function<void()> call = row.setup();
      for (int i = 0; i < 3; ++i) call();
      check(cudaDeviceSynchronize(), "warm-up");
      constexpr int kRepeats = 25;
      std::vector<cudaEvent_t> events(2 * kRepeats);
      for (cudaEvent_t& e : events) check(cudaEventCreate(&e), "cudaEventCreate");
      for (int i = 0; i < kRepeats; ++i) {
        check(cudaEventRecord(events[2 * i], nullptr), "cudaEventRecord");
        call();
        check(cudaEventRecord(events[2 * i + 1], nullptr), "cudaEventRecord");
      }
      check(cudaDeviceSynchronize(), "the timed calls");
      std::vector<double> ms(kRepeats);
      for (int i = 0; i < kRepeats; ++i) {
        float t = 0;
        check(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]), "cudaEventElapsedTime");
        ms[i] = t;
      }
      for (cudaEvent_t e : events) cudaEventDestroy(e);
      std::sort(ms.begin(), ms.end());
      const double median = ms[kRepeats / 2], spread = (ms.back() - ms.front()) / median;
      std::printf("%-26s %9.3f ms  %8.1f GB/s  %7.1f TFLOP/s  spread %.2f\n", row.name.c_str(), median,
                  row.bytes / median / 1e6, row.flops / median / 1e9, spread);
      char entry[512];
      std::snprintf(entry, sizeof(entry),
                    "%s\n  {\"name\": \"%s\", \"median_ms\": %.6f, \"spread\": %.4f, \"bytes\": %.0f, \"flops\": %.0f}",
                    first ? "" : ",", row.name.c_str(), median, spread, row.bytes, row.flops);
      out += entry;
      first = false;
    } catch (const std::exception& e) {
      std::printf("%-26s failed: %s\n", row.name.c_str(), e.what());
    }
    std::fflush(stdout);
  }
  out += "\n]}\n";
  if (!json_path.empty()) std::ofstream(json_path) << out;
  return 0;
}
