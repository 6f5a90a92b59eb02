// The executor: a graph after its passes, turned into a plan that runs without hashing or
// allocating. Note [executor]:
//
// Every operand's kernel view (an Operand: pointer, dtype, shape and strides) is built once; a call
// only writes the base address of each buffer into a flat array (arguments: the caller's tensors;
// outputs: a fresh block from the caching allocator; temporaries: the arena; state and constants:
// where they were traced) and refreshes the operand pointers from it. Steps then run in order:
// kernels through their registered function, fused groups tile by tile (graph/fused.cpp), host
// regions by calling them, gradient slots by setting .grad. Random ops draw new keys from the global
// generator in the order the traced call drew them, so a compiled call consumes the generator
// exactly as an eager one.
#pragma once

#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "base/kernel.h"
#include "graph/fused.h"
#include "graph/ir.h"
#include "graph/passes.h"
#include "kernels/cpu/gemm.h"

namespace ember::graph {

class Executable {
 public:
  Executable(Graph graph, const MemoryPlan& plan);
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Runs the plan with `arguments` (undefined for non-tensor arguments); returns the results.
  std::vector<Tensor> run(const std::vector<Tensor>& arguments);
  // Do the graph's assumptions still hold: gradients it accumulates into are the traced ones, and
  // captured tensors it folded into constants were not written since? Returns what changed ("" if none).
  std::string stale() const;

  const Graph& graph() const { return graph_; }
  // How many runs of optimizer updates execute as one multi-tensor step (Note [multi-tensor updates]).
  int multi_updates() const { return static_cast<int>(multi_.size()); }
  // How many batched products run head by head with the group that reads them (Note [head interleaving]).
  int interleaved() const { return static_cast<int>(interleaves_.size()); }
  // How many of those leave the blocks a mask discards uncomputed (Note [masked products]).
  int masked_products() const;
  // Note [register chains] in graph/fused.h: chains in the fused groups, and the kernels they hold.
  std::pair<int, int> register_chains() const;
  // The share of those products' elements the last run computed (1 when there are none).
  double masked_share() const;
  const MemoryPlan& memory() const { return plan_; }
  int num_steps() const { return static_cast<int>(steps_.size()); }

