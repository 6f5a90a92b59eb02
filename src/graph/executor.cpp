// The executor (Note [executor] in graph/executor.h).
#include "graph/executor.h"

#include <cstring>

#include "core/allocator.h"
#include "core/tensor_impl.h"
#include "kernels/cpu/parallel.h"
#include "ops/dispatch.h"
#include "ops/factory.h"

namespace ember::graph {
Executable::Executable(Graph graph, const MemoryPlan& plan) : graph_(std::move(graph)), plan_(plan) {
  Graph& g = graph_;
  base_.assign(g.buffers.size(), nullptr);
  Device arena_device = kCPU;
  for (const Buffer& b : g.buffers) {
    if (b.kind == BufferKind::kTemp && b.arena_offset >= 0) arena_device = b.device;
  }
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    Buffer& buf = g.buffers[b];
    switch (buf.kind) {
      case BufferKind::kState:
      case BufferKind::kConstant:
        base_[b] = static_cast<char*>(buf.storage->data());
        break;
      case BufferKind::kTemp:
        buf.storage.reset();  // the traced block goes back to the caching allocator
        break;
      case BufferKind::kOutput:
        output_buffers_.push_back(static_cast<int>(b));
        buf.storage.reset();
        break;
      case BufferKind::kScratch:
        buf.storage.reset();
        break;
      case BufferKind::kArgument:
        break;
    }
  }
  output_storage_.resize(g.buffers.size());
  drawing_nodes_.resize(g.draws.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].draw >= 0) drawing_nodes_[g.nodes[i].draw].push_back(static_cast<int>(i));
  }

  size_t num_operands = 0, num_calls = 0;
  for (const Node& n : g.nodes) {
    if (n.kind == NodeKind::kKernel) {
      num_operands += n.inputs.size() + n.outputs.size();
      ++num_calls;
    }
  }
  // State and constants no node writes: their kernels may keep derived forms on their storage
  // (a convolution's packed weight, Note [derived forms]), which a write from outside retires.
  // A buffer the plan writes itself gets none: its version does not move when the plan writes.
  std::vector<bool> written(g.buffers.size(), false);
  const auto mark_written = [&](const Node& n, const auto& self) -> void {
    for (const View& v : n.outputs) {
      if (v.defined()) written[v.buffer] = true;
    }
    for (const Node& member : n.body) self(member, self);
  };
  for (const Node& n : g.nodes) mark_written(n, mark_written);
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    const Buffer& buf = g.buffers[b];
    const bool outside = buf.kind == BufferKind::kArgument ||
                         ((buf.kind == BufferKind::kState || buf.kind == BufferKind::kConstant) && buf.storage);
    if (written[b] && outside && !buf.guard_version) written_outside_.push_back(static_cast<int>(b));
  }
  operands_.reserve(num_operands);
  sources_.reserve(num_operands);
  calls_.reserve(num_calls);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    Step step;
    step.kind = n.kind;
    step.node = static_cast<int>(i);
    step.host_attrs = n.host_attrs != nullptr;
    if (n.kind == NodeKind::kKernel) {
      step.first_operand = static_cast<int>(operands_.size());
      Device device = kCPU;
      auto add = [&](const View& v) {
        Operand o;
        if (v.defined()) {
          o.dtype = v.dtype;
          o.device = g.buffers[v.buffer].device;
          device = o.device;
          o.shape = &v.shape;
          o.strides = &v.strides;
          o.contiguous = v.contiguous();
          const Buffer& buffer = g.buffers[v.buffer];
          if ((buffer.kind == BufferKind::kState || buffer.kind == BufferKind::kConstant) && !written[v.buffer]) {
            o.storage = buffer.storage.get();
          }
          sources_.emplace_back(v.buffer, v.offset);
        } else {
          sources_.emplace_back(-1, 0);
        }
        operands_.push_back(o);
      };
      for (const View& v : n.inputs) add(v);
      for (const View& v : n.outputs) add(v);
      step.num_operands = static_cast<int>(n.inputs.size() + n.outputs.size());
      step.fn = dispatch::kernel_table().at(n.op, device.type).fn;
      EMBER_CHECK(step.fn != nullptr, "[compile] ", op_name(n.op), " is not implemented on ", device);
      step.call = static_cast<int>(calls_.size());
      calls_.emplace_back(KernelCall{
          n.op, n.attrs, std::span<const Operand>(operands_.data() + step.first_operand, n.inputs.size()),
          std::span<const Operand>(operands_.data() + step.first_operand + n.inputs.size(), n.outputs.size())});
    } else if (n.kind == NodeKind::kFused) {
      step.fused = static_cast<int>(fused_.size());
      fused_.push_back(std::make_unique<FusedGroup>(g, n));
    }
    steps_.push_back(step);
  }
  plan_multi_updates();
  plan_interleaves();
  // A product run head by head never fills its buffer (a block per task does): it takes no arena,
  // only a block of its own on a call with observers, which run it whole (bind).
  if (!interleaves_.empty()) {
    for (const auto& pair : interleaves_) g.buffers[static_cast<size_t>(pair->buffer)].kind = BufferKind::kScratch;
    plan_ = plan_memory(g);
  }
  if (plan_.arena_bytes > 0) arena_ = allocate_storage(plan_.arena_bytes, arena_device);
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    // (Empty temporaries take no arena; there may be none.)
    const Buffer& buf = g.buffers[b];
    if (buf.kind == BufferKind::kTemp && buf.arena_offset >= 0 && arena_ != nullptr)
      base_[b] = static_cast<char*>(arena_->data()) + buf.arena_offset;
  }
}

