// conv2d against a naive reference on shapes whose column matrix is cut into several bands of
// output rows (Note [forward bands] in kernels/cpu/conv.cpp), with padding, stride, dilation and
// groups; conv_transpose2d and its gradients against a scatter reference on each kernel path; and
// ReLU's fused backward (kernels/cpu/threshold.h) against PyTorch's rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/functional.h"
#include "golden.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_nchwc.h"
#include "ops/dispatch.h"
#include "test_util.h"

namespace {

namespace F = ember::nn::functional;
using ember::Tensor;

// out[n, o, oh, ow] = bias[o] + sum over the group's channels and taps, in float64.
Tensor reference_conv(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t pad,
                      int64_t dilation, int64_t groups) {
  const Tensor x = input.to(ember::kFloat64).contiguous(), w = weight.to(ember::kFloat64).contiguous();
  const Tensor b = bias.to(ember::kFloat64).contiguous();
  const int64_t batch = x.size(0), in_c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t out_c = w.size(0), kh = w.size(2), kw = w.size(3), per_group = in_c / groups;
  const int64_t oh_size = (h + 2 * pad - dilation * (kh - 1) - 1) / stride + 1;
  const int64_t ow_size = (wd + 2 * pad - dilation * (kw - 1) - 1) / stride + 1;
  Tensor out = ember::zeros({batch, out_c, oh_size, ow_size}, ember::kFloat64);
  const double* xp = x.data_ptr<double>();
  const double* wp = w.data_ptr<double>();
  const double* bp = b.data_ptr<double>();
  double* op = out.data_ptr<double>();
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t o = 0; o < out_c; ++o) {
      const int64_t group = o / (out_c / groups);
      for (int64_t oh = 0; oh < oh_size; ++oh) {
        for (int64_t ow = 0; ow < ow_size; ++ow) {
          double sum = bp[o];
          for (int64_t c = 0; c < per_group; ++c) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * stride - pad + i * dilation, iw = ow * stride - pad + j * dilation;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                sum += xp[((n * in_c + group * per_group + c) * h + ih) * wd + iw] *
                       wp[((o * per_group + c) * kh + i) * kw + j];
              }
            }
          }
          op[((n * out_c + o) * oh_size + oh) * ow_size + ow] = sum;
        }
      }
    }
  }
  return out;
}

TEST(Conv2dBands, ManyBandsMatchTheReference) {
  ember::manual_seed(51);
  struct Case {
    int64_t in_c, out_c, h, w, k, stride, pad, dilation, groups;
  };
  // 64 channels x 3 x 3 taps x 20 columns is too big for one band: the output rows are cut.
  for (const Case& c : {Case{64, 4, 30, 20, 3, 1, 1, 1, 1}, Case{64, 6, 45, 21, 3, 2, 1, 1, 2},
                        Case{48, 5, 33, 31, 3, 1, 2, 2, 1}, Case{3, 4, 40, 9, 5, 1, 2, 1, 1}}) {
    SCOPED_TRACE(::testing::Message() << "in " << c.in_c << " out " << c.out_c << " " << c.h << "x" << c.w << " k "
                                      << c.k << " stride " << c.stride << " pad " << c.pad << " dilation " << c.dilation
                                      << " groups " << c.groups);
    for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
      const Tensor x = ember::randn({2, c.in_c, c.h, c.w}, dtype);
      const Tensor w = ember::randn({c.out_c, c.in_c / c.groups, c.k, c.k}, dtype);
      const Tensor b = ember::randn({c.out_c}, dtype);
      const Tensor out = F::conv2d(x, w, b, c.stride, c.pad, c.dilation, c.groups);
      const Tensor expected = reference_conv(x, w, b, c.stride, c.pad, c.dilation, c.groups);
      const double tol = dtype == ember::kFloat32 ? 1e-4 : 1e-10;
      EXPECT_TRUE(golden::all_close(out.to(ember::kFloat64), expected, {tol, tol}));
    }
  }
}

TEST(Conv2dBands, NonContiguousInputAndGradients) {
  ember::manual_seed(52);
  // A transposed (non-contiguous) input; the gradients by gradcheck in float64 on a banded shape.
  const Tensor x = ember::randn({2, 30, 40, 36}, ember::kFloat64).transpose(2, 3).narrow(1, 0, 24);
  const Tensor w = ember::randn({3, 24, 3, 3}, ember::kFloat64), b = ember::randn({3}, ember::kFloat64);
  EXPECT_TRUE(golden::all_close(F::conv2d(x, w, b, 1, 1), reference_conv(x, w, b, 1, 1, 1, 1), {1e-10, 1e-10}));
  const Tensor small_x = ember::randn({1, 2, 7, 6}, ember::kFloat64).requires_grad_();
  const Tensor small_w = ember::randn({3, 2, 3, 2}, ember::kFloat64).requires_grad_();
  EXPECT_TRUE(ember::autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return F::conv2d(in[0], in[1], std::nullopt, {2, 1}, {1, 0});
      },
      {small_x, small_w}));
}

// Shapes the direct kernels take (Note [direct convolution]): rows two vectors wide, one vector,
// a partial vector, exactly three (24 and 12 columns: MNIST's first layer, and 12 for 4-lane
// vectors); blocks of 8 output channels and the rest; kernel widths up to 7; padding. The
// forward against the reference in float32 and float64, both gradients by gradcheck in float64
// (the input gradient is direct where out_channels * kh * kw <= 64 too).
TEST(Conv2dDirect, MatchesTheReferenceAndGradcheck) {
  ember::manual_seed(53);
  struct Case {
    std::vector<int64_t> x, w;
    ember::Pair pad;
  };
  for (const Case& c : {Case{{1, 1, 10, 30}, {5, 1, 7, 7}, {3, 3}}, Case{{2, 2, 9, 19}, {3, 2, 3, 3}, {1, 1}},
                        Case{{3, 1, 12, 24}, {11, 1, 5, 5}, {0, 0}}, Case{{1, 4, 6, 26}, {2, 4, 2, 6}, {1, 2}},
                        Case{{2, 1, 28, 28}, {16, 1, 5, 5}, {0, 0}}, Case{{1, 3, 14, 14}, {9, 3, 3, 3}, {0, 0}}}) {
    SCOPED_TRACE(::testing::Message() << "x " << ember::Shape(c.x) << " w " << ember::Shape(c.w));
    for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
      const Tensor x = ember::randn(c.x, dtype), w = ember::randn(c.w, dtype), b = ember::randn({c.w[0]}, dtype);
      const Tensor out = F::conv2d(x, w, b, 1, c.pad);
      // The reference pads both dims alike: pad the input by hand first.
      const Tensor expected = reference_conv(ember::pad(x, {c.pad.w, c.pad.w, c.pad.h, c.pad.h}), w, b, 1, 0, 1, 1);
      const double tol = dtype == ember::kFloat32 ? 1e-4 : 1e-10;
      EXPECT_TRUE(golden::all_close(out.to(ember::kFloat64), expected, {tol, tol}));
    }
    const Tensor x = ember::randn(c.x, ember::kFloat64).requires_grad_();
    const Tensor w = ember::randn(c.w, ember::kFloat64).requires_grad_();
    EXPECT_TRUE(ember::autograd::gradcheck(
        [&](const std::vector<Tensor>& in) { return F::conv2d(in[0], in[1], std::nullopt, 1, c.pad); }, {x, w}));
  }
}

