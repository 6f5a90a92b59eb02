// Placeholder until the reduction kernels land.
#include "ember/ops.h"
namespace ember {
#define EMBER_TODO(op) EMBER_FAIL("[" op "] not implemented on cpu")
Tensor sum(const Tensor&, const Axes&, bool) { EMBER_TODO("sum"); }
Tensor mean(const Tensor&, const Axes&, bool) { EMBER_TODO("mean"); }
Tensor prod(const Tensor&, const Axes&, bool) { EMBER_TODO("prod"); }
Tensor amax(const Tensor&, const Axes&, bool) { EMBER_TODO("amax"); }
Tensor amin(const Tensor&, const Axes&, bool) { EMBER_TODO("amin"); }
Tensor argmax(const Tensor&, std::optional<int64_t>, bool) { EMBER_TODO("argmax"); }
Tensor argmin(const Tensor&, std::optional<int64_t>, bool) { EMBER_TODO("argmin"); }
Tensor var(const Tensor&, const Axes&, int64_t, bool) { EMBER_TODO("var"); }
Tensor std(const Tensor&, const Axes&, int64_t, bool) { EMBER_TODO("std"); }
Tensor logsumexp(const Tensor&, const Axes&, bool) { EMBER_TODO("logsumexp"); }
Tensor all(const Tensor&, const Axes&, bool) { EMBER_TODO("all"); }
Tensor any(const Tensor&, const Axes&, bool) { EMBER_TODO("any"); }
Tensor norm(const Tensor&, double, const Axes&, bool) { EMBER_TODO("norm"); }
Tensor softmax(const Tensor&, int64_t) { EMBER_TODO("softmax"); }
Tensor log_softmax(const Tensor&, int64_t) { EMBER_TODO("log_softmax"); }
}  // namespace ember
