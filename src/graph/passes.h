// The passes over a traced graph (Note [graph IR] in graph/ir.h), in the order compile runs them:
//
//   fold_constants   kernels whose inputs are all constant (creation ops, captured tensors the graph
//                    never writes) run once, at compile time: their results become kConstant buffers,
//                    and the captured tensors they read are checked for writes before each call;
//   simplify         x*1, x/1, x+0, x-0 and copies to the same dtype read their input instead;
//   cse              a kernel repeating an earlier one (same op, attributes and operands, none
//                    written in between) reuses its result;
//   dce              kernels whose results nothing reads are dropped;
//   fuse_gelu        x * 0.5 * (1 + erf(x / sqrt(2))), as exported models write GELU, becomes one
//                    gelu kernel (the erf chain's five passes over x become one);
//   fuse_silu        x * sigmoid(x) in float32 or float64 becomes one silu kernel (the same functors,
//                    so the same bits; a 16-bit sigmoid rounds before the product, silu does not);
//   fuse_attention   softmax(scale * q @ k^T [masked]) @ v becomes one scaled_dot_product_attention
//                    (the flash kernel: no (L, S) matrix), the mask a causal flag when it is one;
//   fuse_epilogues   matmul followed by a bias add, a ReLU and a residual add becomes one matmul
//                    with that epilogue (the packed GEMM applies it in registers; GELU and SiLU
//                    stay a pass of their own, which measures faster), and a product scaled by a
//                    constant (attention's scores) takes the scale as its alpha where the GEMM sums
//                    k whole (the same bits);
//   threshold_pooled threshold_backward(max_pool2d_grad(g, indices), x) (ReLU's backward after a
//                    max-pool's, x the pool's input) runs before the unpooling instead, on the
//                    pool's output: each window's maximum is the input value its gradient goes to,
//                    so the bits are the same, and x (a ReLU's output, the size of the layer before
//                    the pool) is no longer alive in the backward (Note [thresholds before unpooling]);
//   recompute_for_backward  a cheap forward kernel (elementwise, a copy, a layer or RMS norm) whose
//                    result the backward reads, and whose inputs are alive there anyway, runs again
//                    just before its first backward reader, so its result is not kept from the
//                    forward through the backward (Note [recomputed activations]);
//   fuse_elementwise chains and DAGs of elementwise kernels over one shape, with the softmaxes
//                    and row reductions among them (and the elementwise kernels over the reduced
//                    rows), become one kFused node run tile by tile or strip by strip; values only
//                    the group uses become kScratch;
//   block_activations a float32 convolution's result that only convolutions of the CPU's blocked
//                    kernel read (as input or residual) stays in their blocked layout, padded for
//                    them, instead of going through NCHW (Note [blocked activations]);
//   reuse_in_place   an elementwise kernel writes over an input of its geometry whose last use it is;
//   plan_memory      temporaries get offsets in one arena from their live intervals (best fit).
//
// Each pass keeps the graph's meaning: the same buffers of kind kArgument, kState and kOutput end
// up with the same contents as running the traced calls in order.
#pragma once

#include "graph/ir.h"

namespace ember::graph {

struct PassStats {
  int folded = 0;
  int simplified = 0;
  int cse = 0;
  int dead = 0;
  int epilogues = 0;
  int attention = 0;
  int gelus = 0;
  int silus = 0;
  int pooled_thresholds = 0;
  int recomputed = 0;
  int fused_groups = 0;
  int fused_nodes = 0;
  int in_place = 0;
  int blocked = 0;
};

void fold_constants(Graph& g, PassStats& stats);
void simplify(Graph& g, PassStats& stats);
void cse(Graph& g, PassStats& stats);
void dce(Graph& g, PassStats& stats);
void fuse_gelu(Graph& g, PassStats& stats);
void fuse_silu(Graph& g, PassStats& stats);
void fuse_attention(Graph& g, PassStats& stats);
void fuse_epilogues(Graph& g, PassStats& stats);
void threshold_pooled(Graph& g, PassStats& stats);
void recompute_for_backward(Graph& g, PassStats& stats);
void fuse_elementwise(Graph& g, PassStats& stats);
void block_activations(Graph& g, PassStats& stats);
void reuse_in_place(Graph& g, PassStats& stats);

struct MemoryPlan {
  int64_t arena_bytes = 0;         // the arena every temporary lives in
  int64_t temp_bytes = 0;          // the sum of the temporaries' sizes (what they take unplanned)
  int64_t largest_temp_bytes = 0;  // a lower bound for the arena
  int64_t live_bytes = 0;          // the most temporaries alive at one step: the arena's lower bound
};
// Assigns every kTemp buffer an arena offset such that buffers alive at the same time never overlap.
MemoryPlan plan_memory(Graph& g);

// The elements of one tile of a fused group (graph/fused.h).
inline constexpr int64_t kFusionTileElements = 32768;

// An elementwise kernel (a primitive with the kElementwise trait, no draw, no update).
bool elementwise(const Node& node);
// Can the node be part of a fused group: elementwise, a softmax / log_softmax whose rows (the
// normalized dim and the dims after it) fit one tile, so that tiles hold whole rows, or a fused
// reduction?
bool fusible(const Node& node);
// A row reduction a fused group takes (Note [fused reductions] in graph/fused.h): sum, amax or amin
// of a floating tensor over its last dim, kept, which the input steps through with unit stride, in
// rows of 2 to kFusionTileElements elements.
bool fused_reduction(const Node& node);
// `shape` with its last dim 1: what a fused reduction over it leaves.
Shape reduced_shape(const Shape& shape);

}  // namespace ember::graph
