// 2-D convolution by im2col + GEMM, and the registry's entries, which send float32 convolutions the
// blocked kernels take (conv_nchwc.cpp, Note [blocked convolution]) there first, and depthwise ones
// to their own kernels (conv_depthwise.cpp, Note [depthwise convolution]).
//
// For one image and one group, with K = in_channels / groups * kernel_h * kernel_w and P =
// out_height * out_width:
//   forward          out (C_out/g, P)  = weight (C_out/g, K) @ columns (K, P)           (+ bias per row)
//   grad input       dcolumns (K, P)   = weight^T (K, C_out/g) @ grad_out (C_out/g, P), then col2im
//   grad weight      dweight (C_out/g, K) += grad_out (C_out/g, P) @ columns^T (P, K)
// where row (c, ki, kj) of `columns` holds, for every output position, the input element that
// kernel tap (ki, kj) of channel c sees there (0 in the padding). The GEMM reads columns^T through
// its strides. Grad input transposes the weight once per call (the GEMM packs its A operand for
// every image, and packing rows is cheaper than gathering columns); grad weight puts several
// images' columns and output gradients side by side to make one deeper GEMM (Note
// [deterministic weight gradient]).
//
// im2col and col2im work a whole output row at a time: for each kernel tap the range of output
// columns that land inside the image is computed once, so the inner loop is a plain copy (stride 1)
// or a strided gather, with no bounds test per element. In the forward and grad input, a 1x1 kernel
// with stride 1 and no padding needs no columns at all: the image (C, H*W) is its own column matrix.
//
// Threads go over the images: each image's im2col and GEMMs run on one thread with its own column
// buffer (the GEMMs of a CNN's images are small, so this beats splitting each GEMM). A GEMM called
// inside one of those tasks runs on that task's thread (parallel.h); a single image runs on the
// calling thread and leaves the threads to the GEMM.
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "ember/error.h"
#include "ember/half.h"
#include "kernels/cpu/conv_depthwise.h"
#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/conv_nchwc_bf16.h"
#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/float_dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/registry.h"
#include "kernels/cpu/scalar_math.h"

namespace ember::cpu {
namespace {

// The sizes every kernel derives from the geometry.
struct Sizes {
  int64_t in_per_group;   // input channels per group
  int64_t out_per_group;  // output channels per group
  int64_t patch;          // K: rows of one group's column matrix
  int64_t in_plane;       // in_height * in_width
  int64_t out_plane;      // P: out_height * out_width
  bool pointwise;         // 1x1 kernel, stride 1, no padding, input and output of one size: the
                          // image is its own column matrix
};

Sizes sizes_of(const Conv2dGeometry& g) {
  Sizes s{};
  s.in_per_group = g.in_channels / g.groups;
  s.out_per_group = g.out_channels / g.groups;
  s.patch = s.in_per_group * g.kernel_h * g.kernel_w;
  s.in_plane = g.in_height * g.in_width;
  s.out_plane = g.out_height * g.out_width;
  // The sizes must be compared too: an input gradient may be asked for a larger input than the
  // output reaches (conv_transpose2d's output_padding, with dilation > 1), and its extra rows and
  // columns are zeros that col2im writes.
  s.pointwise = g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 &&
                g.pad_w == 0 && g.in_height == g.out_height && g.in_width == g.out_width;
  return s;
}

// For one kernel tap along one axis: output position o reads input position o * stride + offset,
// which is inside [0, in_size) exactly for o in [first, last).
struct TapRange {
  int64_t first;
  int64_t last;
  int64_t offset;
};

TapRange tap_range(int64_t out_size, int64_t in_size, int64_t stride, int64_t offset) {
  // first: the least o with o * stride + offset >= 0; last: one past the greatest with
  // o * stride + offset <= in_size - 1.
  int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t last = in_size - 1 - offset < 0 ? 0 : (in_size - 1 - offset) / stride + 1;
  first = std::min(first, out_size);
  last = std::clamp(last, first, out_size);
  return {first, last, offset};
}

// Grow-only buffers owned by the calling thread (the pool's threads live as long as the process), so a
// training loop allocates its column buffers once.
enum class Slot : int {
  kColumns,
  kPartials,
  kWeightT,
  kPadded,
  kSums,
  // A bfloat16 convolution run in float32: its operands widened, and the result before rounding.
  kWidened0,
  kWidened1,
  kWidened2,
  kResult,
  kCount
};

template <class T>
T* thread_buffer(Slot slot, int64_t count) {
  thread_local std::vector<T> buffers[static_cast<int>(Slot::kCount)];
  std::vector<T>& buffer = buffers[static_cast<int>(slot)];
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

// Copies n elements. The rows im2col copies are a feature map's width, often a handful of
// elements, and a call to memmove per row would cost more than the copy: short rows go in
// fixed-size blocks, which compile to a few vector moves.
template <class T>
inline void copy_row(const T* src, T* dst, int64_t n) {
  if (n >= 64) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) std::memcpy(dst + i, src + i, 8 * sizeof(T));
  if (n - i >= 4) {
    std::memcpy(dst + i, src + i, 4 * sizeof(T));
    i += 4;
  }
  for (; i < n; ++i) dst[i] = src[i];
}

// Zeroes n elements; n is often 0 (no padding on that side), which then costs nothing.
template <class T>
inline void zero_row(T* dst, int64_t n) {
  if (n > 0) std::fill(dst, dst + n, T(0));
}

// columns (in_channels * kernel_h * kernel_w, band) from one image (in_channels, H, W), for the
// output rows [oh_begin, oh_end) (band = (oh_end - oh_begin) * out_width positions); consecutive
// rows of `columns` are row_stride elements apart (the band's size for one image alone).
template <class T>
void im2col(const Conv2dGeometry& g, const T* image, T* columns, int64_t row_stride, int64_t oh_begin, int64_t oh_end) {
  const int64_t out_w = g.out_width;
  // Channel outermost: the rows of `columns` are written in order, each channel's plane is read
  // while it is in L1. Channels split over the threads (a single image's columns would otherwise
  // be copied by one thread while the others wait for the GEMM); inside a task, inline.
  const int64_t per_channel = g.kernel_h * g.kernel_w * (oh_end - oh_begin) * out_w;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, per_channel));
  parallel_for(0, g.in_channels, grain, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const T* src = image + c * g.in_height * g.in_width;
      for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
        const TapRange all_rows = tap_range(g.out_height, g.in_height, g.stride_h, ki * g.dilation_h - g.pad_h);
        // The band's part of the rows that land inside the image; the rest is padding (zeros).
        TapRange rows = all_rows;
        rows.first = std::clamp(all_rows.first, oh_begin, oh_end);
        rows.last = std::clamp(all_rows.last, rows.first, oh_end);
        for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
          const TapRange cols = tap_range(out_w, g.in_width, g.stride_w, kj * g.dilation_w - g.pad_w);
          // Indexed by output row: dst + oh * out_w is the band's row oh.
          T* dst = columns + ((c * g.kernel_h + ki) * g.kernel_w + kj) * row_stride - oh_begin * out_w;
          zero_row(dst + oh_begin * out_w, (rows.first - oh_begin) * out_w);
          for (int64_t oh = rows.first; oh < rows.last; ++oh) {
            T* d = dst + oh * out_w;
            const T* s = src + (oh * g.stride_h + rows.offset) * g.in_width;
            zero_row(d, cols.first);
            if (g.stride_w == 1) {
              copy_row(s + cols.first + cols.offset, d + cols.first, cols.last - cols.first);
            } else {
              for (int64_t ow = cols.first; ow < cols.last; ++ow) d[ow] = s[ow * g.stride_w + cols.offset];
            }
            zero_row(d + cols.last, out_w - cols.last);
          }
          zero_row(dst + rows.last * out_w, (oh_end - rows.last) * out_w);
        }
      }
    }
  });
}

