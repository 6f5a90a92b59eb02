// The CUDA kernels' launch functions, as plain C++: what kernels.cpp (the registry entries, which
// read ember's KernelCall) calls and the .cu files define. The .cu files include this header and
// CUDA's alone, so nvcc never parses ember's headers; every launch queues work on `stream` and
// returns without waiting. Layouts are in elements, at most kMaxLaunchDims dims after merging.
#pragma once

#include <cstdint>

namespace ember::cuda::launch {

inline constexpr int kMaxLaunchDims = 8;
inline constexpr int kMaxLaunchOperands = 4;

// Element types as the kernels see them (ember's DType maps onto these in kernels.cpp).
enum class Type : uint8_t { kF32, kF64, kF16, kBF16, kI64, kI32, kBool };

// The elementwise ops. Unary ops compute in the input's type (float for the 16-bit floats); the
// predicates write bool.
enum class Unary : uint8_t {
  kNeg,
  kAbs,
  kSign,
  kExp,
  kLog,
  kLog1p,
  kExpm1,
  kErf,
  kSqrt,
  kRsqrt,
  kSquare,
  kSin,
  kCos,
  kTanh,
  kSigmoid,
  kRelu,
  kSilu,
  kGeluErf,
  kGeluTanh,
  kLogicalNot,
  kIsNan,
  kIsInf,
};
enum class Binary : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMinimum,
  kMaximum,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLogicalAnd,
  kLogicalOr,
  kThresholdBackward,  // a * (b > 0): ReLU's gradient from its output
  kGeluGradErf,        // a * GELU'(b): GELU's gradient at its input b, the erf form
  kGeluGradTanh,       // the same for the tanh form
};
enum class Reduce : uint8_t { kSum, kProd, kAmax, kAmin, kArgmax, kArgmin, kAll, kAny };

// The shape every operand is walked in (operand 0 is the output), with each operand's strides; a
// broadcast dim has stride 0.
struct Layout {
  int ndim = 0;
  int operands = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxLaunchDims] = {};
  int64_t strides[kMaxLaunchOperands][kMaxLaunchDims] = {};
};

// unary and binary return false, launching nothing, for a type the op does not take (integers
// for the float-only ops, bool for neg, sub and threshold_backward).
bool unary(Unary op, Type type, void* out, const void* in, const Layout& layout, void* stream);
bool binary(Binary op, Type type, void* out, const void* a, const void* b, const Layout& layout, void* stream);
// out = cond ? a : b (cond is bool; a, b and out of `type`).
void where(Type type, void* out, const bool* cond, const void* a, const void* b, const Layout& layout, void* stream);
// out = in converted from in_type to out_type (a strided copy when they are the same).
void copy(Type out_type, Type in_type, void* out, const void* in, const Layout& layout, void* stream);
// Every element of out = value (given as a double and as an int64, whichever the type takes).
void fill(Type type, void* out, double value, int64_t int_value, const Layout& layout, void* stream);

// out[o] = op over the reduced elements of output o. The input is walked by kept dims (the output
// is contiguous over them) and reduced dims. Sum/Prod of float16/bfloat16 accumulate in float and
// write out_type (float32 or the input's type); of integers, int64. Argmax/argmin write int64.
// `workspace` holds partial results when an output is split over several blocks: `workspace_bytes`
// says how much (reduce_workspace_bytes), and it may be null when that is 0.
struct ReduceShape {
  int kept_ndim = 0;
  int64_t kept_sizes[kMaxLaunchDims] = {};
  int64_t kept_strides[kMaxLaunchDims] = {};
  int reduced_ndim = 0;
  int64_t reduced_sizes[kMaxLaunchDims] = {};
  int64_t reduced_strides[kMaxLaunchDims] = {};
  int64_t num_outputs = 1;
  int64_t reduce_size = 1;
};
int64_t reduce_workspace_bytes(Reduce op, Type in_type, const ReduceShape& shape);
bool reduce(Reduce op, Type in_type, Type out_type, void* out, const void* in, const ReduceShape& shape,
            void* workspace, void* stream);

