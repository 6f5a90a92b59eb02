// The CUDA kernels against the CPU's: every check draws fresh random inputs (the seed is printed
// with a failure), runs the op on both devices and compares within the dtype's tolerance
// (float32 1e-5 relative, bfloat16/float16 1e-2, float64 1e-12); NaN where the CPU has none never
// passes. Before each GPU op the device's cache is filled with NaN blocks of the output's size, so
// an element the kernel does not write shows up as NaN. Skipped where no GPU is usable.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ember/amp.h"
#include "ember/autograd.h"
#include "ember/cuda.h"
#include "ember/error.h"
#include "ember/memory.h"
#include "ember/models/diffusion.h"
#include "ember/models/gpt.h"
#include "ember/models/mnist.h"
#include "ember/nn.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "ember/train/checkpoint.h"
#include "ember/train/loop.h"
#include "ember/train/tasks.h"

namespace ember {
namespace {

const Device kGpu{DeviceType::kCUDA, 0};

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << cuda::status();
    seed_ = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    manual_seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  uint64_t seed_ = 0;
};

double tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return 1e-12;
    case kFloat32:
      return 1e-5;
    default:
      return 1e-2;
  }
}

// Fills blocks of the device cache that a result of `bytes` bytes would be given with NaN.
void poison(int64_t bytes) {
  std::vector<Tensor> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(full({std::max<int64_t>(bytes / 4, 1)}, NAN, TensorOptions(kGpu)));
}

// gpu (a cuda tensor) equals cpu within the tolerance of `dtype`: |g - c| <= tol * (|c| + 1) per
// element, NaN only where the CPU has NaN, same shape.
::testing::AssertionResult close(const Tensor& gpu, const Tensor& cpu, double tol, uint64_t seed) {
  if (gpu.device() != kGpu) return ::testing::AssertionFailure() << "result on " << gpu.device();
  if (gpu.shape() != cpu.shape()) {
    return ::testing::AssertionFailure() << "shape " << gpu.shape() << " vs the CPU's " << cpu.shape();
  }
  if (gpu.dtype() != cpu.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << gpu.dtype() << " vs the CPU's " << cpu.dtype();
  }
  const std::vector<double> g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool g_nan = std::isnan(g[i]), c_nan = std::isnan(c[i]);
    const bool ok = g_nan || c_nan
                        ? g_nan == c_nan
                        : (std::isinf(c[i]) ? g[i] == c[i] : std::abs(g[i] - c[i]) <= tol * (std::abs(c[i]) + 1));
    if (!ok) {
      return ::testing::AssertionFailure() << "element " << i << " of " << g.size() << ": GPU " << g[i] << ", CPU "
                                           << c[i] << " (tolerance " << tol << ", seed " << seed << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// gpu (a cuda tensor) equals cpu as a whole: ||g - c|| / ||c|| <= rel, no NaN, same shape. For
// bfloat16 results, whose element errors scale with the terms summed rather than with the result.
::testing::AssertionResult close_in_norm(const Tensor& gpu, const Tensor& cpu, double rel, uint64_t seed) {
  if (gpu.device() != kGpu) return ::testing::AssertionFailure() << "result on " << gpu.device();
  if (gpu.shape() != cpu.shape()) {
    return ::testing::AssertionFailure() << "shape " << gpu.shape() << " vs the CPU's " << cpu.shape();
  }
  const std::vector<double> g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  double error = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) || std::isnan(c[i])) return ::testing::AssertionFailure() << "NaN at element " << i;
    error += (g[i] - c[i]) * (g[i] - c[i]);
    norm += c[i] * c[i];
  }
  if (std::sqrt(error) <= rel * std::sqrt(norm)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << std::sqrt(error / norm) << " over " << rel << " (seed "
                                       << seed << ")";
}

Tensor random(const Shape& shape, DType dtype, double scale = 1.0) { return (randn(shape) * scale).to(dtype); }

// The same values (and NaNs in the same places), shape and dtype, both read on the host.
bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  }
  return true;
}

TEST_F(CudaKernels, TransfersKeepEveryBit) {
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt8, kUInt8, kBool}) {
    const Tensor x = (randn({3, 17, 5}) * 100).to(dtype);
    const Tensor g = x.cuda();
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_EQ(g.dtype(), dtype);
    const Tensor back = g.cpu();
    EXPECT_EQ(back.device(), kCPU);
    EXPECT_TRUE(equal(back, x)) << dtype;
    // A non-contiguous source is made contiguous on its own device first.
    EXPECT_TRUE(equal(x.transpose(0, 2).cuda().cpu(), x.transpose(0, 2))) << dtype;
  }
  EXPECT_EQ(empty({0, 4}).cuda().shape(), Shape({0, 4}));
  const Tensor s = tensor<float>({2.5f}).cuda();
  EXPECT_EQ(s.item().to_double(), 2.5);
  EXPECT_EQ(arange(10).cuda().at({7}).to_int(), 7);
}

TEST_F(CudaKernels, CopyAcrossDevicesAndMixedDevicesAreClear) {
  Tensor g = zeros({4, 4}, TensorOptions(kGpu));
  const Tensor x = randn({4});
  g.copy_(x);  // broadcast from the host
  EXPECT_TRUE(equal(g.cpu(), x.expand({4, 4})));
  try {
    (void)(g + randn({4, 4}));
    FAIL() << "mixing devices should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same device"), std::string::npos) << e.what();
  }
  std::ostringstream text;
  text << tensor<float>({1.5f, -2.0f}).cuda();
  EXPECT_EQ(text.str(), "tensor([ 1.5000, -2.0000], device='cuda:0')");
}

TEST_F(CudaKernels, UnaryOpsMatchTheCpu) {
  using UnaryFn = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, UnaryFn>> ops = {
      {"neg", [](const Tensor& x) { return neg(x); }},         {"abs", [](const Tensor& x) { return abs(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},         {"log", [](const Tensor& x) { return log(abs(x)); }},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x)); }},  {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }}, {"relu", [](const Tensor& x) { return relu(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},       {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},         {"erf", [](const Tensor& x) { return erf(x); }},
      {"isnan", [](const Tensor& x) { return isnan(x); }},     {"sign", [](const Tensor& x) { return sign(x); }},
  };
  for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    for (const Shape& shape : {Shape{}, Shape{1}, Shape{7}, Shape{1000, 33}, Shape{3, 1, 4097}}) {
      Tensor x = random(shape, dtype, 2.0);
      if (x.numel() > 2) x.view({-1}).narrow(0, 1, 1).fill_(NAN);
      const Tensor gx = x.cuda();
      for (const auto& [name, fn] : ops) {
        const Tensor cpu = fn(x);
        poison(cpu.numel() * dtype_size(cpu.dtype()));
        EXPECT_TRUE(close(fn(gx), cpu, tolerance(dtype), seed_)) << name << " " << dtype << " " << shape;
      }
    }
  }
  // Non-contiguous input.
  const Tensor x = randn({64, 48});
  EXPECT_TRUE(close(exp(x.cuda().t()), exp(x.t()), 1e-5, seed_));
}