void Executable::plan_interleaves() {
  const Graph& g = graph_;
  for (size_t i = 0; i + 1 < steps_.size(); ++i) {
    Step &product_step = steps_[i], &group_step = steps_[i + 1];
    if (product_step.kind != NodeKind::kKernel || group_step.kind != NodeKind::kFused || product_step.multi >= 0 ||
        product_step.host_attrs)
      continue;
    const Node& n = g.nodes[product_step.node];
    if (n.op != OpKind::kMatmul || n.inputs.size() < 2 || n.outputs.size() != 1) continue;
    bool extra = false;
    for (size_t k = 2; k < n.inputs.size(); ++k) extra = extra || n.inputs[k].defined();
    const View &a = n.inputs[0], &b = n.inputs[1], &out = n.outputs[0];
    const int nd = out.shape.size();
    if (extra || nd < 3 || a.shape.size() != nd || b.shape.size() != nd || !covers(g, out) ||
        g.buffers[out.buffer].kind != BufferKind::kTemp || g.buffers[out.buffer].device.type != DeviceType::kCPU)
      continue;
    const FusedGroup& group = *fused_[group_step.fused];
    const int64_t rows = out.shape[nd - 2], cols = out.shape[nd - 1];
    if (group.row() != cols || group.shape() != out.shape) continue;
    // Only the group reads the product.
    bool other_reader = false;
    for (size_t j = 0; j < g.nodes.size() && !other_reader; ++j) {
      if (j == static_cast<size_t>(group_step.node)) continue;
      for_each_read(g.nodes[j], [&](const View& v) { other_reader = other_reader || v.buffer == out.buffer; });
    }
    for (const View& v : g.outputs) other_reader = other_reader || v.buffer == out.buffer;
    for (const GradSlot& slot : g.grad_slots) other_reader = other_reader || slot.buffer == out.buffer;
    if (other_reader) continue;
    // The factors' leading dims are the product's or broadcast (size 1).
    bool aligned = true;
    for (int d = 0; d < nd - 2; ++d) {
      for (const View* f : {&a, &b}) aligned = aligned && (f->shape[d] == out.shape[d] || f->shape[d] == 1);
    }
    if (!aligned) continue;
    auto pair = std::make_unique<Interleave>();
    pair->step = static_cast<int>(i);
    pair->buffer = out.buffer;
    pair->rows = rows;
    pair->row_bytes = cols * dtype_size(out.dtype);
    pair->heads = out.shape.numel() / std::max<int64_t>(rows * cols, 1);
    for (int64_t h = 0; h < pair->heads; ++h) {
      std::array<int64_t, 2> offset{};
      int64_t rest = h;
      for (int d = nd - 3; d >= 0; --d) {
        const int64_t index = rest % out.shape[d];
        rest /= out.shape[d];
        if (a.shape[d] != 1) offset[0] += index * a.strides[d] * dtype_size(a.dtype);
        if (b.shape[d] != 1) offset[1] += index * b.strides[d] * dtype_size(b.dtype);
      }
      pair->offsets.push_back(offset);
    }
    const View* views[3] = {&a, &b, &out};
    for (int k = 0; k < 3; ++k) {
      pair->shapes[k] = Shape({views[k]->shape[nd - 2], views[k]->shape[nd - 1]});
      pair->strides[k] = Strides({views[k]->strides[nd - 2], views[k]->strides[nd - 1]});
    }
    pair->tasks = static_cast<int>(std::min<int64_t>({cpu::num_threads(), group.slots(), pair->heads}));
    pair->num_operands = product_step.num_operands;
    pair->operands.resize(static_cast<size_t>(pair->tasks * pair->num_operands));
    for (int t = 0; t < pair->tasks; ++t) {
      Operand* ops = pair->operands.data() + static_cast<size_t>(t * pair->num_operands);
      for (int k = 0; k < pair->num_operands; ++k)
        ops[k] = operands_[static_cast<size_t>(product_step.first_operand + k)];
      const int out_index = static_cast<int>(n.inputs.size());
      for (int k = 0; k < 3; ++k) {
        Operand& o = ops[k < 2 ? k : out_index];
        o.shape = &pair->shapes[k];
        o.strides = &pair->strides[k];
        o.contiguous = is_contiguous_layout(pair->shapes[k], pair->strides[k]);
        o.storage = nullptr;
      }
      pair->calls.push_back(KernelCall{n.op, n.attrs, std::span<const Operand>(ops, n.inputs.size()),
                                       std::span<const Operand>(ops + n.inputs.size(), 1)});
      pair->products.push_back(allocate_storage(rows * pair->row_bytes, kCPU));
    }
    pair->bases.resize(static_cast<size_t>(pair->tasks));
    plan_masked_product(*pair, g.nodes[group_step.node]);
    product_step.interleave = static_cast<int>(interleaves_.size());
    group_step.in_pair = true;
    interleaves_.push_back(std::move(pair));
    ++i;
  }
}

