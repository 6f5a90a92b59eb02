// max_pool2d against a naive reference with PyTorch's rules (first maximum wins ties, NaN beats
// everything, -inf is an ordinary value), over the shapes that exercise every path of the kernel:
// strides 1-4 (the vector path), padding (scalar edge columns), widths that leave full-vector,
// partial-vector, 128-bit and scalar tails, with and without indices, ceil_mode, and dilation (the scalar path). Values
// and gradients must match bit for bit: both route each gradient to the same element, in the same order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/functional.h"

namespace {

namespace F = ember::nn::functional;
using ember::Tensor;

struct PoolCase {
  int64_t planes, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation;
  bool ceil_mode;
};

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// out, and grad_in for the output gradient `cot`, computed the obvious way.
template <class T>
void reference(const PoolCase& c, const std::vector<T>& x, const std::vector<T>& cot, std::vector<T>& out,
               std::vector<T>& grad_in) {
  const int64_t oh_size = pooled(c.height, c.kernel_h, c.stride_h, c.pad_h, c.dilation, c.ceil_mode);
  const int64_t ow_size = pooled(c.width, c.kernel_w, c.stride_w, c.pad_w, c.dilation, c.ceil_mode);
  out.assign(static_cast<size_t>(c.planes * oh_size * ow_size), T(0));
  grad_in.assign(x.size(), T(0));
  for (int64_t p = 0; p < c.planes; ++p) {
    for (int64_t oh = 0; oh < oh_size; ++oh) {
      for (int64_t ow = 0; ow < ow_size; ++ow) {
        T best = -std::numeric_limits<T>::infinity();
        int64_t where = -1;
        for (int64_t i = 0; i < c.kernel_h; ++i) {
          const int64_t h = oh * c.stride_h - c.pad_h + i * c.dilation;
          if (h < 0 || h >= c.height) continue;
          for (int64_t j = 0; j < c.kernel_w; ++j) {
            const int64_t w = ow * c.stride_w - c.pad_w + j * c.dilation;
            if (w < 0 || w >= c.width) continue;
            const int64_t index = (p * c.height + h) * c.width + w;
            const T v = x[static_cast<size_t>(index)];
            if (where < 0 || v > best || std::isnan(v)) {
              best = v;
              where = index;
            }
          }
        }
        const int64_t o = (p * oh_size + oh) * ow_size + ow;
        out[static_cast<size_t>(o)] = best;
        grad_in[static_cast<size_t>(where)] += cot[static_cast<size_t>(o)];
      }
    }
  }
}

template <class T>
std::vector<T> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

// Bit for bit: the sign of a zero and a NaN's payload say which element of a window won.
template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// A quiet NaN whose payload is `tag`.
template <class T>
T tagged_nan(size_t tag) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  Bits bits = 0;
  const T quiet = std::numeric_limits<T>::quiet_NaN();
  std::memcpy(&bits, &quiet, sizeof(T));
  bits |= static_cast<Bits>(tag & 0xffff);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

template <class T>
void check_case(const PoolCase& c, ember::DType dtype) {
  SCOPED_TRACE(::testing::Message() << "planes " << c.planes << " " << c.height << "x" << c.width << " kernel "
                                    << c.kernel_h << "x" << c.kernel_w << " stride " << c.stride_h << "x" << c.stride_w
                                    << " pad " << c.pad_h << "x" << c.pad_w << " dilation " << c.dilation << " ceil "
                                    << c.ceil_mode << " " << dtype);
  // Small integers make ties common; a few NaNs and infinities test the comparison rule. Zeros of
  // both signs and NaNs each with its own payload show which tied element won (the first maximum;
  // the last NaN).
  Tensor x = ember::randint(-3, 4, {c.planes, c.height, c.width}).to(dtype);
  std::vector<T> xs = values_of<T>(x);
  for (size_t i = 0; i < xs.size(); i += 7) xs[i] = -std::numeric_limits<T>::infinity();
  for (size_t i = 3; i < xs.size(); i += 29) xs[i] = tagged_nan<T>(i);
  for (size_t i = 4; i < xs.size(); i += 23) xs[i] = tagged_nan<T>(i);
  for (size_t i = 5; i < xs.size(); i += 31) xs[i] = std::numeric_limits<T>::infinity();
  for (size_t i = 0; i < xs.size(); i += 2) {
    if (xs[i] == T(0)) xs[i] = -T(0);
  }
  x = ember::from_blob(xs.data(), {c.planes, c.height, c.width}, dtype).clone().requires_grad_();

  const Tensor out = F::max_pool2d(x, {c.kernel_h, c.kernel_w}, ember::nn::Pair{c.stride_h, c.stride_w},
                                   {c.pad_h, c.pad_w}, c.dilation, c.ceil_mode);
  // Some output gradients -0: the gradient of a window's maximum is 0 + dy, +0 (as a scatter's
  // addition into zeros gives), wherever the kernel routes it.
  std::vector<T> cots = values_of<T>(ember::randn(out.shape(), dtype));
  for (size_t i = 0; i < cots.size(); i += 5) cots[i] = -T(0);
  const Tensor cot = ember::from_blob(cots.data(), out.shape(), dtype).clone();
  out.backward(cot);

  std::vector<T> expected_out, expected_grad;
  reference<T>(c, xs, values_of<T>(cot), expected_out, expected_grad);
  const std::vector<T> got_out = values_of<T>(out), got_grad = values_of<T>(x.grad());
  ASSERT_EQ(got_out.size(), expected_out.size());
  for (size_t i = 0; i < got_out.size(); ++i) {
    ASSERT_TRUE(same_bits(got_out[i], expected_out[i]))
        << "output " << i << ": " << got_out[i] << " vs " << expected_out[i];
  }
  for (size_t i = 0; i < got_grad.size(); ++i) {
    ASSERT_TRUE(same_bits(got_grad[i], expected_grad[i]))
        << "grad " << i << ": " << got_grad[i] << " vs " << expected_grad[i];
  }
  // Without a gradient to route, the kernel keeps no indices: a path of its own (partial tails).
  const ember::autograd::NoGradGuard no_grad;
  const std::vector<T> values =
      values_of<T>(F::max_pool2d(x.detach(), {c.kernel_h, c.kernel_w}, ember::nn::Pair{c.stride_h, c.stride_w},
                                 {c.pad_h, c.pad_w}, c.dilation, c.ceil_mode));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_TRUE(same_bits(values[i], expected_out[i]))
        << "value " << i << ": " << values[i] << " vs " << expected_out[i];
  }
}