TEST_F(CudaKernels, BinaryOpsBroadcastAndPromoteAsOnTheCpu) {
  using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, BinaryFn>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); }},
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{}, {}}, {{5}, {5}}, {{1000, 33}, {33}}, {{1000, 1}, {1, 33}}, {{2, 3, 4}, {3, 1}}, {{4097}, {}}, {{0, 3}, {3}}};
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    for (const auto& [sa, sb] : shapes) {
      const Tensor a = random(sa, dtype), b = random(sb, dtype);
      const Tensor ga = a.cuda(), gb = b.cuda();
      for (const auto& [name, fn] : ops) {
        const Tensor cpu = fn(a, b);
        poison(cpu.numel() * dtype_size(cpu.dtype()));
        EXPECT_TRUE(close(fn(ga, gb), cpu, tolerance(dtype), seed_)) << name << " " << dtype << " " << sa << " " << sb;
      }
    }
  }
  // Integers, a scalar operand, a transposed operand, and int + float promotion.
  const Tensor i = arange(-50, 50).view({10, 10});
  EXPECT_TRUE(close(i.cuda() * 3 + i.cuda().t(), i * 3 + i.t(), 0, seed_));
  const Tensor f = randn({10});
  EXPECT_TRUE(close(i.cuda() + f.cuda(), i + f, 1e-6, seed_));
}

TEST_F(CudaKernels, WhereCastsAndFill) {
  const Tensor a = randn({300, 7}), b = randn({7});
  const Tensor cond = a > 0;
  EXPECT_TRUE(close(where(cond.cuda(), a.cuda(), b.cuda()), where(cond, a, b), 0, seed_));
  for (DType from : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kBool}) {
    for (DType to : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kBool}) {
      Tensor x = (randn({257, 3}) * 1000).to(from);
      const Tensor cpu = x.to(to), gpu = x.cuda().to(to);
      EXPECT_TRUE(equal(gpu.cpu(), cpu)) << from << " -> " << to;
      // Non-contiguous: a transposed view.
      EXPECT_TRUE(equal(x.cuda().t().to(to).cpu(), x.t().to(to))) << from << " -> " << to << " (transposed)";
    }
  }
  EXPECT_TRUE(equal(full({5, 3}, 2.5, TensorOptions(kGpu).with_dtype(kBFloat16)).cpu(),
                    full({5, 3}, 2.5, TensorOptions(kBFloat16))));
  EXPECT_TRUE(equal(zeros({4}, TensorOptions(kGpu).with_dtype(kInt64)).cpu(), zeros({4}, TensorOptions(kInt64))));
}

TEST_F(CudaKernels, ReductionsMatchTheCpu) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    for (const Shape& shape : {Shape{1}, Shape{1000}, Shape{300, 70}, Shape{4, 5, 6, 7}, Shape{1 << 20}, Shape{3, 0}}) {
      const Tensor x = random(shape, dtype);
      const Tensor gx = x.cuda();
      const double tol = dtype == kFloat32 ? 1e-4 : tolerance(dtype) * 10;  // sums of many terms, in another order
      EXPECT_TRUE(close(gx.sum(), x.sum(), tol, seed_)) << dtype << " " << shape;
      EXPECT_TRUE(close(gx.mean({-1}), x.mean({-1}), tol, seed_)) << dtype << " " << shape;
      if (x.numel() == 0) continue;
      EXPECT_TRUE(close(gx.amax({0}, true), x.amax({0}, true), 0, seed_)) << dtype << " " << shape;
      EXPECT_TRUE(close(gx.amin(), x.amin(), 0, seed_)) << dtype << " " << shape;
      EXPECT_TRUE(close(gx.argmax(-1), x.argmax(-1), 0, seed_)) << dtype << " " << shape;
      if (shape.size() == 4) {
        EXPECT_TRUE(close(gx.sum({0, 2}), x.sum({0, 2}), tol, seed_));
        EXPECT_TRUE(close(gx.permute({3, 1, 0, 2}).sum({1, 3}), x.permute({3, 1, 0, 2}).sum({1, 3}), tol, seed_));
      }
    }
  }
  // NaN propagates through amax and wins argmax; ties give the first index.
  const Tensor t = tensor<float>({1, 3, NAN, 3, NAN, 0});
  EXPECT_TRUE(close(t.cuda().amax(), t.amax(), 0, seed_));
  EXPECT_EQ(t.cuda().argmax().item().to_int(), 2);
  EXPECT_EQ(tensor<float>({1, 5, 5, 2}).cuda().argmax().item().to_int(), 1);
  const Tensor i = arange(100000).view({100, 1000});
  EXPECT_TRUE(close(i.cuda().sum({1}), i.sum({1}), 0, seed_));
  EXPECT_TRUE(close((i.cuda() > 500).any({1}), (i > 500).any({1}), 0, seed_));
  EXPECT_TRUE(close((i.cuda() > 500).all(), (i > 500).all(), 0, seed_));
}

TEST_F(CudaKernels, SoftmaxAndItsGradient) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    for (const Shape& shape : {Shape{1, 1}, Shape{8, 1000}, Shape{3, 5000}, Shape{2, 9, 4}}) {
      const Tensor x = random(shape, dtype, 3.0);
      for (int64_t dim : {int64_t{-1}, int64_t{1}}) {
        EXPECT_TRUE(close(softmax(x.cuda(), dim), softmax(x, dim), tolerance(dtype), seed_)) << dtype << shape << dim;
        EXPECT_TRUE(close(log_softmax(x.cuda(), dim), log_softmax(x, dim), tolerance(dtype), seed_))
            << dtype << shape << dim;
      }
    }
  }
  // A row with +inf or NaN gives NaN, as on the CPU.
  const Tensor bad = tensor<float>({1, INFINITY, 2, 0, 1, 2}, Shape{2, 3});
  EXPECT_TRUE(close(softmax(bad.cuda(), -1), softmax(bad, -1), 1e-6, seed_));
  // The gradients through autograd.
  const Tensor x = randn({16, 300}, TensorOptions(kFloat64));
  const Tensor w = randn({16, 300}, TensorOptions(kFloat64));
  for (bool log : {false, true}) {
    Tensor xc = x.clone().requires_grad_(), xg = x.cuda().requires_grad_();
    ((log ? log_softmax(xc, -1) : softmax(xc, -1)) * w).sum().backward();
    ((log ? log_softmax(xg, -1) : softmax(xg, -1)) * w.cuda()).sum().backward();
    EXPECT_TRUE(close(xg.grad(), xc.grad(), 1e-10, seed_)) << (log ? "log_softmax" : "softmax");
  }
}

