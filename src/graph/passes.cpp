// The graph passes (graph/passes.h).
#include "graph/passes.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/allocator.h"
#include "ember/ops.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/gemm.h"
#include "ops/collective.h"

namespace ember::graph {
namespace {

// Writes per buffer over the whole graph (fused bodies count through their group's outputs).
std::vector<int> count_writers(const Graph& g) {
  std::vector<int> writers(g.buffers.size(), 0);
  for (const Node& n : g.nodes) for_each_write(n, [&](const View& v) { ++writers[v.buffer]; });
  return writers;
}

// Every view of the graph at or after node `from` (node operands, fused members, the results,
// gradient slots), for renaming.
template <class Fn>
void for_each_view_from(Graph& g, size_t from, Fn fn) {
  auto visit = [&](auto& self, Node& n) -> void {
    for (View& v : n.inputs) fn(v);
    for (View& v : n.outputs) fn(v);
    for (Node& m : n.body) self(self, m);
  };
  for (size_t i = from; i < g.nodes.size(); ++i) visit(visit, g.nodes[i]);
  for (View& v : g.outputs) fn(v);
}

// From node `from` on, reads of buffer `old` (a contiguous layout from its start) read `with` (a
// contiguous view of the same elements) instead.
void rename(Graph& g, size_t from, int old, const View& with) {
  for_each_view_from(g, from, [&](View& v) {
    if (v.buffer != old) return;
    v.buffer = with.buffer;
    v.offset += with.offset;
  });
  for (GradSlot& s : g.grad_slots) {
    if (s.buffer == old) s.buffer = with.buffer;
  }
}

bool is_kernel(const Node& n) { return n.kind == NodeKind::kKernel; }

// A node with deterministic results from its inputs alone (no draw, no update of its outputs, no
// collective).
bool pure(const Node& n) {
  return is_kernel(n) && !has_trait(n.op, kRandom) && !has_trait(n.op, kUpdate) && is_primitive(n.op) &&
         !collective::is_collective(n.op);
}

// Are all of n's outputs temporaries (or, with `results`, returned buffers) it alone writes, each
// covering its buffer?
bool fresh_outputs(const Graph& g, const Node& n, const std::vector<int>& writers, bool results = false) {
  for (const View& v : n.outputs) {
    if (!v.defined()) continue;
    const BufferKind k = g.buffers[v.buffer].kind;
    const bool kind_ok = k == BufferKind::kTemp || (results && k == BufferKind::kOutput);
    if (!kind_ok || writers[v.buffer] != 1 || !covers(g, v)) return false;
  }
  return true;
}

// The index of the last node that writes each buffer.
std::vector<int> last_writes(const Graph& g) {
  std::vector<int> last(g.buffers.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for_each_write(g.nodes[i], [&](const View& v) { last[v.buffer] = static_cast<int>(i); });
  return last;
}

void erase_marked(Graph& g, const std::vector<bool>& drop) {
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
}

// Is every element of constant `v` equal to `value`? (Small constants only.)
bool constant_equals(const Graph& g, const View& v, double value) {
  const Buffer& b = g.buffers[v.buffer];
  if (b.kind != BufferKind::kConstant || b.storage == nullptr || v.shape.numel() > 4096) return false;
  const char* base = static_cast<const char*>(b.storage->data()) + v.offset;
  bool all = true;
  const int64_t numel = v.shape.numel();
  Shape index(std::vector<int64_t>(v.shape.size(), 0));
  for (int64_t i = 0; i < numel && all; ++i) {
    int64_t off = 0;
    for (int d = 0; d < v.shape.size(); ++d) off += index[d] * v.strides[d];
    dispatch_dtype(v.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_arithmetic_v<T>) {
        all = static_cast<double>(reinterpret_cast<const T*>(base)[off]) == value;
      } else {
        all = static_cast<double>(static_cast<float>(reinterpret_cast<const T*>(base)[off])) == value;
      }
    });
    for (int d = v.shape.size() - 1; d >= 0; --d) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
  return all;
}

}  // namespace

// --- constant folding ------------------------------------------------------------------------------

void fold_constants(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  std::vector<bool> constant(g.buffers.size(), false), drop(g.nodes.size(), false);
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    constant[b] = g.buffers[b].kind == BufferKind::kConstant ||
                  (g.buffers[b].kind == BufferKind::kState && writers[b] == 0 && g.buffers[b].storage != nullptr);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!pure(n) || !fresh_outputs(g, n, writers)) continue;
    bool all_constant = true;
    for (const View& v : n.inputs) all_constant = all_constant && (!v.defined() || constant[v.buffer]);
    // A result without its traced storage (a size a template scaled, Note [dynamic dims]) is computed.
    for (const View& v : n.outputs) all_constant = all_constant && (!v.defined() || g.buffers[v.buffer].storage);
    if (!all_constant) continue;
    // The traced storage already holds the result (it was computed while tracing and never written
    // again): keep it, and check the captured tensors it came from before each call.
    for (const View& v : n.inputs) {
      if (!v.defined()) continue;
      Buffer& in = g.buffers[v.buffer];
      if (in.kind == BufferKind::kState) {
        in.guard_version = true;
        in.version = in.storage->version();
      }
    }
    for (const View& v : n.outputs) {
      if (!v.defined()) continue;
      g.buffers[v.buffer].kind = BufferKind::kConstant;
      constant[v.buffer] = true;
    }
    drop[i] = true;
    ++stats.folded;
  }
  erase_marked(g, drop);
}

// --- algebraic simplification ----------------------------------------------------------------------

namespace {

// An in-place kernel on a temporary is traced as its result and a copy back (mean's total.div_(n):
// t = div(x, n), then x = copy(t)). Where t is a whole temporary that nothing touches after the copy,
// the views of x from then on take t's place and the copy goes: each buffer is then written once,
// which lets a fused group keep both in scratch (Note [fused reductions] in graph/fused.h).
void drop_copies_back(Graph& g, PassStats& stats) {
  std::vector<bool> drop(g.nodes.size(), false);
  // Per buffer: how many kernels write it, and the last node that touches it (the copies dropped so
  // far left out).
  std::vector<int> writers, last;
  auto count = [&] {
    writers.assign(g.buffers.size(), 0);
    last.assign(g.buffers.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (drop[i]) continue;
      auto touch = [&](const View& v) { last[v.buffer] = static_cast<int>(i); };
      for_each_read(g.nodes[i], touch);
      for_each_write(g.nodes[i], [&](const View& v) {
        touch(v);
        ++writers[v.buffer];
      });
    }
    for (const View& v : g.outputs) last[v.buffer] = static_cast<int>(g.nodes.size());
    for (const GradSlot& slot : g.grad_slots) {
      if (slot.buffer >= 0) last[slot.buffer] = static_cast<int>(g.nodes.size());
    }
  };
  count();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!pure(n) || n.op != OpKind::kCopy) continue;
    const View &from = n.inputs[0], &to = n.outputs[0];
    if (from.buffer == to.buffer || from.dtype != to.dtype || from.shape != to.shape || !covers(g, from) ||
        !covers(g, to) || g.buffers[from.buffer].kind != BufferKind::kTemp ||
        g.buffers[to.buffer].kind != BufferKind::kTemp || writers[from.buffer] != 1 ||
        last[from.buffer] != static_cast<int>(i))
      continue;
    rename(g, i + 1, to.buffer, from);
    drop[i] = true;
    ++stats.simplified;
    count();
  }
  erase_marked(g, drop);
}

}  // namespace

void simplify(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const std::vector<int> last_write = last_writes(g);
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!pure(n) || !fresh_outputs(g, n, writers)) continue;
    const View& out = n.outputs[0];
    // The input the node's result equals, if it does.
    const View* same = nullptr;
    auto identity = [&](int keep, int other, double neutral) {
      const View& x = n.inputs[keep];
      if (x.shape == out.shape && x.dtype == out.dtype && constant_equals(g, n.inputs[other], neutral)) same = &x;
    };
    switch (n.op) {
      case OpKind::kMul:
        identity(0, 1, 1.0);
        if (same == nullptr) identity(1, 0, 1.0);
        break;
      case OpKind::kAdd:
        identity(0, 1, 0.0);
        if (same == nullptr) identity(1, 0, 0.0);
        break;
      case OpKind::kDiv:
        identity(0, 1, 1.0);
        break;
      case OpKind::kSub:
        identity(0, 1, 0.0);
        break;
      case OpKind::kCopy:
        if (n.inputs[0].dtype == out.dtype && n.inputs[0].shape == out.shape) same = &n.inputs[0];
        break;
      default:
        break;
    }
    // Reading x instead of the result is right while x keeps its value: x is a contiguous view
    // that nothing writes after this node.
    if (same == nullptr || !same->contiguous() || last_write[same->buffer] > static_cast<int>(i)) continue;
    const View with = *same;
    rename(g, i + 1, out.buffer, with);
    drop[i] = true;
    ++stats.simplified;
  }
  erase_marked(g, drop);
  drop_copies_back(g, stats);
}

