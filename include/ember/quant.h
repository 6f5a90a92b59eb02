// Quantized tensors and products, for inference: the block dtypes q8_0, q4_0 and q4_1 (llama.cpp's
// layouts, ember/blocks.h) and per-row symmetric int8. None of these ops records a gradient.
//
//   Tensor q = ember::quantize(w, ember::kQ4_0);        // (out, in) -> 18 bytes per 32 values
//   Tensor y = ember::quantized_linear(x, q);            // x @ dequantize(q)^T, in integers
//   auto [values, scales] = ember::quantize_int8(w);     // per output channel
//   Tensor y8 = ember::quantized_linear(x, values, scales, bias);
//   auto fast = ember::interleave(q);                    // once, at load: for generation
//   Tensor y4 = ember::quantized_linear(x, fast);
#pragma once

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "ember/blocks.h"
#include "ember/tensor.h"

namespace ember {

// x (floating, on the CPU, last dim a multiple of 32, every value finite) in the block dtype
// `dtype` (kQ8_0, kQ4_0 or kQ4_1), row by row along the last dim, bit for bit as llama.cpp's reference
// quantizer. x.to(kQ8_0) is the same.
Tensor quantize(const Tensor& x, DType dtype);

// A block-quantized tensor's values, as float32 of the same shape. q.to(kFloat32) is the same.
Tensor dequantize(const Tensor& q);

// Per-row symmetric int8 along the last dim: x ~= values * scales.unsqueeze(-1), with
// scale = max|row| / 127 and values = round(row / scale) (0 for an all-zero row).
struct Int8Rows {
  Tensor values;  // int8, x's shape
  Tensor scales;  // float32, x's shape without its last dim
};
Int8Rows quantize_int8(const Tensor& x);

// y = x @ W^T + bias, W (out, in) stored as `weight`: q8_0, q4_0 or q4_1 blocks (scale absent), or int8
// with a float32 scale per output row. A block weight's rows may be zero-padded to whole blocks:
// (out, in rounded up to 32), as Linear::quantize_ stores a layer whose in is no multiple of 32. x (..., in) is
// floating (computed in float32); y is
// (..., out) float32. The activations are quantized on the fly: each row of x to q8_0 blocks for
// block weights, to per-row int8 for int8 weights; the products are exact integer dot products
// scaled in float32. Rows of x holding NaN or Inf are an error.
Tensor quantized_linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& scale = std::nullopt,
                        const std::optional<Tensor>& bias = std::nullopt);

// A block-quantized weight (q8_0, q4_0 or q4_1, (out, in)) rearranged for the CPU's mat-vec
// kernels: each group of 16 rows interleaved so that one vector load serves the 16 rows (Note
// [interleaved weights], src/kernels/cpu/quant.cpp). Made once, when a model is loaded; the product
// y = quantized_linear(x, interleave(w)) equals quantized_linear(x, w) up to the float32 rounding
// of the sums' order, and is several times faster with a few rows of x (generating tokens).
// `data` has the weight's dtype, shape and size, its bytes in the interleaved order: only
// quantized_linear reads it (dequantize or save the original weight, not this).
struct InterleavedWeight {
  Tensor data;
  DType dtype() const { return data.dtype(); }
  int64_t out_features() const { return data.size(0); }
  int64_t in_features() const { return data.size(1); }
};
InterleavedWeight interleave(const Tensor& weight);
// The rows of several weights of one dtype and in_features, stacked (the first's rows, then the
// second's, ...), interleaved as one matrix: layers that read the same input (attention's q, k and
// v) then take one product, y's columns being the layers' outputs side by side.
InterleavedWeight interleave(const std::vector<Tensor>& weights);
Tensor quantized_linear(const Tensor& x, const InterleavedWeight& weight,
                        const std::optional<Tensor>& bias = std::nullopt);

// Block-quantized weights (out, in) of one dtype and in_features, multiplied through one interleaved
// copy of their stacked rows: x @ [W_0; W_1; ...]^T in one product. The copy is made by prepare()
// or the first apply(), and again whenever a weight is replaced or written (load_state_dict,
// copy_): it is keyed by each weight's data and version. The weights are members of modules that
// outlive this; apply() may be called from several threads at once.
class InterleavedStack {
 public:
  InterleavedStack() = default;
  explicit InterleavedStack(std::vector<const Tensor*> weights) : weights_(std::move(weights)) {}
  InterleavedStack(InterleavedStack&& other) noexcept { *this = std::move(other); }
  InterleavedStack& operator=(InterleavedStack&& other) noexcept;
  // Whether the weights can be stacked: all block-quantized, 2-D, in one dtype and in_features.
  bool stackable() const;
  Tensor apply(const Tensor& x, const std::optional<Tensor>& bias = std::nullopt);
  void prepare();

 private:
  InterleavedWeight current();  // under mutex_

  std::mutex mutex_;
  std::vector<const Tensor*> weights_;
  InterleavedWeight interleaved_;
  std::vector<std::pair<Tensor, uint32_t>> made_from_;  // the weights the copy was made from, and their versions
};

}  // namespace ember