// image (in_channels, H, W) = the sum of every column entry into the input element it came from
// (the adjoint of im2col). The image is overwritten.
template <class T>
void col2im(const Conv2dGeometry& g, const T* columns, T* image) {
  const int64_t out_w = g.out_width, plane = g.out_height * g.out_width;
  for (int64_t c = 0; c < g.in_channels; ++c) {
    T* dst = image + c * g.in_height * g.in_width;
    std::fill(dst, dst + g.in_height * g.in_width, T(0));
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      const TapRange rows = tap_range(g.out_height, g.in_height, g.stride_h, ki * g.dilation_h - g.pad_h);
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const TapRange cols = tap_range(out_w, g.in_width, g.stride_w, kj * g.dilation_w - g.pad_w);
        const T* src = columns + ((c * g.kernel_h + ki) * g.kernel_w + kj) * plane;
        for (int64_t oh = rows.first; oh < rows.last; ++oh) {
          const T* s = src + oh * out_w;
          T* d = dst + (oh * g.stride_h + rows.offset) * g.in_width;
          if (g.stride_w == 1) {
            for (int64_t ow = cols.first; ow < cols.last; ++ow) d[ow + cols.offset] += s[ow];
          } else {
            for (int64_t ow = cols.first; ow < cols.last; ++ow) d[ow * g.stride_w + cols.offset] += s[ow];
          }
        }
      }
    }
  }
}

// Runs body(n) for every image, images split over the threads (see the top of the file).
template <class F>
void for_each_image(int64_t batch, const F& body) {
  parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) body(n);
  });
}

template <class T>
GemmArgs gemm_args(int64_t m, int64_t n, int64_t k) {
  GemmArgs args;
  args.dtype = std::is_same_v<T, float> ? kFloat32 : kFloat64;
  args.m = m;
  args.n = n;
  args.k = k;
  return args;
}

// Note [forward bands]: a big image's column matrix (K x P) does not fit in L2 (a 64-channel
// 56 x 56 map with a 3 x 3 kernel makes 7 MiB), and writing it out only for the GEMM to read it
// back while packing costs as much as a third of the GEMM (perf, 1 thread: pack_b 21% and im2col
// 12% of conv2d_f32_resnet). So the forward builds the columns for a band of output rows at a
// time, about kBandBudget bytes, and runs the GEMM on that band, so the columns are still in
// cache when the GEMM packs them. The GEMM packs the weight once per band instead of once per
// image, so a band is kept at least kMinBandPositions wide (for the ResNet shape that wins over
// the budget: 5 rows of 56, about 640 KiB), which keeps that repacking near a fifth of the
// columns' volume. Small images (a CNN on MNIST) are one band.
constexpr int64_t kBandBudget = int64_t{256} << 10;
constexpr int64_t kMinBandPositions = 256;

template <class T>
int64_t band_rows(const Conv2dGeometry& g) {
  const int64_t row_bytes = g.in_channels * g.kernel_h * g.kernel_w * g.out_width * static_cast<int64_t>(sizeof(T));
  const int64_t rows = std::max(kBandBudget / row_bytes, (kMinBandPositions + g.out_width - 1) / g.out_width);
  return std::clamp<int64_t>(rows, 1, g.out_height);
}

// Note [direct convolution]: im2col copies each input value kernel_h * kernel_w times, and then
// the GEMM packs the copy again; for a kernel over few input channels (MNIST's first layer: one
// channel, 5 x 5, k = 25) that copying costs more than the multiply-adds, and a GEMM with k = 25
// runs far from the FMA peak. The direct kernels (conv_direct.h) read the image in place. They
// take stride 1, dilation 1, one group, kernel_w <= 7 and rows at least one vector (8) wide;
// measured on 2 threads against im2col + GEMM, interleaved (ember bench; `ember train mnist
// --profile` for the backward):
// - forward: MNIST's first layer 228 -> 87 us (32 x 1 x 28 x 28, 5 x 5), its second 1152 ->
//   610 us (64 x 16 x 12 x 12, 5 x 5); in a training epoch all conv2d forwards 104 -> 52 ms; the
//   ResNet layer (64 channels, 56 x 56, 3 x 3) 49.3 -> 43.2 ms. But the ResNet block at 28 x 28
//   (rows of 3.5 vectors) took 46.5 ms direct, 42.1 with its forwards through im2col, 41.3 all
//   through im2col. Hence direct_forward_wins.
// - weight gradient: the epoch's conv2d_weight_grad 116 -> 56 ms; neutral on the ResNet block;
//   the same rule.
// - input gradient: a direct forward of the output gradient padded by kernel - 1 - padding, with
//   the weight flipped and transposed. The padding's zeros cost multiply-adds too: for MNIST's
//   second layer (8 x 8 outputs, 5 x 5, 32 channels) 60 -> 204 ms an epoch. So only for small
//   patches (out_channels * kh * kw <= kDirectSmallPatch).
constexpr int64_t kDirectSmallPatch = 64;
constexpr double kSerialConvFlops = 2e6;
constexpr int64_t kDirectMaxPatch = 640;
constexpr int64_t kDirectVector = 8;

bool direct_shape(const Conv2dGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 && g.groups == 1 &&
         g.kernel_w <= 7;
}

// The forward and the weight gradient: rows of whole vectors (a last, partial vector in every
// strip costs as much as a whole one) and patches up to kDirectMaxPatch, or any rows at least a
// vector wide when the patch is small.
bool direct_forward_wins(const Conv2dGeometry& g) {
  const int64_t patch = g.in_channels * g.kernel_h * g.kernel_w;
  return direct_shape(g) && g.out_width >= kDirectVector &&
         (patch <= kDirectSmallPatch || (patch <= kDirectMaxPatch && g.out_width % kDirectVector == 0));
}

// Copies `channels` planes (height x width) into `padded` with pad_h / pad_w zeros around each.
template <class T>
void pad_planes(const T* planes, int64_t channels, int64_t height, int64_t width, int64_t pad_h, int64_t pad_w,
                T* padded) {
  const int64_t padded_width = width + 2 * pad_w, padded_plane = (height + 2 * pad_h) * padded_width;
  for (int64_t c = 0; c < channels; ++c) {
    T* dst = padded + c * padded_plane;
    std::fill(dst, dst + padded_plane, T(0));
    for (int64_t y = 0; y < height; ++y) {
      copy_row(planes + (c * height + y) * width, dst + (y + pad_h) * padded_width + pad_w, width);
    }
  }
}

// out (batch images of `out` planes) = the direct convolution of `input` (batch images of
// in_channels planes of in_height x in_width, padded here by pad_h / pad_w) with `weight`
// ((out_channels, in_channels, kh, kw)) plus bias, then activation(out + residual) as each strip is
// stored (residual: laid out as out, or null), then with pool = 2 a 2 x 2 max pooling (out then
// holds the pooled planes). Tasks: images times bands of output rows (bands only when there are too
// few images to go round).
template <class T>
void direct_forward(const T* input, int64_t batch, int64_t in_channels, int64_t in_height, int64_t in_width,
                    int64_t pad_h, int64_t pad_w, const T* weight, const T* bias, int64_t out_channels,
                    int64_t kernel_h, int64_t kernel_w, T* out, const T* residual = nullptr,
                    Activation activation = Activation::kNone, int64_t pool = 1) {
  DirectConv<T> c;
  c.weight = weight;
  c.bias = bias;
  c.activation = activation;
  c.in_channels = in_channels;
  c.in_height = in_height + 2 * pad_h;
  c.in_width = in_width + 2 * pad_w;
  c.out_channels = out_channels;
  c.out_height = c.in_height - kernel_h + 1;
  c.out_width = c.in_width - kernel_w + 1;
  c.kernel_h = kernel_h;
  c.kernel_w = kernel_w;
  c.pool = pool;
  // A convolution of a few hundred thousand multiply-adds (one MNIST image) runs on the calling
  // thread: waking another costs as much as it would save, and far more when that core is busy.
  const double flops = 2.0 * static_cast<double>(batch * out_channels * c.out_height * c.out_width) *
                       static_cast<double>(in_channels * kernel_h * kernel_w);
  const int threads = flops < kSerialConvFlops ? 1 : num_threads();
  const int64_t rows = c.out_height / pool;  // of `out`
  const int64_t bands = std::clamp<int64_t>((threads * kTasksPerThread + batch - 1) / batch, 1, rows);
  const int64_t in_image = in_channels * in_height * in_width, conv_image = out_channels * c.out_height * c.out_width;
  const int64_t out_image = out_channels * rows * (c.out_width / pool);
  parallel_for_threads(threads, 0, batch * bands, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n = t / bands, band = t % bands;
      DirectConv<T> image = c;
      image.input = input + n * in_image;
      if (pad_h > 0 || pad_w > 0) {
        T* padded = thread_buffer<T>(Slot::kPadded, in_channels * c.in_height * c.in_width);
        pad_planes(image.input, in_channels, in_height, in_width, pad_h, pad_w, padded);
        image.input = padded;
      }
      image.out = out + n * out_image;
      if (residual != nullptr) image.residual = residual + n * conv_image;
      direct_forward_rows(image, 0, out_channels, band * rows / bands, (band + 1) * rows / bands);
    }
  });
}

