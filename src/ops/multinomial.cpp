// multinomial: category indices drawn from rows of non-negative weights, as torch.multinomial.
//
// Shape rule: weights (C) give (num_samples), weights (R, C) give (R, num_samples); int64.
// The weights must be floating, finite and non-negative, with a positive sum per row (they need not
// sum to 1); num_samples must be positive, and at most C without replacement. Without replacement a
// row never repeats an index; its zero-weight categories come after the positive ones, in index
// order (PyTorch also returns them rather than failing). The kernel finds bad weights (a value
// below 0, inf or nan; a row summing to 0) and throws naming the first bad row.
// Randomness: the Multinomial primitive (MultinomialAttrs) draws from the Philox key reserved from
// the global generator, ceil(n / 2) counter blocks per row, n = num_samples with replacement, C
// without (the draw is described in kernels/cpu/sort.cpp). It depends on ember::manual_seed only,
// never on the thread count, and does not reproduce PyTorch's stream.
// Cost: a pass over the weights (C adds per row) plus, with replacement, a binary search per
// sample (ceil(log2 C) comparisons); without replacement a key per category (a log and a divide,
// counted 10) and a selection (C comparisons). bytes = weights read + samples written.
// Not differentiable: the result is integer.
#include <algorithm>
#include <cmath>

#include "ember/ops.h"
#include "ops/cost.h"
#include "ops/dispatch.h"
#include "ops/factory.h"
#include "ops/tensor_util.h"

namespace ember {

Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement) {
  EMBER_CHECK(is_floating(weights.dtype()), "[multinomial] expects floating-point weights, got ", weights.dtype(),
              " (shape ", weights.shape(), ")");
  EMBER_CHECK(weights.dim() == 1 || weights.dim() == 2, "[multinomial] expects 1-D or 2-D weights, got shape ",
              weights.shape());
  EMBER_CHECK(num_samples > 0, "[multinomial] cannot sample num_samples <= 0 samples, got ", num_samples);
  const int64_t rows = weights.dim() == 2 ? weights.shape()[0] : 1;
  const int64_t categories = weights.shape()[weights.dim() - 1];
  EMBER_CHECK(categories > 0, "[multinomial] the weights have no categories (shape ", weights.shape(), ")");
  EMBER_CHECK(replacement || num_samples <= categories, "[multinomial] cannot sample num_samples = ", num_samples,
              " > the number of categories (", categories, ") without replacement");
  const Tensor input = detail::kernel_operand(weights).reshape({rows, categories});
  Tensor out = detail::make_empty({rows, num_samples}, kInt64, weights.device());
  const int64_t blocks_per_row = ((replacement ? num_samples : categories) + 1) / 2;
  const detail::RandomDraw draw = detail::reserve_random_blocks(rows * blocks_per_row);
  dispatch::run(OpKind::kMultinomial, MultinomialAttrs{num_samples, replacement, draw.seed, draw.first_block}, {&input},
                {&out});
  return weights.dim() == 2 ? out : out.reshape({num_samples});
}

// --- cost rules ----------------------------------------------------------------------------------

namespace {

OpCost multinomial_cost(const KernelCall& c) {
  const MultinomialAttrs& attrs = c.get<MultinomialAttrs>();
  const double rows = cost::as_double(c.inputs[0].size(0)), categories = cost::as_double(c.inputs[0].size(1));
  const double samples = cost::as_double(attrs.num_samples);
  const double per_row = attrs.replacement
                             ? categories + samples * std::max(1.0, std::ceil(std::log2(std::max(categories, 1.0))))
                             : categories + 10.0 * categories + categories;
  return {rows * per_row, cost::operand_bytes(c)};
}

}  // namespace

void define_multinomial_ops(OpRuleTable& table) { table.set_cost(OpKind::kMultinomial, multinomial_cost); }

}  // namespace ember