// The gradients of sum(conv2d(x, w) * a random cotangent) with respect to x and w: in float64, and in
// float32 on one thread and on the default count.
struct ConvGrads {
  std::vector<Tensor> want, one, got;
};
ConvGrads conv_grads(const Tensor& x, const Tensor& w, ember::Pair stride, ember::Pair pad, ember::Pair dilation,
                     int64_t groups) {
  const auto grads = [&](ember::DType dtype) {
    const Tensor xl = x.to(dtype).requires_grad_(), wl = w.to(dtype).requires_grad_();
    const Tensor out = F::conv2d(xl, wl, std::nullopt, stride, pad, dilation, groups);
    ember::manual_seed(7);
    const Tensor cot = ember::randn(out.shape(), ember::kFloat64).to(dtype);
    return ember::autograd::grad({(out * cot).sum()}, {xl, wl});
  };
  ConvGrads g;
  g.want = grads(ember::kFloat64);
  const int threads = ember::get_num_threads();
  ember::set_num_threads(1);
  g.one = grads(ember::kFloat32);
  ember::set_num_threads(threads);
  g.got = grads(ember::kFloat32);
  return g;
}

// conv2d(x, w, b) in float32 on 1 and 2 threads: each within 2e-4 of the float64 reference, and the
// two bit for bit the same. Returns the result.
Tensor expect_reference_on_1_and_2_threads(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride,
                                           int64_t pad, int64_t dilation) {
  const Tensor expected = reference_conv(x, w, b, stride, pad, dilation, 1);
  const int threads = ember::get_num_threads();
  std::vector<Tensor> outs;
  for (const int t : {1, 2}) {
    ember::set_num_threads(t);
    outs.push_back(F::conv2d(x, w, b, stride, pad, dilation));
    EXPECT_TRUE(golden::all_close(outs.back().to(ember::kFloat64), expected, {2e-4, 2e-4})) << t << " threads";
  }
  ember::set_num_threads(threads);
  EXPECT_TRUE(golden::all_close(outs[0], outs[1], {0, 0}));
  return outs[0];
}

// The blocked float32 forward (Note [blocked convolution]) against the float64 reference: rows
// that are whole tiles, a tile and a bit, one position; a partial last input block (136 channels
// in blocks of 16) and a partial last output group (80 = 2 x 32 + 16), output groups of one vector
// (16 and 48 channels on AVX-512); strides 1 and 2, padding (past the kernel's reach too),
// dilation, 1 x 1 and non-square kernels; one image (tasks over rows) and several (tasks over
// images, an odd count too); 1 and 2 threads, which must agree bit for bit.
TEST(Conv2dBlocked, MatchesTheReferenceAcrossTileEdges) {
  ember::manual_seed(57);
  struct Case {
    std::vector<int64_t> x, w;
    int64_t stride, pad, dilation;
  };
  const std::vector<Case> cases = {
      {{1, 16, 9, 30}, {32, 16, 3, 3}, 1, 1, 1},
      {{3, 32, 7, 7}, {64, 32, 3, 3}, 1, 1, 1},
      {{2, 136, 5, 16}, {80, 136, 3, 1}, 1, 0, 1},
      {{1, 16, 17, 31}, {32, 16, 3, 5}, 2, 2, 1},
      {{4, 16, 8, 43}, {32, 16, 1, 1}, 1, 0, 1},
      {{1, 24, 12, 12}, {16, 24, 3, 3}, 1, 2, 2},
      {{2, 64, 1, 1}, {128, 64, 1, 1}, 1, 0, 1},
      {{1, 16, 6, 4}, {48, 16, 3, 3}, 2, 1, 1},
      {{2, 16, 10, 20}, {16, 16, 3, 3}, 1, 1, 1},
      // Padding past the kernel's reach: the first and last output rows read only zeros, the
      // tiles skip the kernel rows that do (rows_of), in rows of one tile and of two (7 x 7).
      {{1, 16, 4, 9}, {32, 16, 3, 3}, 1, 3, 1},
      {{1, 16, 9, 15}, {32, 16, 3, 3}, 2, 3, 2},
      {{2, 16, 5, 5}, {32, 16, 3, 3}, 1, 2, 1}};
  int blocked = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << ember::Shape(c.x) << " w " << ember::Shape(c.w) << " stride "
                                      << c.stride << " pad " << c.pad << " dilation " << c.dilation);
    const Tensor x = ember::randn(c.x), w = ember::randn(c.w), b = ember::randn({c.w[0]});
    ember::cpu::Conv2dGeometry g;
    g.batch = c.x[0];
    g.in_channels = c.x[1];
    g.out_channels = c.w[0];
    g.stride_h = g.stride_w = c.stride;
    blocked += ember::cpu::nchwc_takes(g) ? 1 : 0;
    expect_reference_on_1_and_2_threads(x, w, b, c.stride, c.pad, c.dilation);
  }
  // Most cases take the blocked path where the CPU has one (AVX2 and up).
  ember::cpu::Conv2dGeometry any;
  if (ember::cpu::nchwc_layout(any).block > 0) {
    EXPECT_GE(blocked, 7);
  }
}

// Fewer input channels than a block (Note [patch convolution]): a 1 x 1 blocked convolution over
// the patches. ResNet's first layer (3 channels, 7 x 7, stride 2, padding 3) on a small image; a
// tall one cut into several bands, with one vector of output channels; 5 channels, 5 x 5, dilation
// 2, over two images. Against the float64 reference; 1 and 2 threads agree bit for bit.
TEST(Conv2dBlocked, FewChannelsRunOverTheirPatches) {
  ember::manual_seed(59);
  struct Case {
    std::vector<int64_t> x, w;
    int64_t stride, pad, dilation;
  };
  const std::vector<Case> cases = {{{1, 3, 40, 44}, {64, 3, 7, 7}, 2, 3, 1},
                                   {{1, 3, 400, 60}, {16, 3, 7, 7}, 2, 3, 1},
                                   {{2, 5, 12, 13}, {32, 5, 5, 5}, 1, 4, 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << ember::Shape(c.x) << " w " << ember::Shape(c.w));
    const Tensor x = ember::randn(c.x), w = ember::randn(c.w), b = ember::randn({c.w[0]});
    const Tensor out = expect_reference_on_1_and_2_threads(x, w, b, c.stride, c.pad, c.dilation);
    ember::cpu::Conv2dGeometry g;
    g.in_channels = c.x[1];
    g.out_channels = c.w[0];
    g.kernel_h = c.w[2];
    g.kernel_w = c.w[3];
    g.out_height = out.size(2);
    g.out_width = out.size(3);
    if (ember::cpu::nchwc_layout(g).block > 0) {
      EXPECT_TRUE(ember::cpu::nchwc_patch_takes(g));
    }
  }
}