OpKind activation_op(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return OpKind::kRelu;
    case Activation::kGeluErf:
      return OpKind::kGeluErf;
    case Activation::kGeluTanh:
      return OpKind::kGeluTanh;
    case Activation::kSilu:
      return OpKind::kSilu;
    case Activation::kNone:
      break;
  }
  EMBER_CHECK(false, "[conv2d] internal error: no op for this activation");
  return OpKind::kRelu;
}

// The epilogue after the im2col path: out = activation(out + residual), the activation through
// the elementwise op's row function where it has one for T (so each value gets the op's bits),
// else through its scalar form, as the op computes it then.
template <class T>
void finish(T* o, int64_t count, const T* residual, Activation activation) {
  const simd::UnaryRowFn row =
      activation != Activation::kNone ? simd::unary_row_fn(activation_op(activation), dtype_of<T>()) : nullptr;
  parallel_for(0, count, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    if (residual != nullptr) {
      for (int64_t i = begin; i < end; ++i) o[i] += residual[i];
    }
    if (activation == Activation::kNone || (row != nullptr && row(o + begin, o + begin, end - begin) == end - begin))
      return;
    for (int64_t i = begin; i < end; ++i) o[i] = scalar::activate(activation, o[i]);
  });
}

template <class T>
void forward(const Conv2dGeometry& g, const T* input, const T* weight, const T* bias, T* out, const T* residual,
             Activation activation) {
  if (depthwise_takes(g)) return depthwise_forward(g, input, weight, bias, out, residual, activation);
  if (direct_forward_wins(g)) {
    return direct_forward(input, g.batch, g.in_channels, g.in_height, g.in_width, g.pad_h, g.pad_w, weight, bias,
                          g.out_channels, g.kernel_h, g.kernel_w, out, residual, activation);
  }
  const Sizes s = sizes_of(g);
  const int64_t rows_per_band = s.pointwise ? g.out_height : band_rows<T>(g);
  for_each_image(g.batch, [&](int64_t n) {
    const T* image = input + n * g.in_channels * s.in_plane;
    T* out_image = out + n * g.out_channels * s.out_plane;
    for (int64_t oh0 = 0; oh0 < g.out_height; oh0 += rows_per_band) {
      const int64_t oh1 = std::min(g.out_height, oh0 + rows_per_band), band = (oh1 - oh0) * g.out_width;
      const T* columns = image;  // pointwise: the image is its own column matrix (one band)
      if (!s.pointwise) {
        T* buffer = thread_buffer<T>(Slot::kColumns, g.in_channels * g.kernel_h * g.kernel_w * band);
        im2col(g, image, buffer, band, oh0, oh1);
        columns = buffer;
      }
      for (int64_t group = 0; group < g.groups; ++group) {
        GemmArgs args = gemm_args<T>(s.out_per_group, band, s.patch);
        args.a = weight + group * s.out_per_group * s.patch;
        args.a_row_stride = s.patch;
        args.a_col_stride = 1;
        args.b = columns + group * s.patch * band;
        args.b_row_stride = band;
        args.b_col_stride = 1;
        args.c = out_image + group * s.out_per_group * s.out_plane + oh0 * g.out_width;  // the band's columns
        args.c_row_stride = s.out_plane;
        args.c_col_stride = 1;
        gemm(args);
      }
    }
    if (bias != nullptr) {
      // The GEMM's bias epilogue is per column; here the bias is per row (output channel), added
      // while the image's output is still in cache.
      for (int64_t oc = 0; oc < g.out_channels; ++oc) {
        T* row = out_image + oc * s.out_plane;
        const T b = bias[oc];
        for (int64_t p = 0; p < s.out_plane; ++p) row[p] += b;
      }
    }
  });
  if (residual != nullptr || activation != Activation::kNone)
    finish(out, g.batch * g.out_channels * g.out_height * g.out_width, residual, activation);
}

// flipped (in_channels, out_channels, kh, kw) = weight (out_channels, in_channels, kh, kw) with its
// channels swapped and its taps reversed in both spatial dims (one group): the weight of the
// forward convolution that computes an input gradient.
template <class T>
void flip_weight(const Conv2dGeometry& g, const T* weight, T* flipped) {
  const int64_t taps = g.kernel_h * g.kernel_w;
  for (int64_t o = 0; o < g.out_channels; ++o) {
    for (int64_t i = 0; i < g.in_channels; ++i) {
      for (int64_t t = 0; t < taps; ++t) {
        flipped[(i * g.out_channels + o) * taps + (taps - 1 - t)] = weight[(o * g.in_channels + i) * taps + t];
      }
    }
  }
}

template <class T>
void backward_input(const Conv2dGeometry& g, const T* grad_out, const T* weight, T* grad_input) {
  if (depthwise_input_grad_takes(g)) return depthwise_backward_input(g, grad_out, weight, grad_input);
  if (direct_shape(g) && g.out_channels * g.kernel_h * g.kernel_w <= kDirectSmallPatch && g.in_width >= kDirectVector &&
      g.pad_h < g.kernel_h && g.pad_w < g.kernel_w) {
    // The direct forward of grad_out padded by kernel - 1 - pad, with the weight transposed to
    // (in_channels, out_channels, kh, kw) and flipped in both spatial dims.
    T* flipped = thread_buffer<T>(Slot::kWeightT, g.out_channels * g.in_channels * g.kernel_h * g.kernel_w);
    flip_weight(g, weight, flipped);
    return direct_forward(grad_out, g.batch, g.out_channels, g.out_height, g.out_width, g.kernel_h - 1 - g.pad_h,
                          g.kernel_w - 1 - g.pad_w, static_cast<const T*>(flipped), static_cast<const T*>(nullptr),
                          g.in_channels, g.kernel_h, g.kernel_w, grad_input);
  }
  const Sizes s = sizes_of(g);
  // weight^T per group, (K, C_out/g) with rows contiguous, made once: the GEMM packs its A operand
  // for every image, and packing rows is much cheaper than gathering columns.
  T* weight_t = thread_buffer<T>(Slot::kWeightT, g.out_channels * s.patch);
  for (int64_t group = 0; group < g.groups; ++group) {
    const T* w = weight + group * s.out_per_group * s.patch;
    T* wt = weight_t + group * s.out_per_group * s.patch;
    for (int64_t o = 0; o < s.out_per_group; ++o) {
      for (int64_t k = 0; k < s.patch; ++k) wt[k * s.out_per_group + o] = w[o * s.patch + k];
    }
  }
  for_each_image(g.batch, [&](int64_t n) {
    T* image = grad_input + n * g.in_channels * s.in_plane;
    T* columns =
        s.pointwise ? image : thread_buffer<T>(Slot::kColumns, g.in_channels * g.kernel_h * g.kernel_w * s.out_plane);
    const T* grad_image = grad_out + n * g.out_channels * s.out_plane;
    for (int64_t group = 0; group < g.groups; ++group) {
      GemmArgs args = gemm_args<T>(s.patch, s.out_plane, s.out_per_group);
      args.a = weight_t + group * s.out_per_group * s.patch;  // weight^T: (K, C_out/g)
      args.a_row_stride = s.out_per_group;
      args.a_col_stride = 1;
      args.b = grad_image + group * s.out_per_group * s.out_plane;
      args.b_row_stride = s.out_plane;
      args.b_col_stride = 1;
      args.c = columns + group * s.patch * s.out_plane;
      args.c_row_stride = s.out_plane;
      args.c_col_stride = 1;
      gemm(args);
    }
    if (!s.pointwise) col2im(g, columns, image);
  });
}