// --- common-subexpression elimination --------------------------------------------------------------

void cse(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  std::vector<int> epoch(g.buffers.size(), 0);  // writes so far per buffer
  struct Seen {
    size_t node;
    std::vector<int> epochs;
  };
  std::unordered_multimap<size_t, Seen> table;
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (pure(n) && fresh_outputs(g, n, writers)) {
      size_t h = hash_value(n.attrs) * 31 + static_cast<size_t>(n.op);
      std::vector<int> epochs;
      for (const View& v : n.inputs) {
        h = h * 1000003 + static_cast<size_t>(v.buffer + 1) * 17 + static_cast<size_t>(v.offset);
        epochs.push_back(v.defined() ? epoch[v.buffer] : 0);
      }
      bool replaced = false;
      auto [lo, hi] = table.equal_range(h);
      for (auto it = lo; it != hi && !replaced; ++it) {
        const Node& m = g.nodes[it->second.node];
        if (m.op != n.op || !(m.attrs == n.attrs) || m.inputs != n.inputs || it->second.epochs != epochs ||
            m.outputs.size() != n.outputs.size())
          continue;
        bool same_outputs = true;
        for (size_t k = 0; k < n.outputs.size(); ++k) {
          same_outputs =
              same_outputs && n.outputs[k].shape == m.outputs[k].shape && n.outputs[k].dtype == m.outputs[k].dtype;
        }
        if (!same_outputs) continue;
        for (size_t k = 0; k < n.outputs.size(); ++k) {
          if (n.outputs[k].defined()) rename(g, i + 1, n.outputs[k].buffer, m.outputs[k]);
        }
        drop[i] = true;
        replaced = true;
        ++stats.cse;
      }
      if (!replaced) table.emplace(h, Seen{i, std::move(epochs)});
    }
    for_each_write(n, [&](const View& v) { ++epoch[v.buffer]; });
  }
  erase_marked(g, drop);
}

// --- dead-code elimination -------------------------------------------------------------------------

void dce(Graph& g, PassStats& stats) {
  std::vector<bool> needed(g.buffers.size(), false), drop(g.nodes.size(), false);
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    const BufferKind k = g.buffers[b].kind;
    needed[b] = k == BufferKind::kArgument || k == BufferKind::kState || k == BufferKind::kOutput;
  }
  for (const View& v : g.outputs) needed[v.buffer] = true;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    bool live = (!is_kernel(n) && n.kind != NodeKind::kFused) || (is_kernel(n) && collective::is_collective(n.op));
    for_each_write(n, [&](const View& v) { live = live || needed[v.buffer]; });
    if (!live) {
      drop[i] = true;
      ++stats.dead;
      continue;
    }
    for_each_read(n, [&](const View& v) { needed[v.buffer] = true; });
  }
  erase_marked(g, drop);
}

// --- GEMM epilogues --------------------------------------------------------------------------------

namespace {

// Reads of each buffer: (node index, operand) pairs.
std::vector<std::vector<size_t>> readers_of(const Graph& g) {
  std::vector<std::vector<size_t>> readers(g.buffers.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for_each_read(g.nodes[i], [&](const View& v) {
      auto& r = readers[v.buffer];
      if (r.empty() || r.back() != i) r.push_back(i);
    });
  }
  for (const View& v : g.outputs) readers[v.buffer].push_back(g.nodes.size());
  return readers;
}

Activation activation_of(OpKind op) {
  switch (op) {
    case OpKind::kRelu:
      return Activation::kRelu;
    case OpKind::kGeluErf:
      return Activation::kGeluErf;
    case OpKind::kGeluTanh:
      return Activation::kGeluTanh;
    case OpKind::kSilu:
      return Activation::kSilu;
    default:
      return Activation::kNone;
  }
}

// A convolution takes the activation after it (ReLU, GELU or SiLU; also after a residual it took),
// or the add of a contiguous tensor of its output's shape before any activation: out =
// activation(conv + bias + residual), the end of a ResNet block (Conv2dAttrs). Unlike the GEMM's
// (below), every convolution kernel applies it to finished outputs still in cache, in full vectors
// (late_activation in conv_nchwc.cpp): silu(conv2d) over 16 x 64 x 56 x 56 compiled 18.25 ms
// against 18.38 eagerly on a Zen 4 (the SiLU's arithmetic, not its memory pass, is what it costs).
bool fuse_into_conv(Node& conv, const Node& next, const View& c, bool c_first) {
  auto& attrs = std::get<Conv2dAttrs>(conv.attrs);
  if (attrs.activation != Activation::kNone || attrs.max_pool != 1) return false;
  if (const Activation act = activation_of(next.op); act != Activation::kNone && c_first) {
    attrs.activation = act;
    return true;
  }
  if (next.op != OpKind::kAdd || next.inputs.size() != 2 || !(c_first || next.inputs[1] == c)) return false;
  const View& other = c_first ? next.inputs[1] : next.inputs[0];
  const bool has_residual = conv.inputs.size() > 3 && conv.inputs[3].defined();
  if (has_residual || other.buffer == c.buffer || other.shape != c.shape || other.dtype != c.dtype ||
      !other.contiguous())
    return false;
  conv.inputs.resize(4);
  conv.inputs[3] = other;
  return true;
}

// A convolution also takes a max pooling after it (Conv2dAttrs::max_pool), after its activation:
// an inference's pooling (the values alone: no indices kept for a backward) over square windows
// at a stride of the window, with no padding, dilation or ceil mode, where the CPU kernel pools as
// it stores (cpu::conv2d_pools_directly; Note [pooled convolution] in conv_direct.cpp): MNIST's
// first layer and its pooling in the ONNX model at batch 32.
bool fuse_pool_into_conv(const Graph& g, Node& conv, const Node& next, const View& c) {
  auto& attrs = std::get<Conv2dAttrs>(conv.attrs);
  if (next.op != OpKind::kMaxPool2d || attrs.max_pool != 1 || next.inputs.size() != 1 || !(next.inputs[0] == c) ||
      (next.outputs.size() > 1 && next.outputs[1].defined()) || !g.buffers[c.buffer].device.is_cpu() ||
      c.shape.size() != 4 || conv.inputs[0].shape.size() != 4)
    return false;
  const auto& pool = std::get<Pool2dAttrs>(next.attrs);
  const int64_t k = pool.kernel_size.h;
  if (pool.kernel_size != Pair(k) || pool.stride != Pair(k) || pool.padding != Pair(0) || pool.dilation != Pair(1) ||
      pool.ceil_mode)
    return false;
  const cpu::Conv2dGeometry geometry = cpu::conv2d_geometry(attrs, conv.inputs[0].shape, conv.inputs[1].shape);
  if (!cpu::conv2d_pools_directly(c.dtype, geometry, k)) return false;
  attrs.max_pool = k;
  return true;
}

double constant_value(const Graph& g, const View& v);

// A product scaled by a constant (attention's scores, q @ k^T * d^-1/2) takes the scale as its
// alpha: float32 or float64, no epilogue yet, and a k the GEMM sums whole before scaling
// (kGemmWholeSumDepth), so alpha * sum rounds as the unfused sum * scale does.
bool fuse_scale(Node& mm, const Graph& g, const View& scale) {
  auto& attrs = std::get<MatmulAttrs>(mm.attrs);
  const View& c = mm.outputs[0];
  if (attrs.alpha != 1.0 || attrs.beta != 0.0 || attrs.activation != Activation::kNone || mm.inputs[2].defined() ||
      mm.inputs[3].defined() || (c.dtype != kFloat32 && c.dtype != kFloat64) || scale.dtype != c.dtype ||
      mm.inputs[0].shape[mm.inputs[0].shape.size() - 1] > cpu::kGemmWholeSumDepth)
    return false;
  View one = scale;  // a broadcast scalar: its one element
  for (int d = 0; d < scale.shape.size(); ++d) {
    if (scale.strides[d] != 0 && scale.shape[d] != 1) return false;
  }
  one.shape = Shape();
  one.strides = Strides();
  const double value = constant_value(g, one);
  if (std::isnan(value)) return false;
  attrs.alpha = value;
  return true;
}

}  // namespace

