// Core: promotion and broadcasting tables and printing against PyTorch; views sharing storage,
// factories, the allocator, scalars and errors. The ops' forward checks (to, arange, linspace, eye,
// the views, the random draws) are their registry entries (tests/ops_*.cpp).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "core/allocator.h"
#include "golden.h"
#include "test_util.h"

using ember::Tensor;

TEST(Promotion, MatchesPyTorchTable) {
  int checked = 0;
  for (const auto& entry : golden::load("core").at("promotion")) {
    const ember::DType a = golden::dtype_from_name(entry.at("a"));
    const Tensor ta = ember::zeros(entry.at("a_dim").get<int>() ? ember::Shape{2} : ember::Shape{}, a);
    const ember::DType expected = golden::dtype_from_name(entry.at("result"));
    ember::DType actual;
    std::string what;
    if (entry.contains("scalar")) {
      const ember::Scalar s = golden::scalar_from_json(entry.at("scalar"));
      actual = ember::result_type(ta, s);
      what = entry.at("scalar").dump();
    } else {
      const ember::DType b = golden::dtype_from_name(entry.at("b"));
      const Tensor tb = ember::zeros(entry.at("b_dim").get<int>() ? ember::Shape{2} : ember::Shape{}, b);
      actual = ember::result_type(ta, tb);
      what = std::string(ember::dtype_name(b)) + (entry.at("b_dim").get<int>() ? "" : " (0-dim)");
    }
    EXPECT_EQ(actual, expected) << ember::dtype_name(a) << (entry.at("a_dim").get<int>() ? "" : " (0-dim)") << " with "
                                << what;
    ++checked;
  }
  EXPECT_GT(checked, 400);
}

TEST(Broadcasting, MatchesPyTorch) {
  int checked = 0;
  for (const auto& entry : golden::load("core").at("broadcast")) {
    const ember::Shape a(entry.at("a").get<std::vector<int64_t>>());
    const ember::Shape b(entry.at("b").get<std::vector<int64_t>>());
    if (entry.at("result").is_null()) {
      EXPECT_THROW(ember::broadcast_shapes(a, b, "test"), ember::Error) << a << " " << b;
      // and the ops say so too
      EXPECT_THROW(ember::add(ember::zeros(a), ember::zeros(b)), ember::Error);
    } else {
      const ember::Shape expected(entry.at("result").get<std::vector<int64_t>>());
      EXPECT_EQ(ember::broadcast_shapes(a, b, "test"), expected) << a << " " << b;
      EXPECT_EQ((ember::zeros(a) + ember::ones(b)).shape(), expected);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 300);
}

TEST(Printing, MatchesPyTorchRepr) {
  for (const auto& entry : golden::load("core").at("print")) {
    const Tensor t = golden::decode_tensor(entry.at("tensor"));
    std::ostringstream out;
    out << t;
    EXPECT_EQ(out.str(), entry.at("text").get<std::string>());
  }
}

TEST(Views, ShareStorageAndSeeWrites) {
  Tensor base = ember::arange(24).reshape({2, 3, 4});
  Tensor v = base.permute({2, 0, 1});
  EXPECT_TRUE(v.shares_storage(base));
  EXPECT_EQ(v.shape(), (ember::Shape{4, 2, 3}));
  EXPECT_EQ(v.at<int64_t>({3, 1, 2}), base.at<int64_t>({1, 2, 3}));
  base.select(0, 1).select(0, 2).fill_(-1);
  EXPECT_EQ(v.at<int64_t>({0, 1, 2}), -1);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_TRUE(v.contiguous().is_contiguous());
  EXPECT_FALSE(v.contiguous().shares_storage(base));
  EXPECT_TRUE(base.contiguous().is_same(base));
}

TEST(Views, ErrorsNameTheOp) {
  Tensor x = ember::zeros({2, 3});
  auto starts_with = [](const std::function<void()>& f, const std::string& prefix) {
    try {
      f();
    } catch (const ember::Error& e) {
      return std::string(e.what()).rfind(prefix, 0) == 0;
    }
    return false;
  };
  EXPECT_TRUE(starts_with([&] { x.view({4, 2}); }, "[view]"));
  EXPECT_TRUE(starts_with([&] { x.permute({0, 0}); }, "[permute]"));
  EXPECT_TRUE(starts_with([&] { x.transpose(0, 2); }, "[transpose]"));
  EXPECT_TRUE(starts_with([&] { x.select(1, 3); }, "[select]"));
  EXPECT_TRUE(starts_with([&] { x.narrow(1, 2, 2); }, "[narrow]"));
  EXPECT_TRUE(starts_with([&] { x.expand({3, 3}); }, "[expand]"));
  EXPECT_TRUE(starts_with([&] { x.as_strided({10}, {1}); }, "[as_strided]"));
  EXPECT_TRUE(starts_with([&] { x.item(); }, "[item]"));
  EXPECT_TRUE(starts_with([&] { x.slice(0, 0, 1, 0); }, "[slice]"));
  EXPECT_TRUE(starts_with([&] { x.reshape({-1, -1}); }, "[reshape]"));
  EXPECT_TRUE(starts_with([&] { (void)x.data_ptr<double>(); }, "[data_ptr]"));
  EXPECT_TRUE(starts_with([&] { ember::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}); }, "[shape]"));
  EXPECT_TRUE(starts_with([&] { ember::zeros({2, -1}); }, "[zeros]"));
  // A CUDA device past the last one (cuda:0 on a machine without a GPU).
  const ember::Device missing{ember::DeviceType::kCUDA, ember::cuda::device_count()};
  EXPECT_TRUE(starts_with([&] { ember::ones({2}, missing); }, "[allocate]"));
  EXPECT_TRUE(starts_with([&] { ember::arange(0, 5, -1); }, "[arange]"));
  EXPECT_TRUE(starts_with([&] { ember::randint(5, 5, {2}); }, "[randint]"));
}

