// The parts of data-parallel training that one process can check: the autograd hooks DDP is built
// on, DistributedSampler's shares, the DataLoader's sampler, a one-rank Gloo group (DDP and ZeRO-1
// then change nothing), and the launch errors. tests/dist/ runs the real multi-rank jobs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "ember/autograd.h"
#include "ember/data.h"
#include "ember/dist.h"
#include "ember/models/mnist.h"
#include "ember/nn.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "ember/profiler.h"
#include "test_util.h"

namespace ember {
namespace {

TEST(PostAccumulateGradHook, SeesTheAccumulatedGradientAndCanBeRemoved) {
  const Tensor w = full({3}, 2.0).requires_grad_(true);
  std::vector<double> seen;
  RemovableHandle handle = autograd::register_post_accumulate_grad_hook(
      w, [&](const Tensor& leaf) { seen.push_back(leaf.grad().sum().item<double>()); });
  (w * 3).sum().backward();
  (w * 3).sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(seen[0], 9.0);   // after the first accumulation
  EXPECT_DOUBLE_EQ(seen[1], 18.0);  // the sum of both
  handle.remove();
  (w * 3).sum().backward();
  EXPECT_EQ(seen.size(), 2u);
  test_util::expect_error([&] { autograd::register_post_accumulate_grad_hook(w * 2, [](const Tensor&) {}); },
                          {"[register_post_accumulate_grad_hook]", "leaf"});
}

TEST(QueueCallback, RunsOnceAfterTheWholeBackward) {
  const Tensor a = full({2}, 1.0).requires_grad_(true);
  const Tensor b = full({2}, 1.0).requires_grad_(true);
  std::vector<std::string> events;
  autograd::register_post_accumulate_grad_hook(a, [&](const Tensor&) {
    events.push_back("a");
    autograd::queue_callback([&] {
      events.push_back(b.grad().defined() ? "callback after b" : "callback before b");
      autograd::queue_callback([&] { events.push_back("queued by a callback"); });
    });
  });
  autograd::register_post_accumulate_grad_hook(b, [&](const Tensor&) { events.push_back("b"); });
  (a * b * 2).sum().backward();
  // The callback ran after both accumulations (whichever came first), then the one it queued.
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2], "callback after b");
  EXPECT_EQ(events[3], "queued by a callback");
  // A throwing callback reaches backward's caller.
  autograd::register_post_accumulate_grad_hook(
      a, [&](const Tensor&) { autograd::queue_callback([] { EMBER_FAIL("[test] from a callback"); }); });
  test_util::expect_error([&] { (a * 2).sum().backward(); }, {"[test] from a callback"});
  test_util::expect_error([] { autograd::queue_callback([] {}); }, {"[queue_callback] called outside a backward"});
}

TEST(DistributedSampler, SharesMatchPyTorch) {
  // torch.utils.data.DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False):
  // padded to 12 by repeating 0, 1; rank r takes r, r + 4, r + 8.
  const std::vector<std::vector<int64_t>> expected = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int rank = 0; rank < 4; ++rank) {
    const dist::DistributedSampler sampler(10, 4, rank, /*shuffle=*/false);
    EXPECT_EQ(sampler.num_samples(), 3);
    EXPECT_EQ(sampler.indices(0), expected[static_cast<size_t>(rank)]);
  }
  // drop_last cuts to 8: two each.
  EXPECT_EQ(dist::DistributedSampler(10, 4, 3, false, 0, /*drop_last=*/true).indices(0), (std::vector<int64_t>{3, 7}));
  // Fewer examples than ranks: the order repeats.
  EXPECT_EQ(dist::DistributedSampler(1, 3, 2, false).indices(0), (std::vector<int64_t>{0}));
  EXPECT_TRUE(dist::DistributedSampler(0, 2, 1, true).indices(5).empty());
  // Shuffled: the ranks split the epoch's permutation, which changes with the epoch.
  const std::vector<int64_t> order = data::random_permutation(9, 4, 2);
  const std::vector<int64_t> rank1 = dist::DistributedSampler(9, 3, 1, true, 4).indices(2);
  EXPECT_EQ(rank1, (std::vector<int64_t>{order[1], order[4], order[7]}));
  EXPECT_NE(rank1, dist::DistributedSampler(9, 3, 1, true, 4).indices(3));
  test_util::expect_error([] { dist::DistributedSampler(10, 2, 2); }, {"[DistributedSampler] rank 2 is not in [0, 2)"});
  test_util::expect_error([] { dist::DistributedSampler(10, 0, 0); }, {"world_size must be at least 1"});
}

