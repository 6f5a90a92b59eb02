// Fused elementwise groups, tile by tile (Note [fused groups] in graph/fused.h).
#include "graph/fused.h"

#include <algorithm>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/parallel.h"
#include "ops/dispatch.h"

namespace ember::graph {
namespace {

// A softmax member's and a reduction member's attributes over a strip of whole rows, shape (rows, row).
const Attrs kStripRowDim = DimAttrs{1};
const Attrs kStripReduce = ReduceAttrs{Axes({1}), true};

// Row r of a strip operand of `rows` rows (its first stride steps from row to row).
void* row_of(const Operand& o, int64_t rows, int64_t r) {
  return rows == 1 ? o.data : static_cast<char*>(o.data) + r * (*o.strides)[0] * dtype_size(o.dtype);
}

bool normalizes(OpKind op) { return op == OpKind::kSoftmax || op == OpKind::kLogSoftmax; }

// 1 for a unary elementwise primitive, 2 for a binary one, else 0.
int primitive_arity(OpKind op) {
  switch (op) {
#define EMBER_UNARY_CASE(kind, ...) case OpKind::k##kind:
    EMBER_UNARY_PRIMITIVES(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
    return 1;
#define EMBER_BINARY_CASE(kind, ...) case OpKind::k##kind:
    EMBER_BINARY_PRIMITIVES(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
    return 2;
    default:
      return 0;
  }
}

}  // namespace

FusedGroup::FusedGroup(const Graph& g, const Node& fused) {
  // S: a reduction member's input, else the members' result (Note [fused reductions]).
  const Node* reducing = nullptr;
  for (const Node& m : fused.body) {
    if (fused_reduction(m)) reducing = &m;
  }
  const Shape& s = reducing != nullptr ? reducing->inputs[0].shape : fused.body.front().outputs[0].shape;
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
  tile_full_reduced_ = reduced_shape(tile_full_);
  tile_last_reduced_ = reduced_shape(tile_last_);
  const Strides scratch_strides = contiguous_strides(tile_full_);
  // A reduced value's block: contiguous over the tile's rows, read along a row as one value.
  Strides reduced_scratch_strides = contiguous_strides(tile_full_reduced_);
  reduced_scratch_strides[reduced_scratch_strides.size() - 1] = 0;
  // The buffers holding reduced values: the results of the members over reduced_shape(S).
  std::vector<bool> reduced_buffer(g.buffers.size(), false);
  if (reducing != nullptr) {
    for (const Node& m : fused.body) {
      if (m.outputs[0].shape != shape_) reduced_buffer[m.outputs[0].buffer] = true;
    }
  }

  auto add = [&](const View& v, bool over_reduced) {
    Operand_ o;
    o.buffer = v.buffer;
    o.offset = v.offset;
    o.dtype = v.dtype;
    o.device = g.buffers[v.buffer].device;
    o.scratch = g.buffers[v.buffer].kind == BufferKind::kScratch;
    o.over_reduced = over_reduced;
    o.reduced = reduced_buffer[v.buffer];
    // Views of a 0-d shape iterate as one element. A view over the reduced shape steps along S's
    // last dim as a broadcast.
    o.full_strides = v.shape.size() == 0 ? Strides({0}) : v.strides;
    if (over_reduced && o.full_strides.size() == ndim) o.full_strides[ndim - 1] = 0;
    if (o.scratch) {
      o.tile_strides = o.reduced ? reduced_scratch_strides : scratch_strides;
    } else {
      std::vector<int64_t> st(ndim - split_);
      for (int d = split_; d < ndim; ++d) st[d - split_] = o.full_strides[d];
      o.tile_strides = Strides(st);
    }
    o.contiguous_full = is_contiguous_layout(over_reduced ? tile_full_reduced_ : tile_full_, o.tile_strides);
    o.contiguous_last = is_contiguous_layout(over_reduced ? tile_last_reduced_ : tile_last_, o.tile_strides);
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
    member.reduces = fused_reduction(m);
    member.over_reduced = !member.reduces && reducing != nullptr && m.outputs[0].shape != shape_;
    if (normalizes(m.op) || member.reduces) {
      const int64_t dim = member.reduces ? ndim - 1 : std::get<DimAttrs>(m.attrs).dim;
      const int64_t tile_dim = dim - split_;
      EMBER_CHECK(s.size() > 0 && (tile_dim > 0 || (tile_dim == 0 && chunk_ == shape_[split_])),
                  "[compile] internal error: a ", op_name(m.op), " row does not fit a tile");
      if (member.reduces) {
        tile_attrs_.push_back(ReduceAttrs{Axes({tile_dim}), true});
      } else {
        tile_attrs_.push_back(DimAttrs{tile_dim});
      }
    }
    member.first = static_cast<int>(operands_.size());
    for (const View& v : m.inputs) add(v, member.over_reduced);
    for (const View& v : m.outputs) add(v, member.over_reduced || member.reduces);
    member.num_inputs = static_cast<int>(m.inputs.size());
    member.num_outputs = static_cast<int>(m.outputs.size());
    members_.push_back(member);
  }
  // Point the row-wise members at their tile attributes (stable now that the vector is complete).
  size_t next_tile_attrs = 0;
  for (Member& member : members_) {
    if (normalizes(member.op) || member.reduces) member.attrs = &tile_attrs_[next_tile_attrs++];
  }
  std::vector<int> value_of(g.buffers.size(), -1);
  for (Operand_& o : operands_) {
    if (!o.scratch) continue;
    if (scratch_at[o.buffer] < 0) {
      scratch_at[o.buffer] = scratch_bytes_;
      scratch_bytes_ += (tile_full_.numel() * dtype_size(o.dtype) + 63) / 64 * 64;
      value_of[o.buffer] = strip_values_++;
    }
    o.scratch_offset = scratch_at[o.buffer];
    o.value = value_of[o.buffer];
  }
  // The cost: every member over S; memory traffic only at the group's boundary.
  const double elements = static_cast<double>(shape_.numel());
  const double reduced_elements = static_cast<double>(reduced_shape(shape_).numel());
  for (size_t i = 0; i < members_.size(); ++i) {
    const OpKind op = fused.body[i].op;
    cost_.flops += (members_[i].over_reduced ? reduced_elements : elements) * op_info(op).flops_per_element;
  }
  auto stored = [](const View& v) {
    double n = 1;
    for (int d = 0; d < v.shape.size(); ++d) n *= v.strides[d] == 0 ? 1.0 : static_cast<double>(v.shape[d]);
    return n * static_cast<double>(dtype_size(v.dtype));
  };
  for (const View& v : fused.inputs) cost_.bytes += stored(v);
  for (const View& v : fused.outputs) cost_.bytes += stored(v);
  strips_ = plan_strips();
  // The units that tasks share out: tiles, or S's elements (rows) for strips.
  units_ = !strips_ ? tiles_ : row_ > 0 ? shape_.numel() / row_ : shape_.numel();
  slots_ = static_cast<int>(std::min<int64_t>(units_, cpu::num_threads() * cpu::kTasksPerThread));
  if (!strips_) {
    scratch_storage_.resize(static_cast<size_t>(scratch_bytes_ * slots_ + 64));
    scratch_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(scratch_storage_.data()) + 63) & ~uintptr_t{63});
  } else {
    strip_rows_.resize(static_cast<size_t>(slots_) * slot_stride<char*>());
  }
  call_operands_.resize(static_cast<size_t>(slots_) * slot_stride<Operand>());
}

void FusedGroup::run_tiles(const std::vector<char*>& base, int64_t begin, int64_t end, int slot) {
  Operand* ops = call_operands_.data() + static_cast<size_t>(slot) * slot_stride<Operand>();
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
      if (o.over_reduced) {
        op.shape = is_last ? &tile_last_reduced_ : &tile_full_reduced_;
      } else {
        op.shape = is_last ? &tile_last_ : &tile_full_;
      }
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

bool FusedGroup::plan_strips() {
  if (shape_.numel() <= 1) return false;
  // A softmax or reduction member works along S's last dim, or the group keeps tiles; a strip holds
  // whole rows.
  const int ndim = shape_.size();
  for (const Member& m : members_) {
    if (!normalizes(m.op) && !m.reduces) continue;
    const int64_t row = shape_[ndim - 1];
    // (m.attrs hold the dim counted in a tile, whose first dim is S's split_.)
    if ((!m.reduces && std::get<DimAttrs>(*m.attrs).dim != ndim - 1 - split_) || row < 2 || row > kRowStripElements) {
      return false;
    }
    row_ = row;
  }
  // S without its size-1 dims, and with each dim merged into the one before it where every operand
  // steps through the pair as through one dim (never S's last dim when strips hold whole rows).
  // Scratch values are contiguous over S, reduced ones over reduced_shape(S) (a broadcast along S's
  // last dim).
  const Strides scratch = contiguous_strides(shape_);
  Strides reduced_scratch = contiguous_strides(reduced_shape(shape_));
  reduced_scratch[ndim - 1] = 0;
  auto stride = [&](size_t k, int d) {
    const Operand_& o = operands_[k];
    return !o.scratch ? o.full_strides[d] : o.reduced ? reduced_scratch[d] : scratch[d];
  };
  loop_strides_.assign(operands_.size(), {});
  loop_ndim_ = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape_[d] == 1) continue;
    bool merge = loop_ndim_ > 0 && !(row_ > 0 && d == ndim - 1);
    for (size_t k = 0; k < operands_.size() && merge; ++k) {
      merge = loop_strides_[k][loop_ndim_ - 1] == stride(k, d) * shape_[d];
    }
    if (merge) {
      loop_sizes_[loop_ndim_ - 1] *= shape_[d];
    } else {
      loop_sizes_[loop_ndim_++] = shape_[d];
    }
    for (size_t k = 0; k < operands_.size(); ++k) loop_strides_[k][loop_ndim_ - 1] = stride(k, d);
  }
  // Every operand's step along the inner dim must let a strip be an operand that takes the unfused
  // kernel's code path: outputs unit-stride; inputs unit-stride, or a broadcast value where every
  // path gives the same bits (the binary ops with vector forms are IEEE-exact +, -, *, /, min and
  // max; a select and a conversion are exact).
  const int nd = loop_ndim_;
  // Along a member's row: S's inner dim, or for a member over the reduced shape, from row to row
  // (Note [fused reductions]: its strip is one row of values, one per row of S).
  auto inner = [&](const Member& m, int k) {
    const auto& steps = loop_strides_[static_cast<size_t>(k)];
    if (!m.over_reduced) return steps[nd - 1];
    if (nd < 2) return int64_t{1};  // one row
    return operands_[static_cast<size_t>(k)].scratch ? int64_t{1} : steps[nd - 2];
  };
  for (Member& m : members_) {
    const bool unary = primitive_arity(m.op) == 1, binary = primitive_arity(m.op) == 2;
    const DType in = operands_[m.first].dtype, out = operands_[m.first + m.num_inputs].dtype;
    if (unary && in == out) m.unary_row = cpu::simd::unary_row_fn(m.op, in);
    if (binary && in == out) m.binary_row = cpu::simd::binary_row_fn(m.op, in);
    const bool broadcast_ok = binary || m.op == OpKind::kWhere || m.op == OpKind::kCopy;
    for (int k = m.first; k < m.first + m.num_inputs; ++k) {
      if (inner(m, k) != 1 && !(inner(m, k) == 0 && broadcast_ok)) return false;
    }
    // A reduction writes its values contiguously, one per row.
    for (int k = m.first + m.num_inputs; k < m.first + m.num_inputs + m.num_outputs; ++k) {
      const bool along_rows = m.reduces && nd >= 2 && !operands_[static_cast<size_t>(k)].scratch;
      if ((m.reduces ? (along_rows ? loop_strides_[static_cast<size_t>(k)][nd - 2] : 1) : inner(m, k)) != 1) {
        return false;
      }
    }
  }
  // A strip's steps: along its row, and (strips of whole rows) from row to row.
  for (size_t k = 0; k < operands_.size(); ++k) {
    const int64_t along = loop_strides_[k][nd - 1];
    if (row_ == 0) {
      strip_strides_.push_back(Strides({along}));
    } else if (operands_[k].scratch) {
      strip_strides_.push_back(operands_[k].reduced ? Strides({1, 0}) : Strides({row_, 1}));
    } else {
      strip_strides_.push_back(Strides({nd >= 2 ? loop_strides_[k][nd - 2] : 0, along}));
    }
  }
  for (Member& m : members_) {
    if (normalizes(m.op)) m.attrs = &kStripRowDim;
    if (m.reduces) {
      m.attrs = &kStripReduce;
      m.reduce_row = cpu::simd::reduce_row_fn(m.op, operands_[m.first].dtype, operands_[m.first + 1].dtype);
    }
  }
  plan_chains();
  return true;
}