TEST(Creation, FactoriesAndLike) {
  EXPECT_EQ(ember::full({2}, 7).dtype(), ember::kInt64);
  EXPECT_EQ(ember::full({2}, 7.5).dtype(), ember::kFloat32);
  EXPECT_EQ(ember::full({2}, true).dtype(), ember::kBool);
  EXPECT_EQ(ember::full({2, 2}, 7.5, ember::kFloat64).at<double>({1, 1}), 7.5);
  EXPECT_EQ(ember::zeros_like(ember::ones({3}, ember::kInt32)).dtype(), ember::kInt32);
  EXPECT_EQ(ember::ones_like(ember::ones({3})).sum().item<float>(), 3.0f);
  std::vector<double> data = {1, 2, 3, 4, 5, 6};
  Tensor blob = ember::from_blob(data.data(), {2, 3}, ember::kFloat64);
  blob.mul_(2);
  EXPECT_EQ(data[5], 12.0);  // from_blob wraps, not copies
  Tensor strided = ember::from_blob(data.data(), {3}, ember::kFloat64, ember::Strides{2});
  EXPECT_EQ(strided.at<double>({2}), 10.0);
  Tensor v = ember::from_vector(std::vector<int32_t>{1, 2, 3, 4}, ember::Shape{2, 2});
  EXPECT_EQ(v.dtype(), ember::kInt32);
  EXPECT_EQ(v.at<int32_t>({1, 0}), 3);
  EXPECT_THROW(ember::from_vector(std::vector<int32_t>{1, 2, 3}, ember::Shape{2, 2}), ember::Error);
}

TEST(Allocator, SteadyStateLoopHitsTheCache) {
  Tensor x = ember::rand({256, 256});
  for (int i = 0; i < 3; ++i) x = ember::exp(x) * 0.5;  // warm up the size class
  const ember::MemoryStats before = ember::memory_stats();
  for (int i = 0; i < 50; ++i) x = ember::exp(x) * 0.5;
  const ember::MemoryStats after = ember::memory_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_GE(after.cache_hits - before.cache_hits, 100);
  EXPECT_GE(after.peak_bytes_in_use, after.bytes_in_use);
  EXPECT_GE(after.bytes_reserved, after.bytes_in_use);
  const int64_t in_use = after.bytes_in_use;
  {
    Tensor big = ember::empty({1 << 20});
    EXPECT_GE(ember::memory_stats().bytes_in_use, in_use + (4 << 20));
  }
  EXPECT_EQ(ember::memory_stats().bytes_in_use, in_use);
  ember::empty_cache();
  const ember::MemoryStats emptied = ember::memory_stats();
  EXPECT_EQ(emptied.bytes_reserved, emptied.bytes_in_use);
}

