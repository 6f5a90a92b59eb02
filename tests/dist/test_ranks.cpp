// Tests run by every rank of a real multi-process job (tests/dist/run_ranks.sh starts them, under
// mpirun for MPI or as plain processes for Gloo): the collectives, and DistributedDataParallel (with
// and without ZeRO-1) against the same training in one process with the whole batch, which each
// rank also runs on its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "ember/autograd.h"
#include "ember/dist.h"
#include "ember/dist/functional.h"
#include "ember/models/gpt.h"
#include "ember/models/mnist.h"
#include "ember/nn.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "test_util.h"

namespace ember::dist {
namespace {

ProcessGroup& group() {
  static const std::shared_ptr<ProcessGroup> g = init_process_group();
  return *g;
}
std::shared_ptr<ProcessGroup> group_ptr() {
  static const std::shared_ptr<ProcessGroup> g(&group(), [](ProcessGroup*) {});
  return g;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to(kFloat64).eq(b.to(kFloat64)).all().item<bool>();
}
double at(const Tensor& t, int64_t i) { return t.reshape({-1}).select(0, i).to(kFloat64).item<double>(); }

// ||a - b|| / ||b|| (elementwise ratios blow up at weights that pass near zero).
double max_relative_difference(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(kFloat64), y = b.to(kFloat64);
  return ((x - y).square().sum().sqrt() / (y.square().sum().sqrt() + 1e-30)).item<double>();
}

TEST(Collectives, EveryCollectiveOnEveryDtype) {
  ProcessGroup& g = group();
  const int world = g.world_size();
  const int rank = g.rank();
  ASSERT_GE(world, 2);
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor t = full({5}, rank + 1, dtype);
    g.all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_EQ(t.to(kFloat64).sum().item<double>(), 5.0 * world * (world + 1) / 2);
    t = full({3}, rank + 1, dtype);
    g.all_reduce(t, ReduceOp::kMax)->wait();
    EXPECT_EQ(t.to(kFloat64).max().item<double>(), world);
    EXPECT_EQ(t.to(kFloat64).min().item<double>(), world);
    t = arange(0, 4, 1, dtype) + rank;
    g.broadcast(t, world - 1)->wait();
    EXPECT_TRUE(same(t, arange(0, 4, 1, dtype) + (world - 1)));
    const Tensor gathered = zeros({world * 2}, dtype);
    g.all_gather(gathered, full({2}, rank, dtype))->wait();
    for (int r = 0; r < world; ++r) EXPECT_EQ(at(gathered, 2 * r), r);
    const Tensor input = arange(0, world * 3, 1, dtype);  // the same on every rank
    const Tensor output = zeros({3}, dtype);
    g.reduce_scatter(output, input, ReduceOp::kSum)->wait();
    EXPECT_TRUE(same(output, (arange(0, 3, 1, dtype) + 3 * rank) * world));
  }
  Tensor avg = full({4}, static_cast<double>(rank), kFloat64);
  g.all_reduce(avg, ReduceOp::kAvg)->wait();
  EXPECT_DOUBLE_EQ(at(avg, 0), (world - 1) / 2.0);
  g.barrier()->wait();
  // Many in flight at once complete in order.
  std::vector<Tensor> tensors;
  std::vector<WorkHandle> works;
  for (int i = 0; i < 20; ++i) {
    tensors.push_back(full({1000}, i, kFloat32));
    works.push_back(g.all_reduce(tensors.back()));
  }
  for (int i = 0; i < 20; ++i) {
    works[i]->wait();
    EXPECT_EQ(at(tensors[i], 999), i * world);
  }
  test_util::expect_error([&] { g.all_reduce(zeros({2}, kInt32)); }, {"[dist] all_reduce", "int32"});
  test_util::expect_error([&] { g.all_reduce(zeros({4, 4}).t()); }, {"contiguous"});
  test_util::expect_error([&] { g.all_gather(zeros({3}), zeros({2})); }, {"all_gather", "elements"});
}

// The differentiable collectives: every rank's loss is (output * (rank + 1)).sum(), so the gradient
// of each input is what the sum of the ranks' losses says about it.
TEST(Collectives, DifferentiableCollectivesBackpropagateTheSumOfTheRanksLosses) {
  namespace F = functional;
  const std::shared_ptr<ProcessGroup> g = group_ptr();
  const int world = g->world_size();
  const int rank = g->rank();
  const double weights = world * (world + 1) / 2.0;  // the sum over ranks of rank + 1
  auto input = [&](const Shape& shape) {
    return (arange(0, shape.numel(), 1, kFloat64).reshape(shape) + 10.0 * rank).requires_grad_(true);
  };
  auto backward = [&](const Tensor& out) { (out * static_cast<double>(rank + 1)).sum().backward(); };
  const Tensor base = arange(0, 6, 1, kFloat64).reshape({2, 3});

  Tensor x = input({2, 3});
  Tensor y = F::all_reduce(x.t(), g);  // a non-contiguous input
  EXPECT_TRUE(same(y, (base * world + 10.0 * world * (world - 1) / 2).t()));
  EXPECT_TRUE(same(x, base + 10.0 * rank));  // the input is left as it was
  backward(y);
  EXPECT_TRUE(same(x.grad(), full({2, 3}, weights, kFloat64)));

  x = input({2, 3});
  backward(F::all_reduce(x, g, ReduceOp::kAvg));
  EXPECT_TRUE(same(x.grad(), full({2, 3}, weights / world, kFloat64)));

  x = input({2, 3});
  y = F::all_gather(x, g);
  ASSERT_EQ(y.shape(), Shape({2 * world, 3}));
  for (int r = 0; r < world; ++r) EXPECT_TRUE(same(y.narrow(0, 2 * r, 2), base + 10.0 * r));
  const Tensor ramp = arange(0, 6 * world, 1, kFloat64).reshape({2 * world, 3});
  (y * ramp * static_cast<double>(rank + 1)).sum().backward();
  EXPECT_TRUE(same(x.grad(), ramp.narrow(0, 2 * rank, 2) * weights));

  x = input({2 * world, 3});
  y = F::reduce_scatter(x, g);
  ASSERT_EQ(y.shape(), Shape({2, 3}));
  const Tensor rows = arange(0, 6 * world, 1, kFloat64).reshape({2 * world, 3}).narrow(0, 2 * rank, 2);
  EXPECT_TRUE(same(y, rows * world + 10.0 * world * (world - 1) / 2));
  backward(y);
  for (int r = 0; r < world; ++r) EXPECT_TRUE(same(x.grad().narrow(0, 2 * r, 2), full({2, 3}, r + 1.0, kFloat64)));

  const int root = world - 1;
  x = input({2, 3});
  y = F::broadcast(x, g, root);
  EXPECT_TRUE(same(y, base + 10.0 * root));
  backward(y);
  EXPECT_TRUE(same(x.grad(), full({2, 3}, rank == root ? weights : 0.0, kFloat64)));

  // A max has no gradient; integers record none.
  x = input({2, 3});
  y = F::all_reduce(x, g, ReduceOp::kMax);
  EXPECT_TRUE(same(y, base + 10.0 * (world - 1)));
  test_util::expect_error([&] { backward(y); }, {"[dist] all_reduce with ReduceOp::kMax has no gradient"});
  EXPECT_FALSE(F::all_reduce(arange(0, 3, 1, kInt64), g).requires_grad());
  test_util::expect_error([&] { (void)F::reduce_scatter(zeros({2 * world + 1}), g); },
                          {"[dist] reduce_scatter splits dim 0 into world_size"});
  test_util::expect_error([&] { (void)F::broadcast(zeros({2}), g, world); }, {"[dist] broadcast: root"});
  test_util::expect_error([&] { (void)F::all_gather(zeros({}), g); }, {"[dist] all_gather stacks along dim 0"});
}

// One process with the global batch, and every rank with its share of it under DDP, trained alike;
// returns the worst relative difference of the losses and of the final weights.
struct Equality {
  double loss = 0;
  double weights = 0;
};

using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;
using LossFn = std::function<Tensor(nn::Module&, const Tensor& inputs, const Tensor& targets)>;
using GroupsFn = std::function<std::vector<optim::ParamGroup>(nn::Module&)>;

std::vector<optim::ParamGroup> one_group(nn::Module& model) { return {{.params = model.parameters(), .options = {}}}; }

Equality train_both(const ModelFactory& make, const LossFn& loss_fn, const Tensor& inputs, const Tensor& targets,
                    int steps, bool zero, double bucket_cap_mb, const GroupsFn& groups = one_group) {
  ProcessGroup& g = group();
  const int world = g.world_size();
  const int64_t batch = inputs.size(0) / steps;
  const int64_t share = batch / world;
  manual_seed(7);
  const std::shared_ptr<nn::Module> single = make();
  manual_seed(1000 + g.rank());  // other weights on each rank: DDP must broadcast rank 0's
  const std::shared_ptr<nn::Module> replica = make();
  if (g.rank() == 0) replica->load_state_dict(single->state_dict());
  DistributedDataParallel ddp(replica, group_ptr(), {.bucket_cap_mb = bucket_cap_mb});
  EXPECT_GT(ddp.buckets().size(), bucket_cap_mb < 1 ? 1u : 0u);

  optim::AdamW single_opt(groups(*single), {.lr = 1e-3});
  auto make_adamw = [](std::vector<optim::ParamGroup> shard) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(shard), optim::AdamWOptions{.lr = 1e-3});
  };
  std::unique_ptr<optim::Optimizer> plain;
  std::unique_ptr<ZeroRedundancyOptimizer> sharded;
  if (zero) {
    sharded = std::make_unique<ZeroRedundancyOptimizer>(groups(*replica), group_ptr(), make_adamw);
  } else {
    plain = make_adamw(groups(*replica));
  }

  Equality worst;
  for (int step = 0; step < steps; ++step) {
    const Tensor x = inputs.narrow(0, step * batch, batch);
    const Tensor y = targets.narrow(0, step * batch, batch);
    single_opt.zero_grad();
    const Tensor single_loss = loss_fn(*single, x, y);
    single_loss.backward();
    single_opt.step();

    if (zero)
      sharded->zero_grad();
    else
      plain->zero_grad();
    const Tensor replica_loss =
        loss_fn(*replica, x.narrow(0, g.rank() * share, share), y.narrow(0, g.rank() * share, share));
    replica_loss.backward();
    if (zero)
      sharded->step();
    else
      plain->step();
    Tensor global_loss = replica_loss.detach().to(kFloat64).reshape({1});
    g.all_reduce(global_loss, ReduceOp::kAvg)->wait();
    worst.loss = std::max(worst.loss, max_relative_difference(global_loss, single_loss.detach().reshape({1})));
  }
  const auto a = single->parameters();
  const auto b = replica->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = max_relative_difference(b[i], a[i]);
    worst.weights = std::max(worst.weights, d);
  }
  if (zero) {
    // The shards together hold the unsharded optimizer's state.
    const StateDict consolidated = sharded->consolidated_state_dict();
    const StateDict expected = single_opt.state_dict();
    EXPECT_EQ(consolidated.size(), expected.size());
    for (const auto& [key, value] : expected) {
      if (!consolidated.count(key)) {
        ADD_FAILURE() << "missing " << key;
        continue;
      }
      if (key.find("exp_avg") != std::string::npos) {
        EXPECT_LT(max_relative_difference(consolidated.at(key), value), 1e-5) << key;
      } else {
        EXPECT_TRUE(same(consolidated.at(key), value)) << key;
      }
    }
    EXPECT_GT(sharded->local_state_bytes(), 0);
  }
  return worst;
}