// Note [register chains]: runs of consecutive members over S in which each member after the first
// reads the result of the one before it. That value stays in registers, and is stored as well where
// the group keeps it (a result of the group, or a value another member reads).
void FusedGroup::plan_chains() {
  // The operand's step along a strip's row: 0 for a broadcast value.
  auto broadcast = [&](int k) { return strip_strides_[static_cast<size_t>(k)].back() == 0; };
  auto same = [&](int a, int b) {
    const Operand_ &x = operands_[static_cast<size_t>(a)], &y = operands_[static_cast<size_t>(b)];
    return x.buffer == y.buffer && x.offset == y.offset &&
           strip_strides_[static_cast<size_t>(a)] == strip_strides_[static_cast<size_t>(b)];
  };
  int buffers = 0;
  for (const Operand_& o : operands_) buffers = std::max(buffers, o.buffer + 1);
  std::vector<int> reads(static_cast<size_t>(buffers), 0);  // per buffer: member inputs reading it
  for (const Member& m : members_) {
    for (int k = m.first; k < m.first + m.num_inputs; ++k) {
      ++reads[static_cast<size_t>(operands_[static_cast<size_t>(k)].buffer)];
    }
  }
  auto chainable = [&](const Member& m) {
    if (m.reduces || m.over_reduced || !cpu::simd::chains(m.op) ||
        (m.unary_row == nullptr && m.binary_row == nullptr)) {
      return false;
    }
    if (cpu::simd::chain_row_fn(operands_[static_cast<size_t>(m.first)].dtype) == nullptr) return false;
    return m.unary_row != nullptr || !(broadcast(m.first) && broadcast(m.first + 1));
  };
  // How many of member m's inputs read operand `value`'s view.
  auto reading = [&](const Member& m, int value) {
    int count = 0;
    for (int k = m.first; k < m.first + m.num_inputs; ++k) count += same(k, value) ? 1 : 0;
    return count;
  };
  // The link of member `m`, which reads value operand `value`.
  auto link = [&](const Member& m, int value) {
    if (m.unary_row != nullptr) return ChainLink{m.op};
    if (reading(m, value) == 2) return ChainLink{m.op, -1, true};
    const bool first = same(m.first, value);
    return ChainLink{m.op, first ? m.first + 1 : m.first, first};
  };
  const int count = static_cast<int>(members_.size());
  for (int i = 0; i < count; ++i) {
    const Member& head = members_[static_cast<size_t>(i)];
    if (!chainable(head)) continue;
    Chain chain;
    chain.first = i;
    chain.fn = cpu::simd::chain_row_fn(operands_[static_cast<size_t>(head.first)].dtype);
    if (head.unary_row != nullptr) {
      chain.in = head.first;
      chain.links.push_back(ChainLink{head.op});
    } else if (same(head.first, head.first + 1)) {
      chain.in = head.first;
      chain.links.push_back(ChainLink{head.op, -1, true});
    } else {
      const bool swap = broadcast(head.first);  // the value comes from the row operand
      chain.in = swap ? head.first + 1 : head.first;
      chain.links.push_back(ChainLink{head.op, swap ? head.first : head.first + 1, !swap});
    }
    int last = i;
    while (last + 1 < count && static_cast<int>(chain.links.size()) < kMaxChain) {
      const Member &prev = members_[static_cast<size_t>(last)], &next = members_[static_cast<size_t>(last + 1)];
      if (!chainable(next) ||
          operands_[static_cast<size_t>(next.first)].dtype != operands_[static_cast<size_t>(head.first)].dtype)
        break;
      const int value = prev.first + prev.num_inputs;
      const Operand_& v = operands_[static_cast<size_t>(value)];
      const int read = reading(next, value);
      if (read == 0 || v.reduced) break;
      // The value is stored as well where any other member may read it.
      if (!v.scratch || reads[static_cast<size_t>(v.buffer)] != read) chain.links.back().stored = value;
      chain.links.push_back(link(next, value));
      ++last;
    }
    const Member& tail = members_[static_cast<size_t>(last)];
    chain.out = tail.first + tail.num_inputs;
    // A row sum of the last result ends the chain: summed in registers, in the order of its row function.
    if (last + 1 < count) {
      const Member& next = members_[static_cast<size_t>(last + 1)];
      const Operand_& v = operands_[static_cast<size_t>(chain.out)];
      if (next.reduces && next.op == OpKind::kSum && next.reduce_row != nullptr && same(next.first, chain.out) &&
          operands_[static_cast<size_t>(next.first + 1)].dtype == v.dtype) {
        if (v.scratch && reads[static_cast<size_t>(v.buffer)] == 1) chain.out = -1;
        chain.sum = next.first + 1;
        ++last;
      }
    }
    if (last == i) continue;
    chain.last = last;
    members_[static_cast<size_t>(i)].chain = static_cast<int>(chains_.size());
    chains_.push_back(std::move(chain));
    i = last;
  }
}

