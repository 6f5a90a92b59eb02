// The dispatch seam (src/ops/dispatch.h): device, dtype and attribute checks with clear errors,
// observers that see every kernel, view, composite and backward node, and autograd nodes that
// carry their op and its attributes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ops/dispatch.h"
#include "test_util.h"

namespace ember {
namespace {

using test_util::expect_error;

// A tensor that claims to live on cuda:0 (its bytes are host memory, never touched: the seam
// refuses before any kernel runs), so the checks can be tested on a machine without a GPU.
Tensor fake_cuda_tensor(const Shape& shape, std::vector<float>& memory) {
  memory.assign(static_cast<size_t>(shape.numel()), 0.0f);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<StorageImpl>(memory.data(), static_cast<int64_t>(memory.size() * sizeof(float)),
                                                Device{DeviceType::kCUDA, 0}, nullptr, nullptr);
  impl->set_geometry(shape, contiguous_strides(shape), 0);
  return Tensor(impl);
}

TEST(Dispatch, AnOpWithoutAKernelForTheDeviceIsAClearError) {
  std::vector<float> a_bytes, b_bytes, c_bytes;
  const Tensor a = fake_cuda_tensor({2, 3}, a_bytes), b = fake_cuda_tensor({2, 3}, b_bytes);
  const Tensor c = fake_cuda_tensor({2, 3}, c_bytes);
  expect_error([&] { dispatch::run(OpKind::kCumsum, DimAttrs{0}, {&a}, {&c}); },
               {"[cumsum] not implemented on cuda:0"});
  expect_error(
      [&] {
        dispatch::run(OpKind::kBatchNormStats, NoAttrs{}, {&a}, {&b, &c});
      },
      {"[batch_norm_stats] not implemented on cuda:0"});
}

TEST(Dispatch, OperandsOnDifferentDevicesAreAClearError) {
  std::vector<float> bytes;
  const Tensor gpu = fake_cuda_tensor({2, 3}, bytes), cpu = ones({2, 3});
  expect_error([&] { (void)add(cpu, gpu); }, {"[add] expected all tensors on the same device, got cpu and cuda:0"});
  expect_error([&] { (void)mul(cpu, gpu); }, {"[mul]", "cuda:0"});
}

TEST(Dispatch, AKernelRefusesAResultDtypeItDoesNotCompute) {
  const Tensor x = ones({1, 1, 4, 4}), w = ones({1, 1, 2, 2});
  const Tensor out = empty({1, 1, 3, 3}, kInt64);
  expect_error(
      [&] {
        dispatch::run(OpKind::kConv2d, Conv2dAttrs{}, {&x, &w, nullptr}, {&out});
      },
      // (bfloat16 too where the CPU has AVX512_BF16)
      {"[conv2d] the CPU kernel computes float32, float64", "not int64"});
}

TEST(Dispatch, AttributesOfAnotherOpAreRefused) {
  const Tensor a = ones({2}), out = empty({2});
  expect_error(
      [&] {
        dispatch::run(OpKind::kAdd, Conv2dAttrs{}, {&a, &a}, {&out});
      },
      {"[add] internal error: called with the attributes of another op"});
}

// Counts what an observer sees.
class Counter final : public dispatch::Observer {
 public:
  void begin(const dispatch::OpCall& call) override {
    ++begins[call.call_kind];
    names.push_back(std::string(op_name(call.kind)) +
                    (call.call_kind == dispatch::CallKind::kBackward ? "_backward" : ""));
    if (call.call_kind == dispatch::CallKind::kKernel) {
      EXPECT_NE(call.kernel, nullptr);
    }
  }
  void end(const dispatch::OpCall& call) override {
    ++ends[call.call_kind];
    if (call.failed) ++failed;
  }
  std::map<dispatch::CallKind, int> begins, ends;
  std::vector<std::string> names;
  int failed = 0;
};

TEST(Dispatch, ObserversSeeKernelsViewsCompositesAndBackwardNodes) {
  const Tensor x = randn({4, 3}).requires_grad_();
  Counter counter;
  dispatch::add_observer(&counter);
  const Tensor y = mean(x.t() * 2.0);  // a view, a fill (the scalar), a mul, then mean: sum and div
  y.backward();
  dispatch::remove_observer(&counter);
  (void)add(x, x);  // not observed any more
  EXPECT_EQ(counter.begins, counter.ends);
  EXPECT_GE(counter.begins[dispatch::CallKind::kView], 1);
  EXPECT_EQ(counter.begins[dispatch::CallKind::kComposite], 1);  // mean
  EXPECT_GE(counter.begins[dispatch::CallKind::kBackward], 3);   // mean, mul, permute
  const std::vector<std::string> expected = {"permute", "fill", "mul", "mean", "sum", "fill", "div"};
  ASSERT_GE(counter.names.size(), expected.size());
  EXPECT_EQ(std::vector<std::string>(counter.names.begin(), counter.names.begin() + 7), expected);
  EXPECT_NE(std::find(counter.names.begin(), counter.names.end(), "mean_backward"), counter.names.end());
  EXPECT_EQ(std::count(counter.names.begin(), counter.names.end(), "add"), 0);
}

TEST(Dispatch, AFailingKernelEndsItsCallAsFailedAndNamesTheCompositeTheUserCalled) {
  const Tensor weight = randn({5, 3}), indices = from_vector(std::vector<int64_t>{1, 7});
  Counter counter;
  dispatch::add_observer(&counter);
  expect_error([&] { (void)embedding(weight, indices); }, {"[embedding] index 7 is out of bounds for dimension 0"});
  dispatch::remove_observer(&counter);
  EXPECT_EQ(counter.begins, counter.ends);
  EXPECT_EQ(counter.failed, 2);  // the index_select kernel and the embedding scope around it
  // Outside a composite the primitive names itself.
  expect_error([&] { (void)index_select(weight, 0, indices); }, {"[index_select] index 7 is out of bounds"});
}

TEST(Dispatch, AScopeWithTheAttributesOfAnotherOpIsRefused) {
  const Tensor a = ones({2});
  expect_error([&] { const dispatch::Scope scope(OpKind::kCat, {&a}); },
               {"[cat] internal error: a scope with the attributes of another op"});
  // The refused scope left no error context behind: a kernel's error names its own op.
  expect_error([&] { (void)index_select(a, 0, from_vector(std::vector<int64_t>{5})); }, {"[index_select] index 5"});
}

// An observer that throws from begin(): the op fails before it runs and leaves no state behind.
class ThrowingObserver final : public dispatch::Observer {
 public:
  void begin(const dispatch::OpCall&) override { EMBER_FAIL("observer refused"); }
  void end(const dispatch::OpCall&) override { ++ends; }
  int ends = 0;
};

TEST(Dispatch, AnObserverThatThrowsFailsTheOpCleanly) {
  const Tensor x = randn({3, 4});
  ThrowingObserver observer;
  dispatch::add_observer(&observer);
  expect_error([&] { (void)mean(x); }, {"observer refused"});
  dispatch::remove_observer(&observer);
  EXPECT_EQ(observer.ends, 0);
  // mean's scope never opened, so an error inside a later op names that op, not mean.
  expect_error([&] { (void)index_select(x, 0, from_vector(std::vector<int64_t>{5})); }, {"[index_select] index 5"});
}

// Attaching and detaching observers while another thread runs ops (a profiler started and stopped
// during training, with the data loader's thread gathering batches) is safe, and once
// remove_observer returns the observer is called no more.
TEST(Dispatch, ObserversComeAndGoWhileAnotherThreadRunsOps) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> ops{0};
  std::thread worker([&] {
    const Tensor a = ones({4}), b = ones({4});
    while (!stop.load()) {
      (void)add(a, b);
      ++ops;
    }
  });
  for (int i = 0; i < 200; ++i) {
    Counter first, second;
    dispatch::add_observer(&first);
    dispatch::add_observer(&second);
    dispatch::remove_observer(&first);
    dispatch::remove_observer(&second);
    const size_t seen = second.names.size();
    const int64_t until = ops.load() + 2;
    while (ops.load() < until) std::this_thread::yield();
    EXPECT_EQ(second.names.size(), seen);  // detached: no more calls
  }
  stop = true;
  worker.join();
}

TEST(Dispatch, AutogradNodesCarryTheirOpAndAttributes) {
  const Tensor x = randn({1, 2, 6, 6}), w = randn({3, 2, 3, 3}).requires_grad_();
  const Tensor y = conv2d(x, w, std::nullopt, 2, 1);
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->kind(), OpKind::kConv2d);
  EXPECT_EQ(std::get<Conv2dAttrs>(y.grad_fn()->attrs()), (Conv2dAttrs{2, 1, 1, 1}));
  const Tensor s = sum(y, {1, 3}, true);
  EXPECT_EQ(s.grad_fn()->kind(), OpKind::kSum);
  EXPECT_EQ(std::get<ReduceAttrs>(s.grad_fn()->attrs()), (ReduceAttrs{{1, 3}, true}));
  EXPECT_STREQ(s.grad_fn()->name(), "sum");
  // A leaf's gradient sink is no op.
  EXPECT_FALSE(autograd::grad_accumulator(w)->kind().has_value());
}