void fuse_epilogues(Graph& g, PassStats& stats) {
  bool changed = true;
  while (changed) {
    changed = false;
    const std::vector<int> writers = count_writers(g);
    const auto readers = readers_of(g);
    std::vector<bool> drop(g.nodes.size(), false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& mm = g.nodes[i];
      const bool conv = is_kernel(mm) && mm.op == OpKind::kConv2d;
      if (!is_kernel(mm) || (mm.op != OpKind::kMatmul && !conv) || drop[i]) continue;
      const View& c = mm.outputs[0];
      if (conv && c.dtype != kFloat32 && c.dtype != kFloat64) continue;  // the bfloat16 kernel has no epilogue
      if (!conv && (std::get<MatmulAttrs>(mm.attrs).beta != 0.0 || mm.inputs[3].defined())) continue;
      if (!fresh_outputs(g, mm, writers)) continue;
      const auto& users = readers[c.buffer];
      if (users.size() != 1 || users[0] >= g.nodes.size()) continue;
      const size_t j = users[0];
      Node& next = g.nodes[j];
      const bool pooling = conv && next.op == OpKind::kMaxPool2d;  // the one consumer of another shape
      if (!is_kernel(next) || !fresh_outputs(g, next, writers, true) ||
          (next.outputs[0].shape != c.shape && !pooling) || next.outputs[0].dtype != c.dtype)
        continue;
      // Nothing between may write what the fused product would now read late, or read what it writes.
      bool clear = true;
      for (size_t k = i + 1; k < j && clear; ++k) {
        for_each_write(g.nodes[k], [&](const View& v) {
          for (const View& in : next.inputs) clear = clear && !(in.defined() && in.buffer == v.buffer);
        });
      }
      if (!clear) continue;
      const bool c_first = next.inputs.size() >= 1 && next.inputs[0] == c;
      const Activation act = activation_of(next.op);
      bool fused = false;
      auto* matmul = std::get_if<MatmulAttrs>(&mm.attrs);
      // Only ReLU goes into the epilogue: a GELU or SiLU computed in the GEMM's last block costs
      // more than its own pass over the result (linear + gelu(tanh), 8192x768x3072: 204 ms, +10 ms
      // as a separate pass, +20 ms in the epilogue, on this machine). Run instead over each tile
      // just after it is stored (in L1), with the residual after it, it was no better on a Zen 4:
      // gelu(linear) + residual compiled 214-219 ms (the residual's rows prefetched while the tile
      // is computed; 222-240 without) against 200-221 ms with the GELU and the add fused into one
      // strip pass after the GEMM; gelu(linear) alone 196-203 against 198-201 ms in registers.
      if (pooling) {
        fused = fuse_pool_into_conv(g, mm, next, c);
      } else if (conv) {
        fused = fuse_into_conv(mm, next, c, c_first);
      } else if (next.op == OpKind::kMul && next.inputs.size() == 2 && (c_first || next.inputs[1] == c)) {
        fused = fuse_scale(mm, g, c_first ? next.inputs[1] : next.inputs[0]);
      } else if (act == Activation::kRelu && matmul->activation == Activation::kNone && c_first) {
        matmul->activation = act;
        fused = true;
      } else if (next.op == OpKind::kAdd && next.inputs.size() == 2) {
        const View& other = c_first ? next.inputs[1] : next.inputs[0];
        if (!(c_first || next.inputs[1] == c) || other.buffer == c.buffer) continue;
        const bool bias_like =
            other.shape.size() == 1 && other.shape[0] == c.shape[c.shape.size() - 1] && other.strides[0] == 1;
        if (bias_like && !mm.inputs[2].defined() && matmul->activation == Activation::kNone) {
          mm.inputs[2] = other;
          fused = true;
        } else if (other.shape == c.shape && other.dtype == c.dtype && (c.dtype == kFloat32 || c.dtype == kFloat64)) {
          // A 16-bit product would round once with the residual in the epilogue, twice unfused.
          mm.inputs[3] = other;
          fused = true;
        }
      }
      if (!fused) continue;
      // The matmul now writes the consumer's result, at the consumer's place (its own result, `c`,
      // is no longer written: keep nothing pointing at it).
      mm.outputs[0] = next.outputs[0];
      next = std::move(mm);
      drop[i] = true;
      ++stats.epilogues;
      changed = true;
    }
    erase_marked(g, drop);
  }
}

// --- blocked activations --------------------------------------------------------------------------

// Note [blocked activations]
// The blocked convolution (Note [blocked convolution] in kernels/cpu/conv_nchwc.cpp) copies its
// input into channel blocks of the vector width with padded planes, and writes its output back to
// NCHW through 8 x 8 transposes. Between two such convolutions both copies are wasted: `perf` of
// `onnx_resnet18_b1` gave the blocking 4.3% of the samples and the write-out 5.8%. This pass keeps
// such an activation blocked: a float32 convolution's result that only blocked convolutions read,
// as their input or their residual, becomes a (N, ceil(C / c), H + 2 pad, W + 2 pad, c) buffer (c
// the vector width, pad the largest padding of the convolutions reading it as input, zeros in the
// padding and in the channels past C), written by the producer as it finishes each tile and read
// by the consumers in place (Conv2dAttrs::blocked_input, blocked_residual, blocked_output). A max
// pooling (without indices) between such convolutions pools the blocked planes into blocked planes
// (Pool2dAttrs::blocked_input, blocked_output), and a convolution run over its patches (an image's
// first layer) writes them too. ResNet's activations stay blocked from the stem's output to the
// global pooling: NCHW only at the edges of the run of convolutions. The bits are those of the NCHW
// path: the same tiles, the bias and residual added in the same order, the activations lane by
// lane, each window's values taken in the pooling kernel's order by its rule.
//
// Inference only, in effect: in a training step the backward reads each activation too (a weight
// gradient, a ReLU's mask), so no result qualifies. CPU float32 only (the layout is the blocked
// kernel's, chosen for the CPU that compiles the plan).

namespace {

// The geometry of a convolution node the CPU's blocked float32 forward runs (with `patches`, also
// one it runs over its patches: such a convolution writes blocked planes but reads only NCHW).
std::optional<cpu::Conv2dGeometry> blocked_convolution(const Graph& g, const Node& n, bool patches = false) {
  if (!is_kernel(n) || n.op != OpKind::kConv2d || n.inputs.size() < 2 || n.outputs.empty()) return std::nullopt;
  const auto& attrs = std::get<Conv2dAttrs>(n.attrs);
  const View &x = n.inputs[0], &w = n.inputs[1], &out = n.outputs[0];
  const int x_dims = attrs.blocked_input.h >= 0 ? 5 : 4;
  if (attrs.max_pool != 1 || out.dtype != kFloat32 || x.dtype != kFloat32 || w.dtype != kFloat32 ||
      x.shape.size() != x_dims || w.shape.size() != 4 || !g.buffers[out.buffer].device.is_cpu())
    return std::nullopt;
  const cpu::Conv2dGeometry geometry = cpu::conv2d_geometry(attrs, x.shape, w.shape);
  if (cpu::nchwc_takes(geometry)) return geometry;
  const bool residual = n.inputs.size() > 3 && n.inputs[3].defined();
  if (patches && x_dims == 4 && !residual && cpu::nchwc_patch_takes(geometry)) return geometry;
  return std::nullopt;
}

// A temporary result that one node writes whole and that something reads.
bool plain_temp(const Graph& g, const View& v, const std::vector<int>& writers,
                const std::vector<std::vector<size_t>>& readers) {
  return g.buffers[v.buffer].kind == BufferKind::kTemp && writers[v.buffer] == 1 && v.shape.size() == 4 &&
         v.dtype == kFloat32 && covers(g, v) && !readers[v.buffer].empty();
}

// Can node r read `v` blocked in `block` lanes: a blocked convolution reading it as its input or
// residual, or (where `pools`) a max pooling of it whose own result only such convolutions read.
// The padding a convolution reading it as input needs goes into `pad`.
bool reads_blocked(const Graph& g, size_t r, const View& v, int64_t block, const std::vector<int>& writers,
                   const std::vector<std::vector<size_t>>& readers, bool pools, Pair& pad) {
  if (r >= g.nodes.size()) return false;  // a result of the graph
  const Node& n = g.nodes[r];
  if (is_kernel(n) && n.op == OpKind::kMaxPool2d && pools) {
    const bool indices = n.outputs.size() > 1 && n.outputs[1].defined();
    if (indices || n.inputs.size() != 1 || !(n.inputs[0] == v) || !plain_temp(g, n.outputs[0], writers, readers))
      return false;
    Pair unused = 0;
    for (const size_t q : readers[n.outputs[0].buffer]) {
      if (!reads_blocked(g, q, n.outputs[0], block, writers, readers, false, unused)) return false;
    }
    return true;
  }
  const std::optional<cpu::Conv2dGeometry> c = blocked_convolution(g, n);
  if (!c || cpu::nchwc_layout(*c).block != block) return false;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    if (n.inputs[k].buffer != v.buffer) continue;
    if (!(n.inputs[k] == v) || (k != 0 && k != 3)) return false;
    if (k == 0) pad = Pair(std::max(pad.h, c->pad_h), std::max(pad.w, c->pad_w));
  }
  return true;
}

}  // namespace