// The gradients in the blocked layout against the float64 path (im2col). The input gradient of a
// stride-1 convolution is the blocked forward of the padded output gradient with the weight
// transposed and flipped (kernels 1 x 1 to 5 x 3, padding 0 to full, dilation 2; conv_transpose2d,
// whose forward is that gradient, too). The weight gradient (Note [blocked weight gradient]) also
// for strides 2, an odd number of output blocks (80 channels), and images in several chunks
// (5 images of 32 x 40 x 40); 1 and 2 threads agree bit for bit.
TEST(Conv2dBlocked, GradientsMatchTheFloat64Path) {
  ember::manual_seed(61);
  struct Case {
    std::vector<int64_t> x, w;
    ember::Pair stride, pad, dilation;
  };
  const std::vector<Case> cases = {
      {{2, 32, 9, 17}, {16, 32, 3, 3}, 1, {1, 1}, {1, 1}},  {{1, 32, 8, 30}, {32, 32, 5, 3}, 1, {0, 2}, {1, 1}},
      {{3, 32, 7, 7}, {48, 32, 3, 3}, 1, {2, 2}, {2, 2}},   {{2, 32, 5, 6}, {16, 32, 1, 1}, 1, {0, 0}, {1, 1}},
      {{2, 16, 11, 13}, {80, 16, 3, 3}, 2, {1, 1}, {1, 1}}, {{5, 32, 40, 40}, {32, 32, 3, 3}, 1, {1, 1}, {1, 1}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << ember::Shape(c.x) << " w " << ember::Shape(c.w));
    const Tensor x = ember::randn(c.x), w = ember::randn(c.w);
    const auto [want, one, got] = conv_grads(x, w, c.stride, c.pad, c.dilation, 1);
    for (size_t i = 0; i < 2; ++i) {
      const double scale = std::sqrt(static_cast<double>(c.x[0] * c.x[2] * c.x[3]));  // terms in a weight's sum
      const double tol = i == 0 ? 2e-4 : 2e-5 * scale;
      EXPECT_TRUE(golden::all_close(got[i].to(ember::kFloat64), want[i], {tol, tol})) << (i == 0 ? "input" : "weight");
      EXPECT_TRUE(golden::all_close(one[i], got[i], {0, 0}));
    }
  }
  const Tensor y = ember::randn({2, 32, 6, 14}), wt = ember::randn({32, 32, 3, 3});
  EXPECT_TRUE(golden::all_close(F::conv_transpose2d(y, wt, std::nullopt, 1, 1).to(ember::kFloat64),
                                F::conv_transpose2d(y.to(ember::kFloat64), wt.to(ember::kFloat64), std::nullopt, 1, 1),
                                {2e-4, 2e-4}));
}

// Rows whose kernel columns hang a full kernel - 1 over each side (Note [padded rows] in
// conv_nchwc.cpp): the input gradients of unpadded 5 x 5 and 3 x 3 convolutions (MNIST's second
// layer among them) and a forward padded by 4, at widths from the kernel's to past a tile's (14 on
// AVX-512, 6 on AVX2), with one and two vectors of output channels, against the float64 path; 1 and 2
// threads agree bit for bit.
TEST(Conv2dBlocked, PaddedRowsMatchTheFloat64Path) {
  ember::manual_seed(63);
  struct Case {
    std::vector<int64_t> x, w;
  };
  const std::vector<Case> cases = {{{2, 16, 12, 12}, {32, 16, 5, 5}}, {{1, 32, 9, 8}, {32, 32, 5, 5}},
                                   {{1, 16, 7, 14}, {32, 16, 5, 5}},  {{2, 8, 6, 5}, {16, 8, 5, 5}},
                                   {{1, 16, 5, 6}, {32, 16, 5, 5}},   {{1, 32, 6, 4}, {16, 32, 3, 3}},
                                   {{2, 16, 5, 6}, {32, 16, 3, 3}},   {{1, 32, 8, 9}, {32, 32, 3, 3}},
                                   {{1, 16, 4, 14}, {32, 16, 3, 3}},  {{1, 16, 4, 17}, {32, 16, 3, 3}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << ember::Shape(c.x) << " w " << ember::Shape(c.w));
    const Tensor x = ember::randn(c.x), w = ember::randn(c.w);
    const auto [want, one, got] = conv_grads(x, w, 1, 0, 1, 1);
    for (size_t i = 0; i < 2; ++i) {
      const double scale = std::sqrt(static_cast<double>(c.x[0] * c.x[2] * c.x[3]));
      const double tol = i == 0 ? 2e-4 : 2e-5 * scale;
      EXPECT_TRUE(golden::all_close(got[i].to(ember::kFloat64), want[i], {tol, tol})) << (i == 0 ? "input" : "weight");
      EXPECT_TRUE(golden::all_close(one[i], got[i], {0, 0}));
    }
  }
  // A forward padded by kernel - 1: outputs 12 wide from 8 columns.
  const Tensor x = ember::randn({1, 32, 6, 8}), w = ember::randn({16, 32, 5, 5}), b = ember::randn({16});
  expect_reference_on_1_and_2_threads(x, w, b, 1, 4, 1);
}

// A convolution given a max pooling (Conv2dAttrs::max_pool, which the compiler sets for inference)
// gives max_pool2d(activation(conv2d + bias + residual), 2)'s bits: on the direct path, which pools
// as it stores (MNIST's first layer; 8 + 1 output channels; odd rows and columns, which the pooling
// drops; padding; rows of one to five vectors; float64), and on the others, which pool a whole
// output (the blocked one, 16 -> 32 channels; im2col at stride 2); each with NaNs in the input, no
// bias, a residual, ReLU and SiLU, on 1 and 2 threads.
TEST(Conv2dPooled, MatchesConvolutionThenMaxPool) {
  struct Case {
    int64_t batch, in, out, height, width, kernel, padding, stride;
    ember::DType dtype;
  };
  const std::vector<Case> cases = {
      {3, 1, 16, 28, 28, 5, 0, 1, ember::kFloat32}, {2, 2, 9, 13, 31, 3, 1, 1, ember::kFloat32},
      {1, 1, 8, 12, 19, 5, 2, 1, ember::kFloat64},  {2, 3, 8, 11, 42, 3, 0, 1, ember::kFloat32},
      {1, 2, 8, 9, 10, 3, 0, 1, ember::kFloat32},   {2, 16, 32, 12, 12, 5, 0, 1, ember::kFloat32},
      {2, 3, 8, 17, 23, 3, 1, 2, ember::kFloat32}};
  const test_util::ThreadCountGuard threads_guard;
  ember::manual_seed(65);
  int direct = 0;
  for (const Case& c : cases) {
    Tensor x = ember::randn({c.batch, c.in, c.height, c.width}, c.dtype);
    const auto poison = [](auto* values) { values[5] = values[77] = NAN; };
    c.dtype == ember::kFloat32 ? poison(x.data_ptr<float>()) : poison(x.data_ptr<double>());
    const Tensor w = ember::randn({c.out, c.in, c.kernel, c.kernel}, c.dtype), b = ember::randn({c.out}, c.dtype);
    const Tensor conv = ember::conv2d(x, w, b, c.stride, c.padding);
    const Tensor r = ember::randn(conv.shape(), c.dtype);
    ember::cpu::Conv2dGeometry g;
    g.in_channels = c.in;
    g.in_height = c.height;
    g.in_width = c.width;
    g.out_channels = c.out;
    g.out_height = conv.size(2);
    g.out_width = conv.size(3);
    g.kernel_h = g.kernel_w = c.kernel;
    g.pad_h = g.pad_w = c.padding;
    g.stride_h = g.stride_w = c.stride;
    direct += ember::cpu::conv2d_pools_directly(c.dtype, g, 2) ? 1 : 0;
    for (const ember::Activation activation :
         {ember::Activation::kNone, ember::Activation::kRelu, ember::Activation::kSilu}) {
      for (const bool with_bias : {true, false}) {
        for (const bool residual : {false, true}) {
          for (const int threads : {1, 2}) {
            SCOPED_TRACE(::testing::Message() << "x " << x.shape() << ", kernel " << c.kernel << ", padding "
                                              << c.padding << ", stride " << c.stride << ", activation "
                                              << static_cast<int>(activation) << (with_bias ? "" : ", no bias")
                                              << (residual ? ", residual" : "") << ", " << threads << " threads");
            ember::set_num_threads(threads);
            Tensor y = ember::conv2d(x, w, with_bias ? std::optional<Tensor>(b) : std::nullopt, c.stride, c.padding);
            if (residual) y = y + r;
            if (activation == ember::Activation::kRelu) y = ember::relu(y);
            if (activation == ember::Activation::kSilu) y = ember::silu(y);
            const Tensor want = ember::max_pool2d(y, 2);
            Tensor got = ember::full(want.shape(), 7.0, c.dtype);  // every element must be written
            ember::Conv2dAttrs attrs;
            attrs.stride = c.stride;
            attrs.padding = c.padding;
            attrs.activation = activation;
            attrs.max_pool = 2;
            ember::dispatch::run(ember::OpKind::kConv2d, attrs,
                                 {&x, &w, with_bias ? &b : nullptr, residual ? &r : nullptr}, {&got});
            EXPECT_TRUE(test_util::bitwise_equal(got, want));
          }
        }
      }
    }
  }
  EXPECT_GE(direct, 5);  // the first five cases (and, where it does not run blocked, the sixth)
}

