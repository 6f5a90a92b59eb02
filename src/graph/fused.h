// A fused elementwise group run tile by tile. Note [fused groups]:
//
// The members of a kFused node all iterate over one shape S. The group cuts S into tiles along
// one dim d (whole trailing dims, a chunk of d, one index of each leading dim) of about
// kTileElements elements, and runs every member's own kernel on each tile in turn, so a value that
// only the group uses (a kScratch buffer) lives in a tile-sized scratch block that stays in cache
// and never reaches DRAM. Tiles are independent: a task takes a run of them, with scratch of its
// own. The members are the registered kernels, seen with tile-sized operands, so a fused group
// computes bit for bit what the unfused kernels do. A softmax member normalizes a dim that the
// fusion pass made sure lies, with every dim after it, inside one tile: a tile holds whole rows.
//
// Note [strip fusion]: a group whose every operand steps through S's inner dim with stride 1 (or
// 0, a broadcast value) runs in strips instead of tiles: the group walks S once, kStripElements at
// a time, and every member processes the strip before the next one is read. A value only the group
// uses lives in a strip buffer (512 bytes of float32, in L1), the group's inputs are read from
// memory once and its outputs written once, and the member loop stays an interpreter over strips:
// no code is generated at run time. A member runs the vector row functions its unfused kernel runs
// on a unit-stride row (elementwise_simd.h: they give an element the same bits wherever it falls in
// a row), or, where those have no vector form, its own kernel over the strip as a 1-d operand with
// the unfused call's inner strides: the same code path, so the same bits. A group with a softmax
// over S's last dim (rows of up to kRowStripElements) runs strips of whole rows, (rows, row)
// operands, the softmax member's kernel over them; a softmax over another dim keeps the tiles.
//
// Why 128 elements: x * sigmoid(x) + y on 16M float32 (2 threads, Zen 4, `ember bench`, median of 5
// rounds) took 16.3 ms in strips of 32, 9.8 of 64, 7.3-7.5 of 128, 9.7-10.4 of 256, 9.1-10.0 of 512,
// 11.3-11.8 of 2048 and 10.7 of 8192; tiles of 32K took 10.1-10.6. Eight AVX-512 vectors of sigmoid
// are about as many instructions as the core keeps in flight, so the loads of the next strip's
// inputs issue while this strip computes: memory and arithmetic overlap, which they do not when a
// member runs for thousands of cycles before the next one reads memory. Shorter strips pay the
// interpreter (a dispatched call per member per strip). Prefetching strips ahead in software made
// it slower (11-12 ms at 2 to 64 strips ahead) and non-temporal stores of the outputs did not help
// at 128 (8.2 against 7.3 ms).
//
// Note [fused reductions]: a group may hold row reductions (sum, amax, amin over S's last dim, kept:
// fused_reduction in graph/passes.h) and, after one, elementwise members over reduced_shape(S), the
// values of one per row (a mean's scaling, var + eps, rsqrt). Softmax, layer norm, RMS norm and
// log-sum-exp written with primitives are such groups: every row is read from memory once, and its
// reduced values and the members over S that read them (broadcast along the row) run while the row
// is in L1. A reduction member is its kernel over (rows, row) operands, which reduces each row the
// way the unfused call over all rows does (reduce_inner/reduce_small in kernels/cpu/reduce_walkers.h
// choose by the row's length and stride alone, so a row gets the same bits); a member over the
// reduced shape sees a strip's (rows, 1) values as one row of `rows`, through the same row functions
// as every member. The strips hold whole rows (up to kRowStripElements, or the group keeps tiles,
// which hold whole rows too), and a reduced value only the group uses lives in a block of one value
// per row, which members over S read with stride 0 along the row.
//
// Strips of whole rows hold up to 16384 elements (64 KiB of float32 per value, so a group's values
// sit in L2): against 4096, layer norm written with primitives on 8192 x 768 (compiled, 2 threads,
// Zen 4, binaries alternated 3 times, `ember bench`) took 2.79-3.04 against 3.15-3.94 ms, the same
// on 1024 rows (in cache) 212-238 against 225-287 us, and masked_softmax_f32_compiled 10.2-11.0
// against 10.3-12.7 ms: fewer member calls per row outweigh the values leaving L1.
//
// Note [register chains]: in strips, a run of consecutive members over S of a few instructions each
// (+, -, *, /, minimum, maximum, neg, abs, sqrt, rsqrt, square, relu: simd::chains), in float32 or
// float64, where each member after the first reads the result of the one before it, runs as one pass
// (simd::chain_row_fn): each vector of the first member's input is loaded once, every member's op is
// applied in registers, each other operand is loaded as it is needed (a row, a broadcast value, or
// the value itself, as in c * c), and a member's result is stored only where the group keeps it: the
// last member's, a result of the group, or a value another member reads (layer norm's x - mean,
// which both the variance and the output read). The steps are the row functions' vector forms in the
// same order, and a float32 or float64 value stored and loaded again is the same value, so every
// element keeps its bits (a NaN's payload aside: where an add or a multiply meets two NaNs, which
// one it keeps is the operand order the C++ compiler picked, in each build of each loop); the tail
// takes the padded copies the row functions take. The 16-bit floats round each member's result, so
// they keep one pass per member. A step is dispatched once per block of four vectors, which stay in
// registers only while every case of the dispatch is a few instructions: with every unary op as a
// case (exp, tanh, GELU...), the compiler kept the block on the stack around the dispatch, and layer
// norm written with primitives in cache (256 x 768, compiled) took 72 us against 54 us unchained.
// With the ops above it takes 40-41 us, and 2.3-2.5 against 2.8-2.9 ms on 8192 x 768 (Zen 4, 2
// threads, `ember bench`, three alternated rounds). A row reduction in a strip calls its row
// function (simd::reduce_row_fn) row by row instead of the kernel over the strip: the same bits,
// without the kernel's layout and task set-up per strip (38.6-39.3 against 39.8-40.4 us).
// Tried and not kept: a chain begun by any unary op through its row function, four vectors at a
// time (SiLU's result straight into silu_add's + y): silu_add_f32_16M_compiled 1.05x the time (6
// alternated rounds), as its strips of 128 elements already keep that value in L1 and the row runs
// at a plain add's speed (add_f32_4096, 7.2-9.0 ms beside its 7.1-10.6 ms on a busy host; 5.56
// against 5.79 ms in the quiet baseline run).
//
// A row sum of the chain's last result ends the chain: the chain's blocks of four vectors are the
// steps of the vector sum's four accumulators, so the sum takes the values from registers in the
// order its row function takes them from memory (accumulate_vectors in kernels/cpu/reduce-inl.h,
// which VectorRows::contiguous runs too), and the summed value is stored only where the group keeps
// it. Rows of at most kSmallReduce elements (summed by a plain loop) and longer than a chunk store
// the values and call the row function. Layer norm's (x - mean)^2 is then never stored: 38.4-40.1
// -> 32.5-36.2 us in cache, 2.03-2.09 -> 1.89-1.97 ms on 8192 x 768 (three alternated rounds).
#pragma once