TEST_F(CudaKernels, MatmulMatchesTheCpu) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {{{1, 1}, {1, 1}},         {{33, 17}, {17, 65}},      {{64, 784}, {784, 128}},
                                   {{3, 40, 50}, {50, 30}},  {{2, 3, 8, 9}, {3, 9, 5}}, {{7}, {7, 4}},
                                   {{256, 256}, {256, 256}}, {{5, 0}, {0, 3}}};
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    for (const Case& c : cases) {
      const Tensor a = random(c.a, dtype), b = random(c.b, dtype);
      // The CPU reference in float64 from the same (rounded) inputs, rounded to the dtype at the end.
      const Tensor cpu = matmul(a.to(kFloat64), b.to(kFloat64)).to(dtype);
      const double k = static_cast<double>(c.a[c.a.size() - 1]);
      const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 * std::sqrt(k + 1) : 2e-2;
      poison(cpu.numel() * dtype_size(dtype));
      EXPECT_TRUE(close(matmul(a.cuda(), b.cuda()), cpu, tol, seed_)) << dtype << " " << c.a << " @ " << c.b;
    }
    // Transposed operands (cuBLAS's transpose flags) and a view with neither dim contiguous.
    const Tensor a = random({40, 30}, dtype), b = random({50, 40}, dtype);
    const Tensor ref = matmul(a.t().to(kFloat64), b.t().to(kFloat64)).to(dtype);
    const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-4 : 2e-2;
    EXPECT_TRUE(close(matmul(a.cuda().t(), b.cuda().t()), ref, tol, seed_)) << dtype;
    const Tensor big = random({40, 2, 30}, dtype);
    const Tensor strided = big.select(1, 1);               // rows of stride 60, columns of stride 1
    const Tensor cols = big.transpose(0, 2).select(1, 0);  // (30, 40) with strides (1, 60)
    EXPECT_TRUE(close(matmul(cols.cuda(), strided.cuda()), matmul(cols.to(kFloat64), strided.to(kFloat64)).to(dtype),
                      tol, seed_))
        << dtype;
  }
  // linear: bias and the epilogue.
  const Tensor x = randn({32, 64}), w = randn({48, 64}), bias = randn({48});
  EXPECT_TRUE(close(linear(x.cuda(), w.cuda(), bias.cuda()), linear(x, w, bias), 1e-4, seed_));
  EXPECT_TRUE(close(relu(linear(x.cuda(), w.cuda(), bias.cuda())), relu(linear(x, w, bias)), 1e-4, seed_));
}

TEST_F(CudaKernels, Float64GradcheckOnTheGpu) {
  const Tensor a = randn({5, 4}, TensorOptions(kFloat64)).cuda().requires_grad_();
  const Tensor b = randn({4, 3}, TensorOptions(kFloat64)).cuda().requires_grad_();
  const Tensor c = randn({3}, TensorOptions(kFloat64)).cuda().requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return log_softmax(tanh(matmul(in[0], in[1]) + in[2]), -1) * sigmoid(in[2]);
      },
      {a, b, c}));
}

TEST_F(CudaKernels, ModulesMoveToTheGpuAndTrain) {
  manual_seed(seed_);
  nn::Linear cpu_layer(20, 10);
  nn::Linear gpu_layer(20, 10);
  gpu_layer.load_state_dict(cpu_layer.state_dict());
  gpu_layer.to(kGpu);
  EXPECT_EQ(gpu_layer.weight.device(), kGpu);
  const Tensor x = randn({8, 20});
  const Tensor yc = cpu_layer.forward(x), yg = gpu_layer.forward(x.cuda());
  EXPECT_TRUE(close(yg, yc, 1e-5, seed_));
  (yc * yc).sum().backward();
  (yg * yg).sum().backward();
  EXPECT_TRUE(close(gpu_layer.weight.grad(), cpu_layer.weight.grad(), 1e-4, seed_));
  EXPECT_TRUE(close(gpu_layer.bias.grad(), cpu_layer.bias.grad(), 1e-4, seed_));
  const MemoryStats stats = memory_stats(kGpu);
  EXPECT_GT(stats.bytes_in_use, 0);
}

TEST_F(CudaKernels, CrossEntropyMatchesTheCpuAndRejectsBadTargets) {
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tensor scores = random({37, 10}, dtype, 3.0);
    Tensor target = randint(0, 10, {37});
    target.narrow(0, 3, 1).fill_(-100);  // ignored
    for (double smoothing : {0.0, 0.1}) {
      Tensor xc = scores.clone().requires_grad_(), xg = scores.cuda().requires_grad_();
      const Tensor lc = cross_entropy(xc, target, -100, Reduction::kMean, smoothing);
      const Tensor lg = cross_entropy(xg, target.cuda(), -100, Reduction::kMean, smoothing);
      EXPECT_TRUE(close(lg, lc, tolerance(dtype), seed_)) << dtype << " smoothing " << smoothing;
      lc.backward();
      lg.backward();
      EXPECT_TRUE(close(xg.grad(), xc.grad(), tolerance(dtype), seed_)) << dtype << " smoothing " << smoothing;
    }
    // Positions along a trailing dim: (N, C, d).
    const Tensor s3 = random({4, 5, 6}, dtype);
    const Tensor t3 = randint(0, 5, {4, 6});
    EXPECT_TRUE(close(cross_entropy(s3.cuda(), t3.cuda()), cross_entropy(s3, t3), tolerance(dtype), seed_));
  }
  Tensor bad = randint(0, 10, {8});
  bad.narrow(0, 5, 1).fill_(12);
  try {
    (void)cross_entropy(randn({8, 10}).cuda(), bad.cuda()).item();
    FAIL() << "an out-of-range target should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 12 at position 5"), std::string::npos) << e.what();
  }
}