Tensor cnn_loss(nn::Module& model, const Tensor& x, const Tensor& y) {
  return nn::functional::cross_entropy(model(x), y);
}

TEST(DistributedDataParallel, CnnMatchesOneProcessWithTheWholeBatch) {
  manual_seed(3);
  const int steps = 50;
  const Tensor images = randn({steps * 16, 1, 28, 28});
  const Tensor labels = randint(0, 10, {steps * 16});
  for (bool zero : {false, true}) {
    SCOPED_TRACE(zero ? "ZeRO-1" : "replicated optimizer");
    const Equality eq = train_both([] { return std::static_pointer_cast<nn::Module>(models::mnist_cnn()); }, cnn_loss,
                                   images, labels, steps, zero, /*bucket_cap_mb=*/0.02);
    if (group().rank() == 0)
      std::printf("cnn%s: losses within %.2e, weights within %.2e\n", zero ? " zero" : "", eq.loss, eq.weights);
    EXPECT_LT(eq.loss, 1e-6);
    EXPECT_LT(eq.weights, 1e-6);
  }
}

TEST(DistributedDataParallel, GptMatchesOneProcessWithTheWholeBatch) {
  models::GPTConfig config;
  config.vocab_size = 32;
  config.block_size = 16;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  config.dropout = 0;
  // Without biases: the key bias's true gradient is 0 (softmax ignores a shift), so its float
  // rounding noise, different for different batch splits, is all AdamW sees and amplifies to full
  // steps; every other parameter agrees to 4e-7 with biases on.
  config.bias = false;
  manual_seed(5);
  const int steps = 50;
  const Tensor tokens = randint(0, 32, {steps * 4, 16});
  const Tensor next = randint(0, 32, {steps * 4, 16});
  auto loss = [](nn::Module& model, const Tensor& x, const Tensor& y) {
    const Tensor logits = model(x);
    return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
  };
  for (bool zero : {false, true}) {
    SCOPED_TRACE(zero ? "ZeRO-1" : "replicated optimizer");
    // Two groups, weight decay on the matrices only, as `ember train gpt` has them.
    auto decay_groups = [](nn::Module& model) {
      auto& gpt = dynamic_cast<models::GPT&>(model);
      return std::vector<optim::ParamGroup>{{.params = gpt.decayed_parameters(), .options = {{"weight_decay", 0.1}}},
                                            {.params = gpt.undecayed_parameters(), .options = {{"weight_decay", 0.0}}}};
    };
    const Equality eq =
        train_both([&] { return std::static_pointer_cast<nn::Module>(std::make_shared<models::GPT>(config)); }, loss,
                   tokens, next, steps, zero, /*bucket_cap_mb=*/0.05, decay_groups);
    if (group().rank() == 0)
      std::printf("gpt%s: losses within %.2e, weights within %.2e\n", zero ? " zero" : "", eq.loss, eq.weights);
    EXPECT_LT(eq.loss, 1e-6);
    EXPECT_LT(eq.weights, 1e-6);
  }
}

