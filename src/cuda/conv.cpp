// 2-D convolution on CUDA through cuDNN: the forward and both gradients of conv2d (and so of conv1d
// and conv_transpose2d, which run on the same three primitives). cuDNN is loaded with dlopen at the
// first convolution, as cuBLASLt is at the first product: ember itself loads without it, and a
// machine with a GPU but no libcudnn gets an ember::Error saying what to install.
//
// float32 computes with FMA instructions only (CUDNN_FMA_MATH: no TF32, so results stay within
// float32's rounding of the CPU's), float64 in float64, bfloat16 on the tensor cores with float32
// accumulation. Bias, ReLU and residual are applied by ember's elementwise kernels after the
// convolution.
//
// Note [choosing convolution algorithms]: the algorithm of each shape is the first of cuDNN's
// heuristics (as PyTorch without cudnn.benchmark) that ember takes, found at the shape's first call
// and kept. Only deterministic algorithms are taken (no atomics adding in a varying order), so a
// shape gives the same bits on every run: under compute-sanitizer, whose scheduling differs, the
// MNIST CNN's weights drifted 2.5% from the CPU's over 30 Adam steps with them (run 16). float32 takes only
// the algorithms that sum the products themselves, on FMA units: no TF32, and no FFT or Winograd,
// whose transforms round on their own (on an H200 one of them put the MNIST CNN's loss 1.6e-4 off
// the CPU's after three Adam steps; docs/cuda.md, run 11). Timing every algorithm at the first call
// (cudnnFind, PyTorch's cudnn.benchmark) made the ResNet rows slower there, not faster (bfloat16
// 0.16 -> 0.31 ms, run 11; why was not established).
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "ember/error.h"

#if defined(EMBER_WITH_CUDA) && __has_include(<cudnn.h>)
#include <cudnn.h>

namespace ember::cuda {
namespace {

// The cuDNN entry points ember uses, loaded once.
struct Cudnn {
  void* library = nullptr;
  std::string error;  // why it could not be loaded
  // clang-format off
#define EMBER_CUDNN_FUNCTIONS(X) \
  X(cudnnCreate) \
  X(cudnnGetErrorString) \
  X(cudnnSetStream) \
  X(cudnnCreateTensorDescriptor) \
  X(cudnnSetTensorNdDescriptor) \
  X(cudnnDestroyTensorDescriptor) \
  X(cudnnCreateFilterDescriptor) \
  X(cudnnSetFilter4dDescriptor) \
  X(cudnnDestroyFilterDescriptor) \
  X(cudnnCreateConvolutionDescriptor) \
  X(cudnnSetConvolution2dDescriptor) \
  X(cudnnSetConvolutionGroupCount) \
  X(cudnnSetConvolutionMathType) \
  X(cudnnDestroyConvolutionDescriptor) \
  X(cudnnGetConvolutionForwardAlgorithm_v7) \
  X(cudnnGetConvolutionForwardWorkspaceSize) \
  X(cudnnConvolutionForward) \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize) \
  X(cudnnConvolutionBackwardData) \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize) \
  X(cudnnConvolutionBackwardFilter)
  // clang-format on
#define EMBER_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  EMBER_CUDNN_FUNCTIONS(EMBER_CUDNN_MEMBER)
#undef EMBER_CUDNN_MEMBER
  cudnnHandle_t handle = nullptr;
  // The algorithm and math type chosen for each problem (see problem_key), so the heuristics run
  // once per shape.
  struct Choice {
    int algorithm;
    cudnnMathType_t math;
  };
  std::map<std::vector<int64_t>, Choice> choices;
  std::mutex mutex;  // held around every call: the handle is shared
};