// An MLP trained for 50 steps on the GPU follows the CPU's run: the same losses and parameters
// within 1e-4 (float32 sums in another order), with SGD with momentum and with AdamW.
TEST_F(CudaKernels, TrainingStepsFollowTheCpu) {
  for (bool adam : {false, true}) {
    auto make = [] {
      return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(64, 32), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(32, 10));
    };
    auto cpu_model = make(), gpu_model = make();
    gpu_model->load_state_dict(cpu_model->state_dict());
    gpu_model->to(kGpu);
    auto optimizer = [adam](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
      if (adam) return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2});
      return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    };
    auto cpu_opt = optimizer(*cpu_model), gpu_opt = optimizer(*gpu_model);
    for (int step = 0; step < 50; ++step) {
      const Tensor x = randn({32, 64}), y = randint(0, 10, {32});
      cpu_opt->zero_grad();
      gpu_opt->zero_grad();
      const Tensor lc = cross_entropy(cpu_model->forward(x), y);
      const Tensor lg = cross_entropy(gpu_model->forward(x.cuda()), y.cuda());
      lc.backward();
      lg.backward();
      cpu_opt->step();
      gpu_opt->step();
      ASSERT_TRUE(close(lg, lc, 1e-4, seed_)) << (adam ? "AdamW" : "SGD") << " step " << step;
    }
    const StateDict cpu_state = cpu_model->state_dict(), gpu_state = gpu_model->state_dict();
    for (const auto& [name, value] : cpu_state) {
      EXPECT_TRUE(close(gpu_state.at(name), value, 1e-4, seed_)) << (adam ? "AdamW " : "SGD ") << name;
    }
  }
}

// The same key gives the CPU's numbers: uniform and integer draws and dropout's mask bit for bit,
// normal draws within the last bits of Box-Muller's double arithmetic.
TEST_F(CudaKernels, RandomDrawsAreTheCpusNumbers) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    manual_seed(seed_);
    const Tensor uc = rand({1001}, dtype), nc = randn({7, 33}, dtype), ic = randint(-5, 17, {999});
    manual_seed(seed_);
    const TensorOptions on_gpu = TensorOptions(kGpu).with_dtype(dtype);
    const Tensor ug = rand({1001}, on_gpu), ng = randn({7, 33}, on_gpu);
    const Tensor ig = randint(-5, 17, {999}, TensorOptions(kGpu));
    EXPECT_EQ(randn_like(ug).device(), kGpu);  // the *_like draws follow their tensor
    EXPECT_EQ(rand_like(ug).device(), kGpu);
    EXPECT_TRUE(equal(ug.cpu(), uc)) << dtype;
    EXPECT_TRUE(close(ng, nc, dtype == kFloat64 ? 1e-14 : 1e-6, seed_)) << dtype;
    EXPECT_TRUE(equal(ig.cpu(), ic));
    const Tensor x = random({65, 3}, dtype);
    manual_seed(seed_ + 1);
    const Tensor dc = dropout(x, 0.3);
    manual_seed(seed_ + 1);
    const Tensor dg = dropout(x.cuda(), 0.3);
    EXPECT_TRUE(equal(dg.cpu(), dc)) << dtype;
  }
  EXPECT_TRUE(equal(arange(3, 40, 3, TensorOptions(kGpu)).cpu(), arange(3, 40, 3)));
  EXPECT_TRUE(equal(arange(0.5, 4.0, 0.25, TensorOptions(kGpu)).cpu(), arange(0.5, 4.0, 0.25)));
}

TEST_F(CudaKernels, IndexingMatchesTheCpuAndRejectsBadIndices) {
  for (DType dtype : {kFloat32, kBFloat16, kInt64}) {
    const Tensor x = (randn({6, 5, 4}) * 10).to(dtype);
    const Tensor rows = randint(0, 5, {9});
    for (int64_t dim : {0, 1, 2}) {
      const Tensor idx = randint(0, x.size(dim), {7});
      EXPECT_TRUE(equal(index_select(x.cuda(), dim, idx.cuda()).cpu(), index_select(x, dim, idx))) << dtype << dim;
    }
    EXPECT_TRUE(equal(index_select(x.cuda(), 1, rows.to(kInt32).cuda()).cpu(), index_select(x, 1, rows.to(kInt32))));
    const Tensor gi = randint(0, 5, {6, 3, 4});
    EXPECT_TRUE(equal(gather(x.cuda(), 1, gi.cuda()).cpu(), gather(x, 1, gi))) << dtype;
    if (dtype == kInt64) {
      const Tensor src = randint(-9, 9, {6, 3, 4});
      EXPECT_TRUE(equal(scatter_add(x.cuda(), 1, gi.cuda(), src.cuda()).cpu(), scatter_add(x, 1, gi, src)));
    }
  }
  // Float sums in another order: within rounding.
  const Tensor x = randn({50, 8}), src = randn({400, 8});
  const Tensor idx = randint(0, 50, {400, 1}).expand({400, 8}).contiguous();
  EXPECT_TRUE(close(scatter_add(x.cuda(), 0, idx.cuda(), src.cuda()), scatter_add(x, 0, idx, src), 1e-5, seed_));
  // embedding forward and backward.
  const Tensor weight = randn({11, 6}), tokens = randint(0, 11, {3, 5});
  Tensor wc = weight.clone().requires_grad_(), wg = weight.cuda().requires_grad_();
  const Tensor ec = embedding(wc, tokens), eg = embedding(wg, tokens.cuda());
  EXPECT_TRUE(close(eg, ec, 0, seed_));
  (ec * ec).sum().backward();
  (eg * eg).sum().backward();
  EXPECT_TRUE(close(wg.grad(), wc.grad(), 1e-5, seed_));
  try {
    (void)index_select(x.cuda(), 0, tensor<int64_t>({3, 50, 1}).cuda());
    FAIL() << "an out-of-range index should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 50 is out of bounds for dimension 0 with size 50"), std::string::npos)
        << e.what();
  }
}

// A GPT (attention, layer norm, GELU, embeddings, dropout) trained 50 AdamW steps on the GPU
// follows the CPU's run within 1e-4.
TEST_F(CudaKernels, GptTrainingFollowsTheCpu) {
  models::GPTConfig config;
  config.vocab_size = 65;
  config.block_size = 32;
  config.n_layer = 2;
  config.n_head = 4;
  config.n_embd = 64;
  config.dropout = 0.1;
  manual_seed(seed_);
  models::GPT cpu_model(config), gpu_model(config);
  gpu_model.load_state_dict(cpu_model.state_dict());
  gpu_model.to(kGpu);
  optim::AdamW cpu_opt(cpu_model.parameters(), optim::AdamWOptions{.lr = 3e-3});
  optim::AdamW gpu_opt(gpu_model.parameters(), optim::AdamWOptions{.lr = 3e-3});
  for (int step = 0; step < 50; ++step) {
    const Tensor idx = randint(0, 65, {4, 32}), targets = randint(0, 65, {4, 32});
    const uint64_t key = seed_ + 100 + static_cast<uint64_t>(step);
    manual_seed(key);  // the same dropout draws on both
    cpu_opt.zero_grad();
    const Tensor lc = cpu_model.loss(idx, targets);
    lc.backward();
    cpu_opt.step();
    manual_seed(key);
    gpu_opt.zero_grad();
    const Tensor lg = gpu_model.loss(idx.cuda(), targets.cuda());
    lg.backward();
    gpu_opt.step();
    ASSERT_TRUE(close(lg, lc, 1e-4, seed_)) << "step " << step;
  }
  // The keys' bias gets a gradient of exactly 0 (softmax ignores a shift shared by a query's scores):
  // what it holds is rounding noise, which AdamW scales up by 1 / (sqrt(v) + eps) on each device
  // alike but from different noise. It stays within 1e-3 of the CPU's; every other value within 1e-4.
  const StateDict cpu_state = cpu_model.state_dict(), gpu_state = gpu_model.state_dict();
  for (const auto& [name, value] : cpu_state) {
    const Tensor& gpu = gpu_state.at(name);
    if (!name.ends_with("attn.c_attn.bias")) {
      EXPECT_TRUE(close(gpu, value, 1e-4, seed_)) << name;
      continue;
    }
    const int64_t d = config.n_embd;
    EXPECT_TRUE(close(gpu.narrow(0, 0, d), value.narrow(0, 0, d), 1e-4, seed_)) << name << " (queries)";
    EXPECT_TRUE(close(gpu.narrow(0, d, d), value.narrow(0, d, d), 1e-3, seed_)) << name << " (keys)";
    EXPECT_TRUE(close(gpu.narrow(0, 2 * d, d), value.narrow(0, 2 * d, d), 1e-4, seed_)) << name << " (values)";
  }
}