// Note [what cannot be allocated]: a size that does not fit in 64 bits, or a request larger than the
// machine's memory, is an ember::Error naming the op the user called, before any memory is touched.
namespace {
using test_util::error_of;
// The error `f` throws starts with `prefix` (the message is shown when it does not).
::testing::AssertionResult error_starts(const std::function<void()>& f, const std::string& prefix) {
  const std::string message = error_of(f);
  if (message.rfind(prefix, 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the error \"" << message << "\" does not start with \"" << prefix << "\"";
}
// A 1-element tensor seen as `shape` (stride 0): huge operands that take no memory.
Tensor huge_view(const ember::Shape& shape) { return ember::ones(ember::Shape(shape.size(), 1)).expand(shape); }
}  // namespace

TEST(Allocation, BeyondMemoryNamesTheOpAndTheBytes) {
  constexpr int64_t k64TiB = int64_t{1} << 46;
  if (ember::cpu_memory_limit() >= k64TiB) GTEST_SKIP() << "this machine has 64 TiB";
  const std::string memory = ": more than this machine's memory (";
  EXPECT_TRUE(error_starts(
      [] {
        ember::zeros({int64_t{1} << 22, int64_t{1} << 22});
      },
      "[zeros] cannot allocate 70368744177664 bytes (64.0 TiB)" + memory));
  const ember::Shape big{int64_t{1} << 22, int64_t{1} << 22};
  EXPECT_TRUE(error_starts([&] { ember::empty(big); }, "[empty] cannot allocate 70368744177664 bytes"));
  EXPECT_TRUE(error_starts([&] { ember::ones(big); }, "[ones] cannot allocate 70368744177664 bytes"));
  EXPECT_TRUE(error_starts([&] { ember::full(big, 2.5); }, "[full] cannot allocate 70368744177664 bytes"));
  EXPECT_TRUE(error_starts([&] { ember::rand(big); }, "[rand] cannot allocate 70368744177664 bytes"));
  EXPECT_TRUE(error_starts([&] { ember::randn(big); }, "[randn] cannot allocate 70368744177664 bytes"));
  EXPECT_TRUE(error_starts([&] { ember::randint(0, 9, big); }, "[randint] cannot allocate 140737488355328 bytes"));
  EXPECT_TRUE(error_starts([] { ember::linspace(0, 1, int64_t{1} << 46); }, "[linspace] cannot allocate"));
  EXPECT_TRUE(error_starts([] { ember::eye(int64_t{1} << 23); }, "[eye] cannot allocate 281474976710656 bytes"));
  EXPECT_TRUE(error_starts([] { ember::arange(int64_t{1} << 45); }, "[arange] cannot allocate 281474976710656"));
  // Outputs sized from their operands: a matmul, a broadcast, a linear layer, a convolution.
  const int64_t n = int64_t{1} << 21;  // (n, n) float32: 16 TiB
  EXPECT_TRUE(error_starts(
      [&] {
        ember::matmul(huge_view({n, 1}), huge_view({1, n}));
      },
      "[matmul] cannot allocate 17592186044416 bytes"));
  EXPECT_TRUE(error_starts(
      [&] {
        ember::add(huge_view({n, 1}), huge_view({1, n}));
      },
      "[add] cannot allocate 17592186044416 bytes"));
  EXPECT_TRUE(error_starts(
      [&] {
        ember::linear(huge_view({n, 1}), huge_view({n, 1}));
      },
      "[linear] cannot allocate 17592186044416 bytes"));
  EXPECT_TRUE(error_starts(
      [&] {
        ember::conv2d(huge_view({1, 1, n, n}), ember::ones({1, 1, 1, 1}));
      },
      "[conv2d] cannot allocate 17592186044416 bytes"));
  EXPECT_TRUE(error_starts([&] { huge_view({n, n}).contiguous(); }, "[copy] cannot allocate 17592186044416 bytes"));
  EXPECT_TRUE(error_starts([&] { ember::cat({huge_view({n, n}), huge_view({n, n})}); }, "[cat] cannot allocate"));
  // Nothing was allocated, and the allocator still works.
  EXPECT_EQ(ember::ones({3}).sum().item<float>(), 3.0f);
}

TEST(Allocation, SizesBeyond64BitsAreErrorsNotWrappedAround) {
  const int64_t g = int64_t{1} << 40;
  EXPECT_TRUE(error_starts(
      [&] {
        ember::zeros({g, g});
      },
      "[zeros] shape [1099511627776, 1099511627776] has more elements than a 64-bit count holds"));
  // (2^62 + 1) * 4 wraps around to 4: once a 16-byte tensor claiming 2^64 elements.
  const ember::Shape wraps{(int64_t{1} << 62) + 1, 4};
  EXPECT_TRUE(error_starts([&] { ember::zeros(wraps); }, "[zeros] shape [4611686018427387905, 4]"));
  EXPECT_TRUE(error_starts(
      [&] {
        ember::from_vector(std::vector<float>{1, 2, 3, 4}, wraps);
      },
      "[from_vector] shape [4611686018427387905, 4] has more elements"));
  EXPECT_TRUE(error_starts(
      [&] {
        ember::empty({int64_t{1} << 31, int64_t{1} << 31}, ember::kFloat64);
      },
      "[empty] cannot allocate a float64 tensor of shape [2147483648, 2147483648]: its size in bytes "
      "does not fit in 64 bits"));
  EXPECT_TRUE(error_starts([&] { ember::eye(int64_t{1} << 33); }, "[eye] shape [8589934592, 8589934592]"));
  EXPECT_TRUE(error_starts([] { ember::arange(0.0, 1e300, 1.0); }, "[arange] start 0, end 1e+300 and step 1 give"));
  EXPECT_TRUE(error_starts([] { ember::arange(INT64_MIN, INT64_MAX, int64_t{1}); }, "[arange] start"));
  EXPECT_TRUE(error_starts([] { ember::zeros({2, -1}); }, "[zeros] negative dimension in shape [2, -1]"));
  // Views: a reshape, an expand or an as_strided whose size or reach wraps around.
  EXPECT_TRUE(error_starts(
      [] {
        ember::zeros({0}).reshape({int64_t{1} << 62, 8});
      },
      "[reshape] shape [4611686018427387904, 8] has more elements"));
  EXPECT_TRUE(error_starts([&] { ember::zeros({4}).view(wraps); }, "[view] shape [4611686018427387905, 4]"));
  EXPECT_TRUE(error_starts([&] { ember::ones({1, 1}).expand({g, g}); }, "[expand] shape [1099511627776, "));
  EXPECT_TRUE(error_starts(
      [] {
        ember::ones({4}).as_strided({2, 2}, {int64_t{1} << 62, int64_t{1} << 62});
      },
      "[as_strided] shape [2, 2] with strides [4611686018427387904, 4611686018427387904] and offset 0 "
      "reaches beyond any storage"));
  EXPECT_TRUE(error_starts([] { ember::ones({4}).repeat({int64_t{1} << 62}); }, "[repeat] repeating shape [4]"));
  float value = 0;
  EXPECT_TRUE(error_starts(
      [&] {
        ember::from_blob(&value, {3, 3}, ember::kFloat32, ember::Strides{INT64_MAX, 1});
      },
      "[from_blob] shape [3, 3] with strides"));
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define EMBER_TEST_ASAN 1
#endif
#if !defined(EMBER_TEST_ASAN)  // AddressSanitizer reserves terabytes of address space
// The system allocator saying no (overcommit_memory=2, ulimit -v): the same error, never
// std::bad_alloc or an abort. The address-space limit makes it say no here.
TEST(Allocation, SystemAllocatorRefusalNamesTheOp) {
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old_limit), 0);
  std::ifstream status("/proc/self/status");
  std::string line;
  int64_t vm_kib = -1;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoll(line.substr(7));
  }
  if (vm_kib < 0) GTEST_SKIP() << "no /proc/self/status";
  const int64_t request = int64_t{4} << 30;  // 4 GiB: under the machine's memory, over the limit
  if (ember::cpu_memory_limit() <= request) GTEST_SKIP() << "this machine has less than 4 GiB";
  rlimit small = old_limit;
  small.rlim_cur = static_cast<rlim_t>(vm_kib * 1024 + (int64_t{1} << 30));
  ASSERT_EQ(setrlimit(RLIMIT_AS, &small), 0);
  const std::string message = error_of([&] { ember::zeros({request / 4}); });
  setrlimit(RLIMIT_AS, &old_limit);
  EXPECT_EQ(message.rfind("[zeros] cannot allocate 4294967296 bytes (4.0 GiB): the system allocator refused", 0), 0u)
      << message;
  EXPECT_EQ(ember::ones({3}).sum().item<float>(), 3.0f);
}
#endif

