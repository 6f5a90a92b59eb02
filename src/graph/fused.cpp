// Fused elementwise groups, tile by tile (Note [fused groups] in graph/fused.h).
#include "graph/fused.h"

#include <algorithm>

#include "kernels/cpu/parallel.h"
#include "ops/dispatch.h"

namespace ember::graph {

FusedGroup::FusedGroup(const Graph& g, const Node& fused) {
  const Shape& s = fused.body.front().outputs[0].shape;
  shape_ = s.size() == 0 ? Shape({1}) : s;
  const int ndim = shape_.size();
  // The split dim: the outermost whose trailing dims fit a tile; a tile is a chunk of it.
  split_ = ndim - 1;
  for (int d = ndim - 1; d >= 0; --d) {
    int64_t after = 1;
    for (int k = d + 1; k < ndim; ++k) after *= shape_[k];
    if (after > kTileElements) break;
    split_ = d;
  }
  int64_t trailing = 1;
  for (int d = split_ + 1; d < ndim; ++d) trailing *= shape_[d];
  chunk_ = std::clamp<int64_t>(kTileElements / std::max<int64_t>(trailing, 1), 1, shape_[split_]);
  chunks_ = (shape_[split_] + chunk_ - 1) / chunk_;
  int64_t outer = 1;
  for (int d = 0; d < split_; ++d) outer *= shape_[d];
  tiles_ = outer * chunks_;
  std::vector<int64_t> full(ndim - split_), last(ndim - split_);
  for (int d = split_; d < ndim; ++d) full[d - split_] = last[d - split_] = shape_[d];
  full[0] = chunk_;
  last[0] = shape_[split_] - (chunks_ - 1) * chunk_;
  tile_full_ = Shape(full);
  tile_last_ = Shape(last);
  const Strides scratch_strides = contiguous_strides(tile_full_);

  auto add = [&](const View& v) {
    Operand_ o;
    o.buffer = v.buffer;
    o.offset = v.offset;
    o.dtype = v.dtype;
    o.device = g.buffers[v.buffer].device;
    o.scratch = g.buffers[v.buffer].kind == BufferKind::kScratch;
    // Views of a 0-d shape iterate as one element.
    o.full_strides = v.shape.size() == 0 ? Strides({0}) : v.strides;
    if (o.scratch) {
      o.tile_strides = scratch_strides;
    } else {
      std::vector<int64_t> st(ndim - split_);
      for (int d = split_; d < ndim; ++d) st[d - split_] = o.full_strides[d];
      o.tile_strides = Strides(st);
    }
    o.contiguous_full = is_contiguous_layout(tile_full_, o.tile_strides);
    o.contiguous_last = is_contiguous_layout(tile_last_, o.tile_strides);
    operands_.push_back(std::move(o));
  };
  // Scratch: one tile-sized block per scratch buffer.
  std::vector<int64_t> scratch_at(g.buffers.size(), -1);
  for (const Node& m : fused.body) {
    Member member;
    member.op = m.op;
    member.attrs = &m.attrs;
    member.fn = dispatch::kernel_table().at(m.op, g.buffers[m.outputs[0].buffer].device.type).fn;
    EMBER_CHECK(member.fn != nullptr, "[compile] no kernel for ", op_name(m.op), " in a fused group");
    if (m.op == OpKind::kSoftmax || m.op == OpKind::kLogSoftmax) {
      const int64_t dim = std::get<DimAttrs>(m.attrs).dim;
      const int64_t tile_dim = dim - split_;
      EMBER_CHECK(s.size() > 0 && (tile_dim > 0 || (tile_dim == 0 && chunk_ == shape_[split_])),
                  "[compile] internal error: a ", op_name(m.op), " row does not fit a tile");
      tile_attrs_.push_back(DimAttrs{tile_dim});
    }
    member.first = static_cast<int>(operands_.size());
    for (const View& v : m.inputs) add(v);
    for (const View& v : m.outputs) add(v);
    member.num_inputs = static_cast<int>(m.inputs.size());
    member.num_outputs = static_cast<int>(m.outputs.size());
    members_.push_back(member);
  }
  // Point the row-wise members at their tile attributes (stable now that the vector is complete).
  size_t next_tile_attrs = 0;
  for (Member& member : members_) {
    if (member.op == OpKind::kSoftmax || member.op == OpKind::kLogSoftmax)
      member.attrs = &tile_attrs_[next_tile_attrs++];
  }
  for (Operand_& o : operands_) {
    if (!o.scratch) continue;
    if (scratch_at[o.buffer] < 0) {
      scratch_at[o.buffer] = scratch_bytes_;
      scratch_bytes_ += (tile_full_.numel() * dtype_size(o.dtype) + 63) / 64 * 64;
    }
    o.scratch_offset = scratch_at[o.buffer];
  }
  // The cost: every member over S; memory traffic only at the group's boundary.
  const double elements = static_cast<double>(shape_.numel());
  for (const Node& m : fused.body) cost_.flops += elements * op_info(m.op).flops_per_element;
  auto stored = [](const View& v) {
    double n = 1;
    for (int d = 0; d < v.shape.size(); ++d) n *= v.strides[d] == 0 ? 1.0 : static_cast<double>(v.shape[d]);
    return n * static_cast<double>(dtype_size(v.dtype));
  };
  for (const View& v : fused.inputs) cost_.bytes += stored(v);
  for (const View& v : fused.outputs) cost_.bytes += stored(v);
  slots_ = static_cast<int>(std::min<int64_t>(tiles_, cpu::num_threads() * cpu::kTasksPerThread));
  scratch_storage_.resize(static_cast<size_t>(scratch_bytes_ * slots_ + 64));
  scratch_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(scratch_storage_.data()) + 63) & ~uintptr_t{63});
  call_operands_.resize(static_cast<size_t>(slots_) * operands_.size());
}