// Rows of 24 columns, which the direct forward takes two at a time on AVX-512 (Note [row pairs] in
// conv_direct.cpp), against rows of 25, which it takes one at a time: the first 24 columns of the
// wider convolution (one more input column, of zeros) are the same sums in the same order, so the
// same bits, pooled or not. The weight gradient, which takes the pairs too, against float64. Blocks
// of 8 output channels and one more; 1 and 3 input channels; kernels 5 and 3 with padding; an odd
// number of rows (a last row on its own); bias, residual and activations; 1 and 2 threads (bands
// that start at odd rows).
TEST(Conv2dDirect, RowPairsMatchSingleRowsBitForBit) {
  struct Case {
    int64_t batch, in, out, height, kernel, padding;
  };
  const test_util::ThreadCountGuard threads_guard;
  ember::manual_seed(67);
  for (const Case& c : {Case{2, 1, 17, 28, 5, 0}, Case{1, 3, 9, 27, 5, 0}, Case{3, 1, 8, 25, 3, 1}}) {
    const int64_t width = 24 + c.kernel - 1 - 2 * c.padding;
    const Tensor x = ember::randn({c.batch, c.in, c.height, width});
    const Tensor wide = ember::pad(x, {0, 1, 0, 0});  // zeros, as the padding of x's last column
    const Tensor w = ember::randn({c.out, c.in, c.kernel, c.kernel}), b = ember::randn({c.out});
    const int64_t out_height = c.height + 2 * c.padding - c.kernel + 1;
    const Tensor r_wide = ember::randn({c.batch, c.out, out_height, 25});
    const Tensor r = r_wide.narrow(3, 0, 24).contiguous();
    ember::cpu::Conv2dGeometry g;
    g.in_channels = c.in;
    g.in_height = c.height;
    g.in_width = width;
    g.out_channels = c.out;
    g.out_height = out_height;
    g.out_width = 24;
    g.kernel_h = g.kernel_w = c.kernel;
    g.pad_h = g.pad_w = c.padding;
    EXPECT_TRUE(ember::cpu::conv2d_pools_directly(ember::kFloat32, g, 2)) << "the direct forward takes it";
    // The weight gradient sums two rows at a time too, in another grouping of the products: against
    // the float64 gradients, and on 1 and 2 threads bit for bit.
    const auto [want_grads, one, got_grads] = conv_grads(x, w, 1, c.padding, 1, 1);
    const double scale = std::sqrt(static_cast<double>(c.batch * out_height * 24));  // terms in a weight's sum
    EXPECT_TRUE(golden::all_close(got_grads[1].to(ember::kFloat64), want_grads[1], {2e-5 * scale, 2e-5 * scale}));
    EXPECT_TRUE(golden::all_close(got_grads[0].to(ember::kFloat64), want_grads[0], {2e-4, 2e-4}));
    EXPECT_TRUE(golden::all_close(one[1], got_grads[1], {0, 0}));
    for (const int64_t pool : {1, 2}) {
      for (const ember::Activation activation :
           {ember::Activation::kNone, ember::Activation::kRelu, ember::Activation::kSilu}) {
        for (const bool residual : {false, true}) {
          for (const int threads : {1, 2}) {
            SCOPED_TRACE(::testing::Message() << "x " << x.shape() << ", kernel " << c.kernel << ", pool " << pool
                                              << ", activation " << static_cast<int>(activation)
                                              << (residual ? ", residual" : "") << ", " << threads << " threads");
            ember::set_num_threads(threads);
            ember::Conv2dAttrs attrs;
            attrs.padding = c.padding;
            attrs.activation = activation;
            attrs.max_pool = pool;
            const int64_t out_width = 24 / pool;
            const ember::Shape shape({c.batch, c.out, out_height / pool, out_width});
            Tensor got = ember::full(shape, 7.0);
            const Tensor* bias = residual ? nullptr : &b;  // a bias, or a residual alone
            ember::dispatch::run(ember::OpKind::kConv2d, attrs, {&x, &w, bias, residual ? &r : nullptr}, {&got});
            Tensor want = ember::full({c.batch, c.out, out_height / pool, 25 / pool}, 7.0);
            ember::dispatch::run(ember::OpKind::kConv2d, attrs, {&wide, &w, bias, residual ? &r_wide : nullptr},
                                 {&want});
            EXPECT_TRUE(test_util::bitwise_equal(got, want.narrow(3, 0, out_width).contiguous()));
          }
        }
      }
    }
  }
}

// The channels of a block of the blocked convolution on this CPU (0: it has none).
int64_t blocked_lanes() {
  ember::cpu::Conv2dGeometry probe;
  probe.in_channels = probe.out_channels = 64;
  return ember::cpu::nchwc_takes(probe) ? ember::cpu::nchwc_layout(probe).block : 0;
}

// An activation as the layout pass keeps it (Note [blocked activations] in graph/passes.cpp): (N,
// ceil(C / block), H + 2 pad.h, W + 2 pad.w, block), zeros in the padding and past C.
Tensor to_blocked(const Tensor& t, int64_t block, ember::Pair pad) {
  const int64_t blocks = (t.size(1) + block - 1) / block;
  const Tensor p = ember::pad(t, {pad.w, pad.w, pad.h, pad.h, 0, blocks * block - t.size(1)});
  return p.reshape({t.size(0), blocks, block, p.size(2), p.size(3)}).permute({0, 1, 3, 4, 2}).contiguous();
}

