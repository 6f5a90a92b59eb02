// The collective primitives' registry entry: all_reduce, all_gather, reduce_scatter, broadcast and
// collective_wait through the dispatch seam, on a communicator that plays a group of two ranks in
// one process (the other rank's contribution is known) and runs each collective only when it is
// waited for, as a slow network would: a value read before the wait is the old one. The real groups
// (MPI, Gloo, two processes) are tests/dist/test_ranks.cpp's.
#include <deque>
#include <functional>

#include "op_registry.h"
#include "ops/collective.h"

namespace op_registry {
namespace {

using ember::CollectiveAttrs;
using ember::Operand;

// Rank 0 of two; rank 1's buffers hold 10 * (1 + index).
class TwoRanks final : public ember::collective::Communicator {
 public:
  TwoRanks() : id_(ember::collective::register_communicator(this)) {}
  ~TwoRanks() override { ember::collective::unregister_communicator(id_); }
  int64_t id() const { return id_; }

  void start(OpKind kind, const Operand& input, const Operand& output, const CollectiveAttrs& attrs) override {
    const auto* in = input.ptr<const float>();
    auto* out = output.ptr<float>();
    const int64_t n = input.numel(), m = output.numel();
    const int64_t reduce = attrs.reduce;
    const int64_t root = attrs.root;
    auto other = [](int64_t i) { return 10.0f * static_cast<float>(1 + i); };
    pending_.push_back({output.data, [=] {
                          if (kind == OpKind::kAllReduce) {
                            for (int64_t i = 0; i < n; ++i) {
                              out[i] = reduce == 2   ? std::max(out[i], other(i))
                                       : reduce == 1 ? (out[i] + other(i)) / 2.0f
                                                     : out[i] + other(i);
                            }
                          } else if (kind == OpKind::kBroadcast) {
                            if (root == 1) {
                              for (int64_t i = 0; i < n; ++i) out[i] = other(i);
                            }
                          } else if (kind == OpKind::kAllGather) {
                            for (int64_t i = 0; i < n; ++i) {
                              out[i] = in[i];
                              out[n + i] = other(i);
                            }
                          } else {  // reduce_scatter: rank 0 keeps the first half, summed
                            for (int64_t i = 0; i < m; ++i) out[i] = in[i] + other(i);
                          }
                        }});
  }

  void wait(const void* data) override {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->data != data) {
        ++it;
        continue;
      }
      it->run();
      it = pending_.erase(it);
    }
  }

 private:
  struct Pending {
    const void* data;
    std::function<void()> run;
  };
  int64_t id_;
  std::deque<Pending> pending_;
};

void run_collective(OpKind kind, CollectiveAttrs attrs, const Tensor* input, const Tensor& output) {
  if (input != nullptr) {
    ember::dispatch::run(kind, attrs, {input}, {&output});
  } else {
    ember::dispatch::run(kind, attrs, {}, {&output});
  }
}

void wait(CollectiveAttrs attrs, const Tensor* input, const Tensor& output) {
  run_collective(OpKind::kCollectiveWait, attrs, input, output);
}

void expect_values(const Tensor& t, std::vector<float> expected) { EXPECT_EQ(t.to_vector<float>(), expected); }

void collectives_start_and_wait() {
  TwoRanks group;
  const CollectiveAttrs sum{.group = group.id()};
  Tensor x = ember::tensor<float>({1, 2, 3});
  run_collective(OpKind::kAllReduce, sum, nullptr, x);
  expect_values(x, {1, 2, 3});  // started, not done
  wait(sum, nullptr, x);
  expect_values(x, {11, 22, 33});
  Tensor y = ember::tensor<float>({1, 2});
  run_collective(OpKind::kAllReduce, {.group = group.id(), .reduce = 1}, nullptr, y);
  wait(sum, nullptr, y);
  expect_values(y, {5.5f, 11});
  Tensor z = ember::tensor<float>({50, 2});
  run_collective(OpKind::kAllReduce, {.group = group.id(), .reduce = 2}, nullptr, z);
  wait(sum, nullptr, z);
  expect_values(z, {50, 20});

  Tensor b = ember::tensor<float>({7, 8});
  run_collective(OpKind::kBroadcast, {.group = group.id(), .root = 1}, nullptr, b);
  wait(sum, nullptr, b);
  expect_values(b, {10, 20});

  const Tensor mine = ember::tensor<float>({1, 2});
  Tensor gathered = ember::zeros({4});
  run_collective(OpKind::kAllGather, sum, &mine, gathered);
  wait(sum, &mine, gathered);
  expect_values(gathered, {1, 2, 10, 20});

  const Tensor both = ember::tensor<float>({1, 2, 3, 4});
  Tensor half = ember::zeros({2});
  run_collective(OpKind::kReduceScatter, sum, &both, half);
  wait(sum, &both, half);
  expect_values(half, {11, 22});

  // Nothing started on a buffer: the wait returns at once.
  Tensor idle = ember::ones({1});
  wait(sum, nullptr, idle);
  expect_values(idle, {1});
}

void unknown_group_is_an_error() {
  Tensor x = ember::ones({2});
  EXPECT_THROW(run_collective(OpKind::kAllReduce, {.group = 123456}, nullptr, x), ember::Error);
}

[[maybe_unused]] const bool kCollectiveRegistered =
    add({{.name = "collectives",
          .ops = {OpKind::kAllReduce, OpKind::kBroadcast, OpKind::kAllGather, OpKind::kReduceScatter,
                  OpKind::kCollectiveWait},
          .checks = {{"collectives_start_and_wait", collectives_start_and_wait},
                     {"collectives_unknown_group", unknown_group_is_an_error}}}});

}  // namespace
}  // namespace op_registry
