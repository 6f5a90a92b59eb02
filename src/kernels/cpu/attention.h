// Flash attention on the CPU (Note [flash attention] in attention.cpp): scaled dot-product
// attention forward and backward over tiles of queries and keys with an online softmax, never
// holding an (L, S) matrix.
#pragma once

#include <cstdint>

#include "ember/dtype.h"

namespace ember::cpu {

// One attention call. q (B, Hq, L, E), k (B, Hk, S, E), v (B, Hk, S, Ev), each with its last dim
// contiguous and the other strides (batch, head, row) in elements; Hk divides Hq (query head h
// reads key/value head h / (Hq / Hk)). The optional mask (B, Hq, L, S) may have any strides (0
// where it broadcasts): bool (true: the key takes part) or of `dtype` (added to the scaled scores).
struct AttentionProblem {
  DType dtype = kFloat32;  // of q, k, v and the outputs: float32 or float64
  int64_t batch = 0, heads = 0, kv_heads = 0, length = 0, keys = 0, features = 0, value_features = 0;
  const void* q = nullptr;
  int64_t q_strides[3] = {};
  const void* k = nullptr;
  int64_t k_strides[3] = {};
  const void* v = nullptr;
  int64_t v_strides[3] = {};
  const void* mask = nullptr;
  DType mask_dtype = kBool;
  int64_t mask_strides[4] = {};
  double scale = 1.0;
  bool causal = false;  // key j > query i masked
  // Each weight (bh, i, j) is kept when Philox's uniform number ((bh L + i) S + j) of the draw
  // (seed, first_block) is below 1 - dropout_p (dropout's mask over the (B, Hq, L, S) weights).
  double dropout_p = 0.0;
  uint64_t seed = 0;
  uint64_t first_block = 0;
  int threads = 1;
};

// out (B, Hq, L, Ev) and lse (B, Hq, L), contiguous: the attention and each row's log-sum-exp of
// its scaled, masked scores (+inf for a row with no key: its output is 0).
void attention_forward(const AttentionProblem& p, void* out, void* lse);

// The gradients of q, k and v (contiguous, shaped as q, k, v) from the forward's out and lse and
// the output's gradient grad_out (B, Hq, L, Ev) contiguous.
void attention_backward(const AttentionProblem& p, const void* out, const void* lse, const void* grad_out, void* grad_q,
                        void* grad_k, void* grad_v);

}  // namespace ember::cpu