TEST(MaxPool2dKernel, MatchesTheReferenceOnEveryPath) {
  ember::manual_seed(41);
  std::vector<PoolCase> cases;
  for (int64_t stride = 1; stride <= 5; ++stride) {
    for (int64_t kernel = 1; kernel <= 4; ++kernel) {
      for (int64_t pad = 0; pad <= kernel / 2; ++pad) {
        for (const int64_t width : {kernel, 7L, 13L, 24L, 37L}) {
          if (width + 2 * pad < kernel) continue;
          cases.push_back({3, 9, width, kernel, kernel, stride, stride, pad, pad, 1, false});
          if (stride > 1) cases.push_back({2, 10, width, kernel, kernel, stride, stride, pad, pad, 1, true});
        }
      }
    }
  }
  cases.push_back({4, 11, 19, 3, 2, 2, 3, 1, 1, 1, false});    // rectangular, different strides
  cases.push_back({2, 12, 20, 2, 3, 1, 2, 0, 1, 2, false});    // dilation: the scalar path
  cases.push_back({512, 24, 24, 2, 2, 2, 2, 0, 0, 1, false});  // the MNIST CNN's first pool, threaded
  cases.push_back({2048, 8, 8, 2, 2, 2, 2, 0, 0, 1, false});   // and its second
  for (const PoolCase& c : cases) {
    check_case<float>(c, ember::kFloat32);
    check_case<double>(c, ember::kFloat64);
  }
}

TEST(MaxPool2dKernel, NaNAndInfinityFollowPyTorch) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // One 2 x 8 plane, four 2 x 2 windows: all -inf (the first element wins), a NaN among values,
  // two NaNs (the last one wins), a tie (the first one wins).
  std::vector<float> xs = {-kInf, -kInf, 1, kNaN, kNaN, 2,    5, 3,  //
                           -kInf, -kInf, 9, 4,    0,    kNaN, 5, 5};
  const Tensor x = ember::from_blob(xs.data(), {1, 2, 8}, ember::kFloat32).clone().requires_grad_();
  const Tensor out = F::max_pool2d(x, 2);
  const std::vector<float> y = values_of<float>(out);
  ASSERT_EQ(y.size(), 4U);
  EXPECT_EQ(y[0], -kInf);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 5.0F);
  out.backward(ember::ones_like(out));
  const std::vector<float> grad = values_of<float>(x.grad());
  const std::vector<float> expected = {1, 0, 0, 1, 0, 0, 1, 0,  //
                                       0, 0, 0, 0, 0, 1, 0, 0};
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_EQ(grad[i], expected[i]) << "element " << i;
}