 private:
  struct Step {
    NodeKind kind;
    KernelFn fn = nullptr;
    int node = 0;
    int first_operand = 0;
    int num_operands = 0;
    int call = -1;            // kKernel: calls_
    int fused = -1;           // kFused: fused_
    bool host_attrs = false;  // kKernel: its attributes come from the host each run
    int multi = -1;           // kKernel: the multi-tensor update (multi_) it belongs to
    int interleave = -1;      // kKernel: the head-by-head pair (interleaves_) it starts
    bool in_pair = false;     // kFused: run by the pair of the step before it
  };
  // Note [head interleaving]: a batched matmul whose product only the next fused group reads, that
  // group running strips of the product's whole rows (attention scores, then scale, mask and
  // softmax), runs head by head: each task takes a share of the leading (batch, head) indices and,
  // for each, multiplies that head into a block of its own, then runs the group's rows of that head
  // over the block while it is in cache. The scores never reach memory: written and read again
  // they cost a stream of their size each way. The product of one head is the batched kernel's own
  // call for that batch index (the k blocks depend on k alone, Note [GEMM blocking]), and the
  // group's rows are its own: the same bits. The product's buffer takes no arena (4 x 8 heads of
  // 512 x 512 scores: 32 MiB); a call with observers (the profiler) runs the two steps apart, the
  // product into a block of its own for that call.
  //
  // Note [masked products]: when the group reads the product only through a select that takes a
  // value of its own wherever a bool mask is set (or clear), `where(mask, -inf, scores)` before a
  // softmax, with nothing but elementwise members between the product and the select (their values
  // the group's alone), the product's values at those positions are never used. Each call then
  // reads the mask of each head and multiplies the head block by block of rows, each block over
  // the columns between the first and the last that its rows use: a causal mask leaves about half
  // of the product's terms uncomputed. Positions left out hold whatever the block held; the select
  // discards them (an elementwise member before it computes a value nobody reads). A block is the
  // whole call's problem over fewer rows and columns, solved on the whole call's path: each element
  // gets the whole call's bits (GemmPath in kernels/cpu/gemm.h).
  // The mask is read on every call: its values are the call's, never assumed. Blocks of 64 rows
  // (rounded up to whole register tiles): masked_softmax_f32_compiled (4 x 8 heads of 512 x 512,
  // causal; 57% of the product computed) went from 8.66-8.71 to 7.11-7.31 ms, and blocks of 42 or
  // 140 rows measured the same, 7.2-8.0 ms (2 threads, Zen 4, binaries alternated).
  struct MaskedProduct {
    int buffer = -1;                    // the mask's (bool, unit stride along the row)
    int64_t offset = 0;                 // bytes from the buffer's start
    bool skip_when = true;              // the value of the mask where the product goes unused
    std::vector<int64_t> head_offsets;  // per head: bytes into the mask
    int64_t row_stride = 0;             // bytes from one row of the mask to the next (0: broadcast)
    int64_t block_rows = 0;
    cpu::GemmArgs args;  // one head's problem, its path fixed; a, b, c set per block
    // Per task: the head mask last read this call, each block's columns [begin, end) in it, and
    // the products' elements it computed this call.
    std::vector<const char*> read;
    std::vector<std::vector<std::array<int64_t, 2>>> columns;
    std::vector<int64_t> elements;
  };
  struct Interleave {
    int step = 0;     // the matmul's; the group's is the next
    int buffer = -1;  // the product's, which the group reads in place of it
    int64_t heads = 0, rows = 0, row_bytes = 0;
    std::vector<std::array<int64_t, 2>> offsets;  // per head: bytes into the two factors
    Shape shapes[3];                              // one head of the factors and of the product
    Strides strides[3];
    int tasks = 0, num_operands = 0;
    std::vector<Operand> operands;                       // tasks x num_operands
    std::vector<KernelCall> calls;                       // per task
    std::vector<std::vector<char*>> bases;               // per task: base_ with the product's block
    std::vector<std::shared_ptr<StorageImpl>> products;  // per task: one head's product
    std::unique_ptr<MaskedProduct> masked;               // Note [masked products], or null
  };
  // Note [multi-tensor updates]: consecutive optimizer updates (SGD, Adam, Adagrad, RMSprop steps
  // of every parameter, one kernel each) run as one step: their parameters are cut into pieces of
  // kUpdatePiece elements, and one parallel region runs every piece through the update's own
  // kernel, over operands that view the piece. Each parameter's kernel would otherwise start a
  // parallel region of its own (or run on one thread when small); the pieces also balance small
  // and large parameters across threads. An update computes each element alone, whatever the
  // split (pieces start on 64-element blocks, as the kernel's own chunks do): the same bits.
  struct MultiUpdate {
    struct Piece {
      int step = 0;  // the member's index in steps_
      int64_t begin = 0;
      Shape shape;            // (length)
      int first_operand = 0;  // in piece_operands_
    };
    std::vector<int> steps;
    std::vector<Piece> pieces;
    int64_t elements = 0;
    int first_call = 0;  // its pieces' calls in piece_calls_
  };
  static constexpr int64_t kUpdatePiece = 16384;
  void plan_multi_updates();
  void run_multi(const MultiUpdate& multi);
  void plan_interleaves();
  void run_interleaved(Interleave& pair);
  void plan_masked_product(Interleave& pair, const Node& group);
  // Head h's product, a block of rows at a time over the columns the mask leaves (Note [masked
  // products]).
  void multiply_unmasked(Interleave& pair, int task, int64_t head, const char* a, const char* b, char* product);
  void bind(const std::vector<Tensor>& arguments, bool observed);
  void draw();
  void run_observed(const Step& step);  // with observers (the profiler) attached

  Graph graph_;
  MemoryPlan plan_;
  std::shared_ptr<StorageImpl> arena_;
  std::vector<char*> base_;  // per buffer
  std::vector<Step> steps_;
  std::vector<Operand> operands_;
  std::vector<std::pair<int, int64_t>> sources_;  // per operand: buffer, byte offset
  std::vector<KernelCall> calls_;
  std::vector<std::unique_ptr<FusedGroup>> fused_;
  std::vector<MultiUpdate> multi_;
  std::vector<std::unique_ptr<Interleave>> interleaves_;
  std::vector<Operand> piece_operands_;
  std::vector<KernelCall> piece_calls_;
  std::vector<std::vector<int>> drawing_nodes_;  // per draw: the nodes whose key it is
  std::vector<int> output_buffers_;
  // Arguments and state the plan writes: their versions move after each run, as an eager write's
  // would, so forms derived from them outside the plan (Note [derived forms]) retire.
  std::vector<int> written_outside_;
  std::vector<std::shared_ptr<StorageImpl>> observed_products_;  // per interleave, on a call with observers
  std::vector<std::shared_ptr<StorageImpl>> output_storage_;
};

}  // namespace ember::graph