void block_activations(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const auto readers = readers_of(g);
  for (Node& producer : g.nodes) {
    // A blocked convolution, or a max pooling whose input an earlier step here blocked (its result
    // was checked then).
    int64_t block = 0;
    if (is_kernel(producer) && producer.op == OpKind::kMaxPool2d) {
      const auto& attrs = std::get<Pool2dAttrs>(producer.attrs);
      if (attrs.blocked_input.h < 0) continue;
      block = producer.inputs[0].shape[4];
    } else if (const std::optional<cpu::Conv2dGeometry> pg = blocked_convolution(g, producer, true)) {
      block = cpu::nchwc_layout(*pg).block;
    } else {
      continue;
    }
    const View v = producer.outputs[0];
    if (!plain_temp(g, v, writers, readers)) continue;
    Pair pad = 0;
    bool all_blocked = true;
    for (const size_t r : readers[v.buffer]) {
      all_blocked = all_blocked && reads_blocked(g, r, v, block, writers, readers, true, pad);
    }
    if (!all_blocked) continue;
    View blocked = v;
    blocked.shape = cpu::blocked_shape(v.shape, block, {pad.h, pad.w});
    blocked.strides = contiguous_strides(blocked.shape);
    Buffer& buffer = g.buffers[v.buffer];
    buffer.nbytes = blocked.shape.numel() * static_cast<int64_t>(sizeof(float));
    if (buffer.storage != nullptr) buffer.storage = allocate_storage(buffer.nbytes, buffer.device);
    producer.outputs[0] = blocked;
    if (auto* pool = std::get_if<Pool2dAttrs>(&producer.attrs)) {
      pool->blocked_output = pad;
    } else {
      std::get<Conv2dAttrs>(producer.attrs).blocked_output = pad;
    }
    for (const size_t r : readers[v.buffer]) {
      Node& consumer = g.nodes[r];
      for (size_t k = 0; k < consumer.inputs.size(); ++k) {
        if (consumer.inputs[k].buffer != v.buffer) continue;
        consumer.inputs[k] = blocked;
        if (auto* pool = std::get_if<Pool2dAttrs>(&consumer.attrs)) {
          pool->blocked_input = pad;
        } else {
          (k == 0 ? std::get<Conv2dAttrs>(consumer.attrs).blocked_input
                  : std::get<Conv2dAttrs>(consumer.attrs).blocked_residual) = pad;
        }
      }
    }
    ++stats.blocked;
  }
}

// --- attention ----------------------------------------------------------------------------------

namespace {

// The single value `v` holds now (NaN when it is not one element with storage in host memory).
double stored_value(const Graph& g, const View& v) {
  const Buffer& b = g.buffers[v.buffer];
  if (b.storage == nullptr || !b.device.is_cpu() || v.shape.numel() != 1) return NAN;  // device memory: not read here
  const char* p = static_cast<const char*>(b.storage->data()) + v.offset;
  double value = NAN;
  dispatch_dtype(v.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_arithmetic_v<T>) {
      value = static_cast<double>(*reinterpret_cast<const T*>(p));
    } else {
      value = static_cast<double>(static_cast<float>(*reinterpret_cast<const T*>(p)));
    }
  });
  return value;
}

// The value of a one-element constant, else NaN.
double constant_value(const Graph& g, const View& v) {
  return g.buffers[v.buffer].kind == BufferKind::kConstant ? stored_value(g, v) : NAN;
}

// The value of a one-element operand known when compiling: a constant, or a captured tensor the graph
// never writes (an imported model's initializer), which is then checked for writes before each call
// as folded constants are. NaN otherwise.
double known_value(Graph& g, const View& v, const std::vector<int>& writers) {
  const double value = constant_value(g, v);
  if (!std::isnan(value) || writers[v.buffer] != 0 || g.buffers[v.buffer].kind != BufferKind::kState) return value;
  const double captured = stored_value(g, v);
  if (!std::isnan(captured)) {
    Buffer& b = g.buffers[v.buffer];
    b.guard_version = true;
    b.version = b.storage->version();
  }
  return captured;
}

// The view seen with 4 dims (leading size-1 dims added).
View as_4d(const View& v) {
  View r = v;
  std::vector<int64_t> shape(4, 1), strides(4, 0);
  const int lead = 4 - v.shape.size();
  for (int d = 0; d < v.shape.size(); ++d) {
    shape[lead + d] = v.shape[d];
    strides[lead + d] = v.strides[d];
  }
  for (int d = lead - 1; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];  // size 1: any stride
  r.shape = Shape(shape);
  r.strides = Strides(strides);
  return r;
}

// The node that alone reads buffer b after node i, if any.
int only_reader(const std::vector<std::vector<size_t>>& readers, int b, size_t num_nodes) {
  const auto& r = readers[b];
  if (r.size() != 1 || r[0] >= num_nodes) return -1;
  return static_cast<int>(r[0]);
}

}  // namespace