// Note [deterministic weight gradient]
// The weight gradient sums over the batch. The images are cut into at most kWeightPartials
// contiguous ranges by the batch size alone; each range accumulates its images in order into its
// own partial sum (one range per task, tasks spread over the threads), and the partial sums are
// then added in range order. So the result is bitwise the same for any thread count.
//
// Within a range, several images go through one GEMM: their columns side by side (K, images * P)
// and their output gradients side by side (C_out, images * P), so the GEMM's k is images * P
// rather than P: fewer, deeper products, and C is written once per GEMM instead of once per image.
// The number of images per GEMM depends on the sizes alone (a column buffer of about
// kColumnBudget elements), so the order of the sums does too.
constexpr int64_t kWeightPartials = 16;
constexpr int64_t kColumnBudget = int64_t{1} << 20;

// The direct weight gradient (Note [direct convolution]): tasks over (output channels in fours,
// input channel, kernel row), each summing over the whole batch in order, so the result does not
// depend on the thread count either.
template <class T>
void direct_backward_weight(const Conv2dGeometry& g, const T* grad_out, const T* input, T* grad_weight) {
  DirectConv<T> c;
  c.input = input;
  c.in_channels = g.in_channels;
  c.in_height = g.in_height + 2 * g.pad_h;
  c.in_width = g.in_width + 2 * g.pad_w;
  c.out_channels = g.out_channels;
  c.out_height = g.out_height;
  c.out_width = g.out_width;
  c.kernel_h = g.kernel_h;
  c.kernel_w = g.kernel_w;
  if (g.pad_h > 0 || g.pad_w > 0) {
    const int64_t padded_image = g.in_channels * c.in_height * c.in_width;
    T* padded = thread_buffer<T>(Slot::kPadded, g.batch * padded_image);
    for (int64_t n = 0; n < g.batch; ++n) {
      pad_planes(input + n * g.in_channels * g.in_height * g.in_width, g.in_channels, g.in_height, g.in_width, g.pad_h,
                 g.pad_w, padded + n * padded_image);
    }
    c.input = padded;
  }
  // Tasks over (output channels in fours, input channel, a range of kernel rows): the fewest ranges
  // that still give each thread two tasks, since a task reads its images' output gradients once
  // for all its kernel rows.
  constexpr int64_t kChannels = 4;
  const int64_t blocks = (g.out_channels + kChannels - 1) / kChannels;
  const int64_t ranges =
      std::clamp<int64_t>(2 * num_threads() / std::max<int64_t>(1, blocks * g.in_channels), 1, g.kernel_h);
  parallel_for(0, blocks * g.in_channels * ranges, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t range = t % ranges, ci = (t / ranges) % g.in_channels, block = t / (ranges * g.in_channels);
      const int64_t co = block * kChannels;
      direct_weight_rows(c, grad_out, g.batch, co, std::min(kChannels, g.out_channels - co), ci,
                         range * g.kernel_h / ranges, (range + 1) * g.kernel_h / ranges, grad_weight);
    }
  });
}

// Images n0.. side by side (Note [deterministic weight gradient]): their columns (K rows of width =
// images * P), then their output gradients (C_out rows of that width), in the calling thread's
// buffer; returns the columns.
template <class T>
const T* gather_images(const Conv2dGeometry& g, const Sizes& s, const T* input, const T* grad_out, int64_t n0,
                       int64_t images) {
  const int64_t rows = g.in_channels * g.kernel_h * g.kernel_w, width = images * s.out_plane;
  T* columns = thread_buffer<T>(Slot::kColumns, (rows + g.out_channels) * width);
  T* grads = columns + rows * width;
  for (int64_t i = 0; i < images; ++i) {
    im2col(g, input + (n0 + i) * g.in_channels * s.in_plane, columns + i * s.out_plane, width, 0, g.out_height);
    const T* grad_image = grad_out + (n0 + i) * g.out_channels * s.out_plane;
    for (int64_t oc = 0; oc < g.out_channels; ++oc) {
      copy_row(grad_image + oc * s.out_plane, grads + oc * width + i * s.out_plane, s.out_plane);
    }
  }
  return columns;
}

template <class T>
void backward_weight(const Conv2dGeometry& g, const T* grad_out, const T* input, T* grad_weight) {
  if (depthwise_takes(g)) return depthwise_backward_weight(g, grad_out, input, grad_weight);
  if (direct_forward_wins(g)) {
    return direct_backward_weight(g, grad_out, input, grad_weight);
  }
  const Sizes s = sizes_of(g);
  const int64_t weight_size = g.out_channels * s.patch;
  const int64_t rows = g.in_channels * g.kernel_h * g.kernel_w;  // columns of every group
  const int64_t partials = std::min(g.batch, kWeightPartials);
  const int64_t per_gemm = std::max<int64_t>(1, kColumnBudget / std::max<int64_t>(1, rows * s.out_plane));
  // Range 0 sums straight into grad_weight; the others into this buffer of the calling thread.
  T* extra = thread_buffer<T>(Slot::kPartials, (partials - 1) * weight_size);
  parallel_for(0, partials, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      T* sum = part == 0 ? grad_weight : extra + (part - 1) * weight_size;
      const int64_t first = part * g.batch / partials, last = (part + 1) * g.batch / partials;
      for (int64_t n0 = first; n0 < last; n0 += per_gemm) {
        const int64_t images = std::min(per_gemm, last - n0), width = images * s.out_plane;
        const T* columns = gather_images(g, s, input, grad_out, n0, images);
        const T* grads = columns + rows * width;  // (C_out, images * P)
        for (int64_t group = 0; group < g.groups; ++group) {
          GemmArgs args = gemm_args<T>(s.out_per_group, s.patch, width);
          args.a = grads + group * s.out_per_group * width;
          args.a_row_stride = width;
          args.a_col_stride = 1;
          args.b = columns + group * s.patch * width;  // columns^T: (images * P, K)
          args.b_row_stride = 1;
          args.b_col_stride = width;
          args.c = sum + group * s.out_per_group * s.patch;
          args.c_row_stride = s.patch;
          args.c_col_stride = 1;
          args.beta = n0 == first ? 0.0 : 1.0;
          gemm(args);
        }
      }
    }
  });
  parallel_for(0, weight_size, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t part = 1; part < partials; ++part) {
      const T* partial = extra + (part - 1) * weight_size;
      for (int64_t i = begin; i < end; ++i) grad_weight[i] += partial[i];
    }
  });
}