// The training library on the GPU: `ember train gpt --device cuda`'s task and loop, with
// clipping, the cosine schedule, evaluation, a checkpoint written from the GPU and a sample. The
// run follows the CPU's within 1e-4, its checkpoint resumes on the CPU and generates on the GPU as
// on the CPU; under bfloat16 autocast, the run follows within 3e-2.
TEST_F(CudaKernels, TextTaskTrainsOnTheGpuAsOnTheCpu) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ember_cuda_text_" + std::to_string(seed_));
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "To be, or not to be, that is the question: whether 'tis nobler in the mind.\n";
  std::ofstream(dir / "input.txt") << text;
  auto options = [&](Device device) {
    train::TextOptions o;
    o.layers = 2;
    o.heads = 2;
    o.dim = 32;
    o.context = 32;
    o.batch_size = 8;
    o.steps = 30;
    o.warmup = 5;
    o.eval_every = 15;
    o.eval_batches = 2;
    o.dropout = 0.1;
    o.data_path = (dir / "input.txt").string();
    o.device = device;
    return o;
  };
  // One run after the other: each Trainer seeds the generator, which dropout then draws from.
  train::TextTask cpu_task(options(kCPU)), gpu_task(options(kGpu));
  const train::RunSummary cpu = train::Trainer(cpu_task, {}).run();
  const train::RunSummary gpu = train::Trainer(gpu_task, {.save_path = (dir / "gpu.safetensors").string()}).run();
  EXPECT_EQ(gpu.last_step, 30);
  EXPECT_NEAR(gpu.final_loss, cpu.final_loss, 1e-4 * std::abs(cpu.final_loss));
  EXPECT_NEAR(gpu.evaluation.at("val_loss"), cpu.evaluation.at("val_loss"), 1e-4 * cpu.evaluation.at("val_loss"));
  EXPECT_EQ(gpu_task.sample(20).size(), 20u);
  // The checkpoint holds host copies: it loads into a CPU model with the GPU model's values.
  const train::Checkpoint checkpoint = train::read_checkpoint((dir / "gpu.safetensors").string(), "train gpt");
  const StateDict gpu_state = gpu_task.language_model().state_dict();
  int compared = 0;
  for (const auto& [name, value] : checkpoint.tensors) {
    if (!name.starts_with("model.")) continue;
    EXPECT_EQ(value.device(), kCPU);
    EXPECT_TRUE(close(gpu_state.at(name.substr(6)).clone(), value.cuda(), 0, seed_)) << name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
  // `ember generate --device cuda`: the checkpoint's GPT, loaded and moved to the GPU, continues a
  // prompt greedily with the CPU's characters.
  const std::string path = (dir / "gpu.safetensors").string();
  const train::LoadedModel on_cpu = train::load_model(path, "generate", {.kinds = {"gpt"}});
  const train::LoadedModel on_gpu = train::load_model(path, "generate", {.kinds = {"gpt"}});
  on_gpu.model->to(kGpu);
  const std::vector<int64_t> prompt = on_cpu.tokenizer->encode("To be");
  const models::SamplingOptions greedy{.temperature = 0};
  EXPECT_EQ(train::generate_text(on_gpu.as<models::LanguageModel>(), prompt, 40, greedy),
            train::generate_text(on_cpu.as<models::LanguageModel>(), prompt, 40, greedy));
  // Under bfloat16 autocast (`--amp bf16`): the same run within the lower precision's rounding.
  auto lower = [&](Device device) {
    train::TextOptions o = options(device);
    o.amp = kBFloat16;
    return o;
  };
  train::TextTask cpu_amp(lower(kCPU)), gpu_amp(lower(kGpu));
  const train::RunSummary cpu_lower = train::Trainer(cpu_amp, {}).run();
  const train::RunSummary gpu_lower = train::Trainer(gpu_amp, {}).run();
  EXPECT_NEAR(gpu_lower.final_loss, cpu_lower.final_loss, 3e-2 * std::abs(cpu_lower.final_loss));
  std::filesystem::remove_all(dir);
}

// The gradients of `loss` (already computed on both devices) at each pair of leaves agree.
void expect_grads_close(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu, double tol, uint64_t seed,
                        const std::string& what) {
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!cpu[i].defined()) continue;
    EXPECT_TRUE(close(gpu[i].grad(), cpu[i].grad(), tol, seed)) << what << ", gradient of input " << i;
  }
}

