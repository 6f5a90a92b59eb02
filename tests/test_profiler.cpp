// The profiler: what a profiled CNN training step records (ops, phases, module ranges, memory),
// the Chrome trace parsed back and checked, the table and summary, the helpers, and that
// profiling does not change a single bit of training.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ember/models/mnist.h"
#include "ember/profiler.h"

namespace ember {
namespace {

namespace F = nn::functional;
using profiler::EventKind;
using profiler::Phase;
using profiler::Profiler;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ember_test_profiler_" + name)).string();
}

// A small CNN training step: the default `ember train mnist` model on 8 random images.
struct TrainStep {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  Tensor images, targets;

  explicit TrainStep(uint64_t seed) {
    manual_seed(seed);
    model = models::mnist_cnn();
    optimizer = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
    images = randn({8, 1, 28, 28});
    targets = randint(0, 10, {8});
  }

  double run() {
    optimizer->zero_grad();
    const Tensor loss = F::cross_entropy((*model)(images), targets);
    loss.backward();
    optimizer->step();
    return loss.item<double>();
  }
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(Profiler, RecordsOpsPhasesModulesAndMemoryOfATrainingStep) {
  TrainStep step(1);
  step.run();  // warm: the first step creates the optimizer state
  Profiler prof;
  {
    profiler::Range range("train step");
    step.run();
  }
  prof.stop();
  const std::vector<profiler::Event>& events = prof.events();
  std::set<std::string> ops;
  std::set<Phase> phases;
  bool conv_in_module = false;
  for (const profiler::Event& e : events) {
    EXPECT_LE(e.start_ns, e.end_ns) << e.name;
    if (e.parent >= 0) {
      const profiler::Event& p = events[e.parent];
      EXPECT_LE(p.start_ns, e.start_ns) << e.name << " inside " << p.name;
      EXPECT_GE(p.end_ns, e.end_ns) << e.name << " inside " << p.name;
      EXPECT_EQ(p.thread, e.thread);
    }
    if (e.kind != EventKind::kOp) continue;
    ops.insert(e.name);
    phases.insert(e.phase);
    if (e.name == "conv2d") {
      ASSERT_GE(e.parent, 0);
      EXPECT_EQ(events[e.parent].name, "Conv2d");
      EXPECT_EQ(events[e.parent].kind, EventKind::kModule);
      EXPECT_EQ(e.phase, Phase::kForward);
      ASSERT_GE(e.inputs.size(), 2u);
      EXPECT_EQ(e.inputs[1].shape.size(), 4u);
      EXPECT_EQ(e.inputs[0].dtype, kFloat32);
      EXPECT_GT(e.flops, 0);
      conv_in_module = true;
    }
    if (e.name == "conv2d_backward") {
      EXPECT_EQ(e.phase, Phase::kBackward);
    }
    if (e.name == "adam_step") {
      EXPECT_EQ(e.phase, Phase::kOptimizer);
    }
  }
  EXPECT_TRUE(conv_in_module);
  EXPECT_GE(ops.size(), 10u);
  // Primitives, composites (linear, cross_entropy) and backward nodes ("<op>_backward") around the
  // primitives of their vjps (conv2d_weight_grad, max_pool2d_grad, cross_entropy_grad).
  for (const char* name : {"conv2d", "relu", "max_pool2d", "linear", "matmul", "cross_entropy", "cross_entropy_forward",
                           "conv2d_backward", "conv2d_weight_grad", "max_pool2d_backward", "max_pool2d_grad",
                           "linear_backward", "cross_entropy_backward", "cross_entropy_grad", "adam_step"}) {
    EXPECT_TRUE(ops.count(name)) << name;
  }
  EXPECT_EQ(phases, (std::set<Phase>{Phase::kForward, Phase::kBackward, Phase::kOptimizer}));
  EXPECT_FALSE(prof.memory_samples().empty());

  const profiler::Summary summary = prof.summary();
  EXPECT_GT(summary.flops, 0);
  EXPECT_GT(summary.bytes, 0);
  EXPECT_GT(summary.phase_ns[0], 0);
  EXPECT_GT(summary.phase_ns[1], 0);
  EXPECT_GT(summary.phase_ns[2], 0);
  EXPECT_GT(summary.peak_bytes_in_use, 0);
  EXPECT_NE(summary.to_string().find("GFLOP"), std::string::npos);
}

TEST(Profiler, ChromeTraceParsesBackAndNestsPerThread) {
  TrainStep step(2);
  Profiler prof;
  step.run();
  step.run();
  prof.stop();
  const std::string path = temp_path("trace.json");
  prof.export_chrome_trace(path);
  const nlohmann::json trace = read_json(path);
  std::remove(path.c_str());

  ASSERT_TRUE(trace.contains("traceEvents"));
  const nlohmann::json& events = trace["traceEvents"];
  std::map<int, std::vector<std::pair<double, double>>> open;  // per thread: the enclosing intervals
  std::map<int, double> last_ts;
  std::set<std::string> op_names, phases;
  int begins = 0, ends = 0, counters = 0, ops_in_modules = 0, forward_model_ops = 0;
  for (const nlohmann::json& e : events) {
    const std::string ph = e.at("ph");
    ASSERT_TRUE(e.contains("pid") && e.contains("name"));
    if (ph == "B") ++begins;
    if (ph == "E") ++ends;
    if (ph == "C") {
      ++counters;
      EXPECT_GE(e.at("args").at("bytes").get<int64_t>(), 0);
      continue;
    }
    if (ph != "X") continue;
    const int tid = e.at("tid");
    const double ts = e.at("ts"), dur = e.at("dur");
    ASSERT_GE(dur, 0);
    // Timestamps never go back on a thread.
    if (last_ts.count(tid)) {
      EXPECT_GE(ts, last_ts[tid]);
    }
    last_ts[tid] = ts;
    // Complete events on a thread nest: each lies inside the innermost open one or after it.
    auto& stack = open[tid];
    while (!stack.empty() && ts >= stack.back().second) stack.pop_back();
    if (!stack.empty()) {
      EXPECT_LE(ts + dur, stack.back().second + 1e-3) << e.at("name");
    }
    const std::string cat = e.at("cat");
    if (cat == "op") {
      const nlohmann::json& args = e.at("args");
      op_names.insert(e.at("name").get<std::string>());
      phases.insert(args.at("phase").get<std::string>());
      ASSERT_TRUE(args.contains("shapes") && args.contains("dtypes"));
      const std::string name = e.at("name");
      if (name == "conv2d" || name == "linear" || name == "max_pool2d" || name == "relu") {
        if (args.at("phase") == "forward") {
          ++forward_model_ops;
          // Inside a module range: some enclosing interval belongs to a module (checked below by
          // containment, as a viewer shows it).
          bool inside = false;
          for (const nlohmann::json& m : events) {
            if (m.value("cat", "") == "module" && m.at("tid") == tid && m.at("ts").get<double>() <= ts &&
                m.at("ts").get<double>() + m.at("dur").get<double>() >= ts + dur) {
              inside = true;
              break;
            }
          }
          ops_in_modules += inside ? 1 : 0;
        }
        if (name == "conv2d") {  // a primitive with a cost rule (linear is a composite: its matmul has it)
          EXPECT_GT(args.at("flops").get<double>(), 0) << name;
          EXPECT_GT(args.at("bytes").get<double>(), 0) << name;
          EXPECT_EQ(args.at("dtypes")[0], "float32");
        }
      }
    }
    stack.emplace_back(ts, ts + dur);
  }
  EXPECT_EQ(begins, ends);
  EXPECT_GE(op_names.size(), 10u);
  EXPECT_EQ(phases, (std::set<std::string>{"forward", "backward", "optimizer"}));
  EXPECT_GT(counters, 0);
  EXPECT_GT(forward_model_ops, 0);
  EXPECT_EQ(ops_in_modules, forward_model_ops);
}

TEST(Profiler, DoesNotChangeTrainingResults) {
  auto train = [](bool profile) {
    TrainStep step(3);
    std::vector<double> losses;
    std::unique_ptr<Profiler> prof;
    if (profile) prof = std::make_unique<Profiler>();
    for (int i = 0; i < 3; ++i) losses.push_back(step.run());
    if (prof) prof->stop();
    std::vector<Tensor> weights = step.model->parameters();
    return std::make_pair(losses, weights);
  };
  const auto [plain_losses, plain_weights] = train(false);
  const auto [profiled_losses, profiled_weights] = train(true);
  ASSERT_EQ(plain_losses.size(), profiled_losses.size());
  for (size_t i = 0; i < plain_losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&plain_losses[i], &profiled_losses[i], sizeof(double)), 0) << "step " << i;
  }
  ASSERT_EQ(plain_weights.size(), profiled_weights.size());
  for (size_t i = 0; i < plain_weights.size(); ++i) {
    const Tensor a = plain_weights[i].contiguous(), b = profiled_weights[i].contiguous();
    ASSERT_EQ(a.numel(), b.numel());
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.numel()) * a.element_size()), 0)
        << "parameter " << i;
  }
}