TEST(DistributedDataParallel, NoSyncAccumulationEqualsOneLargeBatch) {
  ProcessGroup& g = group();
  manual_seed(11);
  const auto model = models::mnist_cnn();
  const auto reference = models::mnist_cnn();
  DistributedDataParallel ddp(model, group_ptr());
  reference->load_state_dict(model->state_dict());  // rank 0's weights, after the broadcast
  manual_seed(12);
  const Tensor x = randn({8 * g.world_size(), 1, 28, 28});
  const Tensor y = randint(0, 10, {8 * g.world_size()});
  // Rank r's 8 examples in two micro-batches of 4: the first without a collective.
  const Tensor mine_x = x.narrow(0, 8 * g.rank(), 8), mine_y = y.narrow(0, 8 * g.rank(), 8);
  const uint64_t before = g.sequence_number();
  {
    auto guard = ddp.no_sync();
    (cnn_loss(*model, mine_x.narrow(0, 0, 4), mine_y.narrow(0, 0, 4)) * 0.5).backward();
  }
  EXPECT_EQ(g.sequence_number(), before);
  (cnn_loss(*model, mine_x.narrow(0, 4, 4), mine_y.narrow(0, 4, 4)) * 0.5).backward();
  EXPECT_EQ(g.sequence_number(), before + ddp.buckets().size());
  cnn_loss(*reference, x, y).backward();
  const auto a = model->parameters(), b = reference->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(max_relative_difference(a[i].grad(), b[i].grad()), 1e-4) << i;
}