// conv2d through cuDNN: forward and both gradients against the CPU's, over strides, padding,
// dilation, groups (depthwise too), 1 x 1 images, no bias and an empty batch; conv1d and
// conv_transpose2d run on the same kernels. float32 computes without TF32, so it stays within
// 1e-4 of the CPU (sums of up to a few hundred products in another order); bfloat16 within 1e-2 in
// norm of the CPU's float32 on the same rounded inputs.
TEST_F(CudaKernels, ConvolutionsMatchTheCpu) {
  struct Case {
    int64_t n, c, h, w, out, kh, kw;
    Pair stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  const Case cases[] = {
      {2, 3, 9, 11, 8, 3, 3, 1, 1, 1, 1, true},    {3, 4, 10, 7, 6, 3, 2, {2, 1}, {1, 0}, {1, 2}, 2, true},
      {2, 8, 12, 12, 8, 3, 3, 1, 1, 1, 8, true},   {1, 16, 5, 5, 32, 1, 1, 1, 0, 1, 1, false},
      {2, 5, 17, 13, 7, 5, 5, 2, 2, 1, 1, true},   {2, 3, 1, 1, 4, 1, 1, 1, 0, 1, 1, true},
      {4, 16, 28, 28, 32, 5, 5, 1, 0, 1, 1, true},
  };
  for (const Case& k : cases) {
    for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
      const std::string what = "case " + std::to_string(&k - cases) + " " + std::string(dtype_name(dtype));
      // bfloat16: both devices get the same rounded values; the CPU computes in float32.
      const DType cpu_dtype = dtype == kBFloat16 ? kFloat32 : dtype;
      const double tol = dtype == kFloat64 ? 1e-10 : 1e-4;
      const Tensor x = random({k.n, k.c, k.h, k.w}, dtype), w = random({k.out, k.c / k.groups, k.kh, k.kw}, dtype, 0.3);
      const Tensor b = k.bias ? random({k.out}, dtype) : Tensor();
      // Leaves of their own (x.to(float32) of a float32 x is x itself).
      auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().requires_grad_() : Tensor(); };
      std::vector<Tensor> cpu = {leaf(x.to(cpu_dtype)), leaf(w.to(cpu_dtype)), leaf(b.defined() ? b.to(cpu_dtype) : b)};
      std::vector<Tensor> gpu = {leaf(x.cuda()), leaf(w.cuda()), leaf(b.defined() ? b.cuda() : b)};
      auto run = [&](const std::vector<Tensor>& in) {
        return conv2d(in[0], in[1], k.bias ? std::optional<Tensor>(in[2]) : std::nullopt, k.stride, k.padding,
                      k.dilation, k.groups);
      };
      // bfloat16 as a whole (close_in_norm), the others element by element.
      auto agree = [&](const Tensor& g, const Tensor& c, double scale) {
        return dtype == kBFloat16 ? close_in_norm(g.to(cpu_dtype), c, 1e-2, seed_) : close(g, c, tol * scale, seed_);
      };
      poison(x.numel() * 8);
      const Tensor yc = run(cpu), yg = run(gpu);
      ASSERT_TRUE(agree(yg, yc, 1)) << what;
      const Tensor r = random(yc.shape(), cpu_dtype);
      (yc * r).sum().backward();
      poison(x.numel() * 8);
      (yg.to(cpu_dtype) * r.cuda()).sum().backward();
      for (size_t i = 0; i < cpu.size(); ++i) {
        if (!cpu[i].defined()) continue;
        // A gradient sums over the batch and the image: a wider tolerance in float32.
        EXPECT_TRUE(agree(gpu[i].grad(), cpu[i].grad(), dtype == kFloat32 ? 4 : 1))
            << what << ", gradient of input " << i;
      }
    }
  }
  // An empty batch: an empty result, and zero weight gradients.
  const Tensor w = randn({4, 3, 3, 3}).cuda().requires_grad_();
  const Tensor y = conv2d(empty({0, 3, 8, 8}).cuda(), w, std::nullopt, 1, 1);
  EXPECT_EQ(y.shape(), Shape({0, 4, 8, 8}));
  y.sum().backward();
  EXPECT_TRUE(close(w.grad(), zeros({4, 3, 3, 3}), 0, seed_));
  // conv1d and conv_transpose2d (with output padding) ride on the same kernels.
  const Tensor x1 = randn({3, 4, 20}), w1 = randn({6, 2, 3}), b1 = randn({6});
  EXPECT_TRUE(close(conv1d(x1.cuda(), w1.cuda(), b1.cuda(), 2, 1, 2, 2), conv1d(x1, w1, b1, 2, 1, 2, 2), 1e-4, seed_));
  const Tensor xt = randn({2, 6, 5, 7}), wt = randn({6, 4, 3, 3}), bt = randn({4});
  std::vector<Tensor> tc = {xt.clone().requires_grad_(), wt.clone().requires_grad_(), bt.clone().requires_grad_()};
  std::vector<Tensor> tg = {xt.cuda().requires_grad_(), wt.cuda().requires_grad_(), bt.cuda().requires_grad_()};
  const Tensor ytc = conv_transpose2d(tc[0], tc[1], tc[2], 2, 1, 1);
  const Tensor ytg = conv_transpose2d(tg[0], tg[1], tg[2], 2, 1, 1);
  ASSERT_TRUE(close(ytg, ytc, 1e-4, seed_));
  const Tensor rt = randn(ytc.shape());
  (ytc * rt).sum().backward();
  (ytg * rt.cuda()).sum().backward();
  expect_grads_close(tg, tc, 4e-4, seed_, "conv_transpose2d");
}

// Pooling with the CPU's windows: max pooling's values, its ties and NaNs (through the gradient,
// which goes where the saved index says), average pooling with and without the padding counted,
// ceil_mode, dilation, and adaptive average pooling, in float32 and float64.
TEST_F(CudaKernels, PoolingMatchesTheCpu) {
  using PoolFn = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, PoolFn>> pools = {
      {"max 2x2", [](const Tensor& t) { return max_pool2d(t, 2); }},
      {"max 3x3 s2 p1 ceil", [](const Tensor& t) { return max_pool2d(t, 3, Pair{2}, 1, 1, true); }},
      {"max 3x2 dilation 2",
       [](const Tensor& t) {
         return max_pool2d(t, {3, 2}, Pair{1, 2}, 0, 2);
       }},
      {"avg 3x3 s2 p1", [](const Tensor& t) { return avg_pool2d(t, 3, Pair{2}, 1); }},
      {"avg 3x3 s2 p1 ceil, padding not counted",
       [](const Tensor& t) { return avg_pool2d(t, 3, Pair{2}, 1, true, false); }},
      {"avg 2x4",
       [](const Tensor& t) {
         return avg_pool2d(t, {2, 4});
       }},
      {"adaptive 5x3",
       [](const Tensor& t) {
         return adaptive_avg_pool2d(t, {5, 3});
       }},
      {"adaptive 1x1", [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
  };
  for (DType dtype : {kFloat32, kFloat64}) {
    // Small integers: many ties, which the first maximum wins; one NaN, which wins its windows.
    Tensor x = randint(-3, 4, {2, 3, 11, 9}).to(dtype);
    x.narrow(2, 4, 1).narrow(3, 5, 1).narrow(1, 1, 1).fill_(NAN);
    const Tensor smooth = random({2, 3, 11, 9}, dtype);
    for (const auto& [name, pool] : pools) {
      for (const Tensor& input : {x, smooth}) {
        const Tensor xc = input.clone().requires_grad_(), xg = input.cuda().requires_grad_();
        poison(input.numel() * 8);
        const Tensor yc = pool(xc), yg = pool(xg);
        ASSERT_TRUE(close(yg, yc, tolerance(dtype), seed_)) << name << " " << dtype;
        const Tensor r = random(yc.shape(), dtype);
        (yc * r).sum().backward();
        poison(input.numel() * 8);
        (yg * r.cuda()).sum().backward();
        EXPECT_TRUE(close(xg.grad(), xc.grad(), tolerance(dtype), seed_)) << name << " gradient " << dtype;
      }
    }
  }
  // Unbatched (C, H, W) input, and inference (max pooling saves no indices).
  const Tensor u = randn({4, 6, 6});
  EXPECT_TRUE(close(max_pool2d(u.cuda(), 2), max_pool2d(u, 2), 0, seed_));
}

TEST_F(CudaKernels, ConvolutionAndPoolingGradcheckInFloat64) {
  const TensorOptions f64 = TensorOptions(kFloat64);
  const Tensor x = randn({2, 2, 7, 6}, f64).cuda().requires_grad_();
  const Tensor w = randn({4, 1, 3, 3}, f64).cuda().requires_grad_();
  const Tensor b = randn({4}, f64).cuda().requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor y = conv2d(in[0], in[1], in[2], 1, 1, 1, 2);
        return max_pool2d(y, 2, Pair{1}) + avg_pool2d(y, 2, Pair{1}) * 0.5 +
               adaptive_avg_pool2d(y, {5, 4}).sum({2, 3}, true);
      },
      {x, w, b}));
}