TEST(Profiler, TableListsOpsWithTimesAndRates) {
  const Tensor a = randn({64, 64}), b = randn({64, 64});
  Profiler prof;
  for (int i = 0; i < 3; ++i) (void)matmul(a, b);
  (void)add(a, b);
  prof.stop();
  const std::vector<profiler::OpStats> stats = prof.op_stats(profiler::SortBy::kCalls);
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].name, "matmul");
  EXPECT_EQ(stats[0].calls, 3);
  EXPECT_DOUBLE_EQ(stats[0].flops, 3 * 2.0 * 64 * 64 * 64);
  EXPECT_EQ(stats[0].self_ns, stats[0].total_ns);  // nothing nested
  const std::string table = prof.table(profiler::SortBy::kTotalTime);
  for (const char* column : {"op", "calls", "total ms", "self ms", "self %", "avg us", "GFLOP/s", "GB/s", "FLOP/B",
                             "% roof", "matmul", "add"}) {
    EXPECT_NE(table.find(column), std::string::npos) << column << "\n" << table;
  }
  EXPECT_NE(prof.table(profiler::SortBy::kTotalTime, 1).find("(1 more ops)"), std::string::npos);
}

TEST(Profiler, RecordsOtherThreadsSeparately) {
  Profiler prof;
  const Tensor a = randn({4});
  (void)exp(a);
  std::thread worker([&] { (void)sqrt(abs(a)); });
  worker.join();
  prof.stop();
  std::map<std::string, int> thread_of;
  for (const profiler::Event& e : prof.events()) thread_of[e.name] = e.thread;
  EXPECT_EQ(thread_of.at("exp"), 0);
  EXPECT_EQ(thread_of.at("sqrt"), 1);
  EXPECT_EQ(thread_of.at("abs"), 1);
  EXPECT_EQ(prof.summary().threads, 2);
}

