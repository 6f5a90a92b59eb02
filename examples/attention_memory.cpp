// Peak memory and time of causal self-attention, forward and backward, at one length: ember's
// scaled_dot_product_attention (the flash kernel) against the same attention written as a user
// would with matmul, a masked softmax and matmul (which holds the (L, L) scores and weights).
//
//   build/attention_memory [L=4096] [batch=1] [heads=8] [features=64]
#include <ember/ember.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>

namespace {

struct Measurement {
  double peak_mib;
  double seconds;
};

// The peak bytes in use above what was in use before, and the wall time, of one forward + backward.
Measurement measure(const std::function<ember::Tensor()>& forward) {
  ember::reset_peak_memory_stats();
  const int64_t before = ember::memory_stats().bytes_in_use;
  const auto start = std::chrono::steady_clock::now();
  forward().sum().backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double peak = static_cast<double>(ember::memory_stats().peak_bytes_in_use - before);
  return {peak / (1024.0 * 1024.0), seconds};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t length = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 1;
  const int64_t heads = argc > 3 ? std::atoll(argv[3]) : 8;
  const int64_t features = argc > 4 ? std::atoll(argv[4]) : 64;
  ember::manual_seed(0);
  const ember::Tensor q = ember::randn({batch, heads, length, features}).requires_grad_();
  const ember::Tensor k = ember::randn({batch, heads, length, features}).requires_grad_();
  const ember::Tensor v = ember::randn({batch, heads, length, features}).requires_grad_();

  const Measurement flash =
      measure([&] { return ember::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true); });
  const ember::Tensor causal = ember::ge(ember::arange(length).unsqueeze(1), ember::arange(length).unsqueeze(0));
  const Measurement composite = measure([&] {
    const ember::Tensor scores = ember::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(features));
    const ember::Tensor masked =
        ember::masked_fill(scores, ember::logical_not(causal), -std::numeric_limits<double>::infinity());
    return ember::matmul(ember::softmax(masked, -1), v);
  });
  const double inputs_mib = 3.0 * static_cast<double>(q.numel()) * 4.0 / (1024.0 * 1024.0);
  std::printf("causal attention, batch %lld, heads %lld, L %lld, features %lld (q, k, v: %.1f MiB)\n",
              static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(length),
              static_cast<long long>(features), inputs_mib);
  std::printf("  scaled_dot_product_attention   peak %8.1f MiB   %7.3f s\n", flash.peak_mib, flash.seconds);
  std::printf("  matmul + softmax + matmul      peak %8.1f MiB   %7.3f s\n", composite.peak_mib, composite.seconds);
}