void FusedGroup::run_chain(const Chain& chain, const Operand* ops, int64_t rows, int64_t n) const {
  // The steps of row 0, and each pointer's step from row to row (as row_of takes it).
  cpu::simd::ChainStep steps[kMaxChain];
  int64_t other_step[kMaxChain], store_step[kMaxChain];
  auto step = [rows](const Operand& o) { return rows == 1 ? 0 : (*o.strides)[0] * dtype_size(o.dtype); };
  const int count = static_cast<int>(chain.links.size());
  for (int k = 0; k < count; ++k) {
    const ChainLink& l = chain.links[static_cast<size_t>(k)];
    steps[k] = cpu::simd::ChainStep{.op = l.op,
                                    .other = l.other < 0 ? nullptr : ops[l.other].data,
                                    .other_scalar = l.other >= 0 && ops[l.other].strides->back() == 0,
                                    .value_first = l.value_first,
                                    .store = l.stored < 0 ? nullptr : ops[l.stored].data};
    other_step[k] = l.other < 0 ? 0 : step(ops[l.other]);
    store_step[k] = l.stored < 0 ? 0 : step(ops[l.stored]);
  }
  char* out = chain.out < 0 ? nullptr : static_cast<char*>(ops[chain.out].data);
  const char* in = static_cast<const char*>(ops[chain.in].data);
  char* sum = chain.sum < 0 ? nullptr : static_cast<char*>(ops[chain.sum].data);
  const int64_t out_step = chain.out < 0 ? 0 : step(ops[chain.out]), in_step = step(ops[chain.in]),
                sum_step = chain.sum < 0 ? 0 : step(ops[chain.sum]);
  for (int64_t r = 0; r < rows; ++r) {
    chain.fn(out, in, steps, count, n, sum);
    for (int k = 0; k < count; ++k) {
      if (steps[k].other != nullptr) steps[k].other = static_cast<const char*>(steps[k].other) + other_step[k];
      if (steps[k].store != nullptr) steps[k].store = static_cast<char*>(steps[k].store) + store_step[k];
    }
    if (out != nullptr) out += out_step;
    in += in_step;
    if (sum != nullptr) sum += sum_step;
  }
}