// The blocked forward's blocked operands hold what its NCHW ones do, bit for bit (NaNs as NaNs): a
// blocked output (poisoned with NaN first: its padding and the channels past C must come out zero,
// also where an input is infinite) with a bias and
// ReLU, or with an NCHW residual and GELU, padded 1 x 2; a blocked input padded as its reader is
// and more (its planes read from the convolution's own padding on), at strides 1 and 2; a blocked
// residual. Channels past a whole block (60) and whole (64); maps of one tile row, several tiles,
// and two rows per tile (5 x 5 on AVX-512); both ways the forward splits a batch; 1 and 2 threads.
TEST(Conv2dBlocked, BlockedOperandsHoldTheNchwValues) {
  const test_util::ThreadCountGuard threads_guard;
  ember::manual_seed(68);
  const int64_t block = blocked_lanes();
  if (block == 0) GTEST_SKIP() << "no blocked convolution on this CPU";
  const auto run = [](const Tensor& x, const Tensor& w, const Tensor* b, const Tensor* r, ember::Conv2dAttrs attrs,
                      const ember::Shape& shape) {
    Tensor out = ember::full(shape, NAN);
    ember::dispatch::run(ember::OpKind::kConv2d, attrs, {&x, &w, b, r}, {&out});
    return out;
  };
  for (const int64_t c : {60, 64}) {
    const Tensor w1 = ember::randn({c, c, 3, 3}) * 0.05, w2 = ember::randn({c, c, 3, 3}) * 0.05;
    const Tensor b1 = ember::randn({c}), b2 = ember::randn({c});
    for (const int64_t size : {5, 9, 20}) {
      for (const int64_t batch : {1, 3}) {
        for (const int threads : {1, 2}) {
          SCOPED_TRACE(::testing::Message() << c << " channels, " << size << " x " << size << ", batch " << batch
                                            << ", " << threads << " threads");
          ember::set_num_threads(threads);
          Tensor x = ember::randn({batch, c, size, size});
          // An infinite input makes the sums past C NaN (zero weights times it): written as zeros.
          if (batch == 3) x.narrow(0, 1, 1).narrow(1, 5, 1).narrow(2, 2, 1).narrow(3, 3, 1).fill_(INFINITY);
          const ember::Shape nchw({batch, c, size, size});
          ember::Conv2dAttrs first;
          first.padding = 1;
          first.activation = ember::Activation::kRelu;
          const Tensor h = run(x, w1, &b1, nullptr, first, nchw);
          for (const ember::Pair pad : {ember::Pair(1), ember::Pair(2), ember::Pair(1, 2)}) {
            SCOPED_TRACE(::testing::Message() << "planes padded by " << pad.h << " x " << pad.w);
            ember::Conv2dAttrs blocked_out = first;
            blocked_out.blocked_output = pad;
            const Tensor hb = run(x, w1, &b1, nullptr, blocked_out, to_blocked(h, block, pad).shape());
            EXPECT_TRUE(test_util::bitwise_equal_but_nan_payloads(hb, to_blocked(h, block, pad)));
            for (const int64_t stride : {1, 2}) {
              ember::Conv2dAttrs second;
              second.stride = stride;
              second.padding = 1;
              second.activation = ember::Activation::kGeluErf;
              const int64_t out_size = (size - 1) / stride + 1;
              const ember::Shape shape({batch, c, out_size, out_size});
              const Tensor r = ember::randn(shape);
              const Tensor want = run(h, w2, &b2, &r, second, shape);
              ember::Conv2dAttrs blocked_in = second;
              blocked_in.blocked_input = pad;
              EXPECT_TRUE(test_util::bitwise_equal_but_nan_payloads(run(hb, w2, &b2, &r, blocked_in, shape), want))
                  << stride;
            }
            // A blocked residual (stride 1: h's shape), and an NCHW residual into a blocked output.
            ember::Conv2dAttrs second;
            second.padding = 1;
            second.activation = ember::Activation::kGeluErf;
            const Tensor want = run(h, w2, &b2, &h, second, nchw);
            ember::Conv2dAttrs blocked_residual = second;
            blocked_residual.blocked_residual = pad;
            EXPECT_TRUE(test_util::bitwise_equal_but_nan_payloads(run(h, w2, &b2, &hb, blocked_residual, nchw), want));
            if (pad.h == 1 && pad.w == 2) {
              ember::Conv2dAttrs residual_in = second;
              residual_in.blocked_output = pad;
              const Tensor got = run(h, w2, &b2, &h, residual_in, hb.shape());
              EXPECT_TRUE(test_util::bitwise_equal_but_nan_payloads(got, to_blocked(want, block, pad)));
            }
          }
        }
      }
    }
  }
}

// Max pooling over blocked planes (Pool2dAttrs::blocked_input, blocked_output) equals max_pool2d's
// NCHW kernel blocked, bit for bit: NaN and infinite inputs, windows clipped by the padding and by
// ceil mode, a dilated window, the input and output planes padded or not, the output poisoned with
// NaN first.
TEST(Conv2dBlocked, MaxPoolingOverBlockedPlanes) {
  const test_util::ThreadCountGuard threads_guard;
  ember::manual_seed(69);
  const int64_t block = blocked_lanes();
  if (block == 0) GTEST_SKIP() << "no blocked convolution on this CPU";
  struct Case {
    int64_t kernel, stride, padding, dilation;
    bool ceil_mode;
  };
  for (const Case& k :
       {Case{3, 2, 1, 1, false}, Case{2, 2, 0, 1, false}, Case{3, 2, 0, 1, true}, Case{3, 1, 1, 2, false}}) {
    for (const int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "kernel " << k.kernel << ", stride " << k.stride << ", padding " << k.padding
                                        << ", dilation " << k.dilation << (k.ceil_mode ? ", ceil" : "") << ", "
                                        << threads << " threads");
      ember::set_num_threads(threads);
      Tensor x = ember::randn({2, 20, 11, 13});
      x.narrow(1, 3, 1).narrow(2, 4, 1).fill_(NAN);
      x.narrow(1, 4, 1).narrow(3, 5, 1).fill_(INFINITY);
      x.narrow(1, 5, 1).narrow(3, 6, 1).fill_(-INFINITY);
      ember::Pool2dAttrs attrs;
      attrs.kernel_size = k.kernel;
      attrs.stride = k.stride;
      attrs.padding = k.padding;
      attrs.dilation = k.dilation;
      attrs.ceil_mode = k.ceil_mode;
      const Tensor want = F::max_pool2d(x, k.kernel, k.stride, k.padding, k.dilation, k.ceil_mode);
      for (const ember::Pair in_pad : {ember::Pair(0), ember::Pair(1, 2)}) {
        for (const ember::Pair out_pad : {ember::Pair(0), ember::Pair(2, 1)}) {
          ember::Pool2dAttrs blocked = attrs;
          blocked.blocked_input = in_pad;
          blocked.blocked_output = out_pad;
          const Tensor xb = to_blocked(x, block, in_pad);
          Tensor got = ember::full(to_blocked(want, block, out_pad).shape(), NAN);
          ember::dispatch::run(ember::OpKind::kMaxPool2d, blocked, {&xb}, {&got, nullptr});
          EXPECT_TRUE(test_util::bitwise_equal(got, to_blocked(want, block, out_pad)))
              << in_pad.h << " x " << in_pad.w << " -> " << out_pad.h << " x " << out_pad.w;
        }
      }
    }
  }
}