void fuse_attention(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const auto readers = readers_of(g);
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& qk = g.nodes[i];
    if (!is_kernel(qk) || qk.op != OpKind::kMatmul || drop[i]) continue;
    const auto& qk_attrs = std::get<MatmulAttrs>(qk.attrs);
    if (!(qk_attrs == MatmulAttrs{}) || qk.inputs[2].defined() || qk.inputs[3].defined()) continue;
    const View& q = qk.inputs[0];
    const View& kt = qk.inputs[1];
    const int rank = q.shape.size();
    if (rank < 3 || rank > 4 || kt.shape.size() != rank || q.dtype != kFloat32 || !fresh_outputs(g, qk, writers))
      continue;
    // Walk the chain: [mul or div by a constant] [where with a constant condition and -inf] softmax.
    std::vector<size_t> chain{i};
    int cur = qk.outputs[0].buffer;
    double scale = 1.0;
    const View* condition = nullptr;
    bool fill_when_true = false;
    int at = only_reader(readers, cur, g.nodes.size());
    auto advance = [&](int node) {
      chain.push_back(static_cast<size_t>(node));
      cur = g.nodes[node].outputs[0].buffer;
      at = only_reader(readers, cur, g.nodes.size());
    };
    auto other_input = [&](const Node& n) -> const View* {
      if (n.inputs.size() != 2) return nullptr;
      if (n.inputs[0].buffer == cur) return &n.inputs[1];
      if (n.inputs[1].buffer == cur) return &n.inputs[0];
      return nullptr;
    };
    if (at >= 0 && fresh_outputs(g, g.nodes[at], writers) &&
        (g.nodes[at].op == OpKind::kMul || g.nodes[at].op == OpKind::kDiv)) {
      const Node& n = g.nodes[at];
      const View* c = other_input(n);
      const double value = c != nullptr ? known_value(g, *c, writers) : NAN;
      if (!std::isnan(value) && value != 0 && (n.op == OpKind::kMul || n.inputs[0].buffer == cur)) {
        scale = n.op == OpKind::kMul ? value : 1.0 / value;
        advance(at);
      }
    }
    // An additive float mask (BERT's (1 - attention_mask) * min): the kernel adds it to the scores.
    const View* additive = nullptr;
    if (at >= 0 && fresh_outputs(g, g.nodes[at], writers) && g.nodes[at].op == OpKind::kAdd) {
      const View* m = other_input(g.nodes[at]);
      if (m != nullptr && m->dtype == kFloat32 && m->buffer != cur && m->shape.size() <= rank) {
        additive = m;
        advance(at);
      }
    }
    if (additive == nullptr && at >= 0 && fresh_outputs(g, g.nodes[at], writers) && g.nodes[at].op == OpKind::kWhere) {
      const Node& n = g.nodes[at];
      const View& cond = n.inputs[0];
      const bool first = n.inputs[1].buffer != cur && n.inputs[2].buffer == cur;
      const bool second = n.inputs[2].buffer != cur && n.inputs[1].buffer == cur;
      const View& fill = first ? n.inputs[1] : n.inputs[2];
      // The condition: a constant, or a captured tensor the graph never writes (then checked for
      // writes before each call, as folded constants are).
      Buffer& cb = g.buffers[cond.buffer];
      const bool fixed = cb.kind == BufferKind::kConstant ||
                         (cb.kind == BufferKind::kState && writers[cond.buffer] == 0 && cb.storage != nullptr);
      if ((first || second) && fixed && cond.dtype == kBool && constant_value(g, fill) == -INFINITY) {
        if (cb.kind == BufferKind::kState) {
          cb.guard_version = true;
          cb.version = cb.storage->version();
        }
        condition = &cond;
        fill_when_true = first;
        advance(at);
      }
    }
    if (at < 0 || !fresh_outputs(g, g.nodes[at], writers) || g.nodes[at].op != OpKind::kSoftmax ||
        std::get<DimAttrs>(g.nodes[at].attrs).dim != rank - 1)
      continue;
    advance(at);
    if (at < 0) continue;
    const Node& pv = g.nodes[at];
    if (!is_kernel(pv) || pv.op != OpKind::kMatmul || !(std::get<MatmulAttrs>(pv.attrs) == MatmulAttrs{}) ||
        pv.inputs[0].buffer != cur || pv.inputs[2].defined() || pv.inputs[3].defined() ||
        !fresh_outputs(g, pv, writers, true))
      continue;
    const View& v = pv.inputs[1];
    // k from k^T: the last two dims swapped back. The kernel reads q, k and v rows contiguously.
    View k = kt;
    std::swap(k.shape[rank - 1], k.shape[rank - 2]);
    std::swap(k.strides[rank - 1], k.strides[rank - 2]);
    if (q.strides[rank - 1] != 1 || k.strides[rank - 1] != 1 || v.strides[rank - 1] != 1 || v.dtype != kFloat32 ||
        v.shape[rank - 2] != k.shape[rank - 2] || !pv.outputs[0].contiguous())
      continue;
    // Nothing between the first matmul and the last may write q, k, v or the mask.
    bool clear = true;
    for (size_t n = i + 1; n < static_cast<size_t>(at) && clear; ++n) {
      for_each_write(g.nodes[n], [&](const View& w) {
        clear = clear && w.buffer != q.buffer && w.buffer != k.buffer && w.buffer != v.buffer &&
                (additive == nullptr || w.buffer != additive->buffer);
      });
    }
    if (!clear) continue;
    AttentionAttrs attrs;
    attrs.scale = scale;
    View mask;
    const int64_t L = q.shape[rank - 2], S = k.shape[rank - 2];
    if (additive != nullptr) {
      // Broadcast to (batch, heads, L, S): a size-1 dim reads with stride 0.
      const View q4 = as_4d(q);
      const std::vector<int64_t> target{q4.shape[0], q4.shape[1], L, S};
      mask = *additive;
      const int pad = 4 - static_cast<int>(mask.shape.size());
      std::vector<int64_t> shape(4, 1), strides(4, 0);
      for (int d = 0; d < static_cast<int>(mask.shape.size()); ++d) {
        shape[d + pad] = mask.shape[d];
        strides[d + pad] = mask.strides[d];
      }
      bool fits = true;
      for (int d = 0; d < 4; ++d) {
        if (shape[d] == target[d]) continue;
        fits = fits && shape[d] == 1;
        shape[d] = target[d];
        strides[d] = 0;
      }
      if (!fits) continue;
      mask.shape = Shape(shape);
      mask.strides = Strides(strides);
    }
    if (condition != nullptr) {
      // Which (query, key) pairs take part, from the constant; a causal pattern becomes the flag.
      const View c = as_4d(*condition);
      if (c.shape[0] != 1 && c.strides[0] != 0) continue;
      if (c.shape[1] != 1 && c.strides[1] != 0) continue;
      const bool* data =
          reinterpret_cast<const bool*>(static_cast<const char*>(g.buffers[c.buffer].storage->data()) + c.offset);
      const int64_t rs = c.shape[2] == 1 ? 0 : c.strides[2], cs = c.shape[3] == 1 ? 0 : c.strides[3];
      bool causal = true, every_row = true;
      std::vector<int64_t> keep_shape{L, S};
      Tensor keep = zeros(Shape(keep_shape), kBool);
      bool* kp = keep.data_ptr<bool>();
      for (int64_t r = 0; r < L; ++r) {
        bool any = false;
        for (int64_t s_ = 0; s_ < S; ++s_) {
          const bool takes_part = data[r * rs + s_ * cs] != fill_when_true;
          kp[r * S + s_] = takes_part;
          any = any || takes_part;
          causal = causal && takes_part == (s_ <= r);
        }
        every_row = every_row && any;
      }
      // A row with no key is NaN through softmax but zeros through the kernel: leave it as it is.
      if (!every_row) continue;
      if (causal) {
        attrs.is_causal = true;
      } else {
        Buffer b;
        b.kind = BufferKind::kConstant;
        b.nbytes = L * S;
        b.device = g.buffers[q.buffer].device;
        b.storage = keep.impl().storage;
        mask.buffer = g.add_buffer(std::move(b));
        mask.dtype = kBool;
        mask.shape = Shape(std::vector<int64_t>{1, 1, L, S});
        mask.strides = Strides(std::vector<int64_t>{0, 0, S, 1});
      }
    }
    // The log-sum-exp the kernel writes: a temporary nobody reads.
    Buffer lse_buffer;
    lse_buffer.kind = BufferKind::kTemp;
    lse_buffer.device = g.buffers[q.buffer].device;
    const View out = as_4d(pv.outputs[0]);
    lse_buffer.nbytes = out.shape[0] * out.shape[1] * out.shape[2] * 4;
    View lse;
    lse.buffer = g.add_buffer(std::move(lse_buffer));
    lse.dtype = kFloat32;
    lse.shape = Shape(std::vector<int64_t>{out.shape[0], out.shape[1], out.shape[2]});
    lse.strides = contiguous_strides(lse.shape);
    Node sdpa;
    sdpa.op = OpKind::kScaledDotProductAttention;
    sdpa.attrs = attrs;
    sdpa.phase = pv.phase;
    sdpa.inputs = {as_4d(q), as_4d(k), as_4d(v), mask};
    sdpa.outputs = {out, lse};
    for (size_t n : chain) drop[n] = true;
    g.nodes[at] = std::move(sdpa);
    ++stats.attention;
  }
  erase_marked(g, drop);
}

// --- GELU ----------------------------------------------------------------------------------------