#include <array>
#include <vector>

#include "base/kernel.h"
#include "graph/ir.h"
#include "graph/passes.h"
#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/reduce_simd.h"

namespace ember::graph {

class FusedGroup {
 public:
  FusedGroup(const Graph& g, const Node& fused);
  // Runs the group; `base` holds each buffer's base address.
  void run(const std::vector<char*>& base);

  // The group's FLOPs (the cost model's per-element counts of its members) and the bytes it moves
  // (its inputs and results, read and written once).
  const OpCost& cost() const { return cost_; }

  static constexpr int64_t kTileElements = kFusionTileElements;
  static constexpr int64_t kStripElements = 128;
  static constexpr int64_t kRowStripElements = 16384;  // a strip of whole rows holds up to this many
  // Does the group run in strips (Note [strip fusion]) rather than tiles?
  bool strips() const { return strips_; }
  // Strips of whole rows: their length (S's last dim), else 0. The group's S.
  int64_t row() const { return strips_ ? row_ : 0; }
  const Shape& shape() const { return shape_; }
  int slots() const { return slots_; }
  // Note [register chains]: the group's chains, and the members they hold.
  int chains() const { return static_cast<int>(chains_.size()); }
  int chained_members() const {
    int count = 0;
    for (const Chain& c : chains_) count += c.last - c.first + 1;
    return count;
  }
  // Rows [begin, end) of S (groups with row() > 0) on the calling thread, with slot `slot`'s
  // operands: a caller that splits the rows among tasks itself (Note [head interleaving] in
  // graph/executor.h).
  void run_rows_on(const std::vector<char*>& base, int64_t begin, int64_t end, int slot) {
    run_rows(base, begin, end, slot);
  }