// --- bfloat16 ------------------------------------------------------------------------------------
//
// Note [bfloat16 convolution]: with AVX512_BF16 (registered only then), bfloat16 convolutions
// multiply bfloat16 pairs with float32 sums (gemm_bf16.h) instead of widening every operand to
// float32, running the float32 kernels and rounding: the columns are half the bytes, and the
// products run on vdpbf16ps or AMX tiles. Each result is summed in float32 and rounded once, as
// before; only the order of the sums differs from the float32 path. Under autocast this also
// drops the casts of the activations and gradients to float32 and back around each such
// convolution. conv2d_bf16_resnet (32 x 64 x 56 x 56, 3 x 3, forward; 2 threads): 16.9 ms against
// 26.7 ms in float32 and PyTorch's bfloat16 20.6 ms (oneDNN).
// - forward: im2col in bfloat16 for several images side by side (one GEMM of n = images * P: a
//   CNN's 8 x 8 maps make GEMMs too narrow one image at a time), or for bands of one big image,
//   each such item on one thread; the float32 result gets the bias per row and is rounded into
//   each image's output.
// - grad input, stride 1 and one group: the forward of grad_out padded by dilation * (k - 1) -
//   padding with the weight's channels swapped and its taps reversed (as the blocked float32
//   path); otherwise weight^T @ grad_out into float32 columns, col2im in float32, rounded.
// - grad weight: as the float32 kernel (Note [deterministic weight gradient]), partial sums in
//   float32, rounded once at the end.
// These paths build im2col columns, one copy per output row and tap, and on narrow maps those
// copies cost more than the products save. Measured per shape on 2 threads, forward + backward,
// float32 -> bfloat16: 64 channels at 56 x 56 23.0 -> 17.3 ms, 128 at 28 x 28 20.8 -> 13.9 ms, 64 ->
// 128 at stride 2 to 28 x 28 14.8 -> 9.1 ms, 1 x 1 64 -> 256 at 56 x 56 17.7 -> 9.3 ms; but 256
// channels at 14 x 14 21.4 -> 25.2 ms and MNIST's 16 -> 32 channels at 8 x 8 1.8 -> 2.1 ms.
// The blocked bfloat16 forward (Note [bfloat16 blocked convolution] in conv_nchwc_bf16.cpp) came
// later and runs every 3 x 3 and 5 x 5 forward it takes at twice the float32 blocked rate, so:
// - forward: the blocked kernel where it takes the shape (one group, stride 1 or 2), but not a
//   pointwise one (the GEMM reads its image as the columns: 8 x 64 x 56 x 56 -> 256, 3.4-3.6 ms
//   against 3.8-4.0); else im2col + GEMM on rows at least kBf16MinRow wide; else float32.
// - input gradient: the blocked forward of the padded output gradient (stride 1), else as above.
// - weight gradient: the blocked bfloat16 weight gradient (Note [bfloat16 blocked weight
//   gradient]) where it takes the shape; else im2col + GEMM on rows at least kBf16WeightGradMinRow
//   wide and patches (C_in / groups x kernel) at least kBf16WeightGradMinPatch long, else float32.
//   The blocked one against the path it replaced, forward + weight gradient, batch 8, 9
//   alternating rounds in one process: 64 channels at 56 x 56 17.98 -> 16.28 ms (GEMM
//   before); 128 at 28 x 28 16.22 -> 14.72; stride 2 10.33 -> 9.84; pointwise 64 -> 256 12.38 ->
//   12.31; 256 at 14 x 14 16.53 -> 14.81; 512 at 7 x 7 21.95 -> 18.29 (float32 before); MNIST's
//   second layer (batch 64) 1.56 -> 1.27; 32 channels at 28 x 28 (batch 32) 6.08 -> 4.47. Between
//   the GEMM and float32, before it: 256 channels at 14 x 14 16.5 against 18.1-18.4 ms (forward +
//   backward), 512 at 7 x 7 24.7 against 20.5-20.6, MNIST's second layer 1.82 against 1.55.
// "float32": the operands widened inside the kernel, the float32 kernels, the result rounded once.
// Per shape, batch 8, float32 -> bfloat16 forward and forward + backward (ms, `python` timing of
// the op, median of 5): 64 at 56 x 56 8.75 -> 4.52 and 27.6 -> 17.5; 128 at 28 x 28 8.40 -> 4.30
// and 26.4 -> 16.1; 64 -> 128 stride 2 4.52 -> 2.31 and 16.4 -> 10.8; 256 at 14 x 14 8.26 -> 4.15
// and 26.4 -> 16.5; 512 at 7 x 7 8.19 -> 4.15 and 28.3 -> 20.5; MNIST's second layer (batch 64)
// 0.51 -> 0.29 and 2.24 -> 1.55.
using Bf16 = uint16_t;

constexpr int64_t kBf16MinRow = 28;
constexpr int64_t kBf16WeightGradMinRow = 14;
// The weight gradient's GEMM is (C_out x positions) @ (positions x patch): a patch narrower than
// the bfloat16 tile's 32 columns fills part of every vdpbf16ps, and its long k is packed for a
// tile or two of reuse. The MNIST CNN's first layer (1 -> 16 channels, 5 x 5: a patch of 25, 24 x
// 24 outputs) took 0.5 ms of train_step_cnn_amp's 2.6-3.0 ms (Zen 4, 2 threads); with that
// gradient in float32 the step took 2.40-2.51 ms (5 alternating rounds).
constexpr int64_t kBf16WeightGradMinPatch = 32;

// Column elements (bfloat16) per forward item: several images' columns side by side, or a band.
constexpr int64_t kBf16ColumnBudget = int64_t{128} << 10;

void widen(const Bf16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = detail::bfloat16_bits_to_float(src[i]);
}

// out[i] = bfloat16(values[i] + add), rounded as round_to_bf16 (the float32 values are scratch).
void narrow(float* values, int64_t n, float add, Bf16* out) {
  if (add != 0.0f) {
    for (int64_t i = 0; i < n; ++i) values[i] += add;
  }
  round_to_bf16(values, 1, n, nullptr, out, n);
}

void forward_bf16(const Conv2dGeometry& g, const Bf16* input, const Bf16* weight, const Bf16* bias, Bf16* out) {
  const Sizes s = sizes_of(g);
  std::vector<float> bias_values(static_cast<size_t>(g.out_channels), 0.0f);
  if (bias != nullptr) widen(bias, bias_values.data(), g.out_channels);
  const int64_t rows = g.in_channels * g.kernel_h * g.kernel_w;  // every group's column rows
  const int64_t image_columns = rows * s.out_plane;
  int64_t images = 1, rows_per_band = g.out_height;
  if (image_columns <= kBf16ColumnBudget) {
    images = std::clamp<int64_t>(kBf16ColumnBudget / image_columns, 1, g.batch);
  } else {
    rows_per_band = std::clamp<int64_t>(kBf16ColumnBudget / (rows * g.out_width), 1, g.out_height);
  }
  const int64_t bands = (g.out_height + rows_per_band - 1) / rows_per_band;
  const int64_t items = (g.batch + images - 1) / images * bands;
  // Items go over the threads, each GEMM on its item's thread; a single item leaves them to the GEMM.
  const int threads = items > 1 ? 1 : num_threads();
  parallel_for(0, items, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n0 = item / bands * images, count = std::min(images, g.batch - n0);
      const int64_t oh0 = item % bands * rows_per_band, oh1 = std::min(g.out_height, oh0 + rows_per_band);
      const int64_t positions = (oh1 - oh0) * g.out_width, width = count * positions;
      // Pointwise, one image: the image's band is its own column matrix, rows in_plane apart.
      const Bf16* columns = input + n0 * g.in_channels * s.in_plane + oh0 * g.out_width;
      int64_t column_stride = s.in_plane;
      if (!s.pointwise || count > 1) {
        Bf16* buffer = thread_buffer<Bf16>(Slot::kColumns, rows * width);
        for (int64_t i = 0; i < count; ++i) {
          im2col(g, input + (n0 + i) * g.in_channels * s.in_plane, buffer + i * positions, width, oh0, oh1);
        }
        columns = buffer;
        column_stride = width;
      }
      float* c = thread_buffer<float>(Slot::kColumns, g.out_channels * width);
      for (int64_t group = 0; group < g.groups; ++group) {
        gemm_bf16({weight + group * s.out_per_group * s.patch, s.patch, 1},
                  {columns + group * s.patch * column_stride, 1, column_stride}, s.out_per_group, width, s.patch,
                  c + group * s.out_per_group * width, threads);
      }
      for (int64_t i = 0; i < count; ++i) {
        for (int64_t oc = 0; oc < g.out_channels; ++oc) {
          narrow(c + oc * width + i * positions, positions, bias_values[static_cast<size_t>(oc)],
                 out + ((n0 + i) * g.out_channels + oc) * s.out_plane + oh0 * g.out_width);
        }
      }
    }
  });
}

// The input gradient of a convolution with stride 1 and one group as a forward convolution of
// grad_out padded by dilation * (kernel - 1) - padding, with the weight's channels swapped and its
// taps reversed: that convolution's geometry, when the input is exactly what the output reaches
// (not conv_transpose2d's larger one).
std::optional<Conv2dGeometry> input_gradient_as_forward(const Conv2dGeometry& g) {
  if (g.stride_h != 1 || g.stride_w != 1 || g.groups != 1) return std::nullopt;
  Conv2dGeometry t = g;
  t.in_channels = g.out_channels;
  t.in_height = g.out_height;
  t.in_width = g.out_width;
  t.out_channels = g.in_channels;
  t.out_height = g.in_height;
  t.out_width = g.in_width;
  t.pad_h = g.dilation_h * (g.kernel_h - 1) - g.pad_h;
  t.pad_w = g.dilation_w * (g.kernel_w - 1) - g.pad_w;
  const bool reaches = t.pad_h >= 0 && t.pad_w >= 0 &&
                       t.in_height + 2 * t.pad_h - g.dilation_h * (g.kernel_h - 1) == g.in_height &&
                       t.in_width + 2 * t.pad_w - g.dilation_w * (g.kernel_w - 1) == g.in_width;
  if (!reaches) return std::nullopt;
  return t;
}