void fuse_gelu(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const auto readers = readers_of(g);
  std::vector<bool> drop(g.nodes.size(), false);
  // Is node i a kernel of `op` (not yet taken by another chain) whose results are temporaries?
  auto link = [&](int i, OpKind op) {
    return i >= 0 && !drop[i] && is_kernel(g.nodes[i]) && g.nodes[i].op == op && g.nodes[i].inputs.size() <= 2 &&
           fresh_outputs(g, g.nodes[i], writers);
  };
  auto near = [](double value, double target) { return std::abs(value - target) <= 1e-6 * std::abs(target); };
  // For binary node n with an operand known to equal `value`: the other operand.
  auto other_than = [&](const Node& n, double value) -> const View* {
    if (n.inputs.size() != 2) return nullptr;
    for (int k = 0; k < 2; ++k) {
      if (near(known_value(g, n.inputs[k], writers), value)) return &n.inputs[1 - k];
    }
    return nullptr;
  };
  // The node that wrote buffer b, when one kernel alone did.
  const std::vector<int> writer_of = last_writes(g);
  auto reader = [&](const Node& n) { return only_reader(readers, n.outputs[0].buffer, g.nodes.size()); };
  for (size_t e = 0; e < g.nodes.size(); ++e) {
    const Node& erf_node = g.nodes[e];
    if (!link(static_cast<int>(e), OpKind::kErf)) continue;
    // x / sqrt(2) or x * (1 / sqrt(2)), read only by the erf_node.
    const int p = writer_of[erf_node.inputs[0].buffer];
    const View* x = nullptr;
    if (link(p, OpKind::kDiv) && reader(g.nodes[p]) == static_cast<int>(e) &&
        near(known_value(g, g.nodes[p].inputs[1], writers), std::sqrt(2.0))) {
      x = &g.nodes[p].inputs[0];
    } else if (link(p, OpKind::kMul) && reader(g.nodes[p]) == static_cast<int>(e)) {
      x = other_than(g.nodes[p], 1.0 / std::sqrt(2.0));
    }
    if (x == nullptr || !is_floating(x->dtype)) continue;
    // 1 + erf, then times x and 0.5 in either order: (x * (1 + erf)) * 0.5 or (0.5 * x) * (1 + erf).
    const int a = reader(erf_node);
    if (!link(a, OpKind::kAdd) || other_than(g.nodes[a], 1.0) == nullptr ||
        *other_than(g.nodes[a], 1.0) != erf_node.outputs[0])
      continue;
    const int m = reader(g.nodes[a]);
    if (m < 0 || !is_kernel(g.nodes[m]) || g.nodes[m].op != OpKind::kMul || g.nodes[m].inputs.size() != 2) continue;
    const Node& product = g.nodes[m];
    const View& other = product.inputs[0] == g.nodes[a].outputs[0] ? product.inputs[1] : product.inputs[0];
    std::vector<int> chain{p, static_cast<int>(e), a};
    int last = -1;
    if (other == *x && fresh_outputs(g, product, writers)) {
      const int h = reader(product);
      if (h >= 0 && is_kernel(g.nodes[h]) && g.nodes[h].op == OpKind::kMul && other_than(g.nodes[h], 0.5) != nullptr &&
          *other_than(g.nodes[h], 0.5) == product.outputs[0] && fresh_outputs(g, g.nodes[h], writers, true)) {
        chain.push_back(m);
        last = h;
      }
    } else if (const int q = writer_of[other.buffer];
               link(q, OpKind::kMul) && reader(g.nodes[q]) == m && other_than(g.nodes[q], 0.5) != nullptr &&
               *other_than(g.nodes[q], 0.5) == *x && fresh_outputs(g, product, writers, true)) {
      chain.push_back(q);
      last = m;
    }
    if (last < 0) continue;
    const View& out = g.nodes[last].outputs[0];
    if (out.shape != x->shape || out.dtype != x->dtype) continue;
    // x is read at the end of the chain now: nothing in between may write it.
    const int first = *std::min_element(chain.begin(), chain.end());
    bool clear = true;
    for (int n = first + 1; n < last && clear; ++n) {
      for_each_write(g.nodes[n], [&](const View& w) { clear = clear && w.buffer != x->buffer; });
    }
    if (!clear) continue;
    Node gelu;
    gelu.op = OpKind::kGeluErf;
    gelu.attrs = NoAttrs{};
    gelu.phase = g.nodes[last].phase;
    gelu.inputs = {*x};
    gelu.outputs = {out};
    for (int n : chain) drop[n] = true;
    g.nodes[last] = std::move(gelu);
    ++stats.gelus;
  }
  erase_marked(g, drop);
}

// --- SiLU ----------------------------------------------------------------------------------------

void fuse_silu(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const auto readers = readers_of(g);
  const std::vector<int> writer_of = last_writes(g);
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t m = 0; m < g.nodes.size(); ++m) {
    Node& product = g.nodes[m];
    if (!is_kernel(product) || product.op != OpKind::kMul || product.inputs.size() != 2 ||
        !fresh_outputs(g, product, writers, true))
      continue;
    const View& out = product.outputs[0];
    if (out.dtype != kFloat32 && out.dtype != kFloat64) continue;
    for (int k = 0; k < 2; ++k) {
      const View &s = product.inputs[k], &x = product.inputs[1 - k];
      const int p = writer_of[s.buffer];
      if (p < 0 || drop[p] || !is_kernel(g.nodes[p]) || g.nodes[p].op != OpKind::kSigmoid ||
          !fresh_outputs(g, g.nodes[p], writers) || s != g.nodes[p].outputs[0] || g.nodes[p].inputs[0] != x ||
          only_reader(readers, s.buffer, g.nodes.size()) != static_cast<int>(m) || x.dtype != out.dtype ||
          x.shape != out.shape || s.shape != out.shape)
        continue;
      // silu reads x where the product did, so nothing between the two may write it.
      bool clear = true;
      for (size_t n = static_cast<size_t>(p) + 1; n < m && clear; ++n) {
        for_each_write(g.nodes[n], [&](const View& w) { clear = clear && w.buffer != x.buffer; });
      }
      if (!clear) continue;
      const View input = x;
      product.op = OpKind::kSilu;
      product.attrs = NoAttrs{};
      product.inputs = {input};
      drop[p] = true;
      ++stats.silus;
      break;
    }
  }
  erase_marked(g, drop);
}

// --- thresholds before unpooling ------------------------------------------------------------------
//
// Note [thresholds before unpooling]: a ReLU before a max-pool has the backward
//   gi = max_pool2d_grad(g, indices)      each window's gradient to where its maximum was
//   gx = threshold_backward(gi, x)        zero where x <= 0 (x the ReLU's output, the pool's input)
// and x, as large as the layer before the pool, is kept from the forward for the second step alone.
// A window's maximum is pooled[w] = x[indices[w]], bit for bit, and only those positions receive a
// gradient (the others are zero either way), so masking by the pooled values first,
//   t = threshold_backward(g, pooled), gx = max_pool2d_grad(t, indices),
// gives the same bits: where windows overlap, every window that reaches a position carries that
// position's value, so all of its terms are kept or all are zero. The pool's output is usually kept
// anyway (the next layer's weight gradient reads it), so x dies after the pool's forward. For the
// MNIST CNN's step (batch 64) that is the largest activation, 2.36 MB of the 6.49 MB peak.

void threshold_pooled(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const auto readers = readers_of(g);
  const std::vector<int> writer_of = last_writes(g);
  auto kernel_at = [&](int i, OpKind op) { return i >= 0 && is_kernel(g.nodes[i]) && g.nodes[i].op == op; };
  for (size_t b = 0; b < g.nodes.size(); ++b) {
    if (!kernel_at(static_cast<int>(b), OpKind::kThresholdBackward) || !fresh_outputs(g, g.nodes[b], writers, true))
      continue;
    const View gi = g.nodes[b].inputs[0], x = g.nodes[b].inputs[1];
    const int a = writer_of[gi.buffer];
    if (!kernel_at(a, OpKind::kMaxPool2dGrad) || !fresh_outputs(g, g.nodes[a], writers) ||
        gi != g.nodes[a].outputs[0] || only_reader(readers, gi.buffer, g.nodes.size()) != static_cast<int>(b))
      continue;
    const View g_out = g.nodes[a].inputs[0], indices = g.nodes[a].inputs[1];
    const int f = writer_of[indices.buffer];
    if (!kernel_at(f, OpKind::kMaxPool2d) || g.nodes[f].outputs.size() != 2 || !fresh_outputs(g, g.nodes[f], writers) ||
        g.nodes[f].outputs[1] != indices || g.nodes[f].inputs[0] != x || !(g.nodes[f].attrs == g.nodes[a].attrs))
      continue;
    const View pooled = g.nodes[f].outputs[0];
    // threshold_backward's kernel takes a contiguous pair of one dtype and shape.
    if (pooled.dtype != g_out.dtype || pooled.shape != g_out.shape || !pooled.contiguous() || !g_out.contiguous() ||
        x.dtype != gi.dtype)
      continue;
    Buffer masked_buffer;
    masked_buffer.kind = BufferKind::kTemp;
    masked_buffer.device = g.buffers[g_out.buffer].device;
    masked_buffer.nbytes = g_out.shape.numel() * dtype_size(g_out.dtype);
    View masked;
    masked.buffer = g.add_buffer(std::move(masked_buffer));
    masked.dtype = g_out.dtype;
    masked.shape = g_out.shape;
    masked.strides = contiguous_strides(g_out.shape);
    Node threshold = g.nodes[b], unpool = g.nodes[a];
    threshold.inputs = {g_out, pooled};
    threshold.outputs = {masked};
    unpool.inputs = {masked, indices};
    unpool.outputs = g.nodes[b].outputs;
    g.nodes[static_cast<size_t>(a)] = std::move(threshold);
    g.nodes[b] = std::move(unpool);
    ++stats.pooled_thresholds;
  }
}