TEST(Profiler, RecordsNothingWhenStoppedAndRefusesMisuse) {
  const Tensor a = randn({4});
  Profiler prof(false);
  (void)exp(a);  // not started yet
  prof.start();
  EXPECT_THROW(prof.events(), Error);  // results are read after stop()
  EXPECT_THROW(Profiler(), Error);     // one profiler at a time
  EXPECT_THROW(profiler::count_flops([] {}), Error);
  (void)neg(a);
  prof.stop();
  (void)exp(a);  // stopped
  ASSERT_EQ(prof.events().size(), 1u);
  EXPECT_EQ(prof.events()[0].name, "neg");
  EXPECT_THROW(prof.stop(), Error);
}

TEST(Profiler, RangesAndExceptionsCloseTheirEvents) {
  const Tensor scores = randn({2, 3}), bad_targets = from_vector(std::vector<int64_t>{0, 7});
  Profiler prof;
  {
    profiler::Range outer("data loading");
    // The forward kernel rejects target 7: it and its composite close while unwinding.
    EXPECT_THROW((void)F::cross_entropy(scores, bad_targets), Error);
  }
  prof.stop();
  const std::vector<profiler::Event>& events = prof.events();
  const auto named = [&](const char* name) {
    return std::find_if(events.begin(), events.end(), [&](const profiler::Event& e) { return e.name == name; });
  };
  const auto composite = named("cross_entropy"), kernel = named("cross_entropy_forward");
  ASSERT_NE(composite, events.end());
  ASSERT_NE(kernel, events.end());
  ASSERT_GE(composite->parent, 0);
  EXPECT_EQ(events[composite->parent].name, "data loading");
  EXPECT_EQ(events[composite->parent].kind, EventKind::kRange);
  EXPECT_EQ(&events[kernel->parent], &*composite);
  EXPECT_FALSE(kernel->has_cost);  // it threw: no cost is counted
}

TEST(Profiler, MeasureLatencyAndCountFlops) {
  const Tensor a = randn({32, 32});
  const profiler::Latency latency = profiler::measure_latency([&] { (void)matmul(a, a); }, 2, 9);
  EXPECT_EQ(latency.iterations, 9);
  EXPECT_GT(latency.min_ns, 0);
  EXPECT_LE(latency.min_ns, latency.median_ns);
  EXPECT_LE(latency.median_ns, latency.max_ns);
  EXPECT_DOUBLE_EQ(profiler::count_flops([&] { (void)matmul(a, a); }), 2.0 * 32 * 32 * 32);
  EXPECT_THROW(profiler::measure_latency([] {}, 0, 0), Error);
}

}  // namespace
}  // namespace ember