// Depthwise convolutions (Note [depthwise convolution]): rows of a partial vector, one vector,
// several rows of one to three vectors, more than four; 3 x 3 to 7 x 7, 1 x 4 (a causal conv1d), 3 x 1;
// strides 1 and 2 (and 3, which the im2col path keeps), padding 0 to 4 (wider than the kernel's
// reach too), dilation 2, odd widths under stride 2, one to three output channels per input channel. The forward
// against the float64 reference in float32 and float64; the gradients by gradcheck in float64 and float32's against
// float64's; 1 and 2 threads agree bit for bit.
TEST(Conv2dDepthwise, MatchesTheReferenceAndGradcheck) {
  ember::manual_seed(67);
  struct Case {
    int64_t batch, channels, mult, h, w, kh, kw, stride, pad, dilation;
  };
  const std::vector<Case> cases = {
      {2, 8, 1, 9, 5, 3, 3, 1, 1, 1},    {1, 6, 1, 7, 7, 7, 7, 1, 3, 1},   {3, 5, 2, 14, 14, 3, 3, 2, 1, 1},
      {1, 4, 1, 20, 33, 5, 5, 1, 2, 1},  {2, 3, 1, 11, 70, 3, 3, 1, 1, 1}, {1, 7, 1, 1, 40, 1, 4, 1, 0, 1},
      {2, 4, 2, 13, 29, 3, 1, 2, 0, 1},  {1, 3, 1, 12, 23, 3, 3, 1, 2, 2}, {2, 4, 1, 15, 31, 3, 3, 3, 1, 1},
      {1, 16, 1, 56, 56, 3, 3, 2, 1, 1}, {1, 2, 3, 6, 17, 2, 5, 1, 1, 2},  {1, 3, 1, 9, 15, 5, 5, 2, 2, 2},
      {2, 2, 1, 8, 9, 3, 3, 2, 0, 1},    {1, 4, 2, 1, 37, 1, 4, 2, 3, 1},  {1, 3, 1, 10, 41, 3, 3, 2, 4, 1}};
  const int threads = ember::get_num_threads();
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "batch " << c.batch << " channels " << c.channels << " x" << c.mult << " "
                                      << c.h << "x" << c.w << " k " << c.kh << "x" << c.kw << " stride " << c.stride
                                      << " pad " << c.pad << " dilation " << c.dilation);
    const std::vector<int64_t> x_shape{c.batch, c.channels, c.h, c.w}, w_shape{c.channels * c.mult, 1, c.kh, c.kw};
    for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
      const Tensor x = ember::randn(x_shape, dtype), w = ember::randn(w_shape, dtype);
      const Tensor b = ember::randn({c.channels * c.mult}, dtype);
      const Tensor expected = reference_conv(x, w, b, c.stride, c.pad, c.dilation, c.channels);
      const double tol = dtype == ember::kFloat32 ? 1e-5 : 1e-12;
      std::vector<Tensor> outs;
      for (const int t : {1, 2}) {
        ember::set_num_threads(t);
        outs.push_back(F::conv2d(x, w, b, c.stride, c.pad, c.dilation, c.channels));
        EXPECT_TRUE(golden::all_close(outs.back().to(ember::kFloat64), expected, {tol, tol})) << t << " threads";
      }
      ember::set_num_threads(threads);
      EXPECT_TRUE(golden::all_close(outs[0], outs[1], {0, 0}));
    }
    // float32's gradients against float64's, on 1 and 2 threads.
    const auto [want, one, got] =
        conv_grads(ember::randn(x_shape), ember::randn(w_shape), c.stride, c.pad, c.dilation, c.channels);
    const double scale = std::sqrt(static_cast<double>(c.batch * c.h * c.w));  // terms in a weight's sum
    for (size_t i = 0; i < 2; ++i) {
      const double tol = i == 0 ? 1e-5 : 2e-6 * scale;
      EXPECT_TRUE(golden::all_close(got[i].to(ember::kFloat64), want[i], {tol, tol})) << (i == 0 ? "input" : "weight");
      EXPECT_TRUE(golden::all_close(one[i], got[i], {0, 0}));
    }
    if (c.h * c.w <= 300) {
      const Tensor xd = ember::randn(x_shape, ember::kFloat64).requires_grad_();
      const Tensor wd = ember::randn(w_shape, ember::kFloat64).requires_grad_();
      const Tensor bd = ember::randn({c.channels * c.mult}, ember::kFloat64).requires_grad_();
      EXPECT_TRUE(ember::autograd::gradcheck(
          [&](const std::vector<Tensor>& in) {
            return F::conv2d(in[0], in[1], in[2], c.stride, c.pad, c.dilation, c.channels);
          },
          {xd, wd, bd}));
    }
  }
}

// Inputs that no output reads (the last column under stride 2, a 3 x 3 kernel and an even width)
// reach neither the output nor the weight gradient: an infinity there leaves both finite.
TEST(Conv2dDepthwise, AnInfinityNoOutputReadsStaysOut) {
  const auto finite = [](const Tensor& t) {
    const std::vector<double> v = t.to(ember::kFloat64).contiguous().to_vector<double>();
    return std::all_of(v.begin(), v.end(), [](double e) { return std::isfinite(e); });
  };
  for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    Tensor x = ember::randn({1, 3, 6, 40}, dtype);
    x.narrow(3, 39, 1).fill_(std::numeric_limits<double>::infinity());
    const Tensor xl = x.requires_grad_(), w = ember::randn({3, 1, 3, 3}, dtype).requires_grad_();
    const Tensor out = F::conv2d(xl, w, std::nullopt, 2, 0, 1, 3);
    EXPECT_EQ(out.size(3), 19);
    EXPECT_TRUE(finite(out));
    const std::vector<Tensor> g = ember::autograd::grad({out.sum()}, {xl, w});
    EXPECT_TRUE(finite(g[1]));
  }
}

// bfloat16 convolutions multiply bfloat16 pairs where the CPU has AVX512_BF16 (Note [bfloat16
// convolution] in kernels/cpu/conv.cpp): every result is the float64 one on the same bfloat16 values,
// rounded once (so within half a bfloat16 ulp, plus float32 summation), on each path: rows wide
// enough for the bfloat16 kernels (several images per GEMM, bands of one big image, pointwise,
// groups, depthwise, stride 2 with its GEMM + col2im input gradient, dilation), the blocked
// layout's forward and input gradient on wide and narrow maps, and narrow ones computed in float32;
// the same bits on 1 and 2 threads.
TEST(Conv2dBfloat16, ResultsAndGradientsAreTheFloat64OnesRoundedOnce) {
  ember::manual_seed(67);
  struct Case {
    std::vector<int64_t> x, w;
    ember::Pair stride, pad, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{3, 5, 30, 30}, {7, 5, 3, 3}, 1, 1, 1, 1},
      {{1, 16, 120, 121}, {8, 16, 3, 3}, 1, 1, 1, 1},
      {{3, 8, 28, 29}, {12, 8, 1, 1}, 1, 0, 1, 1},
      {{2, 6, 32, 31}, {10, 3, 3, 3}, 1, {1, 2}, {2, 1}, 2},
      {{2, 4, 60, 58}, {6, 4, 3, 3}, 2, 1, 1, 1},
      {{2, 6, 40, 40}, {6, 1, 3, 3}, 1, 1, 1, 6},
      {{2, 3, 10, 12}, {4, 3, 3, 3}, 1, 1, 1, 1},
      {{4, 1, 28, 28}, {16, 1, 5, 5}, 1, 0, 1, 1},
      {{1, 64, 60, 61}, {16, 64, 1, 1}, 1, 0, 1, 1},
      // Narrow maps in the blocked layout (Note [bfloat16 blocked convolution]): MNIST's second
      // layer; 27 columns in two tiles with three groups of 16 output channels; maps 5 wide, two
      // rows a tile and an odd last row; stride 2 (its input gradient in float32); dilation 2 on one
      // image (bands of rows); 31 and 30 channels padded to blocks.
      {{3, 16, 12, 12}, {32, 16, 5, 5}, 1, 0, 1, 1},
      {{2, 32, 9, 27}, {48, 32, 3, 3}, 1, 1, 1, 1},
      {{3, 16, 7, 5}, {16, 16, 3, 3}, 1, 1, 1, 1},
      {{2, 32, 15, 17}, {32, 32, 3, 3}, 2, 1, 1, 1},
      {{1, 16, 11, 13}, {16, 16, 3, 3}, 1, 2, 2, 1},
      {{2, 31, 6, 6}, {30, 31, 3, 3}, 1, 1, 1, 1},
      // Wide maps in the blocked layout, with the bfloat16 GEMM's weight gradient: stride 1; stride
      // 2 (its input gradient through the GEMM and col2im); 14 columns, the narrowest such
      // weight gradient.
      {{2, 16, 30, 31}, {32, 16, 3, 3}, 1, 1, 1, 1},
      {{2, 16, 60, 58}, {16, 16, 3, 3}, 2, 1, 1, 1},
      {{2, 32, 14, 14}, {32, 32, 3, 3}, 1, 1, 1, 1},
      // The blocked weight gradient (Note [bfloat16 blocked weight gradient]) with dilation and rows
      // of odd width, and over images in two chunks.
      {{2, 16, 9, 11}, {32, 16, 3, 3}, 1, 2, 2, 1},
      {{7, 32, 30, 30}, {32, 32, 3, 3}, 1, 1, 1, 1}};
  const int threads = ember::get_num_threads();
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << ember::Shape(c.x) << " w " << ember::Shape(c.w));
    const Tensor x = ember::randn(c.x).to(ember::kBFloat16), w = ember::randn(c.w).to(ember::kBFloat16);
    const Tensor b = ember::randn({c.w[0]}).to(ember::kBFloat16);
    const auto run = [&](ember::DType dtype) {
      const Tensor xl = x.to(dtype).requires_grad_(), wl = w.to(dtype).requires_grad_();
      const Tensor out = F::conv2d(xl, wl, b.to(dtype), c.stride, c.pad, c.dilation, c.groups);
      ember::manual_seed(7);
      const Tensor cot = ember::randn(out.shape()).to(ember::kBFloat16).to(dtype);
      std::vector<Tensor> results = ember::autograd::grad({(out * cot).sum()}, {xl, wl});
      results.insert(results.begin(), out.detach());
      return results;
    };
    const std::vector<Tensor> want = run(ember::kFloat64);
    ember::set_num_threads(1);
    const std::vector<Tensor> one = run(ember::kBFloat16);
    ember::set_num_threads(threads);
    const std::vector<Tensor> got = run(ember::kBFloat16);
    const char* names[] = {"output", "input gradient", "weight gradient"};
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(got[i].dtype(), ember::kBFloat16) << names[i];
      // Half an ulp of bfloat16 relative, and float32 sums of up to a few thousand terms absolute.
      EXPECT_TRUE(golden::all_close(got[i].to(ember::kFloat64), want[i], {4e-3, 1e-4})) << names[i];
      EXPECT_TRUE(golden::all_close(one[i], got[i], {0, 0})) << names[i] << " differs between 1 and 2 threads";
    }
  }
}