// --- recomputed activations ------------------------------------------------------------------------
//
// Note [recomputed activations]: a training step's peak is the forward's values kept for the
// backward. Some are cheap to make again from values the backward keeps anyway: GELU's output from
// its input (which GELU's backward reads), a transposed copy of attention's output (which
// attention's backward reads), a layer norm's output from its input (which the norm's backward
// reads). Such a kernel runs a second time just before the first backward kernel that reads its
// results, and every backward read goes to the new results: the forward's die at their last forward
// read. The same kernel on the same, unchanged inputs gives the same bits. Since every input is
// alive at that point without the copy, no value lives longer, and the peak cannot grow; the cost
// is the kernel's time again (elementwise and norm passes, against the products around them).
// Results under 64 KiB stay: a kernel call saves them no memory worth its time. The GPT step of
// `ember train gpt` (batch 16, 4 layers, 192 wide) keeps GELU's output, the attention copy and both
// layer norms' outputs per layer, 44 MB of its 110 MB of temporaries at the peak.

namespace {

bool cheap_to_recompute(const Node& n) {
  if (!pure(n) || n.phase != Phase::kForward) return false;
  return elementwise(n) || n.op == OpKind::kCopy || n.op == OpKind::kLayerNorm || n.op == OpKind::kRmsNorm;
}

constexpr int64_t kRecomputeMinBytes = 64 << 10;

}  // namespace

void recompute_for_backward(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const auto readers = readers_of(g);
  const size_t count = g.nodes.size();
  std::vector<bool> graded(g.buffers.size(), false);
  for (const GradSlot& s : g.grad_slots) {
    if (s.buffer >= 0) graded[s.buffer] = true;
  }
  std::vector<std::vector<Node>> clones(count);           // run before node i
  std::vector<int> renamed(g.buffers.size(), -1);         // a recomputed result's new buffer
  std::vector<size_t> renamed_from(g.buffers.size(), 0);  // from which node on it is read instead
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    if (!cheap_to_recompute(n) || !fresh_outputs(g, n, writers)) continue;
    size_t first = count;
    int64_t largest = 0;
    for (const View& v : n.outputs) {
      if (!v.defined()) continue;
      largest = std::max(largest, g.buffers[v.buffer].nbytes);
      if (graded[v.buffer]) first = 0;
      for (const size_t r : readers[v.buffer]) {
        if (r < count && r > i && g.nodes[r].phase == Phase::kBackward) {
          first = std::min(first, r);
          break;
        }
      }
    }
    if (first == count || first <= i || largest < kRecomputeMinBytes) continue;
    // Every input is alive at `first` without the recompute, and unchanged since node i.
    bool alive = true;
    for (const View& in : n.inputs) {
      if (!in.defined()) continue;
      const bool temp = g.buffers[in.buffer].kind == BufferKind::kTemp;
      alive = alive && (!temp || (!readers[in.buffer].empty() && readers[in.buffer].back() >= first));
      for (size_t k = i + 1; k < first && alive; ++k)
        for_each_write(g.nodes[k], [&](const View& w) { alive = alive && w.buffer != in.buffer; });
    }
    if (!alive) continue;
    Node again = n;
    again.phase = Phase::kBackward;
    for (View& v : again.outputs) {
      if (!v.defined()) continue;
      Buffer b;
      b.kind = BufferKind::kTemp;
      b.device = g.buffers[v.buffer].device;
      b.nbytes = g.buffers[v.buffer].nbytes;
      const int id = g.add_buffer(std::move(b));
      renamed.push_back(-1);
      renamed_from.push_back(0);
      renamed[v.buffer] = id;
      renamed_from[v.buffer] = first;
      v.buffer = id;
    }
    clones[first].push_back(std::move(again));
    ++stats.recomputed;
  }
  if (stats.recomputed == 0) return;
  // Reads at or after a result's first backward reader (the recomputed kernels' own included, in
  // order: one may read another's result) go to its new buffer.
  auto retarget = [&](auto& self, Node& n, size_t at) -> void {
    for (View& v : n.inputs) {
      if (v.defined() && renamed[v.buffer] >= 0 && at >= renamed_from[v.buffer]) v.buffer = renamed[v.buffer];
    }
    for (Node& m : n.body) self(self, m, at);
  };
  std::vector<Node> nodes;
  nodes.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    for (Node& c : clones[i]) {
      retarget(retarget, c, i);
      nodes.push_back(std::move(c));
    }
    retarget(retarget, g.nodes[i], i);
    nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
}

// --- elementwise fusion ----------------------------------------------------------------------------

bool elementwise(const Node& n) {
  return is_kernel(n) && has_trait(n.op, kElementwise) && is_primitive(n.op) && !has_trait(n.op, kRandom) &&
         !has_trait(n.op, kUpdate) && n.outputs.size() == 1 && n.outputs[0].defined() && n.outputs[0].shape.numel() > 0;
}

bool fused_reduction(const Node& n) {
  if (!is_kernel(n) || (n.op != OpKind::kSum && n.op != OpKind::kAmax && n.op != OpKind::kAmin)) return false;
  const View &in = n.inputs[0], &out = n.outputs[0];
  const int last = in.shape.size() - 1;
  if (last < 0 || !is_floating(in.dtype) || out.dtype != in.dtype || in.shape.numel() == 0) return false;
  const auto& attrs = std::get<ReduceAttrs>(n.attrs);
  if (!attrs.keepdim || attrs.dims.size() != 1 || attrs.dims[0] != last) return false;
  if (in.shape[last] < 2 || in.shape[last] > kFusionTileElements || in.strides[last] != 1) return false;
  return out.shape == reduced_shape(in.shape);
}

Shape reduced_shape(const Shape& shape) {
  Shape r = shape;
  if (r.size() > 0) r[r.size() - 1] = 1;
  return r;
}

bool fusible(const Node& n) {
  if (elementwise(n) || fused_reduction(n)) return true;
  if (!is_kernel(n) || (n.op != OpKind::kSoftmax && n.op != OpKind::kLogSoftmax)) return false;
  const View& out = n.outputs[0];
  const int64_t dim = std::get<DimAttrs>(n.attrs).dim;
  if (out.shape.size() == 0 || out.shape.numel() == 0 || n.inputs[0].shape != out.shape ||
      n.inputs[0].dtype != out.dtype)
    return false;
  int64_t row = 1;
  for (int d = static_cast<int>(dim); d < out.shape.size(); ++d) row *= out.shape[d];
  return row <= kFusionTileElements;
}

namespace {

// The view seen over iteration shape `shape` (broadcast dims get stride 0).
View expand_to(const View& v, const Shape& shape) {
  View e = v;
  const int lead = shape.size() - v.shape.size();
  std::vector<int64_t> sizes(shape.size()), strides(shape.size(), 0);
  for (int d = 0; d < shape.size(); ++d) {
    sizes[d] = shape[d];
    if (d >= lead && v.shape[d - lead] == shape[d]) strides[d] = v.strides[d - lead];
  }
  e.shape = Shape(sizes);
  e.strides = Strides(strides);
  return e;
}

// The shape a group member iterates over: a fused reduction's input, else its result.
const Shape& iteration_shape(const Node& n) { return fused_reduction(n) ? n.inputs[0].shape : n.outputs[0].shape; }

struct OpenGroup {
  std::vector<size_t> members;
  Shape shape;
  bool reduces = false;  // a member reduces rows: members over reduced_shape(shape) may join
  Device device;
  std::unordered_map<int, View> written;  // buffer -> the one view members write it through
  std::unordered_set<int> read;