// Layer norm and RMS norm (fused kernels), forward and backward against the CPU's: with and without
// weight and bias, over one and two trailing dims, one row and one column; and GELU's gradient
// (its fused kernel) in both forms.
TEST_F(CudaKernels, NormsAndGeluGradientMatchTheCpu) {
  struct Case {
    Shape shape, normalized;
    bool weight, bias;
  };
  const Case cases[] = {{{37, 768}, {768}, true, true},
                        {{4, 5, 33}, {5, 33}, true, false},
                        {{1, 3000}, {3000}, false, true},
                        {{9, 1}, {1}, true, true},
                        {{64, 7}, {7}, false, false}};
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const Case& k : cases) {
      for (bool rms : {false, true}) {
        const std::string what = std::string(rms ? "rms_norm " : "layer_norm ") + std::string(dtype_name(dtype)) +
                                 " case " + std::to_string(&k - cases);
        const Tensor x = random(k.shape, dtype, 2.0) + 0.5, w = random(k.normalized, dtype),
                     b = random(k.normalized, dtype);
        auto leaf = [](const Tensor& t) { return t.detach().requires_grad_(); };
        std::vector<Tensor> cpu = {leaf(x), leaf(w), leaf(b)}, gpu = {leaf(x.cuda()), leaf(w.cuda()), leaf(b.cuda())};
        auto run = [&](const std::vector<Tensor>& in) {
          const std::optional<Tensor> weight = k.weight ? std::optional<Tensor>(in[1]) : std::nullopt;
          if (rms) return rms_norm(in[0], k.normalized, weight, 1e-5);
          return layer_norm(in[0], k.normalized, weight, k.bias ? std::optional<Tensor>(in[2]) : std::nullopt, 1e-5);
        };
        poison(x.numel() * 8);
        const Tensor yc = run(cpu), yg = run(gpu);
        ASSERT_TRUE(close(yg, yc, tolerance(dtype), seed_)) << what;
        const Tensor r = random(yc.shape(), dtype);
        (yc * r).sum().backward();
        poison(x.numel() * 8);
        (yg * r.cuda()).sum().backward();
        EXPECT_TRUE(close(gpu[0].grad(), cpu[0].grad(), tolerance(dtype) * 10, seed_)) << what << " grad input";
        if (k.weight) {
          EXPECT_TRUE(close(gpu[1].grad(), cpu[1].grad(), tolerance(dtype) * 10, seed_)) << what << " grad weight";
        }
        if (k.bias && !rms) {
          EXPECT_TRUE(close(gpu[2].grad(), cpu[2].grad(), tolerance(dtype) * 10, seed_)) << what << " grad bias";
        }
      }
    }
  }
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    for (std::string_view form : {"none", "tanh"}) {
      const Tensor x = random({1000}, dtype, 3.0);
      const Tensor xc = x.detach().requires_grad_(), xg = x.cuda().requires_grad_();
      const Tensor r = random({1000}, dtype);
      (gelu(xc, form) * r).sum().backward();
      (gelu(xg, form) * r.cuda()).sum().backward();
      EXPECT_TRUE(close(xg.grad(), xc.grad(), tolerance(dtype), seed_)) << "gelu " << form << " " << dtype;
    }
  }
}

// The MNIST CNN (two convolutions, ReLU, max pooling, a linear layer) trained 30 Adam steps on both
// devices: the same losses and parameters within 1e-4.
TEST_F(CudaKernels, CnnTrainingFollowsTheCpu) {
  manual_seed(seed_);
  auto cpu_model = models::mnist_cnn(), gpu_model = models::mnist_cnn();
  gpu_model->load_state_dict(cpu_model->state_dict());
  gpu_model->to(kGpu);
  optim::Adam cpu_opt(cpu_model->parameters(), optim::AdamOptions{.lr = 3e-3});
  optim::Adam gpu_opt(gpu_model->parameters(), optim::AdamOptions{.lr = 3e-3});
  for (int step = 0; step < 30; ++step) {
    const Tensor x = randn({16, 1, 28, 28}), y = randint(0, 10, {16});
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    const Tensor lc = cross_entropy(cpu_model->forward(x), y);
    const Tensor lg = cross_entropy(gpu_model->forward(x.cuda()), y.cuda());
    lc.backward();
    lg.backward();
    cpu_opt.step();
    gpu_opt.step();
    ASSERT_TRUE(close(lg, lc, 1e-4, seed_)) << "step " << step;
  }
  const StateDict cpu_state = cpu_model->state_dict(), gpu_state = gpu_model->state_dict();
  for (const auto& [name, value] : cpu_state) EXPECT_TRUE(close(gpu_state.at(name), value, 1e-4, seed_)) << name;
}