// The blocked bfloat16 weight gradient takes positions in pairs: a row of odd width ends with a
// position past the row, whose gradient is zero and whose input (at the next tap's column) must not
// be multiplied by it. An infinity in the last input column reaches only the taps that read it
// there (kx = 2 of a 3-wide kernel over 5 output columns), for the float64 path and bfloat16 alike.
TEST(Conv2dBfloat16, AnInfinityReachesOnlyTheWeightGradientTapsThatReadIt) {
  ember::manual_seed(73);
  for (const ember::DType dtype : {ember::kFloat64, ember::kBFloat16}) {
    Tensor x = ember::randn({2, 16, 6, 7});
    x.select(3, 6).fill_(std::numeric_limits<double>::infinity());
    const Tensor xl = x.to(dtype), w = ember::randn({32, 16, 3, 3}).to(dtype).requires_grad_();
    const Tensor out = F::conv2d(xl, w, std::nullopt, 1, 0);
    ASSERT_EQ(out.size(3), 5);
    const Tensor gw = ember::autograd::grad({out.sum()}, {w})[0].to(ember::kFloat64);
    for (int64_t kx = 0; kx < 3; ++kx) {
      const std::vector<double> values = gw.select(3, kx).contiguous().to_vector<double>();
      const auto finite = std::count_if(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
      EXPECT_EQ(finite, kx < 2 ? static_cast<int64_t>(values.size()) : 0) << "kx " << kx << " " << dtype;
    }
  }
}

// The compiler fuses a ReLU or a residual add into a float32 convolution's epilogue; the bfloat16
// kernel has none, so a compiled bfloat16 block replays its ops apart, bit for bit as eager.
TEST(Conv2dBfloat16, CompiledBlockMatchesEagerBitForBit) {
  ember::manual_seed(71);
  const Tensor w = ember::randn({8, 8, 3, 3}).to(ember::kBFloat16), b = ember::randn({8}).to(ember::kBFloat16);
  const auto block = [&](const Tensor& x) { return std::vector<Tensor>{ember::relu(F::conv2d(x, w, b, 1, 1) + x)}; };
  auto compiled = ember::compile(block);
  for (int call = 0; call < 3; ++call) {
    const Tensor x = ember::randn({2, 8, 30, 30}).to(ember::kBFloat16);
    const Tensor got = compiled(x)[0], want = block(x)[0];
    ASSERT_EQ(got.dtype(), ember::kBFloat16);
    EXPECT_TRUE(golden::all_close(got, want, {0, 0})) << "call " << call;
  }
  EXPECT_EQ(compiled.stats().compiles, 1);
}

// The packed weight is kept on the weight's storage (Note [derived forms]) and must follow every
// write: an in-place op, copy_, an optimizer step, two views of one storage, and a compiled
// function whose captured weight is written between calls.
TEST(Conv2dBlocked, PackedWeightFollowsWrites) {
  ember::manual_seed(59);
  const Tensor x = ember::randn({2, 16, 6, 6});
  Tensor w = ember::randn({32, 16, 3, 3});
  const auto expect_matches = [&](const Tensor& weight, const Tensor& got) {
    EXPECT_TRUE(golden::all_close(got.to(ember::kFloat64), reference_conv(x, weight, ember::zeros({32}), 1, 1, 1, 1),
                                  {2e-4, 2e-4}));
  };
  expect_matches(w, F::conv2d(x, w, std::nullopt, 1, 1));
  w.mul_(-2.0);
  expect_matches(w, F::conv2d(x, w, std::nullopt, 1, 1));
  w.copy_(ember::randn({32, 16, 3, 3}));
  expect_matches(w, F::conv2d(x, w, std::nullopt, 1, 1));

  const Tensor p = ember::randn({32, 16, 3, 3}).requires_grad_();
  ember::optim::SGD sgd({p}, {.lr = 0.5});
  expect_matches(p.detach(), F::conv2d(x, p, std::nullopt, 1, 1));
  F::conv2d(x, p, std::nullopt, 1, 1).sum().backward();
  sgd.step();
  expect_matches(p.detach(), F::conv2d(x, p, std::nullopt, 1, 1));

  const Tensor both = ember::randn({64, 16, 3, 3});
  const Tensor first = both.slice(0, 0, 32), second = both.slice(0, 32, 64);
  expect_matches(first, F::conv2d(x, first, std::nullopt, 1, 1));
  expect_matches(second, F::conv2d(x, second, std::nullopt, 1, 1));

  Tensor captured = ember::randn({32, 16, 3, 3});
  auto compiled = ember::compile([&](const Tensor& input) { return F::conv2d(input, captured, std::nullopt, 1, 1); });
  expect_matches(captured, compiled(x));
  captured.add_(1.0);
  expect_matches(captured, compiled(x));
}

// conv_transpose2d's output and gradients in float64 by scattering: input element (n, c, ih, iw)
// adds input * weight[c, o, ki, kj] to output (n, group's o, ih * stride - pad + ki * dilation, ...);
// the gradients follow the same pairs. Returns {out, grad_input, grad_weight, grad_bias} for the
// output gradient `cot`.
std::vector<Tensor> reference_conv_transpose(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                             const Tensor& cot, ember::Pair stride, ember::Pair pad,
                                             ember::Pair dilation, int64_t groups) {
  const Tensor x = input.to(ember::kFloat64).contiguous(), w = weight.to(ember::kFloat64).contiguous();
  const Tensor b = bias.to(ember::kFloat64).contiguous(), g = cot.to(ember::kFloat64).contiguous();
  const int64_t batch = x.size(0), in_c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t in_per_group = in_c / groups, out_per_group = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t out_c = out_per_group * groups, oh_size = g.size(2), ow_size = g.size(3);
  Tensor out = ember::zeros({batch, out_c, oh_size, ow_size}, ember::kFloat64);
  Tensor grad_x = ember::zeros(x.shape(), ember::kFloat64), grad_w = ember::zeros(w.shape(), ember::kFloat64);
  const double *xp = x.data_ptr<double>(), *wp = w.data_ptr<double>(), *gp = g.data_ptr<double>();
  double *op = out.data_ptr<double>(), *gxp = grad_x.data_ptr<double>(), *gwp = grad_w.data_ptr<double>();
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t c = 0; c < in_c; ++c) {
      const int64_t group = c / in_per_group;
      for (int64_t ih = 0; ih < h; ++ih) {
        for (int64_t iw = 0; iw < wd; ++iw) {
          const int64_t xi = ((n * in_c + c) * h + ih) * wd + iw;
          for (int64_t o = 0; o < out_per_group; ++o) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t oh = ih * stride.h - pad.h + i * dilation.h, ow = iw * stride.w - pad.w + j * dilation.w;
                if (oh < 0 || oh >= oh_size || ow < 0 || ow >= ow_size) continue;
                const int64_t oi = ((n * out_c + group * out_per_group + o) * oh_size + oh) * ow_size + ow;
                const int64_t wi = ((c * out_per_group + o) * kh + i) * kw + j;
                op[oi] += xp[xi] * wp[wi];
                gxp[xi] += gp[oi] * wp[wi];
                gwp[wi] += gp[oi] * xp[xi];
              }
            }
          }
        }
      }
    }
  }
  return {out + b.view({1, out_c, 1, 1}), grad_x, grad_w, g.sum({0, 2, 3})};
}

