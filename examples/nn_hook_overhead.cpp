// Measures what module hooks cost on a small training step: an MLP 784-128-10 (Linear, ReLU,
// Linear in a Sequential), batch 64, cross-entropy, forward + backward + a hand-written SGD update.
// The same model is timed with no hooks and with an empty forward pre-hook, forward hook and full
// backward hook on each of its four modules; the two configurations alternate run by run (so
// drift in machine load hits both), and the median step time of each is reported, as wall time
// and as process CPU time (all threads' CPU time: with OMP_NUM_THREADS=1 it is the step's own cost,
// unaffected by other processes taking the cores, which makes it the steadier number on a busy
// machine).
//
//   OMP_NUM_THREADS=1 nn_hook_overhead [runs=41] [steps_per_run=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <vector>

#include "ember/ember.h"
#include "ember/nn.h"

namespace {

using Clock = std::chrono::steady_clock;

double process_cpu_microseconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

struct Timing {
  double wall_us;
  double cpu_us;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  namespace nn = ember::nn;
  const int runs = argc > 1 ? std::atoi(argv[1]) : 41;
  const int steps_per_run = argc > 2 ? std::atoi(argv[2]) : 20;

  ember::manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 128), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(128, 10));
  const ember::Tensor x = ember::randn({64, 784});
  const ember::Tensor y = ember::randint(0, 10, {64});
  const double lr = 0.01;

  auto step = [&] {
    model->zero_grad();
    ember::Tensor loss = nn::functional::cross_entropy((*model)(x), y);
    loss.backward();
    ember::autograd::NoGradGuard no_grad;
    for (ember::Tensor& p : model->parameters()) p.sub_(p.grad() * lr);
  };
  auto time_run = [&] {
    const auto start = Clock::now();
    const double cpu_start = process_cpu_microseconds();
    for (int i = 0; i < steps_per_run; ++i) step();
    const double cpu_us = (process_cpu_microseconds() - cpu_start) / steps_per_run;
    return Timing{std::chrono::duration<double, std::micro>(Clock::now() - start).count() / steps_per_run, cpu_us};
  };

  std::vector<ember::RemovableHandle> handles;
  int backward_calls = 0;
  auto add_hooks = [&] {
    for (const auto& module : model->modules()) {
      handles.push_back(module->register_forward_pre_hook([](nn::Module&, const ember::Tensor&) {}));
      handles.push_back(module->register_forward_hook([](nn::Module&, const ember::Tensor&, const ember::Tensor&) {}));
      handles.push_back(module->register_full_backward_hook(
          [&backward_calls](nn::Module&, const ember::Tensor&, const ember::Tensor&) { ++backward_calls; }));
    }
  };
  auto remove_hooks = [&] {
    for (auto& handle : handles) handle.remove();
    handles.clear();
  };

  for (int i = 0; i < 20; ++i) step();  // warm up the allocator cache and the threads
  std::vector<double> plain_wall, hooked_wall, plain_cpu, hooked_cpu;
  for (int run = 0; run < runs; ++run) {
    // Alternate which configuration goes first, so neither always follows the other.
    const bool hooks_first = run % 2 == 1;
    for (int phase = 0; phase < 2; ++phase) {
      const bool with_hooks = (phase == 0) == hooks_first;
      if (with_hooks) add_hooks();
      const Timing t = time_run();
      (with_hooks ? hooked_wall : plain_wall).push_back(t.wall_us);
      (with_hooks ? hooked_cpu : plain_cpu).push_back(t.cpu_us);
      if (with_hooks) remove_hooks();
    }
  }

  std::printf("MLP 784-128-10, batch 64, forward + backward + SGD; %d runs x %d steps each, interleaved\n", runs,
              steps_per_run);
  std::printf("%-12s %14s %22s %10s\n", "median", "no hooks", "3 empty hooks/module", "overhead");
  auto report = [](const char* what, const std::vector<double>& plain, const std::vector<double>& hooked) {
    const double plain_us = median(plain);
    const double hooked_us = median(hooked);
    std::printf("%-12s %11.1f us %19.1f us %+9.2f%%\n", what, plain_us, hooked_us,
                100.0 * (hooked_us - plain_us) / plain_us);
  };
  report("wall time", plain_wall, hooked_wall);
  report("CPU time", plain_cpu, hooked_cpu);
  std::printf("(%d backward hook calls)\n", backward_calls);
  return 0;
}