TEST(Allocation, EachThreadCountsItsOwnSystemAllocations) {
  // With the cache empty, the other thread's allocation goes to the system; this thread's count
  // does not move.
  ember::empty_cache();
  const int64_t mine = ember::thread_system_allocations();
  const int64_t total = ember::memory_stats().system_allocations;
  int64_t theirs = -1;
  std::thread([&] {
    const int64_t before = ember::thread_system_allocations();
    const Tensor t = ember::empty({1000003}, ember::kInt8);
    theirs = ember::thread_system_allocations() - before;
  }).join();
  EXPECT_EQ(theirs, 1);
  EXPECT_EQ(ember::thread_system_allocations(), mine);
  EXPECT_GE(ember::memory_stats().system_allocations, total + 1);
}

TEST(Scalars, ItemAndAt) {
  EXPECT_EQ(ember::tensor<double>({2.5}).item<double>(), 2.5);
  EXPECT_EQ(ember::tensor<int32_t>({1, 2, 3}).at<int32_t>({-1}), 3);
  EXPECT_THROW(ember::tensor<int32_t>({1, 2, 3}).at<int32_t>({3}), ember::Error);
  EXPECT_EQ(ember::Half(1.5f), 1.5f);
  EXPECT_EQ(static_cast<float>(ember::BFloat16(3.0f)), 3.0f);
}