int Executable::masked_products() const {
  int count = 0;
  for (const auto& pair : interleaves_) count += pair->masked != nullptr ? 1 : 0;
  return count;
}

std::pair<int, int> Executable::register_chains() const {
  std::pair<int, int> count{0, 0};
  for (const auto& group : fused_) {
    count.first += group->chains();
    count.second += group->chained_members();
  }
  return count;
}

double Executable::masked_share() const {
  double computed = 0, all = 0;
  for (const auto& pair : interleaves_) {
    if (!pair->masked) continue;
    for (int64_t n : pair->masked->elements) computed += static_cast<double>(n);
    all += static_cast<double>(pair->heads * pair->rows * pair->masked->args.n);
  }
  return all > 0 ? computed / all : 1.0;
}

void Executable::plan_masked_product(Interleave& pair, const Node& group) {
  const Graph& g = graph_;
  const Node& product = g.nodes[steps_[static_cast<size_t>(pair.step)].node];
  const MatmulAttrs& attrs = std::get<MatmulAttrs>(product.attrs);
  const View& out = product.outputs[0];
  const Shape& s = out.shape;
  const int nd = s.size();
  if ((out.dtype != kFloat32 && out.dtype != kFloat64) || attrs.beta != 0 || attrs.activation != Activation::kNone)
    return;
  // The values derived from the product by elementwise members, up to the select that ends them.
  std::vector<char> derived(g.buffers.size(), 0), written(g.buffers.size(), 0);
  derived[static_cast<size_t>(pair.buffer)] = 1;
  const Node* select = nullptr;
  bool skip_when = true;
  for (const Node& m : group.body) {
    bool reads = false, same_view = true;
    for_each_read(m, [&](const View& v) {
      reads = reads || derived[static_cast<size_t>(v.buffer)] != 0;
      same_view = same_view && (v.buffer != pair.buffer || v == out);  // the product's positions are the mask's
    });
    if (!same_view) return;
    for_each_write(m, [&](const View& v) { written[static_cast<size_t>(v.buffer)] = 1; });
    if (!reads) continue;
    if (m.op == OpKind::kWhere && select == nullptr && derived[static_cast<size_t>(m.inputs[0].buffer)] == 0 &&
        derived[static_cast<size_t>(m.inputs[1].buffer)] != derived[static_cast<size_t>(m.inputs[2].buffer)] &&
        derived[static_cast<size_t>(m.outputs[0].buffer)] == 0) {
      select = &m;
      skip_when = derived[static_cast<size_t>(m.inputs[1].buffer)] == 0;  // a set mask picks the first
      continue;
    }
    if (!elementwise(m) || m.outputs[0].shape != s) return;  // a reduction or softmax reads them
    for (const View& v : m.outputs) derived[static_cast<size_t>(v.buffer)] = 1;
  }
  if (select == nullptr) return;
  for (size_t b = 0; b < derived.size(); ++b) {
    if (derived[b] != 0 && static_cast<int>(b) != pair.buffer && g.buffers[b].kind != BufferKind::kScratch) return;
  }
  const View& mask = select->inputs[0];
  if (mask.dtype != kBool || mask.shape != s || mask.strides[nd - 1] != 1 ||
      g.buffers[mask.buffer].kind == BufferKind::kScratch || written[static_cast<size_t>(mask.buffer)] != 0)
    return;
  auto masked = std::make_unique<MaskedProduct>();
  masked->buffer = mask.buffer;
  masked->offset = mask.offset;
  masked->skip_when = skip_when;
  for (int64_t h = 0; h < pair.heads; ++h) {
    int64_t offset = 0, rest = h;
    for (int d = nd - 3; d >= 0; --d) {
      offset += rest % s[d] * mask.strides[d];
      rest /= s[d];
    }
    masked->head_offsets.push_back(offset);
  }
  masked->row_stride = mask.strides[nd - 2];
  // Blocks of whole register tiles, about 64 rows: fewer rows skip more of a causal mask's terms,
  // and pay a GEMM call (packing its B block) per block.
  const int64_t tile = cpu::gemm_tile_rows();
  masked->block_rows = std::min(pair.rows, (64 + tile - 1) / tile * tile);
  cpu::GemmArgs& args = masked->args;
  args.dtype = out.dtype;
  args.m = pair.rows;
  args.n = s[nd - 1];
  args.k = product.inputs[0].shape[nd - 1];
  args.a_row_stride = pair.strides[0][0];
  args.a_col_stride = pair.strides[0][1];
  args.b_row_stride = pair.strides[1][0];
  args.b_col_stride = pair.strides[1][1];
  args.c_row_stride = pair.strides[2][0];
  args.c_col_stride = pair.strides[2][1];
  args.alpha = attrs.alpha;
  args.path = cpu::gemm_path(args);  // every block takes it: the whole head's bits
  if (args.path == cpu::GemmPath::kEmpty || args.path == cpu::GemmPath::kNoTerms || args.path == cpu::GemmPath::kOther)
    return;
  masked->read.assign(static_cast<size_t>(pair.tasks), nullptr);
  masked->elements.assign(static_cast<size_t>(pair.tasks), 0);
  masked->columns.resize(static_cast<size_t>(pair.tasks));
  pair.masked = std::move(masked);
}

