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
#pragma once

#include <vector>

#include "base/kernel.h"
#include "graph/ir.h"
#include "graph/passes.h"

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
  };
  struct Member {
    KernelFn fn;
    OpKind op;
    const Attrs* attrs;
    int first = 0, num_inputs = 0, num_outputs = 0;
  };
  void run_tiles(const std::vector<char*>& base, int64_t begin, int64_t end, int slot);

  Shape shape_;  // S
  int split_ = 0;
  int64_t chunk_ = 1, chunks_ = 1, tiles_ = 1;
  Shape tile_full_, tile_last_;
  std::vector<Operand_> operands_;
  std::vector<Member> members_;
  std::vector<Attrs> tile_attrs_;  // row-wise members' attributes with their dim counted in a tile
  int64_t scratch_bytes_ = 0;      // per slot
  std::vector<char> scratch_storage_;
  char* scratch_ = nullptr;
  int slots_ = 1;
  std::vector<Operand> call_operands_;  // slots_ x operands_.size()
  OpCost cost_;
};

}  // namespace ember::graph