  bool empty() const { return members.empty(); }
  bool interacts(const Node& n) const {
    bool hit = false;
    for_each_read(n, [&](const View& v) { hit = hit || written.count(v.buffer) != 0; });
    for_each_write(n, [&](const View& v) { hit = hit || written.count(v.buffer) != 0 || read.count(v.buffer) != 0; });
    return hit;
  }
  // Can n join? It iterates over the group's shape (or, once a member reduces rows, an elementwise
  // kernel over the reduced shape) and every buffer the group writes is seen through one view (so a
  // tile of one is the same elements in the other).
  bool accepts(const Graph& g, const Node& n) const {
    if (g.buffers[n.outputs[0].buffer].device != device) return false;
    const Shape& over = iteration_shape(n);
    if (over != shape && !(reduces && !fused_reduction(n) && over == reduced_shape(shape))) return false;
    bool ok = true;
    auto check = [&](const View& v) {
      if (auto it = written.find(v.buffer); it != written.end()) ok = ok && it->second == v;
    };
    for (const View& v : n.inputs) {
      if (v.defined()) check(v);
      if (v.defined() && broadcast_shapes(v.shape, over, "fuse") != over) ok = false;
    }
    check(n.outputs[0]);
    // A member writing a buffer others read through another view would change what they read.
    if (read.count(n.outputs[0].buffer) != 0 && written.count(n.outputs[0].buffer) == 0) ok = false;
    return ok;
  }
  void add(const Node& n, size_t index) {
    members.push_back(index);
    reduces = reduces || fused_reduction(n);
    for (const View& v : n.inputs) {
      if (v.defined()) read.insert(v.buffer);
    }
    written.emplace(n.outputs[0].buffer, n.outputs[0]);
  }
};

}  // namespace

void fuse_elementwise(Graph& g, PassStats& stats) {
  const std::vector<int> writers = count_writers(g);
  const auto readers = readers_of(g);
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  std::vector<bool> taken(g.nodes.size(), false);
  // Where each closed group goes: at its last member.
  std::map<size_t, Node> groups;
  OpenGroup open;

  auto close = [&]() {
    if (open.members.size() >= 2) {
      std::unordered_set<size_t> in_group(open.members.begin(), open.members.end());
      Node f;
      f.kind = NodeKind::kFused;
      f.op = g.nodes[open.members[0]].op;
      f.phase = g.nodes[open.members.back()].phase;
      std::string label = "fused(";
      std::unordered_set<int> scratch;
      for (size_t idx : open.members) {
        const View& o = g.nodes[idx].outputs[0];
        bool only_here = g.buffers[o.buffer].kind == BufferKind::kTemp && writers[o.buffer] == 1 && covers(g, o);
        for (size_t r : readers[o.buffer]) only_here = only_here && in_group.count(r) != 0;
        if (only_here) scratch.insert(o.buffer);
      }
      std::unordered_set<int> seen_in, seen_out;
      for (size_t k = 0; k < open.members.size(); ++k) {
        Node m = std::move(g.nodes[open.members[k]]);
        taken[open.members[k]] = true;
        label += (k ? ", " : "") + std::string(op_name(m.op));
        const Shape over = iteration_shape(m);
        for (View& v : m.inputs) {
          if (!v.defined()) continue;
          v = expand_to(v, over);
          if (scratch.count(v.buffer) == 0 && seen_in.insert(v.buffer).second) f.inputs.push_back(v);
        }
        if (scratch.count(m.outputs[0].buffer) == 0 && seen_out.insert(m.outputs[0].buffer).second)
          f.outputs.push_back(m.outputs[0]);
        f.body.push_back(std::move(m));
      }
      for (int b : scratch) g.buffers[b].kind = BufferKind::kScratch;
      f.label = label + ")";
      ++stats.fused_groups;
      stats.fused_nodes += static_cast<int>(open.members.size());
      groups.emplace(open.members.back(), std::move(f));
    }
    open = OpenGroup{};
  };

  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (fusible(n) && !open.empty() && open.accepts(g, n)) {
      open.add(n, i);
      continue;
    }
    if (!open.empty() && (fusible(n) || open.interacts(n))) close();
    if (fusible(n)) {
      open.shape = iteration_shape(n);
      open.device = g.buffers[n.outputs[0].buffer].device;
      if (open.accepts(g, n)) open.add(n, i);
    }
  }
  close();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = groups.find(i); it != groups.end()) {
      out.push_back(std::move(it->second));
    } else if (!taken[i]) {
      out.push_back(std::move(g.nodes[i]));
    }
  }
  g.nodes = std::move(out);
}

// --- in-place reuse --------------------------------------------------------------------------------

void reuse_in_place(Graph& g, PassStats& stats) {
  std::vector<int> last_use(g.buffers.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for_each_read(g.nodes[i], [&](const View& v) { last_use[v.buffer] = static_cast<int>(i); });
    for_each_write(g.nodes[i], [&](const View& v) { last_use[v.buffer] = static_cast<int>(i); });
  }
  for (const View& v : g.outputs) last_use[v.buffer] = static_cast<int>(g.nodes.size());
  const std::vector<int> writers = count_writers(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    // An elementwise kernel reads element i of each input before writing element i of its result, so
    // the result may take the place of an input with the same geometry.
    if (!elementwise(n)) continue;
    const View& out = n.outputs[0];
    if (!fresh_outputs(g, n, writers)) continue;
    for (const View& in : n.inputs) {
      if (!in.defined() || in.buffer == out.buffer || g.buffers[in.buffer].kind != BufferKind::kTemp) continue;
      if (!covers(g, in) || in.shape != out.shape || in.dtype != out.dtype ||
          last_use[in.buffer] != static_cast<int>(i))
        continue;
      bool other_views = false;
      for (const View& o : n.inputs) other_views = other_views || (o.buffer == in.buffer && !(o == in));
      if (other_views) continue;
      const int old = out.buffer;
      const View with = in;
      for_each_view_from(g, i, [&](View& v) {
        if (v.buffer == old) v.buffer = with.buffer;
      });
      last_use[with.buffer] = last_use[old];
      ++stats.in_place;
      break;
    }
  }
}

// --- memory planning -------------------------------------------------------------------------------

MemoryPlan plan_memory(Graph& g) {
  constexpr int64_t kAlign = 64;
  const int num = static_cast<int>(g.buffers.size());
  std::vector<int> first(num, -1), last(num, -1);
  auto touch = [&](int b, int i) {
    if (first[b] < 0) first[b] = i;
    last[b] = i;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for_each_read(g.nodes[i], [&](const View& v) { touch(v.buffer, static_cast<int>(i)); });
    for_each_write(g.nodes[i], [&](const View& v) { touch(v.buffer, static_cast<int>(i)); });
  }
  std::vector<int> temps;
  MemoryPlan plan;
  for (int b = 0; b < num; ++b) {
    if (g.buffers[b].kind != BufferKind::kTemp) continue;
    if (first[b] < 0) continue;  // never used after the passes
    temps.push_back(b);
    plan.temp_bytes += g.buffers[b].nbytes;
    plan.largest_temp_bytes = std::max(plan.largest_temp_bytes, g.buffers[b].nbytes);
  }
  std::vector<int64_t> live(g.nodes.size() + 1, 0);  // bytes alive at each step, by differences
  for (int b : temps) {
    const int64_t size = (g.buffers[b].nbytes + kAlign - 1) / kAlign * kAlign;
    live[static_cast<size_t>(first[b])] += size;
    live[static_cast<size_t>(last[b]) + 1] -= size;
  }
  for (int64_t i = 0, sum = 0; i < static_cast<int64_t>(g.nodes.size()); ++i) {
    sum += live[static_cast<size_t>(i)];
    plan.live_bytes = std::max(plan.live_bytes, sum);
  }
  // Largest first; each takes the smallest gap that fits among the placed buffers alive with it.
  std::stable_sort(temps.begin(), temps.end(), [&](int a, int b) { return g.buffers[a].nbytes > g.buffers[b].nbytes; });
  std::vector<int> placed;
  for (int b : temps) {
    const int64_t size = (g.buffers[b].nbytes + kAlign - 1) / kAlign * kAlign;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int p : placed) {
      if (first[p] <= last[b] && first[b] <= last[p]) {
        const int64_t psize = (g.buffers[p].nbytes + kAlign - 1) / kAlign * kAlign;
        busy.emplace_back(g.buffers[p].arena_offset, g.buffers[p].arena_offset + psize);
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo - cursor >= size && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    if (best < 0) best = cursor;
    g.buffers[b].arena_offset = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + size);
    placed.push_back(b);
  }
  return plan;
}

}  // namespace ember::graph