namespace {

// Does the word of 8 mask bytes hold one the product is needed for (one that is not `skip_when`)?
inline bool needs_any(uint64_t word, bool skip_when) {
  if (!skip_when) return word != 0;
  return ((word - 0x0101010101010101ULL) & ~word & 0x8080808080808080ULL) != 0;  // a zero byte
}

// The columns [first, last + 1) of a mask row of n bytes between the first and the last the product
// is needed for; {n, 0} when there is none.
std::array<int64_t, 2> needed_columns(const uint8_t* row, int64_t n, bool skip_when) {
  const auto needed = [&](int64_t j) { return (row[j] != 0) != skip_when; };
  int64_t first = 0;
  for (uint64_t word = 0; first + 8 <= n; first += 8) {
    std::memcpy(&word, row + first, 8);
    if (needs_any(word, skip_when)) break;
  }
  while (first < n && !needed(first)) ++first;
  if (first == n) return {n, 0};
  int64_t end = n;
  for (uint64_t word = 0; end - 8 > first; end -= 8) {
    std::memcpy(&word, row + end - 8, 8);
    if (needs_any(word, skip_when)) break;
  }
  while (!needed(end - 1)) --end;
  return {first, end};
}

}  // namespace

void Executable::multiply_unmasked(Interleave& pair, int task, int64_t head, const char* a, const char* b,
                                   char* product) {
  MaskedProduct& masked = *pair.masked;
  cpu::GemmArgs args = masked.args;
  const int64_t rows = args.m, cols = args.n, block = masked.block_rows;
  const char* mask =
      base_[static_cast<size_t>(masked.buffer)] + masked.offset + masked.head_offsets[static_cast<size_t>(head)];
  std::vector<std::array<int64_t, 2>>& columns = masked.columns[static_cast<size_t>(task)];
  if (masked.read[static_cast<size_t>(task)] != mask) {  // heads sharing a mask read it once a call
    masked.read[static_cast<size_t>(task)] = mask;
    columns.clear();
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      std::array<int64_t, 2> used{cols, 0};
      for (int64_t r = r0; r < std::min(rows, r0 + block) && !(used[0] == 0 && used[1] == cols); ++r) {
        const auto row =
            needed_columns(reinterpret_cast<const uint8_t*>(mask + r * masked.row_stride), cols, masked.skip_when);
        used = {std::min(used[0], row[0]), std::max(used[1], row[1])};
      }
      columns.push_back(used);
    }
  }
  const int64_t size = static_cast<int64_t>(dtype_size(args.dtype));
  int64_t elements = 0;
  for (size_t i = 0; i < columns.size(); ++i) {
    const int64_t r0 = static_cast<int64_t>(i) * block;
    const auto [begin, end] = columns[i];
    if (end <= begin) continue;
    args.m = std::min(rows, r0 + block) - r0;
    args.n = end - begin;
    args.a = a + r0 * args.a_row_stride * size;
    args.b = b + begin * args.b_col_stride * size;
    args.c = product + (r0 * args.c_row_stride + begin * args.c_col_stride) * size;
    cpu::gemm(args);  // inside a task: on this thread
    elements += args.m * args.n;
  }
  masked.elements[static_cast<size_t>(task)] += elements;
}