void backward_input_bf16(const Conv2dGeometry& g, const Bf16* grad_out, const Bf16* weight, Bf16* grad_input) {
  const Sizes s = sizes_of(g);
  // As a forward, im2col copies out_channels * taps rows of the input's size; through the GEMM,
  // col2im reads in_channels * taps float32 rows of the output's size: the smaller wins (for a
  // layer that doubles the channels and shrinks the map, the GEMM's columns are several times
  // smaller).
  const std::optional<Conv2dGeometry> t = input_gradient_as_forward(g);
  if (t && g.out_channels * s.in_plane <= g.in_channels * s.out_plane) {
    Bf16* flipped = thread_buffer<Bf16>(Slot::kWeightT, g.out_channels * s.patch);
    flip_weight(g, weight, flipped);
    return forward_bf16(*t, grad_out, flipped, nullptr, grad_input);
  }
  const int threads = g.batch > 1 ? 1 : num_threads();
  for_each_image(g.batch, [&](int64_t n) {
    float* columns = thread_buffer<float>(Slot::kColumns, g.in_channels * g.kernel_h * g.kernel_w * s.out_plane);
    float* image = thread_buffer<float>(Slot::kPadded, g.in_channels * s.in_plane);
    const Bf16* grad_image = grad_out + n * g.out_channels * s.out_plane;
    for (int64_t group = 0; group < g.groups; ++group) {
      // weight^T (K, C_out/g) @ grad_out (C_out/g, P), both read through their strides.
      gemm_bf16({weight + group * s.out_per_group * s.patch, 1, s.patch},
                {grad_image + group * s.out_per_group * s.out_plane, 1, s.out_plane}, s.patch, s.out_plane,
                s.out_per_group, columns + group * s.patch * s.out_plane, threads);
    }
    float* result = columns;  // pointwise: the columns are the image
    if (!s.pointwise) {
      col2im(g, columns, image);
      result = image;
    }
    narrow(result, g.in_channels * s.in_plane, 0.0f, grad_input + n * g.in_channels * s.in_plane);
  });
}

void backward_weight_bf16(const Conv2dGeometry& g, const Bf16* grad_out, const Bf16* input, Bf16* grad_weight) {
  const Sizes s = sizes_of(g);
  const int64_t weight_size = g.out_channels * s.patch;
  const int64_t rows = g.in_channels * g.kernel_h * g.kernel_w;
  const int64_t partials = std::min(g.batch, kWeightPartials);
  const int64_t per_gemm = std::max<int64_t>(1, kColumnBudget / std::max<int64_t>(1, rows * s.out_plane));
  const int threads = partials > 1 ? 1 : num_threads();
  float* sums = thread_buffer<float>(Slot::kSums, partials * weight_size);  // each written before it is read
  parallel_for(0, partials, 1, [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      float* sum = sums + part * weight_size;
      const int64_t first = part * g.batch / partials, last = (part + 1) * g.batch / partials;
      for (int64_t n0 = first; n0 < last; n0 += per_gemm) {
        const int64_t images = std::min(per_gemm, last - n0), width = images * s.out_plane;
        const Bf16* columns = gather_images(g, s, input, grad_out, n0, images);
        const Bf16* grads = columns + rows * width;  // (C_out, images * P)
        float* product = n0 == first ? sum : thread_buffer<float>(Slot::kPartials, weight_size);
        for (int64_t group = 0; group < g.groups; ++group) {
          // grad_out (C_out/g, images * P) @ columns^T: columns is bt, its rows contiguous along k.
          gemm_bf16({grads + group * s.out_per_group * width, width, 1}, {columns + group * s.patch * width, width, 1},
                    s.out_per_group, s.patch, width, product + group * s.out_per_group * s.patch, threads);
        }
        if (product != sum) {
          for (int64_t i = 0; i < weight_size; ++i) sum[i] += product[i];
        }
      }
    }
  });
  for (int64_t part = 1; part < partials; ++part) {
    const float* partial = sums + part * weight_size;
    for (int64_t i = 0; i < weight_size; ++i) sums[i] += partial[i];
  }
  round_to_bf16(sums, 1, weight_size, nullptr, grad_weight, weight_size);
}

}  // namespace

Conv2dGeometry conv2d_geometry(const Conv2dAttrs& attrs, const Shape& input, const Shape& weight) {
  Conv2dGeometry g;
  g.batch = input[0];
  g.in_channels = input[1];
  g.in_height = input[2];
  g.in_width = input[3];
  if (attrs.blocked_input.h >= 0) {  // (N, blocks, H + 2 pad, W + 2 pad, block)
    g.in_channels = weight[1] * attrs.groups;
    g.in_height -= 2 * attrs.blocked_input.h;
    g.in_width -= 2 * attrs.blocked_input.w;
  }
  g.out_channels = weight[0];
  g.kernel_h = weight[2];
  g.kernel_w = weight[3];
  g.stride_h = attrs.stride.h;
  g.stride_w = attrs.stride.w;
  g.pad_h = attrs.padding.h;
  g.pad_w = attrs.padding.w;
  g.dilation_h = attrs.dilation.h;
  g.dilation_w = attrs.dilation.w;
  g.groups = attrs.groups;
  g.out_height = (g.in_height + 2 * g.pad_h - g.dilation_h * (g.kernel_h - 1) - 1) / g.stride_h + 1;
  g.out_width = (g.in_width + 2 * g.pad_w - g.dilation_w * (g.kernel_w - 1) - 1) / g.stride_w + 1;
  return g;
}

bool conv2d_pools_directly(DType dtype, const Conv2dGeometry& g, int64_t max_pool) {
  return max_pool == 2 && (dtype == kFloat64 || (dtype == kFloat32 && !nchwc_takes(g) && !nchwc_patch_takes(g))) &&
         !depthwise_takes(g) && direct_forward_wins(g);
}

void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* input, const void* weight, const void* bias,
                    void* out, const void* residual, Activation activation) {
  dispatch_float("conv2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    forward(g, static_cast<const T*>(input), static_cast<const T*>(weight), static_cast<const T*>(bias),
            static_cast<T*>(out), static_cast<const T*>(residual), activation);
  });
}

void conv2d_backward_input(DType dtype, const Conv2dGeometry& g, const void* grad_out, const void* weight,
                           void* grad_input) {
  dispatch_float("conv2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    backward_input(g, static_cast<const T*>(grad_out), static_cast<const T*>(weight), static_cast<T*>(grad_input));
  });
}

void conv2d_backward_weight(DType dtype, const Conv2dGeometry& g, const void* grad_out, const void* input,
                            void* grad_weight) {
  dispatch_float("conv2d", dtype, [&](auto zero) {
    using T = decltype(zero);
    backward_weight(g, static_cast<const T*>(grad_out), static_cast<const T*>(input), static_cast<T*>(grad_weight));
  });
}

// --- registry entries ----------------------------------------------------------------------------
//
// Operands are contiguous 4-D tensors: the input (N, C_in, H, W), the weight (C_out, C_in / groups,
// kH, kW), the output (N, C_out, OH, OW); the geometry comes from their shapes and Conv2dAttrs.