// reduce, softmax, softmax_backward and matmul_epilogue return false, launching nothing, for
// types they do not take (softmax and the epilogue: floats only).
// Softmax or log-softmax over the middle dim of a contiguous (outer, size, inner) float tensor.
bool softmax(bool log, Type type, void* out, const void* in, int64_t outer, int64_t size, int64_t inner, void* stream);
// Their gradients over the last dim of contiguous (rows, n) buffers, from the forward's output y:
//   softmax      dx = y * (dy - sum(dy * y));   log_softmax  dx = dy - exp(y) * sum(dy)
bool softmax_backward(bool log, Type type, void* dx, const void* dy, const void* y, int64_t rows, int64_t n,
                      void* stream);

// The matrix-product epilogue kernels.cpp applies after cuBLASLt where its epilogues do not fit:
// c[i, j] = act(c[i, j] + bias[j * bias_stride]) + residual[i * r_row + j * r_col], over a
// (rows, cols) c with row stride ldc. act: 0 none, 1 ReLU, 2 GELU (erf), 3 GELU (tanh), 4 SiLU.
bool matmul_epilogue(Type type, void* c, int64_t rows, int64_t cols, int64_t ldc, const void* bias, int64_t bias_stride,
                     int activation, const void* residual, int64_t r_row, int64_t r_col, void* stream);

// Layer norm (center) and RMS norm over the rows of contiguous (rows, cols) float32/float64
// buffers, as the CPU's kernels (kernels/cpu/norm.cpp): y = (x - mean) * rstd * weight + bias with
// rstd = 1 / sqrt(mean((x - mean)^2) + eps) (RMS norm: mean 0, no bias). weight and bias may be null;
// mean (layer norm) and rstd (rows each) are written for the backward.
bool row_norm_forward(Type type, bool center, int64_t rows, int64_t cols, double eps, const void* x, const void* weight,
                      const void* bias, void* y, void* mean, void* rstd, void* stream);
// The gradients: grad_in (or null) = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) per row, with
// gw = grad_out * weight and xhat = (x - mean) * rstd (RMS norm: without the mean(gw) term);
// grad_weight = the column sums of grad_out * xhat, grad_bias = those of grad_out (either may be
// null). `workspace` holds row_norm_workspace_bytes bytes of partial column sums.
int64_t row_norm_workspace_bytes(Type type, int64_t rows, int64_t cols);
bool row_norm_backward(Type type, bool center, int64_t rows, int64_t cols, const void* x, const void* grad_out,
                       const void* mean, const void* rstd, const void* weight, void* grad_in, void* grad_weight,
                       void* grad_bias, void* workspace, void* stream);

// Cross-entropy over class scores laid out (outer, classes, inner), contiguous, float32/float64:
// per position p = (o, i), loss[p] and lse[p] (the log-sum-exp of its scores), with label
// smoothing and ignore_index as on the CPU. `bad_target` (one device int64, set to INT64_MAX
// before) receives the smallest position whose target is neither a class nor ignore_index.
struct ClassLoss {
  int64_t outer = 0, classes = 0, inner = 1;
  const int64_t* target = nullptr;
  int64_t ignore_index = -100;
  double label_smoothing = 0;
};
bool cross_entropy_forward(Type type, const ClassLoss& a, const void* scores, void* loss, void* lse,
                           int64_t* bad_target, void* stream);
// grad = scale[p * scale_stride] * (softmax(scores) - smoothed one-hot(target)) per position.
bool cross_entropy_backward(Type type, const ClassLoss& a, const void* scores, const void* lse, const void* scale,
                            int64_t scale_stride, void* grad, void* stream);

// The optimizers' updates over n contiguous elements, in place, with the CPU kernels' formulas
// (SgdAttrs and AdamAttrs in ember/attrs.h). Absent state: null.
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false;
};
bool sgd_step(Type type, const SgdStep& s, void* param, const void* grad, void* momentum_buffer, int64_t n,
              void* stream);
struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0, step_size = 0, bias_correction2_sqrt = 0;
  bool decoupled_weight_decay = false;
};
bool adam_step(Type type, const AdamStep& s, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, int64_t n, void* stream);

// Random draws from Philox4x32-10 with the CPU kernels' mapping (src/kernels/cpu/random.cpp):
// element i takes half of counter block first_block + i / 2 of the key from `seed`, so a draw
// gives the CPU's numbers (randn's Box-Muller in double precision may differ in the last bit of a
// double before the rounding to the output type). Contiguous outputs.
enum class Draw : uint8_t { kUniform, kNormal };
bool random_float(Draw draw, Type type, void* out, int64_t n, uint64_t seed, uint64_t first_block, void* stream);
bool random_int(int64_t* out, int64_t n, int64_t low, int64_t high, uint64_t seed, uint64_t first_block, void* stream);
// y = x * mask with mask = 1 / (1 - p) where the uniform float32 draw is below 1 - p, else 0.
bool dropout(Type type, void* y, void* mask, const void* x, int64_t n, double p, uint64_t seed, uint64_t first_block,
             void* stream);
// out[i] = start + i * step (integers computed in int64 when `integral`), n contiguous elements.
bool arange(Type type, void* out, int64_t n, double start, double step, int64_t int_start, int64_t int_step,
            bool integral, void* stream);

// Indexing. A bad index is reported in `bad` (one device int64 set to INT64_MAX before): the
// smallest flat position of the index operand holding one, which the caller reads back.
// index_select: out (outer, count, row_bytes) = src (outer, size, row_bytes) rows picked by index.
bool index_select(void* out, const void* src, int64_t outer, int64_t size, int64_t row_bytes, const void* index,
                  bool index_int64, int64_t count, int64_t index_stride, int64_t* bad, void* stream);
// gather (scatter = false): out[e] = data[e with dim d replaced by index[e]] over the layout of the
// index's shape, whose operands are (out, data, index) with data's stride along d set to 0;
// scatter_add (scatter = true): out[e with dim d replaced by index[e]] += data[e], the layout's
// operands (out, data, index) with out's stride along d set to 0. `dim_stride` is the stride along
// d of the operand indexed (data for gather, out for scatter_add) and `bound` its size.
bool gather_scatter(bool scatter, Type type, void* out, const void* data, const void* index, bool index_int64,
                    const Layout& layout, int64_t dim_stride, int64_t bound, int64_t* bad, void* stream);

// 2-D pooling over contiguous (planes, in_height, in_width) float32/float64 buffers, with the CPU
// kernels' windows, ties, NaNs and divisors (kernels/cpu/pool.h): window (oh, ow) of max and average
// pooling covers rows oh * stride_h - pad_h + i * dilation_h for i in [0, kernel_h) inside the
// input (columns alike); adaptive pooling covers rows [floor(oh * H / OH), ceil((oh + 1) * H / OH)).
// Max pooling writes where each maximum is (h * in_width + w within the plane) when `indices` is
// not null; its backward routes each output's gradient there.
enum class Pool : uint8_t { kMax, kAvg, kAdaptiveAvg };
struct Pool2d {
  Pool kind = Pool::kMax;
  int64_t planes = 0, in_height = 1, in_width = 1, out_height = 1, out_width = 1;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  bool count_include_pad = true;
};
bool pool2d_forward(Type type, const Pool2d& p, void* out, const void* in, int64_t* indices, void* stream);
// grad_in is overwritten: max pooling reads `indices`, the averages spread each gradient evenly.
bool pool2d_backward(Type type, const Pool2d& p, void* grad_in, const void* grad_out, const int64_t* indices,
                     void* stream);

// The last launch's error, as "name: description", or empty when there was none.
const char* last_error();

}  // namespace ember::cuda::launch