void Executable::run_interleaved(Interleave& pair) {
  const Step& product_step = steps_[static_cast<size_t>(pair.step)];
  FusedGroup& group = *fused_[steps_[static_cast<size_t>(pair.step) + 1].fused];
  const Operand* whole = operands_.data() + product_step.first_operand;
  const int out_index = static_cast<int>(pair.calls[0].inputs.size());
  cpu::parallel_tasks(pair.tasks, pair.tasks, [&](int64_t t) {
    Operand* ops = pair.operands.data() + static_cast<size_t>(t * pair.num_operands);
    std::vector<char*>& base = pair.bases[static_cast<size_t>(t)];
    base = base_;
    char* product = static_cast<char*>(pair.products[static_cast<size_t>(t)]->data());
    ops[out_index].data = product;
    const int64_t first = t * pair.heads / pair.tasks, last = (t + 1) * pair.heads / pair.tasks;
    if (pair.masked) {  // this call's mask is unread
      pair.masked->read[static_cast<size_t>(t)] = nullptr;
      pair.masked->elements[static_cast<size_t>(t)] = 0;
    }
    for (int64_t h = first; h < last; ++h) {
      ops[0].data = static_cast<char*>(whole[0].data) + pair.offsets[static_cast<size_t>(h)][0];
      ops[1].data = static_cast<char*>(whole[1].data) + pair.offsets[static_cast<size_t>(h)][1];
      if (pair.masked) {
        multiply_unmasked(pair, static_cast<int>(t), h, static_cast<const char*>(ops[0].data),
                          static_cast<const char*>(ops[1].data), product);
      } else {
        product_step.fn(pair.calls[static_cast<size_t>(t)]);  // inside a task: on this thread
      }
      // The group finds head h's rows (h * rows on) at the block: its base, moved back by as much.
      base[static_cast<size_t>(pair.buffer)] = reinterpret_cast<char*>(
          reinterpret_cast<uintptr_t>(product) - static_cast<uintptr_t>(h * pair.rows * pair.row_bytes));
      group.run_rows_on(base, h * pair.rows, (h + 1) * pair.rows, static_cast<int>(t));
    }
  });
}