struct TwoHeads : nn::Module {
  std::shared_ptr<nn::Linear> used, unused;
  TwoHeads() {
    used = register_module("used", std::make_shared<nn::Linear>(4, 2));
    unused = register_module("unused", std::make_shared<nn::Linear>(4, 2));
  }
  Tensor forward(const Tensor& x) override { return (*used)(x); }
};

TEST(DistributedDataParallel, UnusedParametersAreAnErrorOrZero) {
  manual_seed(2);
  auto model = std::make_shared<TwoHeads>();
  {
    DistributedDataParallel ddp(model, group_ptr());
    test_util::expect_error(
        [&] {
          (*model)(randn({3, 4})).sum().backward();
        },
        {"[ddp] 2 parameters got no gradient", "unused.weight, unused.bias", "find_unused_parameters"});
  }
  model->zero_grad();
  DistributedDataParallel ddp(model, group_ptr(), {.find_unused_parameters = true});
  (*model)(full({3, 4}, 1.0)).sum().backward();
  EXPECT_TRUE(same(model->unused->weight.grad(), zeros({2, 4})));
  EXPECT_TRUE(same(model->used->bias.grad(), full({2}, 3.0)));
}

TEST(DistributedDataParallel, DifferentModelsAreRefusedAtWrapTime) {
  const int rank = group().rank();
  auto model = std::make_shared<nn::Linear>(4, rank == 0 ? 2 : 3);
  test_util::expect_error([&] { DistributedDataParallel ddp(model, group_ptr()); },
                          {"[ddp] the ranks' models differ", "rank 1 has 2 parameters of"});
}

TEST(DistributedSampler, RanksShareTheEpochLikePyTorch) {
  // Every rank's share, gathered: disjoint and covering with the start repeated as padding.
  ProcessGroup& g = group();
  const DistributedSampler sampler(11, g.world_size(), g.rank(), true, 5);
  const std::vector<int64_t> mine = sampler.indices(3);
  const Tensor all = zeros({static_cast<int64_t>(mine.size()) * g.world_size()}, kInt64);
  g.all_gather(all, from_vector(mine))->wait();
  std::vector<int> seen(11, 0);
  for (int64_t i = 0; i < all.numel(); ++i) ++seen[static_cast<size_t>(at(all, i))];
  int total = 0;
  for (int count : seen) {
    EXPECT_GE(count, 1);
    total += count;
  }
  EXPECT_EQ(total, sampler.num_samples() * g.world_size());
}

}  // namespace
}  // namespace ember::dist