 private:
  struct Operand_ {
    int buffer = -1;
    int64_t offset = 0;
    DType dtype = kFloat32;
    Device device;
    bool scratch = false;
    int64_t scratch_offset = 0;
    Strides full_strides;  // over S
    Strides tile_strides;  // over a tile
    bool contiguous_full = false, contiguous_last = false;
    int value = -1;  // a scratch buffer's strip buffer (Note [strip fusion])
    // Note [fused reductions]: this operand is over reduced_shape(S) (a reduction's result, or any
    // operand of a member over the reduced shape); its buffer holds reduced values.
    bool over_reduced = false, reduced = false;
  };
  struct Member {
    KernelFn fn;
    OpKind op;
    const Attrs* attrs;
    int first = 0, num_inputs = 0, num_outputs = 0;
    bool reduces = false;       // a row reduction over S's last dim
    bool over_reduced = false;  // an elementwise kernel over reduced_shape(S)
    // Strips: the unfused kernel's vector row function for this op and dtype, where it has one.
    cpu::simd::UnaryRowFn unary_row = nullptr;
    cpu::simd::BinaryRowFn binary_row = nullptr;
    cpu::simd::ReduceRowFn reduce_row = nullptr;  // a row reduction's, where the vector path takes it
    int chain = -1;                               // Note [register chains]: the chain this member begins, or -1
  };
  // Note [register chains]: members [first, last] as one pass, the value in registers. Each link
  // is a member's op with its other operand (-1: none, or the value itself), and the operand its
  // result is stored to where another member reads it (-1: kept in registers only).
  struct ChainLink {
    OpKind op;
    int other = -1;
    bool value_first = true;
    int stored = -1;
  };
  struct Chain {
    int first = 0, last = 0;
    int in = -1, out = -1;  // operands: the first member's value input, the last result (-1: not stored)
    int sum = -1;           // a row sum's result, when the chain ends in one (its last member)
    std::vector<ChainLink> links;
    cpu::simd::ChainRowFn fn = nullptr;
  };
  static constexpr int kMaxChain = 64;
  void run_tiles(const std::vector<char*>& base, int64_t begin, int64_t end, int slot);
  // Per-slot arrays of T (one per operand) lie this many elements apart: at least two cache lines
  // between the parts that two tasks write, so that they never share a line.
  template <class T>
  size_t slot_stride() const {
    return operands_.size() + 128 / sizeof(T) + 1;
  }

  // Strips (Note [strip fusion]).
  bool plan_strips();
  void run_strips(const std::vector<char*>& base, int64_t begin, int64_t end, int slot);
  void run_rows(const std::vector<char*>& base, int64_t begin, int64_t end, int slot);
  void run_strip(Operand* ops, int64_t rows, int64_t n) const;
  void plan_chains();
  void run_chain(const Chain& chain, const Operand* ops, int64_t rows, int64_t n) const;

  bool strips_ = false;
  int64_t row_ = 0;    // whole rows of this many elements per strip (a softmax's last dim), or 0
  int loop_ndim_ = 0;  // S collapsed for the strip walk
  int64_t loop_sizes_[kMaxDims] = {};
  std::vector<std::array<int64_t, kMaxDims>> loop_strides_;  // per operand, in elements
  std::vector<Chain> chains_;                                // Note [register chains]
  std::vector<Strides> strip_strides_;                       // per operand: its steps within a strip
  int strip_values_ = 0;                                     // strip buffers: one per scratch buffer
  std::vector<char*> strip_rows_;                            // slots_ x operands_.size()

  Shape shape_;  // S
  int split_ = 0;
  int64_t chunk_ = 1, chunks_ = 1, tiles_ = 1;
  Shape tile_full_, tile_last_;
  Shape tile_full_reduced_, tile_last_reduced_;  // the tiles of reduced_shape(S)
  std::vector<Operand_> operands_;
  std::vector<Member> members_;
  std::vector<Attrs> tile_attrs_;  // row-wise members' attributes with their dim counted in a tile
  int64_t scratch_bytes_ = 0;      // per slot
  std::vector<char> scratch_storage_;
  char* scratch_ = nullptr;
  int64_t units_ = 1;  // what tasks share out: tiles, or (for strips) S's elements or rows
  int slots_ = 1;
  std::vector<Operand> call_operands_;  // slots_ x operands_.size()
  OpCost cost_;
};

}  // namespace ember::graph