// One strip, `rows` rows of n elements: each member in turn (Note [strip fusion]).
void FusedGroup::run_strip(Operand* ops, int64_t strip_rows, int64_t strip_n) const {
  for (size_t i = 0; i < members_.size(); ++i) {
    const Member& m = members_[i];
    if (m.chain >= 0) [[unlikely]] {
      const Chain& chain = chains_[static_cast<size_t>(m.chain)];
      run_chain(chain, ops, strip_rows, strip_n);
      i = static_cast<size_t>(chain.last);
      continue;
    }
    const Operand* io = ops + m.first;
    // A member over the reduced shape takes the strip's (rows, 1) values as one row of `rows`.
    const int64_t rows = m.over_reduced ? 1 : strip_rows, n = m.over_reduced ? strip_rows : strip_n;
    const size_t along = m.over_reduced ? 0 : io->strides->size() - 1;
    // The vector row functions, row by row, where the op has them for this dtype.
    auto at = [rows](const Operand& o, int64_t r) { return row_of(o, rows, r); };
    auto broadcast = [along](const Operand& o) { return (*o.strides)[along] == 0; };
    if (m.unary_row != nullptr) {
      for (int64_t r = 0; r < rows; ++r) m.unary_row(at(io[1], r), at(io[0], r), n);
      continue;
    }
    if (m.binary_row != nullptr && !(broadcast(io[0]) && broadcast(io[1]))) {
      for (int64_t r = 0; r < rows; ++r) {
        m.binary_row(at(io[2], r), at(io[0], r), broadcast(io[0]), at(io[1], r), broadcast(io[1]), n);
      }
      continue;
    }
    if (m.reduce_row != nullptr) {  // each row's value as the kernel over all the strip's rows gives it
      for (int64_t r = 0; r < rows; ++r) m.reduce_row(at(io[1], r), at(io[0], r), n);
      continue;
    }
    // Else the member's kernel over the strip.
    m.fn(KernelCall{m.op, *m.attrs, std::span<const Operand>(io, m.num_inputs),
                    std::span<const Operand>(io + m.num_inputs, m.num_outputs)});
  }
}