namespace {

// The geometry of a kernel call. The output operand gives the output's size, which may be smaller
// than the input's gives (conv_transpose2d's output_padding), except for a pooled convolution's,
// which is the pooling's.
Conv2dGeometry conv_geometry(const Conv2dAttrs& attrs, const Operand& input, const Operand& weight,
                             const Operand& output) {
  Conv2dGeometry g = conv2d_geometry(attrs, *input.shape, *weight.shape);
  if (attrs.max_pool == 1) {
    g.out_height = output.size(2) - 2 * std::max<int64_t>(attrs.blocked_output.h, 0);
    g.out_width = output.size(3) - 2 * std::max<int64_t>(attrs.blocked_output.w, 0);
  }
  return g;
}

void zero(const Operand& t) { std::memset(t.data, 0, static_cast<size_t>(t.numel() * dtype_size(t.dtype))); }

// The tags of the forms this file keeps on a weight's storage (Note [derived forms]).
constexpr int64_t kDerivedBlockedWeight = 1;
constexpr int64_t kDerivedBlockedWeightTransposed = 2;
constexpr int64_t kDerivedBlockedBf16Weight = 3;
constexpr int64_t kDerivedBlockedBf16WeightTransposed = 4;

// A packing of `weight` for g (`count` values of E, written by pack) kept on the weight's storage
// under `tag` (Note [derived forms]); the key holds the layout and g's channels and kernel.
template <class E, class Pack>
std::shared_ptr<const void> kept_packing(const Conv2dGeometry& g, const Operand& weight, int64_t tag,
                                         NchwcLayout layout, int64_t count, const Pack& pack) {
  // The first element's address tells views of one storage apart.
  const auto first = static_cast<int64_t>(reinterpret_cast<intptr_t>(weight.data));
  const DerivedKey key{tag,           layout.block, layout.out_block, first, g.out_channels,
                       g.in_channels, g.kernel_h,   g.kernel_w};
  return derived_form(weight, key, [&] {
    std::shared_ptr<E[]> form(new E[static_cast<size_t>(count)]);
    pack(form.get());
    return std::shared_ptr<const void>(std::move(form));
  });
}

// The float32 forward in the blocked layout (Note [blocked convolution] in conv_nchwc.cpp). The
// packed weight is kept on the weight's storage, so a model that is not training packs each
// weight once; a training step packs it once per step (the optimizer's update retires the form),
// and a weight without a storage of its own once per call. `weight` packed for g (transposed: see
// nchwc_pack_weight); the key holds g's channels and kernel, so the patch geometry's packing
// (Note [patch convolution]) is a form of its own.
std::shared_ptr<const void> packed_weight(const Conv2dGeometry& g, const Operand& weight, bool transposed) {
  const NchwcLayout layout = nchwc_layout(g);
  return kept_packing<float>(g, weight, transposed ? kDerivedBlockedWeightTransposed : kDerivedBlockedWeight, layout,
                             nchwc_packed_size(g, layout), [&](float* packed) {
                               nchwc_pack_weight(g, weight.ptr<const float>(), transposed, packed);
                             });
}

// The bfloat16 blocked forward's packed weight (conv_nchwc_bf16.h), kept as packed_weight keeps
// the float32 one.
std::shared_ptr<const void> packed_bf16_weight(const Conv2dGeometry& g, const Operand& weight, bool transposed) {
  return kept_packing<Bf16>(g, weight, transposed ? kDerivedBlockedBf16WeightTransposed : kDerivedBlockedBf16Weight,
                            NchwcLayout{}, nchwc_bf16_packed_size(g), [&](Bf16* packed) {
                              nchwc_bf16_pack_weight(g, weight.ptr<const Bf16>(), transposed, packed);
                            });
}

// A bfloat16 operand's values widened to float32 in the calling thread's `slot` (null if absent).
const float* widened(const Operand& t, Slot slot) {
  if (!t.defined()) return nullptr;
  float* values = thread_buffer<float>(slot, t.numel());
  widen(t.ptr<const Bf16>(), values, t.numel());
  return values;
}

// The float32 result of a bfloat16 convolution run in float32, rounded into `out` by finish(sums).
template <class F>
void rounded_into(const Operand& out, const F& finish) {
  float* values = thread_buffer<float>(Slot::kResult, out.numel());
  finish(values);
  round_to_bf16(values, 1, out.numel(), nullptr, out.ptr<Bf16>(), out.numel());
}

// The bfloat16 forward (Note [bfloat16 convolution]): the blocked kernel where it takes g, but a
// pointwise convolution (whose image is its own column matrix) goes to the GEMM; rows too narrow
// for im2col in float32.
void forward_bf16_kernel(const Conv2dGeometry& g, const Operand& input, const Operand& weight, const Operand& bias,
                         const Operand& out) {
  const float* b = widened(bias, Slot::kWidened2);
  if (!sizes_of(g).pointwise && nchwc_bf16_takes(g)) {
    const std::shared_ptr<const void> packed = packed_bf16_weight(g, weight, false);
    return nchwc_bf16_forward(g, input.ptr<const Bf16>(), static_cast<const Bf16*>(packed.get()), b, out.ptr<Bf16>());
  }
  if (g.out_width >= kBf16MinRow || sizes_of(g).pointwise) {
    return forward_bf16(g, input.ptr<const Bf16>(), weight.ptr<const Bf16>(), bias.ptr<const Bf16>(), out.ptr<Bf16>());
  }
  const float *x = widened(input, Slot::kWidened0), *w = widened(weight, Slot::kWidened1);
  rounded_into(out, [&](float* values) { conv2d_forward(kFloat32, g, x, w, b, values); });
}

// The bfloat16 input gradient, chosen as the forward is: the blocked forward of the padded output
// gradient (stride 1), else the bfloat16 GEMM paths, else float32 on narrow rows.
void backward_input_bf16_kernel(const Conv2dGeometry& g, const Operand& grad_out, const Operand& weight,
                                const Operand& grad_input) {
  const std::optional<Conv2dGeometry> t = input_gradient_as_forward(g);
  if (t && !sizes_of(g).pointwise && nchwc_bf16_takes(*t)) {
    const std::shared_ptr<const void> packed = packed_bf16_weight(*t, weight, true);
    return nchwc_bf16_forward(*t, grad_out.ptr<const Bf16>(), static_cast<const Bf16*>(packed.get()), nullptr,
                              grad_input.ptr<Bf16>());
  }
  if (g.out_width >= kBf16MinRow || sizes_of(g).pointwise) {
    return backward_input_bf16(g, grad_out.ptr<const Bf16>(), weight.ptr<const Bf16>(), grad_input.ptr<Bf16>());
  }
  const float *go = widened(grad_out, Slot::kWidened0), *w = widened(weight, Slot::kWidened1);
  rounded_into(grad_input, [&](float* values) { conv2d_backward_input(kFloat32, g, go, w, values); });
}

void float32_backward_weight_bf16(const Conv2dGeometry& g, const Operand& grad_out, const Operand& input,
                                  const Operand& grad_weight) {
  const float *go = widened(grad_out, Slot::kWidened0), *x = widened(input, Slot::kWidened1);
  rounded_into(grad_weight, [&](float* values) {
    if (nchwc_weight_grad_takes(g)) return nchwc_weight_grad(g, go, x, values);
    conv2d_backward_weight(kFloat32, g, go, x, values);
  });
}

// g's forward in the blocked layout.
void blocked_forward(const Conv2dGeometry& g, const void* input, const Operand& weight, bool transposed,
                     const NchwcEpilogue& epilogue, void* out) {
  const std::shared_ptr<const void> packed = packed_weight(g, weight, transposed);
  nchwc_forward(g, static_cast<const float*>(input), static_cast<const float*>(packed.get()), nchwc_layout(g), epilogue,
                static_cast<float*>(out));
}

// The input gradient of a convolution with stride 1 and one group, as a forward convolution
// (input_gradient_as_forward), if the blocked forward takes it. (The padding's zeros cost
// multiply-adds, as in the direct path, but the blocked kernel runs near the GEMM's rate:
// resnet_block_f32 33.7 -> 30.4 ms with its input gradients here instead of GEMM + col2im.)
std::optional<Conv2dGeometry> blocked_input_gradient(const Conv2dGeometry& g) {
  std::optional<Conv2dGeometry> t = input_gradient_as_forward(g);
  if (t && !nchwc_takes(*t)) return std::nullopt;
  return t;
}

void conv2d_kernel(const KernelCall& c);

// A convolution with a max pooling after it (Conv2dAttrs::max_pool): the direct path pools as it
// stores (Note [pooled convolution] in conv_direct.cpp); any other convolution runs whole into a
// buffer, then through max pooling's kernel, as the two ops would.
void pooled_conv2d_kernel(const KernelCall& c, const Conv2dGeometry& g) {
  const Operand &input = c.inputs[0], &weight = c.inputs[1], &bias = c.inputs[2], &out = c.outputs[0];
  const Operand* residual = c.inputs.size() > 3 && c.inputs[3].defined() ? &c.inputs[3] : nullptr;
  Conv2dAttrs attrs = c.get<Conv2dAttrs>();
  EMBER_CHECK(out.dtype == kFloat32 || out.dtype == kFloat64, "[conv2d] a max pooling after the convolution takes ",
              "float32 or float64, got ", out.dtype);
  if (conv2d_pools_directly(out.dtype, g, attrs.max_pool)) {
    return dispatch_float("conv2d", out.dtype, [&](auto zero) {
      using T = decltype(zero);
      direct_forward(input.ptr<const T>(), g.batch, g.in_channels, g.in_height, g.in_width, g.pad_h, g.pad_w,
                     weight.ptr<const T>(), bias.ptr<const T>(), g.out_channels, g.kernel_h, g.kernel_w, out.ptr<T>(),
                     residual != nullptr ? residual->ptr<const T>() : nullptr, attrs.activation, attrs.max_pool);
    });
  }
  const Shape shape{g.batch, g.out_channels, g.out_height, g.out_width};
  const Strides strides = contiguous_strides(shape);
  std::vector<std::byte> values(static_cast<size_t>(shape.numel() * dtype_size(out.dtype)));
  const Operand whole{values.data(), out.dtype, out.device, &shape, &strides, true};
  const int64_t pool = attrs.max_pool;
  attrs.max_pool = 1;
  const Attrs unpooled = attrs;
  conv2d_kernel(KernelCall{c.kind, unpooled, c.inputs, std::span<const Operand>(&whole, 1)});
  Pool2dGeometry p;
  p.planes = g.batch * g.out_channels;
  p.in_height = g.out_height;
  p.in_width = g.out_width;
  p.out_height = out.size(2);
  p.out_width = out.size(3);
  p.kernel_h = p.kernel_w = p.stride_h = p.stride_w = pool;
  max_pool2d_forward(out.dtype, p, values.data(), out.data, nullptr);
}

// inputs: input, weight, bias (C_out) or absent, and (from the compiler's epilogue fusion) a
// contiguous residual of the convolution's output shape or absent; outputs: the result.
void conv2d_kernel(const KernelCall& c) {
  const Operand &input = c.inputs[0], &weight = c.inputs[1], &bias = c.inputs[2], &out = c.outputs[0];
  const Operand* residual = c.inputs.size() > 3 && c.inputs[3].defined() ? &c.inputs[3] : nullptr;
  if (out.numel() == 0) return;
  const Conv2dAttrs& attrs = c.get<Conv2dAttrs>();
  const Activation activation = attrs.activation;
  const Conv2dGeometry g = conv_geometry(attrs, input, weight, out);
  if (attrs.max_pool > 1) return pooled_conv2d_kernel(c, g);
  if (out.dtype == kBFloat16) {
    EMBER_CHECK(residual == nullptr && activation == Activation::kNone,
                "[conv2d] internal error: a bfloat16 convolution takes no epilogue");
    return forward_bf16_kernel(g, input, weight, bias, out);
  }
  const auto planes = [](Pair pad) { return BlockedPlanes{pad.h, pad.w}; };
  const BlockedPlanes input_planes = planes(attrs.blocked_input), residual_planes = planes(attrs.blocked_residual),
                      out_planes = planes(attrs.blocked_output);
  if (input_planes.blocked() || residual_planes.blocked() || out_planes.blocked()) {
    EMBER_CHECK(out.dtype == kFloat32 &&
                    (nchwc_takes(g) || (nchwc_patch_takes(g) && !input_planes.blocked() && !residual_planes.blocked())),
                "[conv2d] internal error: blocked operands for a convolution the blocked kernel does not take");
  }
  if (out.dtype == kFloat32 && nchwc_takes(g)) {
    const NchwcEpilogue epilogue{bias.ptr<const float>(), residual != nullptr ? residual->ptr<const float>() : nullptr,
                                 activation, residual_planes};
    const std::shared_ptr<const void> packed = packed_weight(g, weight, false);
    return nchwc_forward(g, input.ptr<const float>(), static_cast<const float*>(packed.get()), nchwc_layout(g),
                         epilogue, out.ptr<float>(), input_planes, out_planes);
  }
  if (out.dtype == kFloat32 && nchwc_patch_takes(g)) {
    const NchwcEpilogue epilogue{
        bias.ptr<const float>(), residual != nullptr ? residual->ptr<const float>() : nullptr, activation, {}};
    const Conv2dGeometry patches = nchwc_patch_geometry(g);
    const std::shared_ptr<const void> packed = packed_weight(patches, weight, false);
    return nchwc_patch_forward(g, input.ptr<const float>(), static_cast<const float*>(packed.get()),
                               nchwc_layout(patches), epilogue, out.ptr<float>(), out_planes);
  }
  conv2d_forward(out.dtype, g, input.data, weight.data, bias.data, out.data,
                 residual != nullptr ? residual->data : nullptr, activation);
}

// inputs: grad_out, weight; outputs: grad_input.
void conv2d_backward_input_kernel(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &weight = c.inputs[1], &grad_input = c.outputs[0];
  if (grad_input.numel() == 0) return;
  if (grad_out.numel() == 0) return zero(grad_input);
  const Conv2dGeometry g = conv_geometry(c.get<Conv2dAttrs>(), grad_input, weight, grad_out);
  if (grad_input.dtype == kBFloat16) {
    return backward_input_bf16_kernel(g, grad_out, weight, grad_input);
  }
  if (grad_input.dtype == kFloat32) {
    if (const std::optional<Conv2dGeometry> t = blocked_input_gradient(g)) {
      return blocked_forward(*t, grad_out.data, weight, true, NchwcEpilogue{}, grad_input.data);
    }
  }
  conv2d_backward_input(grad_input.dtype, g, grad_out.data, weight.data, grad_input.data);
}

// inputs: grad_out, input; outputs: grad_weight.
void conv2d_backward_weight_kernel(const KernelCall& c) {
  const Operand &grad_out = c.inputs[0], &input = c.inputs[1], &grad_weight = c.outputs[0];
  if (grad_weight.numel() == 0) return;
  if (grad_out.numel() == 0) return zero(grad_weight);
  const Conv2dGeometry g = conv_geometry(c.get<Conv2dAttrs>(), input, grad_weight, grad_out);
  if (grad_weight.dtype == kBFloat16) {
    if (nchwc_bf16_weight_grad_takes(g)) {
      return rounded_into(grad_weight, [&](float* values) {
        nchwc_bf16_weight_grad(g, grad_out.ptr<const Bf16>(), input.ptr<const Bf16>(), values);
      });
    }
    if (g.out_width < kBf16WeightGradMinRow || sizes_of(g).patch < kBf16WeightGradMinPatch) {
      return float32_backward_weight_bf16(g, grad_out, input, grad_weight);
    }
    return backward_weight_bf16(g, grad_out.ptr<const Bf16>(), input.ptr<const Bf16>(), grad_weight.ptr<Bf16>());
  }
  if (grad_weight.dtype == kFloat32 && nchwc_weight_grad_takes(g)) {
    return nchwc_weight_grad(g, grad_out.ptr<const float>(), input.ptr<const float>(), grad_weight.ptr<float>());
  }
  conv2d_backward_weight(grad_weight.dtype, g, grad_out.data, input.data, grad_weight.data);
}

}  // namespace

void register_conv_kernels(KernelTable& table) {
  // bfloat16 only where its products run in bfloat16 (Note [bfloat16 convolution]); elsewhere the
  // front-end computes bfloat16 and float16 in float32.
  const DTypeSet dtypes =
      supports(cpu_isa(), Isa::kAvx512Bf16) ? DTypeSet{kFloat32, kFloat64, kBFloat16} : kFloat32Or64;
  table.add(OpKind::kConv2d, DeviceType::kCPU, conv2d_kernel, dtypes);
  table.add(OpKind::kConv2dInputGrad, DeviceType::kCPU, conv2d_backward_input_kernel, dtypes);
  table.add(OpKind::kConv2dWeightGrad, DeviceType::kCPU, conv2d_backward_weight_kernel, dtypes);
}

}  // namespace ember::cpu