void Executable::plan_multi_updates() {
  const auto update = [&](const Step& step) {
    if (step.kind != NodeKind::kKernel) return false;
    const Node& n = graph_.nodes[step.node];
    if (n.op != OpKind::kSgdStep && n.op != OpKind::kAdamStep && n.op != OpKind::kAdagradStep &&
        n.op != OpKind::kRmspropStep) {
      return false;
    }
    const int64_t numel = n.outputs[0].shape.numel();
    for (int k = step.first_operand; k < step.first_operand + step.num_operands; ++k) {
      const Operand& o = operands_[k];
      if (o.defined() && (o.device.type != DeviceType::kCPU || !o.contiguous || o.numel() != numel)) return false;
    }
    return true;
  };
  for (size_t i = 0; i < steps_.size();) {
    size_t end = i;
    while (end < steps_.size() && update(steps_[end]) &&
           graph_.nodes[steps_[end].node].op == graph_.nodes[steps_[i].node].op) {
      ++end;
    }
    if (end - i < 2) {
      i = std::max(end, i + 1);
      continue;
    }
    MultiUpdate multi;
    for (size_t s = i; s < end; ++s) {
      steps_[s].multi = static_cast<int>(multi_.size());
      multi.steps.push_back(static_cast<int>(s));
      const Step& step = steps_[s];
      const int64_t numel = graph_.nodes[step.node].outputs[0].shape.numel();  // the parameter's
      multi.elements += numel;
      for (int64_t b = 0; b < numel; b += kUpdatePiece) {
        multi.pieces.push_back({static_cast<int>(s), b, Shape({std::min(kUpdatePiece, numel - b)}),
                                static_cast<int>(piece_operands_.size())});
        piece_operands_.resize(piece_operands_.size() + static_cast<size_t>(step.num_operands));
      }
    }
    multi_.push_back(std::move(multi));
    i = end;
  }
  // Each piece's call, over its operands (pointed at when a run starts).
  static const Strides kUnit({1});
  for (MultiUpdate& multi : multi_) {
    multi.first_call = static_cast<int>(piece_calls_.size());
    for (const MultiUpdate::Piece& piece : multi.pieces) {
      const Step& step = steps_[piece.step];
      const Node& n = graph_.nodes[step.node];
      for (int k = 0; k < step.num_operands; ++k) {
        Operand& o = piece_operands_[piece.first_operand + k];
        o = operands_[step.first_operand + k];
        if (!o.defined()) continue;
        o.shape = &piece.shape;
        o.strides = &kUnit;
        o.storage = nullptr;
      }
      Operand* ops = piece_operands_.data() + piece.first_operand;
      piece_calls_.push_back(KernelCall{n.op, n.attrs, std::span<const Operand>(ops, n.inputs.size()),
                                        std::span<const Operand>(ops + n.inputs.size(), n.outputs.size())});
    }
  }
}