Cudnn& cudnn() {
  static Cudnn* dnn = [] {
    auto* d = new Cudnn();  // never destroyed: convolutions may run during static destruction
    const std::string soname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    d->library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (d->library == nullptr) {
      const char* why = dlerror();
      d->error = "cannot load " + soname + " (" + (why != nullptr ? why : "unknown error") + "): install cuDNN " +
                 std::to_string(CUDNN_MAJOR) +
                 " (e.g. the nvidia-cudnn-cu13 wheel) or add the folder holding it to LD_LIBRARY_PATH";
      return d;
    }
#define EMBER_CUDNN_LOAD(name)                                             \
  d->name = reinterpret_cast<decltype(&::name)>(dlsym(d->library, #name)); \
  if (d->name == nullptr && d->error.empty()) d->error = soname + " has no " #name;
    EMBER_CUDNN_FUNCTIONS(EMBER_CUDNN_LOAD)
#undef EMBER_CUDNN_LOAD
    if (d->error.empty()) {
      const cudnnStatus_t status = d->cudnnCreate(&d->handle);
      if (status != CUDNN_STATUS_SUCCESS)
        d->error = std::string("cudnnCreate failed: ") + d->cudnnGetErrorString(status);
    }
    if (d->error.empty()) d->cudnnSetStream(d->handle, nullptr);  // the default stream, as every ember kernel
    return d;
  }();
  return *dnn;
}

void check(const Cudnn& d, cudnnStatus_t status, const KernelCall& c, const char* what) {
  EMBER_CHECK(status == CUDNN_STATUS_SUCCESS, "[", c.name(), "] cuDNN's ", what,
              " failed: ", d.cudnnGetErrorString(status));
}

cudnnDataType_t data_type(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return CUDNN_DATA_DOUBLE;
    case kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case kFloat16:
      return CUDNN_DATA_HALF;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

int as_int(int64_t v, const KernelCall& c) {
  EMBER_CHECK(v >= 0 && v <= INT32_MAX, "[", c.name(), "] a size or stride of ", v,
              " is past what cuDNN's descriptors hold (2^31 - 1)");
  return static_cast<int>(v);
}

// The descriptors of one convolution: the image x (N, C, H, W), the filter (C_out, C / groups, kH,
// kW), the result y (N, C_out, OH, OW) and the convolution; destroyed with the object.
class Problem {
 public:
  Problem(Cudnn& d, const KernelCall& c, const Operand& x, const Operand& w, const Operand& y)
      : d_(d), call_(c), dtype_(x.dtype) {
    check(d_, d_.cudnnCreateTensorDescriptor(&x_), c, "cudnnCreateTensorDescriptor");
    check(d_, d_.cudnnCreateTensorDescriptor(&y_), c, "cudnnCreateTensorDescriptor");
    check(d_, d_.cudnnCreateFilterDescriptor(&w_), c, "cudnnCreateFilterDescriptor");
    check(d_, d_.cudnnCreateConvolutionDescriptor(&conv_), c, "cudnnCreateConvolutionDescriptor");
    set_tensor(x_, x);
    set_tensor(y_, y);
    EMBER_CHECK(w.is_contiguous(), "[", c.name(), "] the CUDA kernel takes a contiguous weight");
    check(d_,
          d_.cudnnSetFilter4dDescriptor(w_, data_type(dtype_), CUDNN_TENSOR_NCHW, as_int(w.size(0), c),
                                        as_int(w.size(1), c), as_int(w.size(2), c), as_int(w.size(3), c)),
          c, "cudnnSetFilter4dDescriptor");
    const Conv2dAttrs& a = c.get<Conv2dAttrs>();
    const cudnnDataType_t compute = dtype_ == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    check(d_,
          d_.cudnnSetConvolution2dDescriptor(conv_, as_int(a.padding.h, c), as_int(a.padding.w, c),
                                             as_int(a.stride.h, c), as_int(a.stride.w, c), as_int(a.dilation.h, c),
                                             as_int(a.dilation.w, c), CUDNN_CROSS_CORRELATION, compute),
          c, "cudnnSetConvolution2dDescriptor");
    check(d_, d_.cudnnSetConvolutionGroupCount(conv_, as_int(a.groups, c)), c, "cudnnSetConvolutionGroupCount");
    set_math(wanted_math());
    // The key of the algorithm cache: the direction, dtype, the three operands' sizes and strides
    // and the attributes.
    key_ = {static_cast<int64_t>(c.kind),
            static_cast<int64_t>(dtype_),
            a.padding.h,
            a.padding.w,
            a.stride.h,
            a.stride.w,
            a.dilation.h,
            a.dilation.w,
            a.groups};
    for (const Operand* o : {&x, &w, &y}) {
      for (int k = 0; k < 4; ++k) {
        key_.push_back(o->size(k));
        key_.push_back(o->stride(k));
      }
    }
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;
  ~Problem() {
    if (conv_ != nullptr) d_.cudnnDestroyConvolutionDescriptor(conv_);
    if (w_ != nullptr) d_.cudnnDestroyFilterDescriptor(w_);
    if (y_ != nullptr) d_.cudnnDestroyTensorDescriptor(y_);
    if (x_ != nullptr) d_.cudnnDestroyTensorDescriptor(x_);
  }

  // float32 on FMA units only; bfloat16 and float16 on the tensor cores.
  cudnnMathType_t wanted_math() const {
    if (dtype_ == kBFloat16 || dtype_ == kFloat16) return CUDNN_TENSOR_OP_MATH;
    return dtype_ == kFloat32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  }
  void set_math(cudnnMathType_t math) {
    check(d_, d_.cudnnSetConvolutionMathType(conv_, math), call_, "cudnnSetConvolutionMathType");
  }

  // The first of the heuristics' `perf` results (already ranked) that succeeds and is deterministic;
  // in float32 the first that sums products on FMA units too (Note [choosing convolution
  // algorithms]). Where none is, the first that succeeds.
  template <class Perf>
  Cudnn::Choice choose(const Perf* perf, int count) {
    for (bool strict : {true, false}) {
      for (int i = 0; i < count; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        const bool exact = dtype_ != kFloat32 || (perf[i].mathType == CUDNN_FMA_MATH && !transforms(perf[i].algo));
        if (strict && (!exact || perf[i].determinism != CUDNN_DETERMINISTIC)) continue;
        return {static_cast<int>(perf[i].algo), perf[i].mathType};
      }
    }
    EMBER_FAIL("[", call_.name(), "] cuDNN has no algorithm for this ", dtype_, " convolution");
  }
  // The algorithms that compute in a transformed domain (FFT, Winograd), with their own rounding.
  static bool transforms(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  }
  static bool transforms(cudnnConvolutionBwdDataAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  }
  static bool transforms(cudnnConvolutionBwdFilterAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  const Cudnn::Choice* cached() const {
    auto found = d_.choices.find(key_);
    return found == d_.choices.end() ? nullptr : &found->second;
  }
  const Cudnn::Choice& remember(const Cudnn::Choice& choice) { return d_.choices[key_] = choice; }

  cudnnTensorDescriptor_t x() const { return x_; }
  cudnnTensorDescriptor_t y() const { return y_; }
  cudnnFilterDescriptor_t w() const { return w_; }
  cudnnConvolutionDescriptor_t conv() const { return conv_; }
  DType dtype() const { return dtype_; }

 private:
  void set_tensor(cudnnTensorDescriptor_t desc, const Operand& o) {
    // A size-1 dim takes the stride a packed tensor would have there (any stride walks it).
    int sizes[4], strides[4];
    for (int k = 3; k >= 0; --k) {
      sizes[k] = as_int(o.size(k), call_);
      const int64_t packed = k == 3 ? 1 : int64_t{sizes[k + 1]} * strides[k + 1];
      strides[k] = as_int(o.size(k) == 1 ? packed : o.stride(k), call_);
    }
    check(d_, d_.cudnnSetTensorNdDescriptor(desc, data_type(o.dtype), 4, sizes, strides), call_,
          "cudnnSetTensorNdDescriptor");
  }

  Cudnn& d_;
  const KernelCall& call_;
  DType dtype_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  std::vector<int64_t> key_;
};

// The algorithm for `p`: on the first call for its shape, the first of cuDNN's heuristics
// (heuristic(perf, &count)) that Problem::choose takes, then the same one for every call of the shape.
template <class Perf, class Heuristic>
const Cudnn::Choice& choice_for(Problem& p, const Heuristic& heuristic) {
  if (const Cudnn::Choice* cached = p.cached()) return *cached;
  Perf perf[16];
  int count = 0;
  heuristic(perf, &count);
  return p.remember(p.choose(perf, count));
}

// cuDNN's alpha = 1 and beta = 0, as the scaling type of `dtype` (double for float64, else float).
struct Scales {
  explicit Scales(DType dtype) : wide(dtype == kFloat64) {}
  const void* one() const { return wide ? static_cast<const void*>(&one64) : &one32; }
  const void* zero() const { return wide ? static_cast<const void*>(&zero64) : &zero32; }
  bool wide;
  float one32 = 1, zero32 = 0;
  double one64 = 1, zero64 = 0;
};

// A workspace of `bytes` on `device`, from the caching allocator (held until the kernels queued on
// the stream have it; the allocator is stream-ordered).
std::shared_ptr<StorageImpl> workspace(size_t bytes, Device device, const KernelCall& c) {
  if (bytes == 0) return nullptr;
  return allocate_storage(static_cast<int64_t>(bytes), device, c.name());
}

Cudnn& loaded(const KernelCall& c) {
  Cudnn& d = cudnn();
  EMBER_CHECK(d.error.empty(), "[", c.name(), "] ", d.error);
  return d;
}

// out = 0, over a contiguous or strided operand.
void zero(const KernelCall& c, const Operand& out) {
  launch::fill(launch_type(out.dtype, c.name()), out.data, 0.0, 0, layout_of({&out}), nullptr);
  check_launch(c, true, out.dtype);
}

// inputs: x (N, C, H, W), weight, bias (C_out, or undefined), residual (y's shape, optional);
// outputs: y. Attributes: Conv2dAttrs (activation none or ReLU).
void conv2d_kernel(const KernelCall& c) {
  const Operand &x = c.inputs[0], &w = c.inputs[1], &bias = c.inputs[2], &y = c.outputs[0];
  const Operand* residual = c.inputs.size() > 3 && c.inputs[3].defined() ? &c.inputs[3] : nullptr;
  if (y.numel() == 0) return;
  const Conv2dAttrs& attrs = c.get<Conv2dAttrs>();
  EMBER_CHECK(attrs.activation == Activation::kNone || attrs.activation == Activation::kRelu, "[", c.name(),
              "] internal error: only a ReLU goes into the epilogue");
  EMBER_CHECK(attrs.max_pool == 1, "[", c.name(), "] internal error: the CUDA kernel takes no max pooling");
  Cudnn& d = loaded(c);
  {
    const std::lock_guard<std::mutex> lock(d.mutex);
    Problem p(d, c, x, w, y);
    const Cudnn::Choice* choice = &choice_for<cudnnConvolutionFwdAlgoPerf_t>(p, [&](auto* perf, int* count) {
      check(d,
            d.cudnnGetConvolutionForwardAlgorithm_v7(d.handle, p.x(), p.w(), p.conv(), p.y(),
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, count, perf),
            c, "cudnnGetConvolutionForwardAlgorithm_v7");
    });
    p.set_math(choice->math);
    const auto algorithm = static_cast<cudnnConvolutionFwdAlgo_t>(choice->algorithm);
    size_t bytes = 0;
    check(d, d.cudnnGetConvolutionForwardWorkspaceSize(d.handle, p.x(), p.w(), p.conv(), p.y(), algorithm, &bytes), c,
          "cudnnGetConvolutionForwardWorkspaceSize");
    const auto space = workspace(bytes, y.device, c);
    const Scales s(p.dtype());
    check(d,
          d.cudnnConvolutionForward(d.handle, s.one(), p.x(), x.data, p.w(), w.data, p.conv(), algorithm,
                                    space ? space->data() : nullptr, bytes, s.zero(), p.y(), y.data),
          c, "cudnnConvolutionForward");
  }
  const launch::Type type = launch_type(y.dtype, c.name());
  if (bias.defined()) {
    // The bias along dim 1, broadcast over the others.
    const Strides strides{0, bias.stride(0), 0, 0};
    const Operand along{bias.data, bias.dtype, bias.device, y.shape, &strides};
    check_launch(
        c, launch::binary(launch::Binary::kAdd, type, y.data, y.data, bias.data, layout_of({&y, &y, &along}), nullptr),
        y.dtype);
  }
  if (residual != nullptr) {
    check_launch(c,
                 launch::binary(launch::Binary::kAdd, type, y.data, y.data, residual->data,
                                layout_of({&y, &y, residual}), nullptr),
                 y.dtype);
  }
  if (attrs.activation == Activation::kRelu) {
    check_launch(c, launch::unary(launch::Unary::kRelu, type, y.data, y.data, layout_of({&y, &y}), nullptr), y.dtype);
  }
}

// inputs: grad_out (N, C_out, OH, OW), weight; outputs: grad_input (N, C, H, W).
void conv2d_input_grad_kernel(const KernelCall& c) {
  const Operand &dy = c.inputs[0], &w = c.inputs[1], &dx = c.outputs[0];
  if (dx.numel() == 0) return;
  if (dy.numel() == 0) return zero(c, dx);
  Cudnn& d = loaded(c);
  const std::lock_guard<std::mutex> lock(d.mutex);
  Problem p(d, c, dx, w, dy);
  const Cudnn::Choice* choice = &choice_for<cudnnConvolutionBwdDataAlgoPerf_t>(p, [&](auto* perf, int* count) {
    check(d,
          d.cudnnGetConvolutionBackwardDataAlgorithm_v7(d.handle, p.w(), p.y(), p.conv(), p.x(),
                                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, count, perf),
          c, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  });
  p.set_math(choice->math);
  const auto algorithm = static_cast<cudnnConvolutionBwdDataAlgo_t>(choice->algorithm);
  size_t bytes = 0;
  check(d, d.cudnnGetConvolutionBackwardDataWorkspaceSize(d.handle, p.w(), p.y(), p.conv(), p.x(), algorithm, &bytes),
        c, "cudnnGetConvolutionBackwardDataWorkspaceSize");
  const auto space = workspace(bytes, dx.device, c);
  const Scales s(p.dtype());
  check(d,
        d.cudnnConvolutionBackwardData(d.handle, s.one(), p.w(), w.data, p.y(), dy.data, p.conv(), algorithm,
                                       space ? space->data() : nullptr, bytes, s.zero(), p.x(), dx.data),
        c, "cudnnConvolutionBackwardData");
}

// inputs: grad_out (N, C_out, OH, OW), x (N, C, H, W); outputs: grad_weight (contiguous).
void conv2d_weight_grad_kernel(const KernelCall& c) {
  const Operand &dy = c.inputs[0], &x = c.inputs[1], &dw = c.outputs[0];
  if (dw.numel() == 0) return;
  if (dy.numel() == 0 || x.numel() == 0) return zero(c, dw);
  Cudnn& d = loaded(c);
  const std::lock_guard<std::mutex> lock(d.mutex);
  Problem p(d, c, x, dw, dy);
  const Cudnn::Choice* choice = &choice_for<cudnnConvolutionBwdFilterAlgoPerf_t>(p, [&](auto* perf, int* count) {
    check(d,
          d.cudnnGetConvolutionBackwardFilterAlgorithm_v7(d.handle, p.x(), p.y(), p.conv(), p.w(),
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, count, perf),
          c, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
  });
  p.set_math(choice->math);
  const auto algorithm = static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice->algorithm);
  size_t bytes = 0;
  check(d, d.cudnnGetConvolutionBackwardFilterWorkspaceSize(d.handle, p.x(), p.y(), p.conv(), p.w(), algorithm, &bytes),
        c, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
  const auto space = workspace(bytes, dw.device, c);
  const Scales s(p.dtype());
  check(d,
        d.cudnnConvolutionBackwardFilter(d.handle, s.one(), p.x(), x.data, p.y(), dy.data, p.conv(), algorithm,
                                         space ? space->data() : nullptr, bytes, s.zero(), p.w(), dw.data),
        c, "cudnnConvolutionBackwardFilter");
}

}  // namespace

void register_conv_kernels(KernelTable& table) {
  constexpr DeviceType kCuda = DeviceType::kCUDA;
  const DTypeSet dtypes{kFloat32, kFloat64, kBFloat16};
  table.add(OpKind::kConv2d, kCuda, conv2d_kernel, dtypes);
  table.add(OpKind::kConv2dInputGrad, kCuda, conv2d_input_grad_kernel, dtypes);
  table.add(OpKind::kConv2dWeightGrad, kCuda, conv2d_weight_grad_kernel, dtypes);
}

}  // namespace ember::cuda

#elif defined(EMBER_WITH_CUDA)

namespace ember::cuda {
// Built without cuDNN's header: a convolution on a GPU is the clear "not implemented on cuda" error.
void register_conv_kernels(KernelTable& /*table*/) {}
}  // namespace ember::cuda

#endif