// Autocast on the GPU: the MNIST CNN's 20 Adam steps under bfloat16 autocast, and under float16
// autocast with a GradScaler (whose scale and flag follow the loss to the GPU), against the same
// steps on the CPU: the losses within 3e-2 (the devices round their lower-precision products
// differently), the same scale at the end (no step skipped on either).
TEST_F(CudaKernels, AutocastTrainsOnTheGpuAsOnTheCpu) {
  for (DType lower : {kBFloat16, kFloat16}) {
    manual_seed(seed_);
    auto cpu_model = models::mnist_cnn(), gpu_model = models::mnist_cnn();
    gpu_model->load_state_dict(cpu_model->state_dict());
    gpu_model->to(kGpu);
    optim::Adam cpu_opt(cpu_model->parameters(), optim::AdamOptions{.lr = 1e-3});
    optim::Adam gpu_opt(gpu_model->parameters(), optim::AdamOptions{.lr = 1e-3});
    const bool scaled = lower == kFloat16;
    amp::GradScaler cpu_scaler({.enabled = scaled}), gpu_scaler({.enabled = scaled});
    for (int step = 0; step < 20; ++step) {
      const Tensor x = randn({16, 1, 28, 28}), y = randint(0, 10, {16});
      auto train = [&](nn::Module& model, optim::Optimizer& opt, amp::GradScaler& scaler, const Tensor& in,
                       const Tensor& target) {
        opt.zero_grad();
        Tensor loss;
        {
          const amp::Autocast autocast(lower);
          loss = cross_entropy(model.forward(in), target);
        }
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
        return loss;
      };
      const Tensor lc = train(*cpu_model, cpu_opt, cpu_scaler, x, y);
      const Tensor lg = train(*gpu_model, gpu_opt, gpu_scaler, x.cuda(), y.cuda());
      ASSERT_EQ(lg.device(), kGpu);
      ASSERT_TRUE(close(lg, lc, 3e-2, seed_)) << lower << " step " << step;
    }
    EXPECT_EQ(gpu_scaler.get_scale(), cpu_scaler.get_scale()) << lower;
  }
}

// `ember train diffusion --device cuda`: the U-Net's 8 steps (convolutions, group norm, nearest
// upsampling, the step's draws made on the GPU) follow the CPU's run within 1e-3.
TEST_F(CudaKernels, DiffusionTaskTrainsOnTheGpuAsOnTheCpu) {
  const char* env = std::getenv("EMBER_MNIST_DIR");
  const std::string dir = env != nullptr ? env : "data/mnist";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no MNIST images in " << dir << " (scripts/setup fetches them)";
  auto options = [&](Device device) {
    return train::DiffusionOptions{
        .channels = 8, .timesteps = 100, .steps = 8, .batch_size = 16, .warmup = 2, .data_dir = dir, .device = device};
  };
  {  // One step by hand first, so that a failure names its phase.
    train::DiffusionTask probe(options(kGpu));
    (void)probe.model();
    const std::vector<Tensor> batch = probe.batch(0);
    ASSERT_EQ(batch[0].device(), kGpu);
    Tensor loss;
    ASSERT_NO_THROW(loss = probe.loss()(batch)[0]) << "the forward";
    ASSERT_NO_THROW(loss.backward()) << "the backward";
  }
  train::DiffusionTask cpu_task(options(kCPU)), gpu_task(options(kGpu));
  const train::RunSummary cpu = train::Trainer(cpu_task, {}).run();
  train::RunSummary gpu;
  ASSERT_NO_THROW(gpu = train::Trainer(gpu_task, {}).run()) << "the GPU's run";
  EXPECT_EQ(gpu.last_step, 8);
  EXPECT_NEAR(gpu.final_loss, cpu.final_loss, 1e-3 * std::abs(cpu.final_loss));
  EXPECT_EQ(dynamic_cast<models::UNet&>(*gpu_task.model()).conv_in->weight.device(), kGpu);
}

// `ember sample diffusion --device cuda`: DDIM (eta 0) and DDPM with classifier-free guidance on
// the GPU draw the CPU's digits from the same seed (the noise is Philox's, the same on both), within
// 1e-3; the images come back on the labels' device.
TEST_F(CudaKernels, DiffusionSamplingOnTheGpuDrawsTheCpuDigits) {
  manual_seed(seed_);
  models::UNet cpu_model({.channels = 8, .multipliers = {1, 2}, .groups = 2, .num_classes = 3});
  {
    autograd::NoGradGuard no_grad;
    for (Tensor& p : cpu_model.parameters()) p.copy_(randn(p.shape()) * 0.1);  // the zero-started layers too
  }
  models::UNet gpu_model(cpu_model.config);
  gpu_model.load_state_dict(cpu_model.state_dict());
  gpu_model.to(kGpu);
  const models::DiffusionSchedule schedule(50, models::NoiseSchedule::kCosine);
  const Tensor labels = from_vector(std::vector<int64_t>{0, 1, 2, 1});
  for (auto sampler : {models::DiffusionSampler::kDdim, models::DiffusionSampler::kDdpm}) {
    const models::SampleOptions options{.sampler = sampler, .steps = 10, .guidance = 2.0, .eta = 0.0};
    manual_seed(seed_ + 1);
    const Tensor cpu = models::sample(cpu_model, schedule, labels, 8, 8, options);
    manual_seed(seed_ + 1);
    Tensor gpu;
    ASSERT_NO_THROW(gpu = models::sample(gpu_model, schedule, labels, 8, 8, options)) << "the GPU's sampling";
    ASSERT_EQ(gpu.device(), kCPU);
    EXPECT_TRUE(close(gpu.to(kGpu), cpu, 1e-3, seed_)) << models::diffusion_sampler_name(sampler);
  }
}

// `ember train mnist --device cuda`: the CNN's 10 epochs on the offline MNIST images (data/mnist,
// from scripts/setup; EMBER_MNIST_DIR elsewhere) reach the CPU run's test accuracy, at least 97%,
// in float32 and under float16 autocast.
TEST_F(CudaKernels, MnistCnnReachesTheCpuAccuracy) {
  const char* env = std::getenv("EMBER_MNIST_DIR");
  const std::string dir = env != nullptr ? env : "data/mnist";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no MNIST images in " << dir << " (scripts/setup fetches them)";
  auto run = [&](Device device) {
    train::MnistTask task({.data_dir = dir, .device = device});
    return train::Trainer(task, {}).run().evaluation.at("test_accuracy");
  };
  const auto start = std::chrono::steady_clock::now();
  const double gpu = run(kGpu);
  const double gpu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = run(kCPU);
  // float16 autocast with loss scaling (the training step's GradScaler) on the GPU.
  train::MnistTask f16_task({.data_dir = dir, .amp = kFloat16, .device = kGpu});
  const double f16 = train::Trainer(f16_task, {}).run().evaluation.at("test_accuracy");
  std::printf(
      "MNIST CNN, 10 epochs: test accuracy %.2f%% on the GPU (%.1f s), %.2f%% on the CPU, %.2f%% on the GPU "
      "under float16 autocast\n",
      100 * gpu, gpu_seconds, 100 * cpu, 100 * f16);
  EXPECT_GE(f16, 0.97);
  RecordProperty("gpu_accuracy", std::to_string(gpu));
  RecordProperty("cpu_accuracy", std::to_string(cpu));
  EXPECT_GE(gpu, 0.97);
  EXPECT_NEAR(gpu, cpu, 0.01);
}

}  // namespace
}  // namespace ember
