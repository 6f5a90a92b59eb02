// Placeholder until the indexing ops land.
#include "ember/ops.h"
namespace ember {
#define EMBER_TODO(op) EMBER_FAIL("[" op "] not implemented on cpu")
Tensor index_select(const Tensor&, int64_t, const Tensor&) { EMBER_TODO("index_select"); }
Tensor gather(const Tensor&, int64_t, const Tensor&) { EMBER_TODO("gather"); }
Tensor scatter_add(const Tensor&, int64_t, const Tensor&, const Tensor&) { EMBER_TODO("scatter_add"); }
Tensor one_hot(const Tensor&, int64_t) { EMBER_TODO("one_hot"); }
Tensor embedding(const Tensor&, const Tensor&) { EMBER_TODO("embedding"); }
}  // namespace ember