TEST(Dispatch, AttributesCompareAndHashByValue) {
  const Attrs a = Conv2dAttrs{1, 2, 1, 1}, b = Conv2dAttrs{1, 2, 1, 1}, c = Conv2dAttrs{1, 1, 1, 1};
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(hash_value(a), hash_value(b));
  EXPECT_NE(hash_value(a), hash_value(c));
  // Same fields, other attribute type: different.
  EXPECT_NE(hash_value(Attrs{DimAttrs{1}}), hash_value(Attrs{SelectAttrs{1, 0}}));
  // A NaN fill value equals itself (bits), so two such calls are the same call.
  const Attrs nan_fill = FillAttrs{std::nan("")};
  EXPECT_EQ(nan_fill, Attrs{FillAttrs{std::nan("")}});
  // A double field compares by value: -0.0 == 0.0, so they must hash alike. A Scalar compares by
  // its bits: -0.0 fills differently from 0.0.
  const Attrs zero = SgdAttrs{0.1, 0.0}, minus_zero = SgdAttrs{0.1, -0.0};
  EXPECT_EQ(zero, minus_zero);
  EXPECT_EQ(hash_value(zero), hash_value(minus_zero));
  EXPECT_NE(Attrs{FillAttrs{0.0}}, Attrs{FillAttrs{-0.0}});
  EXPECT_NE(hash_value(FillAttrs{0.0}), hash_value(FillAttrs{-0.0}));
}

}  // namespace
}  // namespace ember