void Executable::run_multi(const MultiUpdate& multi) {
  for (const MultiUpdate::Piece& piece : multi.pieces) {
    const Step& step = steps_[piece.step];
    for (int k = 0; k < step.num_operands; ++k) {
      const Operand& whole = operands_[step.first_operand + k];
      if (!whole.defined()) continue;
      piece_operands_[piece.first_operand + k].data =
          static_cast<char*>(whole.data) + piece.begin * dtype_size(whole.dtype);
    }
  }
  // The pieces of the members this run leaves out (Note [host attributes]) are skipped.
  const auto skipped = [&](const MultiUpdate::Piece& piece) {
    const Node& n = graph_.nodes[steps_[piece.step].node];
    return n.host_attrs != nullptr && n.host_attrs->skip;
  };
  const int threads = multi.elements < cpu::kElementwiseGrain ? 1 : cpu::num_threads();
  cpu::parallel_tasks(static_cast<int64_t>(multi.pieces.size()), threads, [&](int64_t p) {
    const MultiUpdate::Piece& piece = multi.pieces[static_cast<size_t>(p)];
    if (!skipped(piece)) steps_[piece.step].fn(piece_calls_[multi.first_call + static_cast<size_t>(p)]);
  });
}

std::string Executable::stale() const {
  for (const GradGuard& guard : graph_.grad_guards) {
    if (guard.leaf->grad.get() != guard.grad)
      return "a parameter's .grad was replaced or reset since the function was compiled";
  }
  for (const Buffer& b : graph_.buffers) {
    if (b.guard_version && b.storage->version() != b.version)
      return "a captured tensor the compiled graph folded into a constant was written since";
  }
  return "";
}

void Executable::bind(const std::vector<Tensor>& arguments, bool observed) {
  for (size_t b = 0; b < graph_.buffers.size(); ++b) {
    const Buffer& buf = graph_.buffers[b];
    if (buf.kind == BufferKind::kArgument) {
      base_[b] = static_cast<char*>(arguments[buf.argument].data_ptr()) - buf.argument_offset;
    }
  }
  for (size_t i = 0; i < interleaves_.size(); ++i) {  // observers see the product whole, in a block of its own
    const Buffer& buf = graph_.buffers[static_cast<size_t>(interleaves_[i]->buffer)];
    observed_products_.resize(interleaves_.size());
    observed_products_[i] = observed ? allocate_storage(buf.nbytes, buf.device) : nullptr;
    base_[static_cast<size_t>(interleaves_[i]->buffer)] =
        observed ? static_cast<char*>(observed_products_[i]->data()) : nullptr;
  }
  for (int b : output_buffers_) {
    const Buffer& buf = graph_.buffers[b];
    output_storage_[b] = allocate_storage(buf.nbytes, buf.device);
    base_[b] = static_cast<char*>(output_storage_[b]->data());
  }
  for (size_t k = 0; k < operands_.size(); ++k) {
    const auto& [buffer, offset] = sources_[k];
    if (buffer >= 0) operands_[k].data = base_[buffer] + offset;
  }
}

void Executable::draw() {
  if (graph_.draws.empty()) return;
  for (size_t d = 0; d < graph_.draws.size(); ++d) {
    const ember::detail::RandomDraw key = ember::detail::reserve_random_blocks(graph_.draws[d].blocks);
    for (int n : drawing_nodes_[d]) set_random_key(graph_.nodes[n].attrs, key.seed, key.first_block);
  }
}

