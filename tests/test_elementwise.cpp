// Elementwise ops' behaviour that the golden data cannot show: call forms, in-place and out= forms,
// overlap, position in a row, errors. Each op's golden forward cases and gradchecks are its registry
// entry (tests/ops_elementwise.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string_view>

#include "golden.h"
#include "test_util.h"

using ember::Tensor;

TEST(Elementwise, ThreeCallFormsAgree) {
  Tensor a = ember::arange(6).reshape({2, 3}).to(ember::kFloat32);
  Tensor b = ember::tensor<float>({10, 20, 30});
  const Tensor f = ember::add(a, b), m = a.add(b), o = a + b;
  EXPECT_TRUE(golden::all_close(m, f, {0, 0}));
  EXPECT_TRUE(golden::all_close(o, f, {0, 0}));
  EXPECT_EQ(f.at<float>({1, 2}), 35.0f);
  EXPECT_EQ((2 - a).at<float>({0, 1}), 1.0f);
  EXPECT_EQ((a / 2).at<float>({1, 0}), 1.5f);
  EXPECT_EQ((1 / (a + 1)).at<float>({0, 1}), 0.5f);
}

TEST(Elementwise, InPlaceWritesIntoSelfAndBumpsVersion) {
  Tensor a = ember::ones({2, 3});
  const float* p = a.data_ptr<float>();
  const uint32_t v = a.version();
  a.add_(ember::tensor<float>({1, 2, 3}));
  a *= 2;
  EXPECT_EQ(a.data_ptr<float>(), p);
  EXPECT_GT(a.version(), v);
  EXPECT_EQ(a.at<float>({1, 2}), 8.0f);
}

TEST(Elementwise, InPlaceRejectsWhatCannotBeHeld) {
  Tensor i = ember::ones({3}, ember::kInt64);
  EXPECT_THROW(i.add_(0.5), ember::Error);  // float result into int64
  Tensor small = ember::ones({3});
  EXPECT_THROW(small.add_(ember::ones({2, 3})), ember::Error);  // would need to grow
}

TEST(Elementwise, InPlaceOnOverlappingViewUsesTemporary) {
  // x[1:] += x[:-1] must read the original values, as PyTorch's out-of-place semantics would.
  Tensor x = ember::arange(5).to(ember::kFloat32);
  Tensor tail = x.slice(0, 1, std::nullopt);
  Tensor expected = ember::tensor<float>({0, 1, 3, 5, 7});
  tail.add_(x.slice(0, 0, 4));
  EXPECT_TRUE(golden::all_close(x, expected, {0, 0}));
}

TEST(Elementwise, InPlaceMethodsMatchOutOfPlace) {
  ember::manual_seed(5);
  const Tensor x = ember::randn({7, 9});
  const Tensor mask = x > 0.5;
  auto check = [&](const std::function<void(Tensor&)>& in_place, const Tensor& expected) {
    Tensor y = x.clone();
    const void* p = y.data_ptr();
    in_place(y);
    EXPECT_EQ(y.data_ptr(), p);
    EXPECT_TRUE(golden::all_close(y, expected, {0, 0}));
  };
  check([](Tensor& y) { y.neg_(); }, ember::neg(x));
  check([](Tensor& y) { y.exp_(); }, ember::exp(x));
  check([](Tensor& y) { y.relu_(); }, ember::relu(x));
  check([](Tensor& y) { y.sigmoid_(); }, ember::sigmoid(x));
  check([](Tensor& y) { y.tanh_(); }, ember::tanh(x));
  check([](Tensor& y) { y.pow_(2); }, ember::pow(x, 2));
  check([](Tensor& y) { y.clamp_(-0.5, 0.5); }, ember::clamp(x, -0.5, 0.5));
  check([&](Tensor& y) { y.masked_fill_(mask, 9); }, ember::masked_fill(x, mask, 9));
  check([](Tensor& y) { y -= 1.5; }, x - 1.5);
  check([](Tensor& y) { y /= 4; }, x / 4);
}