namespace {
// Index into `t` (of shape s, possibly with fewer dims) for a full index of the broadcast shape.
ember::Shape broadcast_index(const ember::Shape& full, const ember::Shape& index, const ember::Shape& s) {
  ember::Shape out(s.size());
  for (int i = 0; i < s.size(); ++i) {
    const int j = full.size() - s.size() + i;
    out[i] = s[i] == 1 ? 0 : index[j];
  }
  return out;
}
}  // namespace

TEST(Broadcasting, RandomShapesPropertyTest) {
  // For random compatible shapes and layouts, every element of a + b equals the sum of the
  // elements NumPy's rules pick from a and b.
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 200; ++trial) {
    const int nd = pick(0, 4);
    ember::Shape full(nd);
    for (int d = 0; d < nd; ++d) full[d] = pick(1, 4);
    auto random_operand = [&]() {
      const int dims = pick(0, nd);
      ember::Shape s(dims);
      for (int i = 0; i < dims; ++i) s[i] = pick(0, 2) == 0 ? 1 : full[nd - dims + i];
      Tensor t = ember::randint(-50, 50, s.empty() ? ember::Shape{} : s);
      if (dims >= 2 && pick(0, 1)) t = t.transpose(0, 1).contiguous().transpose(0, 1);  // same values, strided
      return t;
    };
    const Tensor a = random_operand(), b = random_operand();
    const Tensor c = a + b;
    const ember::Shape expected = ember::broadcast_shapes(a.shape(), b.shape(), "test");
    ASSERT_EQ(c.shape(), expected);
    ember::Shape index(expected.size());
    for (int64_t linear = 0; linear < c.numel(); ++linear) {
      int64_t rest = linear;
      for (int d = expected.size() - 1; d >= 0; --d) {
        index[d] = rest % expected[d];
        rest /= expected[d];
      }
      const int64_t want = a.at<int64_t>(broadcast_index(expected, index, a.shape())) +
                           b.at<int64_t>(broadcast_index(expected, index, b.shape()));
      ASSERT_EQ(c.at<int64_t>(index), want) << a.shape() << " + " << b.shape() << " at " << index;
    }
  }
}

TEST(Dispatch, CostRulesCountFlopsAndBytes) {
  const Tensor a = ember::ones({8, 16}), b = ember::ones({16});
  const Tensor out = a + b;
  const ember::OpCost add = test_util::cost_of(ember::OpKind::kAdd, {}, {a, b}, {out});
  EXPECT_EQ(add.flops, 128.0);
  EXPECT_EQ(add.bytes, 4.0 * (128 + 128 + 16));
  const Tensor x = ember::ones({2, 3, 4}), y = ember::ones({2, 4, 5});
  const ember::OpCost mm = test_util::cost_of(ember::OpKind::kMatmul, ember::MatmulAttrs{}, {x, y, Tensor(), Tensor()},
                                              {ember::matmul(x, y)});
  EXPECT_EQ(mm.flops, 2.0 * 2 * 3 * 4 * 5);
  EXPECT_EQ(mm.bytes, 2.0 * 4 * (3 * 5 + 5 * 4 + 3 * 4));
  EXPECT_EQ(ember::op_info(ember::OpKind::kExp).name, "exp");
  EXPECT_TRUE(ember::has_trait(ember::OpKind::kAdd, ember::kCommutative));
  EXPECT_FALSE(ember::has_trait(ember::OpKind::kSub, ember::kCommutative));
}
