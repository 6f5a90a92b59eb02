// The linear-algebra ops' registry entries: matmul (its function, method and out= forms against
// tests/golden/linalg.json), linear (linalg.json) and linear_gelu (linear_gelu.json), with float64
// gradchecks over every matmul shape rule (dot, matrix-vector, batched, broadcast batch dims) and
// transposed operands. Sums of k products round k times, so float tolerances grow with k.
#include <optional>
#include <string>
#include <utility>

#include "op_registry.h"

namespace op_registry {
namespace {

using golden::Case;

// Strides of `shape` with its last two dims stored transposed: a non-contiguous out= tensor.
Tensor transposed_empty(const ember::Shape& shape, ember::DType dtype) {
  if (shape.size() < 2) return ember::empty(shape, dtype);
  ember::Shape swapped = shape;
  std::swap(swapped[shape.size() - 1], swapped[shape.size() - 2]);
  return ember::empty(swapped, dtype).transpose(-1, -2);
}

std::optional<Tensor> optional_bias(const Case& c) {
  if (c.inputs.size() > 2) return c.tensor(2);
  return std::nullopt;
}

Gradcheck matmul_gradcheck(std::string name, std::vector<Variant> variants) {
  return {std::move(name), [](const std::vector<Tensor>& x) { return ember::matmul(x[0], x[1]); }, std::move(variants)};
}

// linear_gelu with or without a bias (a third input).
Gradcheck linear_gelu_gradcheck(std::string name, std::string approximate) {
  return {std::move(name),
          [approximate](const std::vector<Tensor>& x) {
            const std::optional<Tensor> bias = x.size() > 2 ? std::optional<Tensor>(x[2]) : std::nullopt;
            return ember::linear_gelu(x[0], x[1], bias, approximate);
          },
          {{"2d", {in({4, 6}), in({5, 6}), in({5})}},
           {"3d_no_bias", {in({2, 3, 6}), in({5, 6})}},
           {"3d_transposed", {in_t({2, 3, 6}), in_t({5, 6}), in({5})}}}};
}

std::vector<Entry> linalg_entries() {
  return {
      Entry{.name = "matmul",
            .ops = {OpKind::kMatmul},
            .golden = {{"matmul", "linalg", "matmul",
                        [](const Case& c) -> std::vector<Tensor> { return {ember::matmul(c.tensor(0), c.tensor(1))}; },
                        golden::accumulation_tolerance},
                       {"matmul_method", "linalg", "matmul",
                        [](const Case& c) -> std::vector<Tensor> { return {c.tensor(0).matmul(c.tensor(1))}; },
                        golden::accumulation_tolerance},
                       // matmul_out into a tensor whose last two dims are transposed (C written through strides).
                       {"matmul_out", "linalg", "matmul",
                        [](const Case& c) -> std::vector<Tensor> {
                          const ember::Shape shape = c.expected.empty() ? ember::Shape{} : c.expected[0].shape();
                          Tensor out = transposed_empty(shape, c.tensor(0).dtype());
                          ember::matmul_out(out, c.tensor(0), c.tensor(1));
                          return {out};
                        },
                        golden::accumulation_tolerance}},
            .gradchecks =
                {matmul_gradcheck("matmul_dot", {{"1d", {in({4}), in({4})}}}),
                 matmul_gradcheck("matmul_vector_matrix",
                                  {{"contiguous", {in({3}), in({3, 4})}}, {"transposed", {in({3}), in_t({3, 4})}}}),
                 matmul_gradcheck("matmul_matrix_vector",
                                  {{"contiguous", {in({3, 4}), in({4})}}, {"transposed", {in_t({3, 4}), in({4})}}}),
                 matmul_gradcheck("matmul_2d", {{"contiguous", {in({3, 4}), in({4, 2})}},
                                                {"transposed", {in_t({3, 4}), in_t({4, 2})}}}),
                 matmul_gradcheck("matmul_batched", {{"contiguous", {in({2, 3, 4}), in({2, 4, 2})}},
                                                     {"transposed", {in_t({2, 3, 4}), in_t({2, 4, 2})}}}),
                 // dB from one GEMM over every row.
                 matmul_gradcheck("matmul_batched_shared_right", {{"contiguous", {in({2, 3, 4}), in({4, 2})}},
                                                                  {"transposed", {in_t({2, 3, 4}), in_t({4, 2})}}}),
                 matmul_gradcheck("matmul_shared_left", {{"contiguous", {in({3, 4}), in({2, 4, 2})}}}),
                 matmul_gradcheck("matmul_broadcast_batch", {{"broadcast", {in({2, 1, 3, 4}), in({3, 4, 2})}},
                                                             {"transposed", {in_t({1, 2, 3, 4}), in_t({3, 1, 4, 2})}}}),
                 matmul_gradcheck("matmul_vector_batched",
                                  {{"1d_left", {in({4}), in({2, 4, 3})}}, {"1d_right", {in({2, 3, 4}), in({4})}}})}},
      Entry{.name = "linear",
            .ops = {OpKind::kLinear},
            .golden =
                {{"", "linalg", "linear",
                  [](const Case& c)
                      -> std::vector<Tensor> { return {ember::linear(c.tensor(0), c.tensor(1), optional_bias(c))}; },
                  golden::accumulation_tolerance}},
            .gradchecks = {{"linear",
                            [](const std::vector<Tensor>& x) { return ember::linear(x[0], x[1], x[2]); },
                            {{"2d", {in({3, 4}), in({2, 4}), in({2})}},
                             {"3d_transposed", {in_t({2, 3, 4}), in_t({2, 4}), in({2})}},
                             {"1d_input", {in({4}), in({2, 4}), in({2})}},
                             {"row_bias", {in({3, 4}), in({2, 4}), in({3, 2})}},
                             {"1d_weight", {in_t({2, 3, 4}), in({4}), in({})}}}},
                           {"linear_no_bias",
                            [](const std::vector<Tensor>& x) { return ember::linear(x[0], x[1]); },
                            {{"2d", {in({3, 4}), in({2, 4})}},
                             {"1d_weight", {in({2, 3, 4}), in({4})}},
                             {"both_1d", {in({4}), in({4})}}}}}},
      Entry{.name = "linear_gelu",
            .ops = {OpKind::kLinearGelu},
            .golden = {{"", "linear_gelu", "linear_gelu",
                        [](const Case& c) -> std::
                                              vector<Tensor> {
                                                const std::string approximate =
                                                    c.attrs.value("approximate", std::string("none"));
                                                return {ember::linear_gelu(c.tensor(0), c.tensor(1), optional_bias(c),
                                                                           approximate)};
                                              },
                        golden::accumulation_tolerance}},
            .gradchecks = {linear_gelu_gradcheck("linear_gelu", "none"),
                           linear_gelu_gradcheck("linear_gelu_tanh", "tanh")}},
  };
}

[[maybe_unused]] const bool kLinalgRegistered = add(linalg_entries());

}  // namespace
}  // namespace op_registry