// The uniform families' API is generated from the op table (ember/op_list.h): every row's method,
// in-place method and function must agree bit for bit, and an in-place op must pass the gradient
// its function does.
namespace {

// The gradient of sum(op(x)) at x, through `apply` on a non-leaf copy of x.
Tensor gradient_through(const Tensor& x, const std::function<Tensor(Tensor)>& apply) {
  const Tensor leaf = x.detach().clone().requires_grad_();
  apply(ember::mul(leaf, 1.0)).sum().backward();
  return leaf.grad();
}

}  // namespace

TEST(Elementwise, EveryUnaryRowHasItsMethodAndInPlaceForm) {
  ember::manual_seed(11);
  const Tensor x = ember::add(ember::rand({5, 7}), 0.25);  // in every op's domain (log, sqrt, rsqrt)
#define EMBER_CHECK_UNARY_ROW(Kind, fn, ...)                                                           \
  {                                                                                                    \
    SCOPED_TRACE(#fn);                                                                                 \
    const Tensor expected = ember::fn(x);                                                              \
    EXPECT_TRUE(test_util::bitwise_equal(x.fn(), expected));                                           \
    Tensor y = x.clone();                                                                              \
    y.fn##_();                                                                                         \
    EXPECT_TRUE(test_util::bitwise_equal(y, expected));                                                \
    EXPECT_TRUE(test_util::bitwise_equal(gradient_through(x, [](Tensor t) { return t.fn##_(); }),      \
                                         gradient_through(x, [](Tensor t) { return ember::fn(t); }))); \
  }
  EMBER_UNARY_MATH(EMBER_CHECK_UNARY_ROW)
#undef EMBER_CHECK_UNARY_ROW
#define EMBER_CHECK_PREDICATE_ROW(Kind, fn, ...)                 \
  {                                                              \
    SCOPED_TRACE(#fn);                                           \
    EXPECT_TRUE(test_util::bitwise_equal(x.fn(), ember::fn(x))); \
    EXPECT_EQ(ember::fn(x).dtype(), ember::kBool);               \
  }
  EMBER_UNARY_PREDICATES(EMBER_CHECK_PREDICATE_ROW)
#undef EMBER_CHECK_PREDICATE_ROW
}

TEST(Elementwise, EveryBinaryRowHasItsMethodsAndInPlaceForms) {
  ember::manual_seed(12);
  const Tensor a = ember::add(ember::rand({4, 6}), 0.5);
  const Tensor b = ember::add(ember::rand({6}), 0.5);  // broadcast along the rows
  const Tensor mask_a = a > 1.0, mask_b = b > 1.0;
#define EMBER_CHECK_BINARY_ROW(Kind, fn, ...)                                                                \
  {                                                                                                          \
    SCOPED_TRACE(#fn);                                                                                       \
    const Tensor expected = ember::fn(a, b), expected_scalar = ember::fn(a, 0.75);                           \
    EXPECT_TRUE(test_util::bitwise_equal(a.fn(b), expected));                                                \
    EXPECT_TRUE(test_util::bitwise_equal(a.fn(0.75), expected_scalar));                                      \
    Tensor y = a.clone();                                                                                    \
    y.fn##_(b);                                                                                              \
    EXPECT_TRUE(test_util::bitwise_equal(y, expected));                                                      \
    y = a.clone();                                                                                           \
    y.fn##_(0.75);                                                                                           \
    EXPECT_TRUE(test_util::bitwise_equal(y, expected_scalar));                                               \
    EXPECT_TRUE(test_util::bitwise_equal(gradient_through(a, [&](Tensor t) { return t.fn##_(b); }),          \
                                         gradient_through(a, [&](Tensor t) { return ember::fn(t, b); })));   \
    EXPECT_TRUE(test_util::bitwise_equal(gradient_through(a, [](Tensor t) { return t.fn##_(0.75); }),        \
                                         gradient_through(a, [](Tensor t) { return ember::fn(t, 0.75); }))); \
  }
  EMBER_BINARY_ARITHMETIC(EMBER_CHECK_BINARY_ROW)
#undef EMBER_CHECK_BINARY_ROW
#define EMBER_CHECK_TENSOR_BINARY_ROW(Kind, fn, ...)                                                       \
  {                                                                                                        \
    SCOPED_TRACE(#fn);                                                                                     \
    const Tensor expected = ember::fn(a, b);                                                               \
    EXPECT_TRUE(test_util::bitwise_equal(a.fn(b), expected));                                              \
    Tensor y = a.clone();                                                                                  \
    y.fn##_(b);                                                                                            \
    EXPECT_TRUE(test_util::bitwise_equal(y, expected));                                                    \
    EXPECT_TRUE(test_util::bitwise_equal(gradient_through(a, [&](Tensor t) { return t.fn##_(b); }),        \
                                         gradient_through(a, [&](Tensor t) { return ember::fn(t, b); }))); \
  }
  EMBER_BINARY_EXTREMA(EMBER_CHECK_TENSOR_BINARY_ROW)
#undef EMBER_CHECK_TENSOR_BINARY_ROW
#define EMBER_CHECK_RELATION_ROW(Kind, fn, ...)                      \
  {                                                                  \
    SCOPED_TRACE(#fn);                                               \
    EXPECT_TRUE(test_util::bitwise_equal(a.fn(b), ember::fn(a, b))); \
    EXPECT_TRUE(test_util::bitwise_equal(a.fn(1), ember::fn(a, 1))); \
    EXPECT_EQ(ember::fn(a, 1).dtype(), ember::kBool);                \
  }
  EMBER_RELATIONS(EMBER_CHECK_RELATION_ROW)
#undef EMBER_CHECK_RELATION_ROW
#define EMBER_CHECK_LOGICAL_ROW(Kind, fn, ...)                                           \
  {                                                                                      \
    SCOPED_TRACE(#fn);                                                                   \
    EXPECT_TRUE(test_util::bitwise_equal(mask_a.fn(mask_b), ember::fn(mask_a, mask_b))); \
    EXPECT_EQ(ember::fn(mask_a, mask_b).dtype(), ember::kBool);                          \
  }
  EMBER_LOGICAL_BINARY(EMBER_CHECK_LOGICAL_ROW)
#undef EMBER_CHECK_LOGICAL_ROW
}

TEST(Elementwise, EveryReductionRowHasItsMethods) {
  ember::manual_seed(13);
  const Tensor x = ember::rand({3, 4, 5});
  const Tensor flags = x > 0.5;
#define EMBER_CHECK_REDUCTION_ROW(Kind, fn, ...)                                                   \
  {                                                                                                \
    SCOPED_TRACE(#fn);                                                                             \
    const Tensor t = std::string_view(#fn) == "all" || std::string_view(#fn) == "any" ? flags : x; \
    EXPECT_TRUE(test_util::bitwise_equal(t.fn(), ember::fn(t)));                                   \
    EXPECT_TRUE(test_util::bitwise_equal(t.fn({0, 2}, true), ember::fn(t, {0, 2}, true)));         \
    EXPECT_EQ(t.fn({0, 2}, true).shape(), (ember::Shape{1, 4, 1}));                                \
  }
  EMBER_DIM_REDUCTIONS(EMBER_CHECK_REDUCTION_ROW)
#undef EMBER_CHECK_REDUCTION_ROW
}

TEST(Elementwise, ScalarOnTheLeftAndTensorBounds) {
  const Tensor x = ember::tensor<float>({-2, 0, 1, 3});
  EXPECT_EQ(ember::pow(2, x).to_vector<float>(), (std::vector<float>{0.25f, 1, 2, 8}));
  EXPECT_EQ(ember::div(1, ember::tensor<int64_t>({2, 4})).to_vector<float>(), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(ember::rsub(x, 1).to_vector<float>(), (std::vector<float>{3, 1, 0, -2}));
  const Tensor lo = ember::tensor<float>({-1, 1, -1, -1}), hi = ember::tensor<float>({0, 2, 0.5f, 2});
  EXPECT_EQ(ember::clamp(x, lo, hi).to_vector<float>(), (std::vector<float>{-1, 1, 0.5f, 2}));
  EXPECT_EQ(ember::clamp(x, std::nullopt, std::optional<Tensor>(hi)).to_vector<float>(),
            (std::vector<float>{-2, 0, 0.5f, 2}));
  EXPECT_THROW(ember::clamp(x, std::optional<ember::Scalar>(), std::optional<ember::Scalar>()), ember::Error);
}

TEST(Elementwise, OutFormsWriteIntoOut) {
  Tensor a = ember::rand({4, 5});
  Tensor b = ember::rand({5});
  Tensor out = ember::empty({4, 5});
  const void* p = out.data_ptr();
  ember::add_out(out, a, b);
  EXPECT_EQ(out.data_ptr(), p);
  EXPECT_TRUE(golden::all_close(out, a + b, {0, 0}));
  ember::mul_out(out, a, b);
  EXPECT_TRUE(golden::all_close(out, a * b, {0, 0}));
  Tensor wrong = ember::empty({5, 4});
  EXPECT_THROW(ember::sub_out(wrong, a, b), ember::Error);
  Tensor ints = ember::empty({4, 5}, ember::kInt64);
  EXPECT_THROW(ember::div_out(ints, a, b), ember::Error);
}

TEST(Elementwise, LargeTensorsMatchSmallPath) {
  // Above the grain size the kernels split across threads; the answer must not change.
  ember::manual_seed(3);
  Tensor a = ember::randn({300, 1000});
  Tensor b = ember::randn({1000});
  Tensor big = ember::exp(a) * b;
  Tensor row = ember::exp(a.select(0, 123)) * b;
  EXPECT_TRUE(golden::all_close(big.select(0, 123), row, {0, 0}));
}

TEST(Elementwise, ResultsDoNotDependOnPositionInTheRow) {
  // A contiguous row runs in vectors and its tail through the same vector code, so an element's
  // result is the same whatever its offset: x[i:] gives exactly the tail of the whole row's result,
  // on every SIMD width (ctest also runs this capped at AVX2).
  ember::manual_seed(8);
  const Tensor x = ember::randn({67}) * 3.0, y = ember::randn({67}) + 2.0;
  const Tensor whole_exp = ember::exp(x), whole_tanh = ember::tanh(x), whole_div = x / y;
  for (int64_t i = 0; i < 67; ++i) {
    const Tensor xs = x.slice(0, i, 67).contiguous(), ys = y.slice(0, i, 67).contiguous();
    EXPECT_TRUE(golden::all_close(ember::exp(xs), whole_exp.slice(0, i, 67), {0, 0})) << "offset " << i;
    EXPECT_TRUE(golden::all_close(ember::tanh(xs), whole_tanh.slice(0, i, 67), {0, 0})) << "offset " << i;
    EXPECT_TRUE(golden::all_close(xs / ys, whole_div.slice(0, i, 67), {0, 0})) << "offset " << i;
  }
}

// float16 and bfloat16 rows run the float32 vector code on converted values and round each result
// once to nearest even: bit for bit the float32 op followed by a conversion, nan, infinities,
// overflow, float16 subnormals and rounding ties included, in the vectors and in the tails.
TEST(Elementwise, SixteenBitFloatsComputeInFloat32AndRoundOnce) {
  ember::manual_seed(12);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor specials = ember::tensor<float>({nan, inf, -inf, 0.0f, -0.0f, 65504.0f, 3.0e38f, 1.0e-6f, -2.5e-7f});
  for (const ember::DType dtype : {ember::kBFloat16, ember::kFloat16}) {
    for (const int64_t n : {9, 16, 37, 200}) {
      Tensor x32 = ember::cat({specials, ember::randn({n}) * 4.0}).to(dtype).to(ember::kFloat32);
      Tensor y32 = (ember::randn({n + 9}) * 0.01 + 1.0).to(dtype).to(ember::kFloat32);
      const Tensor x = x32.to(dtype), y = y32.to(dtype);
      const auto check = [&](const char* op, const Tensor& got, const Tensor& want32) {
        EXPECT_TRUE(test_util::bitwise_equal(got, want32.to(dtype))) << op << " " << dtype << " n=" << n;
      };
      check("add", x + y, x32 + y32);
      check("mul", x * y, x32 * y32);
      check("div", x / y, x32 / y32);
      check("mul scalar", x * 3.0, x32 * 3.0);
      check("rsub", 0.5 - x, 0.5 - x32);
      check("exp", ember::exp(x), ember::exp(x32));
      check("tanh", ember::tanh(x), ember::tanh(x32));
      check("gelu", ember::gelu(x), ember::gelu(x32));
      check("neg", -x, -x32);
    }
  }
}

// Casts between float32 and bfloat16, float16 or float64 take vectors along contiguous rows: bit for
// bit the scalar conversion (BFloat16's and Half's rounding to nearest even, static_cast between
// float and double) on
// rounding ties, overflow, subnormals, zeros of both signs, infinities and NaNs with payloads, quiet
// and signalling, in the vectors and in the tails, contiguous or transposed.
TEST(Elementwise, CastsConvertBitForBitAsTheScalarConversion) {
  // Zeros, infinities, NaNs (quiet, signalling, with payloads), float32 subnormals, bfloat16
  // rounding ties, values that round to bfloat16's and float16's infinity (65520), float16's
  // subnormals and their ties (2^-25, 3 x 2^-25), the largest float16.
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u,
                                0x7f800001u, 0xff80abcdu, 0x00000001u, 0x807fffffu, 0x3f808000u, 0x3f818000u,
                                0x3f80c000u, 0x7f7f8000u, 0x7f7fffffu, 0xff7f8000u, 0x00008000u, 0x3f7fffffu,
                                0x477ff000u, 0x477fefffu, 0xc77ff000u, 0x33000000u, 0x33c00000u, 0xb3400000u,
                                0x477fe000u, 0x38800000u, 0x387fc000u, 0x7fa00001u};
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> floats;
  for (const uint32_t b : bits) floats.push_back(ember::bit_cast<float>(b));
  std::vector<double> doubles;
  for (const uint32_t b : bits) {
    doubles.push_back(ember::bit_cast<double>(static_cast<uint64_t>(b) << 32 | (b * 2654435761u)));
  }
  doubles.push_back(ember::bit_cast<double>(uint64_t{0x7ff0000000000001}));  // a signalling NaN
  doubles.push_back(1.0 + std::ldexp(1.0, -24));                             // a tie to even
  doubles.push_back(1.0 + 3 * std::ldexp(1.0, -24));                         // a tie to odd
  doubles.push_back(1e-46);                                                  // below float's subnormals
  for (const int64_t n : {1, 15, 16, 17, 40, 318}) {
    SCOPED_TRACE(n);
    const int64_t nf = std::min<int64_t>(n, static_cast<int64_t>(floats.size()));
    const Tensor f32 = ember::from_blob(floats.data(), {nf}, ember::kFloat32).clone();
    const Tensor f64 = ember::from_blob(doubles.data(), {nf}, ember::kFloat64).clone();
    const Tensor bf16 = f32.to(ember::kBFloat16), f16 = f32.to(ember::kFloat16);
    const Tensor down = f64.to(ember::kFloat32), up = f32.to(ember::kFloat64), back = bf16.to(ember::kFloat32);
    const Tensor back16 = f16.to(ember::kFloat32);
    for (int64_t i = 0; i < nf; ++i) {
      const float f = floats[static_cast<size_t>(i)];
      EXPECT_EQ(bf16.data_ptr<ember::BFloat16>()[i].bits, ember::BFloat16(f).bits) << "float bits " << bits[i];
      EXPECT_EQ(ember::bit_cast<uint32_t>(back.data_ptr<float>()[i]),
                ember::bit_cast<uint32_t>(static_cast<float>(ember::BFloat16(f))))
          << "float bits " << bits[i];
      EXPECT_EQ(f16.data_ptr<ember::Half>()[i].bits, ember::Half(f).bits) << "float bits " << bits[i];
      EXPECT_EQ(ember::bit_cast<uint32_t>(back16.data_ptr<float>()[i]),
                ember::bit_cast<uint32_t>(static_cast<float>(ember::Half(f))))
          << "float bits " << bits[i];
      EXPECT_EQ(ember::bit_cast<uint64_t>(up.data_ptr<double>()[i]), ember::bit_cast<uint64_t>(static_cast<double>(f)))
          << "float bits " << bits[i];
      const double v = doubles[static_cast<size_t>(i)];
      EXPECT_EQ(ember::bit_cast<uint32_t>(down.data_ptr<float>()[i]), ember::bit_cast<uint32_t>(static_cast<float>(v)))
          << "double " << v;
    }
  }
  // The last doubles (ties, a signalling NaN) in a row of their own, vectors and tail.
  const std::vector<double> tail(doubles.end() - 20, doubles.end());
  const Tensor down = ember::from_blob(const_cast<double*>(tail.data()), {20}, ember::kFloat64).to(ember::kFloat32);
  for (size_t i = 0; i < tail.size(); ++i) {
    EXPECT_EQ(ember::bit_cast<uint32_t>(down.data_ptr<float>()[i]),
              ember::bit_cast<uint32_t>(static_cast<float>(tail[i])))
        << "double " << tail[i];
  }
  // Transposed (strided rows: the scalar loop) and contiguous give the same bits.
  const Tensor square = ember::randn({37, 37}) * 1e3;
  EXPECT_TRUE(test_util::bitwise_equal(square.t().to(ember::kBFloat16), square.to(ember::kBFloat16).t()));
}

TEST(Elementwise, AbsClearsTheSignOfNegativeZero) {
  for (const int64_t n : {1, 3, 8, 17, 40}) {
    for (const ember::DType dtype : {ember::kFloat32, ember::kFloat64, ember::kFloat16}) {
      const std::vector<double> values = ember::abs(ember::full({n}, -0.0, dtype)).to_vector<double>();
      for (const double v : values) EXPECT_FALSE(std::signbit(v)) << n << " " << dtype;
    }
  }
}

TEST(Elementwise, ErrorsNameTheOpAndShapes) {
  try {
    ember::add(ember::ones({2, 3}), ember::ones({4}));
    FAIL() << "no error";
  } catch (const ember::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[add]", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  try {
    ember::gelu(ember::ones({2}), "fast");
    FAIL() << "no error";
  } catch (const ember::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[gelu]", 0), 0u) << e.what();
  }
  EXPECT_THROW(ember::pow(ember::ones({2}, ember::kInt64), -1), ember::Error);
}

// An in-place or out= write into a tensor whose elements share memory (a broadcast dim) would
// accumulate into one location: refused with the op's name, as PyTorch does. Filling is harmless.
TEST(Elementwise, InPlaceWritesIntoOverlappingMemoryAreRefused) {
  const Tensor values = ember::tensor<float>({1, 2, 3});
  auto expect_refused = [](const char* op, const std::function<void()>& fn) {
    try {
      fn();
      ADD_FAILURE() << op << " into an expanded tensor should be refused";
    } catch (const ember::Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(std::string("[") + op + "] unsupported operation: more than one element", 0), 0u)
          << message;
    }
  };
  Tensor base = ember::ones({1});
  Tensor expanded = base.expand({3});
  expect_refused("sub_", [&] { expanded.sub_(values); });
  expect_refused("add_", [&] { expanded.add_(1.0); });
  expect_refused("mul_", [&] { expanded.mul_(values); });
  expect_refused("exp_", [&] { expanded.exp_(); });
  expect_refused("copy_", [&] { expanded.copy_(values); });
  expect_refused("add_out", [&] { ember::add_out(expanded, values, values); });
  EXPECT_EQ(base.item<float>(), 1.0f);  // nothing was written
  expanded.fill_(4.0);
  EXPECT_EQ(base.item<float>(), 4.0f);
}

// A tensor without elements cannot overlap itself, whatever its strides: an in-place op on an empty
// expanded tensor does nothing, as in PyTorch (it was refused as an overlapping write).
TEST(Elementwise, InPlaceOpsOnEmptyExpandedTensorsDoNothing) {
  Tensor x = ember::empty({4, 0, 0}).as_strided({4, 0, 0}, {0, 1, 0});
  ASSERT_EQ(x.numel(), 0);
  EXPECT_NO_THROW(x.mul_(ember::ones({4, 0, 0})));
  EXPECT_NO_THROW(x.mul_(2.0));
  EXPECT_NO_THROW(x.add_(ember::ones({0})));
  EXPECT_NO_THROW(x.exp_());
  EXPECT_NO_THROW(x.copy_(ember::empty({4, 0, 0})));
  EXPECT_NO_THROW(ember::add_out(x, ember::empty({4, 0, 0}), ember::empty({4, 0, 0})));
  Tensor expanded = ember::empty({1, 0}).expand({5, 0});
  EXPECT_NO_THROW(expanded.sub_(ember::empty({5, 0})));
  EXPECT_EQ(expanded.shape(), ember::Shape({5, 0}));
}

// where() selects through a mask (Note [branchless select]): 1, 2, 4 and 8-byte elements, each operand
// contiguous, a broadcast scalar or strided, against the arithmetic select in float64.
TEST(Elementwise, WhereSelectsForEveryElementSizeAndLayout) {
  ember::manual_seed(11);
  const Tensor c = ember::rand({37, 70}) < 0.5;
  const Tensor a = ember::randint(-100, 100, {37, 70}), b = ember::randint(-100, 100, {37, 70});
  const Tensor a_t = ember::randint(-100, 100, {70, 37}).t();
  const Tensor s = ember::full({1, 1}, -7.0, ember::kInt64);
  const Tensor cd = c.to(ember::kFloat64);
  for (const ember::DType dtype : {ember::kInt8, ember::kFloat16, ember::kFloat32, ember::kInt64}) {
    for (const auto& [x, y] : std::vector<std::pair<Tensor, Tensor>>{{a, b}, {a, s}, {s, b}, {s, s * -1}, {a_t, b}}) {
      const Tensor xd = x.to(dtype), yd = y.to(dtype);
      const Tensor expected = cd * xd.to(ember::kFloat64) + (1 - cd) * yd.to(ember::kFloat64);
      const Tensor got = ember::where(c, xd, yd);
      ASSERT_EQ(got.dtype(), dtype);
      EXPECT_TRUE(golden::all_close(got.to(ember::kFloat64), expected, {0, 0})) << dtype;
    }
  }
}

// relu's gradient through a broadcast cotangent (a sum's backward) takes the fused pass too.
TEST(Elementwise, ReluGradientThroughASum) {
  ember::manual_seed(12);
  const Tensor x = ember::randn({5, 33}).requires_grad_();
  ember::relu(x).sum().backward();
  EXPECT_TRUE(golden::all_close(x.grad(), (x.detach() > 0).to(ember::kFloat32), {0, 0}));
}