TEST(DataLoader, FollowsItsSampler) {
  const Tensor x = arange(0, 10, 1, kFloat32).reshape({10, 1});
  data::DataLoader loader(data::TensorDataset(x, arange(0, 10, 1, kInt64)), /*batch_size=*/2);
  loader.set_sampler([](uint64_t epoch) { return std::vector<int64_t>{9, 1, static_cast<int64_t>(epoch)}; }, 3);
  EXPECT_EQ(loader.size(), 2);
  std::vector<int64_t> seen;
  for (const data::Batch& batch : loader) {
    for (int64_t i = 0; i < batch.targets.numel(); ++i) seen.push_back(batch.targets.select(0, i).item<int64_t>());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{9, 1, 0}));
  loader.set_sampler([](uint64_t) { return std::vector<int64_t>{1}; }, 3);
  test_util::expect_error([&] { loader.begin(); }, {"[DataLoader] the sampler gave 1 indices", "not the 3"});
}

// Sets environment variables for the scope of a test.
struct Environment {
  std::vector<std::string> names;
  Environment(std::initializer_list<std::pair<const char*, const char*>> values) {
    for (const auto& [name, value] : values) {
      setenv(name, value, 1);
      names.emplace_back(name);
    }
  }
  ~Environment() {
    for (const std::string& name : names) unsetenv(name.c_str());
  }
};

TEST(ProcessGroup, OneRankGlooGroupRunsEveryCollective) {
  if (!dist::is_available(dist::Backend::kGloo)) GTEST_SKIP() << "built without Gloo";
  const Environment env{{"EMBER_RANK", "0"}, {"EMBER_WORLD_SIZE", "1"}, {"EMBER_MASTER_PORT", "0"}};
  const auto group = dist::init_process_group({.backend = dist::Backend::kGloo});
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->world_size(), 1);
  Tensor t = full({4}, 3.0);
  group->all_reduce(t, dist::ReduceOp::kAvg)->wait();
  EXPECT_EQ(t.sum().item<double>(), 12.0);
  const Tensor out = zeros({4});
  group->all_gather(out, t)->wait();
  EXPECT_EQ(out.sum().item<double>(), 12.0);
  group->reduce_scatter(out, t)->wait();
  group->barrier()->wait();
  EXPECT_EQ(group->sequence_number(), 4u);
  {  // In a profile the collectives are ranges on a track of their own: the communication thread's.
    profiler::Profiler profile;
    group->all_reduce(t)->wait();
    profile.stop();
    int found = 0;
    for (const profiler::Event& event : profile.events()) {
      if (event.name != "all_reduce #4 (float32, 4 elements)") continue;
      ++found;
      EXPECT_EQ(event.kind, profiler::EventKind::kRange);
      EXPECT_NE(event.thread, 0);
    }
    EXPECT_EQ(found, 1);
  }

  // DDP and ZeRO-1 over one rank train exactly as without them.
  manual_seed(1);
  const auto model = models::mnist_cnn();
  const auto reference = models::mnist_cnn();
  reference->load_state_dict(model->state_dict());
  dist::DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.01});
  EXPECT_GT(ddp.buckets().size(), 2u);
  dist::ZeroRedundancyOptimizer zero(model->parameters(), group, [](std::vector<optim::ParamGroup> groups) {
    return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions{.lr = 1e-2});
  });
  optim::Adam plain(reference->parameters(), {.lr = 1e-2});
  const Tensor x = randn({8, 1, 28, 28});
  const Tensor y = randint(0, 10, {8});
  for (int step = 0; step < 3; ++step) {
    zero.zero_grad();
    plain.zero_grad();
    nn::functional::cross_entropy((*model)(x), y).backward();
    nn::functional::cross_entropy((*reference)(x), y).backward();
    zero.step();
    plain.step();
  }
  const dist::DdpStats& stats = ddp.last_stats();
  EXPECT_EQ(stats.buckets, static_cast<int64_t>(ddp.buckets().size()));
  EXPECT_EQ(stats.bytes, 18378 * 4);  // every gradient, once
  EXPECT_LE(stats.hidden_seconds, stats.communication_seconds);
  const auto a = model->parameters(), b = reference->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].eq(b[i]).all().item<bool>()) << i;
  EXPECT_GT(zero.local_state_bytes(), 0);
  test_util::expect_error([&] { group->all_reduce(zeros({2}, kInt32)); }, {"[dist] all_reduce", "int32"});
}

TEST(ProcessGroup, LaunchErrorsNameWhatIsMissing) {
  if (dist::is_available(dist::Backend::kGloo)) {
    test_util::expect_error([] { dist::init_process_group({.backend = dist::Backend::kGloo}); },
                            {"[dist] the gloo backend needs EMBER_RANK and EMBER_WORLD_SIZE"});
    const Environment env{{"EMBER_RANK", "2"}, {"EMBER_WORLD_SIZE", "2"}};
    test_util::expect_error([] { dist::init_process_group({.backend = dist::Backend::kGloo}); },
                            {"EMBER_RANK=2 is not below EMBER_WORLD_SIZE=2"});
  }
  const Environment env{{"EMBER_DIST_TIMEOUT", "soon"}};
  test_util::expect_error([] { dist::init_process_group(); }, {"[dist] EMBER_DIST_TIMEOUT=soon"});
}

}  // namespace
}  // namespace ember