void Executable::run_observed(const Step& step) {
  const Node& n = graph_.nodes[step.node];
  if (step.kind == NodeKind::kKernel) {
    const dispatch::OpCall call{n.op, dispatch::CallKind::kKernel, n.phase, n.attrs, {}, {}, &calls_[step.call]};
    dispatch::detail::run_observed(call, step.fn);
  } else {
    const PhaseGuard phase(n.phase);
    dispatch::notify_begin_step(n.label, fused_[step.fused]->cost());
    fused_[step.fused]->run(base_);
    dispatch::notify_end_step();
  }
}

std::vector<Tensor> Executable::run(const std::vector<Tensor>& arguments) {
  const bool observed = dispatch::observed();
  bind(arguments, observed);
  draw();
  for (const Step& step : steps_) {
    if (step.host_attrs) [[unlikely]] {  // Note [host attributes]: as the host computed them for this run
      Node& n = graph_.nodes[step.node];
      const bool skip = n.host_attrs->skip;
      if (!skip) n.attrs = n.host_attrs->attrs;  // the kernel call refers to n.attrs
      if (skip && (step.multi < 0 || observed)) continue;
    }
    if (step.interleave >= 0 && !observed) {
      run_interleaved(*interleaves_[static_cast<size_t>(step.interleave)]);
      continue;
    }
    if (step.in_pair && !observed) continue;  // run with the product before it
    if (step.multi >= 0 && !observed) {
      // A multi-tensor update runs at its last member, when every member's attributes are set.
      const MultiUpdate& multi = multi_[step.multi];
      if (&step - steps_.data() == multi.steps.back()) run_multi(multi);
      continue;
    }
    if (observed && (step.kind == NodeKind::kKernel || step.kind == NodeKind::kFused)) [[unlikely]] {
      run_observed(step);
      continue;
    }
    switch (step.kind) {
      case NodeKind::kKernel:
        step.fn(calls_[step.call]);
        break;
      case NodeKind::kFused:
        fused_[step.fused]->run(base_);
        break;
      case NodeKind::kHost:
        graph_.hosts[graph_.nodes[step.node].index].replay();
        break;
      case NodeKind::kGradSlot: {
        const GradSlot& slot = graph_.grad_slots[graph_.nodes[step.node].index];
        slot.leaf->grad = slot.grad;
        break;
      }
    }
  }
  for (int b : written_outside_) {
    const Buffer& buf = graph_.buffers[static_cast<size_t>(b)];
    if (buf.kind == BufferKind::kArgument) {
      arguments[static_cast<size_t>(buf.argument)].bump_version();
    } else {
      buf.storage->bump_version();
    }
  }
  std::vector<Tensor> results;
  results.reserve(graph_.outputs.size());
  for (const View& v : graph_.outputs) {
    const Buffer& buf = graph_.buffers[v.buffer];
    std::shared_ptr<StorageImpl> storage;
    if (buf.kind == BufferKind::kOutput) {
      storage = output_storage_[v.buffer];
    } else if (buf.kind == BufferKind::kArgument) {
      storage = arguments[buf.argument].impl().storage;
    } else {
      storage = buf.storage;
    }
    EMBER_CHECK(storage != nullptr, "[compile] internal error: a result has no storage");
    auto impl = ember::detail::make_pooled<TensorImpl>();
    impl->storage = std::move(storage);
    const int64_t esize = dtype_size(v.dtype);
    const int64_t arg_shift =
        buf.kind == BufferKind::kArgument
            ? arguments[buf.argument].offset() * arguments[buf.argument].element_size() - buf.argument_offset
            : 0;
    impl->set_geometry(v.shape, v.strides, (v.offset + arg_shift) / esize);
    impl->dtype = v.dtype;
    results.emplace_back(std::move(impl));
  }
  for (int b : output_buffers_) output_storage_[b].reset();
  for (auto& storage : observed_products_) storage.reset();
  return results;
}

}  // namespace ember::graph