namespace {

// Each scratch value's strip buffer (`count` of `bytes` each, 64-byte aligned) in this thread's
// grow-only block.
char* strip_buffers(int count, size_t bytes) {
  thread_local std::vector<char> block;
  if (block.size() < bytes * count + 64) block.resize(bytes * count + 64);
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(block.data()) + 63) & ~uintptr_t{63});
}

}  // namespace

// Elements [begin, end) of S, strip by strip along the inner dim.
void FusedGroup::run_strips(const std::vector<char*>& base, int64_t begin, int64_t end, int slot) {
  const Shape full({kStripElements});
  Shape partial;
  const size_t value_bytes = static_cast<size_t>(kStripElements) * sizeof(double);
  char* const values = strip_buffers(strip_values_, value_bytes);
  Operand* ops = call_operands_.data() + static_cast<size_t>(slot) * slot_stride<Operand>();
  char** row = strip_rows_.data() + static_cast<size_t>(slot) * slot_stride<char*>();
  for (size_t k = 0; k < operands_.size(); ++k) {
    const Operand_& o = operands_[k];
    ops[k] = Operand{
        .dtype = o.dtype, .device = o.device, .strides = &strip_strides_[k], .contiguous = strip_strides_[k][0] == 1};
    if (o.scratch) ops[k].data = values + o.value * value_bytes;
  }
  const int nd = loop_ndim_;
  const int64_t inner = loop_sizes_[nd - 1];
  int64_t index[kMaxDims] = {};
  int64_t linear = begin / inner, column = begin % inner;
  for (int d = nd - 2; d >= 0; --d) {
    index[d] = linear % loop_sizes_[d];
    linear /= loop_sizes_[d];
  }
  for (int64_t position = begin; position < end;) {
    const int64_t length = std::min(inner - column, end - position);
    for (size_t k = 0; k < operands_.size(); ++k) {
      const Operand_& o = operands_[k];
      if (o.scratch) continue;
      int64_t elements = column * loop_strides_[k][nd - 1];
      for (int d = 0; d < nd - 1; ++d) elements += index[d] * loop_strides_[k][d];
      row[k] = base[o.buffer] + o.offset + elements * dtype_size(o.dtype);
    }
    for (int64_t s = 0; s < length; s += kStripElements) {
      const int64_t n = std::min(kStripElements, length - s);
      if (n != kStripElements) partial = Shape({n});
      const Shape* shape = n == kStripElements ? &full : &partial;
      for (size_t k = 0; k < operands_.size(); ++k) {
        ops[k].shape = shape;
        if (!operands_[k].scratch) ops[k].data = row[k] + s * loop_strides_[k][nd - 1] * dtype_size(operands_[k].dtype);
      }
      run_strip(ops, 1, n);
    }
    position += length;
    column = 0;
    for (int d = nd - 2; d >= 0; --d) {
      if (++index[d] < loop_sizes_[d]) break;
      index[d] = 0;
    }
  }
}

