// Placeholder until the shape and indexing ops land.
#include "ember/ops.h"
namespace ember {
#define EMBER_TODO(op) EMBER_FAIL("[" op "] not implemented on cpu")
Tensor cat(const std::vector<Tensor>&, int64_t) { EMBER_TODO("cat"); }
Tensor stack(const std::vector<Tensor>&, int64_t) { EMBER_TODO("stack"); }
std::vector<Tensor> split(const Tensor&, int64_t, int64_t) { EMBER_TODO("split"); }
std::vector<Tensor> split(const Tensor&, const std::vector<int64_t>&, int64_t) { EMBER_TODO("split"); }
std::vector<Tensor> chunk(const Tensor&, int64_t, int64_t) { EMBER_TODO("chunk"); }
Tensor repeat(const Tensor&, const Shape&) { EMBER_TODO("repeat"); }
Tensor tile(const Tensor&, const Shape&) { EMBER_TODO("tile"); }
Tensor flip(const Tensor&, const Axes&) { EMBER_TODO("flip"); }
Tensor roll(const Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&) { EMBER_TODO("roll"); }
Tensor pad(const Tensor&, const std::vector<int64_t>&, const Scalar&) { EMBER_TODO("pad"); }
}  // namespace ember