// bfloat16 max pooling (Note [bfloat16 max pooling]) is the float32 pooling of the widened values,
// bit for bit: the values (NaN payloads kept: a maximum is one of the inputs), the indices (through
// the gradient), and the gradients summed in float32 and rounded once where windows overlap.
TEST(MaxPool2dKernel, Bfloat16IsTheFloat32PoolingBitForBit) {
  ember::manual_seed(43);
  const std::vector<PoolCase> cases = {
      {3, 9, 13, 3, 3, 1, 1, 1, 1, 1, false},      // overlapping windows: gradients summed
      {2, 10, 37, 2, 2, 2, 2, 0, 0, 1, true},      // ceil mode
      {4, 11, 19, 3, 2, 2, 3, 1, 1, 1, false},     // rectangular, different strides
      {2, 12, 20, 2, 3, 1, 2, 0, 1, 2, false},     // dilation
      {512, 24, 24, 2, 2, 2, 2, 0, 0, 1, false},   // the MNIST CNN's first pool: many chunks, threaded
      {2048, 8, 8, 2, 2, 2, 2, 0, 0, 1, false},    // and its second
      {2, 150, 130, 3, 3, 2, 2, 1, 1, 1, false}};  // planes larger than a chunk
  const auto bits_of = [](const Tensor& t) {
    const Tensor c = t.contiguous();
    const auto* p = static_cast<const uint16_t*>(c.data_ptr());
    return std::vector<uint16_t>(p, p + c.numel());
  };
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "planes " << c.planes << " " << c.height << "x" << c.width << " kernel "
                                      << c.kernel_h << "x" << c.kernel_w << " stride " << c.stride_h);
    const std::vector<float> values =
        values_of<float>(ember::randint(-3, 4, {c.planes * c.height * c.width}).to(ember::kFloat32));
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      bits[i] = ember::BFloat16(values[i]).bits;
      if (bits[i] == 0 && i % 2 == 0) bits[i] = 0x8000;                     // -0
      if (i % 7 == 0) bits[i] = 0xff80;                                     // -inf
      if (i % 31 == 5) bits[i] = 0x7f80;                                    // inf
      if (i % 29 == 3) bits[i] = static_cast<uint16_t>(0x7fc0 | (i % 64));  // NaNs, each its own payload
      if (i % 23 == 4) bits[i] = static_cast<uint16_t>(0xff81 + (i % 63));  // signalling ones too
    }
    const Tensor x =
        ember::from_blob(bits.data(), {c.planes, c.height, c.width}, ember::kBFloat16).clone().requires_grad_();
    const Tensor x32 = x.detach().to(ember::kFloat32).requires_grad_();
    const auto pool = [&](const Tensor& t) {
      return F::max_pool2d(t, {c.kernel_h, c.kernel_w}, ember::nn::Pair{c.stride_h, c.stride_w}, {c.pad_h, c.pad_w},
                           c.dilation, c.ceil_mode);
    };
    const Tensor out = pool(x), out32 = pool(x32);
    ASSERT_EQ(out.dtype(), ember::kBFloat16);
    const std::vector<uint16_t> got = bits_of(out);
    const std::vector<float> want = values_of<float>(out32);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], ember::bit_cast<uint32_t>(want[i]) >> 16) << "output " << i;
    }
    const Tensor cot = ember::randn(out.shape()).to(ember::kBFloat16);
    out.backward(cot);
    out32.backward(cot.to(ember::kFloat32));
    EXPECT_EQ(bits_of(x.grad()), bits_of(x32.grad().to(ember::kBFloat16)));
    const ember::autograd::NoGradGuard no_grad;
    EXPECT_EQ(bits_of(pool(x.detach())), got) << "without indices";
  }
}

}  // namespace

// PyTorch's limit on max_pool2d's padding is half the kernel size, whatever the dilation.
TEST(MaxPool2d, PaddingAtMostHalfTheKernelSize) {
  const Tensor x = ember::randn({1, 1, 10, 10});
  EXPECT_EQ(F::max_pool2d(x, 3, std::nullopt, 1, 2).shape(), (ember::Shape{1, 1, 3, 3}));
  for (int64_t padding : {2, 3}) {
    try {
      (void)F::max_pool2d(x, 3, std::nullopt, padding, 2);
      ADD_FAILURE() << "padding " << padding << " with kernel 3 and dilation 2 should be refused";
    } catch (const ember::Error& e) {
      EXPECT_NE(std::string(e.what()).find("[max_pool2d] padding must be between 0 and half the kernel size"),
                std::string::npos)
          << e.what();
    }
  }
}