// Rows [begin, end) of S (row_ elements each), a strip of whole rows at a time: consecutive rows
// along the loop's second-to-last dim.
void FusedGroup::run_rows(const std::vector<char*>& base, int64_t begin, int64_t end, int slot) {
  const int64_t per_strip = std::max<int64_t>(1, kRowStripElements / row_);
  const size_t value_bytes = static_cast<size_t>(per_strip * row_) * sizeof(double);
  char* const values = strip_buffers(strip_values_, value_bytes);
  Operand* ops = call_operands_.data() + static_cast<size_t>(slot) * slot_stride<Operand>();
  for (size_t k = 0; k < operands_.size(); ++k) {
    const Operand_& o = operands_[k];
    ops[k] = Operand{.dtype = o.dtype, .device = o.device, .strides = &strip_strides_[k]};
    if (o.scratch) ops[k].data = values + o.value * value_bytes;
  }
  const int nd = loop_ndim_;
  const int64_t rows_per_block = nd >= 2 ? loop_sizes_[nd - 2] : 1;  // the consecutive rows
  Shape shape, reduced;
  for (int64_t row = begin; row < end;) {
    const int64_t first = row % rows_per_block;
    const int64_t rows = std::min({per_strip, rows_per_block - first, end - row});
    if (shape.size() == 0 || shape[0] != rows) {
      shape = Shape({rows, row_});
      reduced = Shape({rows, 1});
    }
    int64_t index[kMaxDims] = {};
    int64_t rest = row / rows_per_block;
    for (int d = nd - 3; d >= 0; --d) {
      index[d] = rest % loop_sizes_[d];
      rest /= loop_sizes_[d];
    }
    for (size_t k = 0; k < operands_.size(); ++k) {
      Operand& op = ops[k];
      op.shape = operands_[k].over_reduced ? &reduced : &shape;
      op.contiguous = is_contiguous_layout(*op.shape, strip_strides_[k]);
      const Operand_& o = operands_[k];
      if (o.scratch) continue;
      int64_t elements = nd >= 2 ? first * loop_strides_[k][nd - 2] : 0;
      for (int d = 0; d < nd - 2; ++d) elements += index[d] * loop_strides_[k][d];
      op.data = base[o.buffer] + o.offset + elements * dtype_size(o.dtype);
    }
    run_strip(ops, rows, row_);
    row += rows;
  }
}

void FusedGroup::run(const std::vector<char*>& base) {
  auto run_range = [&](int64_t begin, int64_t end, int slot) {
    if (!strips_) {
      run_tiles(base, begin, end, slot);
    } else if (row_ > 0) {
      run_rows(base, begin, end, slot);
    } else {
      run_strips(base, begin, end, slot);
    }
  };
  const int threads = shape_.numel() < cpu::kElementwiseGrain ? 1 : std::min(cpu::num_threads(), slots_);
  if (threads <= 1 || slots_ <= 1) {
    run_range(0, units_, 0);
    return;
  }
  const int64_t per = (units_ + slots_ - 1) / slots_;
  cpu::parallel_tasks(slots_, threads, [&](int64_t t) {
    const int64_t b = t * per;
    if (b < units_) run_range(b, std::min(units_, b + per), static_cast<int>(t));
  });
}

}  // namespace ember::graph