void FusedGroup::run_tiles(const std::vector<char*>& base, int64_t begin, int64_t end, int slot) {
  Operand* ops = call_operands_.data() + static_cast<size_t>(slot) * operands_.size();
  char* scratch = scratch_ + slot * scratch_bytes_;
  const int ndim = shape_.size();
  for (int64_t tile = begin; tile < end; ++tile) {
    int64_t rest = tile / chunks_;
    const int64_t chunk = tile % chunks_;
    const bool is_last = chunk == chunks_ - 1;
    // Element offset of the tile's first element, per operand, from the leading dims' index.
    int64_t index[kMaxDims] = {};
    for (int d = split_ - 1; d >= 0; --d) {
      index[d] = rest % shape_[d];
      rest /= shape_[d];
    }
    for (size_t k = 0; k < operands_.size(); ++k) {
      const Operand_& o = operands_[k];
      Operand& op = ops[k];
      op.dtype = o.dtype;
      op.device = o.device;
      op.shape = is_last ? &tile_last_ : &tile_full_;
      op.strides = &o.tile_strides;
      op.contiguous = is_last ? o.contiguous_last : o.contiguous_full;
      if (o.scratch) {
        op.data = scratch + o.scratch_offset;
      } else {
        int64_t elements = chunk * chunk_ * o.full_strides[split_];
        for (int d = 0; d < split_; ++d) elements += index[d] * o.full_strides[d];
        op.data = base[o.buffer] + o.offset + elements * dtype_size(o.dtype);
      }
    }
    (void)ndim;
    for (const Member& m : members_) {
      const KernelCall call{m.op, *m.attrs, std::span<const Operand>(ops + m.first, m.num_inputs),
                            std::span<const Operand>(ops + m.first + m.num_inputs, m.num_outputs)};
      m.fn(call);
    }
  }
}

void FusedGroup::run(const std::vector<char*>& base) {
  const int64_t elements = shape_.numel();
  const int threads = elements < cpu::kElementwiseGrain ? 1 : std::min(cpu::num_threads(), slots_);
  if (threads <= 1 || slots_ <= 1) {
    run_tiles(base, 0, tiles_, 0);
    return;
  }
  const int64_t per = (tiles_ + slots_ - 1) / slots_;
  cpu::parallel_tasks(slots_, threads, [&](int64_t t) {
    const int64_t b = t * per;
    run_tiles(base, b, std::min(tiles_, b + per), static_cast<int>(t));
  });
}

}  // namespace ember::graph
