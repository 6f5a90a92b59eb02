// The SIMD part of the elementwise kernels: contiguous rows of the float types (the 16-bit ones
// computed in float32), compiled for every Highway target and chosen at run time. Each returns how
// many leading elements it wrote (a whole number of vectors, or 0 when the op has no vector form);
// the caller finishes the tail in scalar.
#pragma once

#include <cstdint>

#include "ember/dtype.h"
#include "ember/primitives.h"

namespace ember::cpu::simd {

// out[i] = op(in[i]) for contiguous out and in.
int64_t unary_row(OpKind op, DType dtype, void* out, const void* in, int64_t n);
// out[i] = op(a[i], b[i]) for contiguous out; a (or b) is one broadcast value when a_scalar (b_scalar).
int64_t binary_row(OpKind op, DType dtype, void* out, const void* a, bool a_scalar, const void* b, bool b_scalar,
                   int64_t n);
// out[i] = in[i] converted from `from` to `to` (contiguous rows), bit for bit as the scalar
// conversion, for float32 <-> bfloat16, float16 and float64; returns how many leading elements it
// wrote (whole vectors; 0 for other pairs).
int64_t convert_row(DType to, DType from, void* out, const void* in, int64_t n);
// The row functions above resolved once for one op and dtype on this machine's target (nullptr where
// the op has no vector form for it): a caller that runs the same op over many short rows skips
// the dispatch and the op's switch on each.
using UnaryRowFn = int64_t (*)(void* out, const void* in, int64_t n);
using BinaryRowFn = int64_t (*)(void* out, const void* a, bool a_scalar, const void* b, bool b_scalar, int64_t n);
UnaryRowFn unary_row_fn(OpKind op, DType dtype);
BinaryRowFn binary_row_fn(OpKind op, DType dtype);
// Note [register chains] (graph/fused.h): a run of elementwise ops applied to one value that stays
// in registers. Each step applies `op` to the value: a unary op alone; a binary op with `other`,
// a contiguous row (or one broadcast value when other_scalar, or the value itself when other is
// nullptr), the value being the op's first operand when value_first. Where `store` is set, the
// step's result is also written to that contiguous row, before any later step reads its `other`.
// Trivial, so that declaring a caller's array of kMaxChain steps costs nothing (their default
// initialization was most of run_chain's time, per row): set every field.
struct ChainStep {
  OpKind op;
  const void* other;
  bool other_scalar;
  bool value_first;
  void* store;
};
// out[i] = steps[count - 1](... steps[0](in[i])) for contiguous out and in, float32 or float64, in
// registers: each element gets the bits the steps' row functions give it one after another (the
// same vector forms, the tail through padded copies). Elements are read and written position by
// position, as the row functions read and write them. Where `sum` is set, it receives the sum of the
// n results, bit for bit as reduce_row_fn(kSum) gives it over them, and out may be nullptr (the
// results only summed). Returns n.
using ChainRowFn = int64_t (*)(void* out, const void* in, const ChainStep* steps, int count, int64_t n, void* sum);
// The chain's row function for dtype on this machine's target: nullptr unless dtype is float32 or
// float64. Every step's op must be one that chains(op).
ChainRowFn chain_row_fn(DType dtype);
// Can `op` be a step of a chain? The arithmetic of a few instructions: +, -, *, /, minimum,
// maximum, neg, abs, sqrt, rsqrt, square and relu.
bool chains(OpKind op);

// out[i] = cond[i] ? a[i] : b[i] for contiguous out and cond over elements of `element_bytes` (2 or
// 4; the bits are moved, not computed); a (or b) is one broadcast value when a_scalar (b_scalar).
// Returns how many leading elements it wrote (whole vectors; 0 for other sizes).
int64_t select_row(int element_bytes, void* out, const bool* cond, const void* a, bool a_scalar, const void* b,
                   bool b_scalar, int64_t n);
// dst[r * dst_stride + c] = src[c * src_stride + r] for r < rows, c < cols, elements of 4 bytes (a
// block of a transposed copy, strides in elements); false, copying nothing, when the target has no
// register tile for them. `stream`: write dst with non-temporal stores where the block allows
// (Note [streaming transpose] in elementwise.cpp); the stores are fenced before it returns.
bool transpose_block_32(void* dst, int64_t dst_stride, const void* src, int64_t src_stride, int64_t rows, int64_t cols,
                        bool stream);

}  // namespace ember::cpu::simd