// The kernels' paths under conv_transpose2d: a 1x1 kernel whose output_padding (allowed by the
// dilation) makes the output larger than the input (the input gradient then cannot use the image as
// its own column matrix), the direct kernels (stride 1, small patch, rows of 8 and more), banded
// im2col in the backward's conv2d (64 output channels), groups with rectangular everything, and
// depthwise.
TEST(ConvTranspose2d, KernelPathsMatchTheScatterReference) {
  ember::manual_seed(54);
  struct Case {
    std::vector<int64_t> x, w;
    ember::Pair stride, pad, output_padding, dilation;
    int64_t groups;
  };
  for (const Case& c :
       {Case{{2, 5, 6, 7}, {5, 4, 1, 1}, 1, 0, 1, 2, 1}, Case{{1, 2, 6, 10}, {2, 3, 3, 3}, 1, 1, 0, 1, 1},
        Case{{1, 8, 20, 20}, {8, 64, 3, 3}, 1, 1, 0, 1, 1},
        Case{{2, 6, 4, 5}, {6, 2, 3, 2}, {2, 3}, {1, 0}, {1, 2}, {1, 2}, 3},
        // Depthwise (its conv2d's input gradient is the depthwise kernel's): stride 2 with an
        // output padding, and stride 1 with dilation 2 and two channels per group.
        Case{{2, 4, 5, 7}, {4, 1, 3, 3}, 2, 1, 1, 1, 4}, Case{{1, 6, 6, 9}, {6, 1, 3, 3}, 1, 1, 1, 2, 3}}) {
    SCOPED_TRACE(::testing::Message() << "x " << ember::Shape(c.x) << " w " << ember::Shape(c.w));
    for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
      const Tensor x = ember::randn(c.x, dtype).requires_grad_(), w = ember::randn(c.w, dtype).requires_grad_();
      const Tensor b = ember::randn({c.w[1] * c.groups}, dtype).requires_grad_();
      const Tensor out = F::conv_transpose2d(x, w, b, c.stride, c.pad, c.output_padding, c.groups, c.dilation);
      const Tensor cot = ember::randn(out.shape(), dtype);
      out.backward(cot);
      const std::vector<Tensor> expected =
          reference_conv_transpose(x.detach(), w.detach(), b.detach(), cot, c.stride, c.pad, c.dilation, c.groups);
      const double tol = dtype == ember::kFloat32 ? 2e-4 : 1e-10;
      const std::vector<Tensor> got = {out.detach(), x.grad(), w.grad(), b.grad()};
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(golden::all_close(got[i].to(ember::kFloat64), expected[i], {tol, tol}))
            << "result " << i << " " << dtype;
      }
    }
  }
}

// float16 and bfloat16 compute in float32 and round once. A compiled function replays the traced
// kernels (conv2d_input_grad and the bias add forward; conv2d, conv2d_weight_grad and the sum
// backward) with the eager results.
TEST(ConvTranspose2d, HalfPrecisionAndCompiledReplay) {
  ember::manual_seed(55);
  const Tensor x = ember::randn({2, 3, 4, 4}), w = ember::randn({3, 2, 3, 3}), b = ember::randn({2});
  for (const ember::DType dtype : {ember::kFloat16, ember::kBFloat16}) {
    const Tensor xh = x.to(dtype), wh = w.to(dtype), bh = b.to(dtype);
    const Tensor out = F::conv_transpose2d(xh, wh, bh, 2, 1, 1);
    EXPECT_EQ(out.dtype(), dtype);
    const Tensor expected =
        F::conv_transpose2d(xh.to(ember::kFloat32), wh.to(ember::kFloat32), bh.to(ember::kFloat32), 2, 1, 1).to(dtype);
    EXPECT_TRUE(golden::all_close(out, expected, {0, 0})) << dtype;
  }

  const auto forward_and_grads = [&](const Tensor& input) {
    const Tensor xl = input.detach().requires_grad_(), wl = w.detach().requires_grad_();
    const Tensor bl = b.detach().requires_grad_();
    const Tensor out = F::conv_transpose2d(xl, wl, bl, 2, 1, 1);
    std::vector<Tensor> results = ember::autograd::grad({(out * out).sum()}, {xl, wl, bl});
    results.insert(results.begin(), out.detach());
    return results;
  };
  auto compiled = ember::compile(forward_and_grads);
  for (int call = 0; call < 3; ++call) {
    const Tensor input = ember::randn({2, 3, 4, 4});
    const std::vector<Tensor> got = compiled(input), want = forward_and_grads(input);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(golden::all_close(got[i], want[i], {1e-6, 1e-6})) << i;
  }
  EXPECT_EQ(compiled.stats().compiles, 1);
}

TEST(ReluBackward, FollowsPyTorchAtZeroNegativeAndNaN) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64}) {
    std::vector<double> xs = {-2.0, -0.0, 0.0, 1e-30, 3.0, kNaN, -kNaN, 5.0};
    const Tensor x = ember::from_blob(xs.data(), {8}, ember::kFloat64).to(dtype).requires_grad_();
    const Tensor y = ember::relu(x);
    std::vector<double> gs = {1, 2, 3, 4, 5, 6, 7, 8};
    y.backward(ember::from_blob(gs.data(), {8}, ember::kFloat64).to(dtype));
    const Tensor grad = x.grad().to(ember::kFloat64);
    const double* g = grad.data_ptr<double>();
    // x <= 0 (either zero included) blocks; NaN keeps its NaN output and so passes (PyTorch's
    // threshold_backward: out <= 0 ? 0 : grad).
    const std::vector<double> expected = {0, 0, 0, 4, 5, 6, 7, 8};
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(g[i], expected[i]) << "element " << i << " " << dtype;
  }
}

TEST(ReluBackward, FusedAndCompositePathsAgree) {
  ember::manual_seed(53);
  // Big enough to be threaded; a non-contiguous gradient takes the composite path.
  const Tensor x = ember::randn({300, 257}).requires_grad_();
  const Tensor cot = ember::randn({257, 300}).t();
  ember::relu(x).backward(cot);
  const Tensor expected = ember::where(ember::gt(x.detach(), 0), cot, 0.0);
  EXPECT_TRUE(golden::all_close(x.grad(), expected, {0, 0}));
  x.grad().zero_();
  ember::relu(x).backward(cot.contiguous());
  EXPECT_TRUE(golden::all_close(x.grad(), expected, {0, 0}));
  // float64 gradcheck away from the kink.
  const Tensor xd = ember::randn({5, 7}, ember::kFloat64).add(0.05).requires_grad_();
  EXPECT_TRUE(ember::autograd::gradcheck([](const std::vector<Tensor>& in) { return ember::relu(in[0]); }, {xd}));
}

}  // namespace
