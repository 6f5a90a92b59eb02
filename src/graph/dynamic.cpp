// Dynamic dims (Note [dynamic dims] in graph/dynamic.h).
#include "graph/dynamic.h"

#include <sstream>

#include "graph/passes.h"

namespace ember::graph {
namespace {

// Every integer of a graph that a size can enter, in one fixed order: buffers' bytes and argument
// offsets, views' offsets, sizes and strides (nodes, fused members, results), draws' blocks.
template <class F>
void for_each_size(Graph& g, F&& f) {
  for (Buffer& b : g.buffers) {
    f(b.nbytes);
    f(b.argument_offset);
  }
  auto view = [&](View& v) {
    f(v.offset);
    for (int d = 0; d < v.shape.size(); ++d) f(v.shape[d]);
    for (int d = 0; d < v.strides.size(); ++d) f(v.strides[d]);
  };
  auto node = [&](auto& self, Node& n) -> void {
    for (View& v : n.inputs) view(v);
    for (View& v : n.outputs) view(v);
    for (Node& m : n.body) self(self, m);
  };
  for (Node& n : g.nodes) node(node, n);
  for (View& v : g.outputs) view(v);
  for (RandomDraw& d : g.draws) f(d.blocks);
}

std::vector<int64_t> sizes_of(Graph& g) {
  std::vector<int64_t> values;
  for_each_size(g, [&](int64_t& v) { values.push_back(v); });
  return values;
}

bool same_view_structure(const View& a, const View& b) {
  return a.buffer == b.buffer && a.dtype == b.dtype && a.shape.size() == b.shape.size() &&
         a.strides.size() == b.strides.size();
}

// Attributes with a random op's key left out (the executor sets it before each run).
Attrs keyless(Attrs attrs) {
  set_random_key(attrs, 0, 0);
  return attrs;
}

bool same_node_structure(const Node& a, const Node& b) {
  if (a.kind != b.kind || a.op != b.op || a.draw != b.draw || a.index != b.index || a.label != b.label ||
      a.phase != b.phase || (a.host_attrs == nullptr) != (b.host_attrs == nullptr) ||
      a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size() || a.body.size() != b.body.size())
    return false;
  // Attributes the host computes before each run (an optimizer's step count) are not the graph's.
  if (a.host_attrs == nullptr && !(keyless(a.attrs) == keyless(b.attrs))) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    if (!same_view_structure(a.inputs[i], b.inputs[i])) return false;
  }
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    if (!same_view_structure(a.outputs[i], b.outputs[i])) return false;
  }
  for (size_t i = 0; i < a.body.size(); ++i) {
    if (!same_node_structure(a.body[i], b.body[i])) return false;
  }
  return true;
}

}  // namespace

std::string structure_difference(const Graph& a, const Graph& b) {
  std::ostringstream why;
  if (a.num_arguments != b.num_arguments || a.buffers.size() != b.buffers.size()) {
    why << "the traces have " << a.buffers.size() << " and " << b.buffers.size() << " buffers";
    return why.str();
  }
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const Buffer &x = a.buffers[i], &y = b.buffers[i];
    if (x.kind != y.kind || x.device != y.device || x.argument != y.argument) {
      why << "buffer %" << i << " is " << buffer_kind_name(x.kind) << " in one trace and " << buffer_kind_name(y.kind)
          << " in the other";
      return why.str();
    }
  }
  if (a.nodes.size() != b.nodes.size()) {
    why << "the traces have " << a.nodes.size() << " and " << b.nodes.size() << " steps";
    return why.str();
  }
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    if (!same_node_structure(a.nodes[i], b.nodes[i])) {
      why << "step " << i << " (" << node_name(a.nodes[i]) << ") differs in more than its sizes";
      return why.str();
    }
  }
  bool same = a.outputs.size() == b.outputs.size() && a.hosts.size() == b.hosts.size() &&
              a.grad_slots.size() == b.grad_slots.size() && a.grad_guards.size() == b.grad_guards.size() &&
              a.draws.size() == b.draws.size();
  for (size_t i = 0; same && i < a.outputs.size(); ++i) same = same_view_structure(a.outputs[i], b.outputs[i]);
  for (size_t i = 0; same && i < a.hosts.size(); ++i) same = a.hosts[i].name == b.hosts[i].name;
  for (size_t i = 0; same && i < a.grad_slots.size(); ++i) {
    same = a.grad_slots[i].leaf == b.grad_slots[i].leaf && a.grad_slots[i].buffer == b.grad_slots[i].buffer;
  }
  for (size_t i = 0; same && i < a.grad_guards.size(); ++i) same = a.grad_guards[i].leaf == b.grad_guards[i].leaf;
  return same ? "" : "the traces return, replay or assign gradients differently";
}

std::variant<SizeTemplate, std::string> SizeTemplate::generalize(const Graph& a, int64_t size_a, const Graph& b,
                                                                 int64_t size_b) {
  if (size_a == size_b || size_a < 1 || size_b < 1) return std::string("the traces have the same size");
  if (std::string why = structure_difference(a, b); !why.empty()) return why;
  Graph a_copy = a, base = b;
  const std::vector<int64_t> va = sizes_of(a_copy), vb = sizes_of(base);
  SizeTemplate t;
  t.growth_.assign(vb.size(), Growth::kFixed);
  t.slopes_.assign(vb.size(), 0);
  for (size_t i = 0; i < vb.size(); ++i) {
    if (va[i] == vb[i]) continue;
    // v_a / size_a == v_b / size_b, in integers (a product past 64 bits does not generalize).
    int64_t lhs = 0, rhs = 0;
    if (!__builtin_mul_overflow(va[i], size_b, &lhs) && !__builtin_mul_overflow(vb[i], size_a, &rhs) && lhs == rhs) {
      t.growth_[i] = Growth::kMultiple;
    } else if ((vb[i] - va[i]) % (size_b - size_a) == 0) {
      t.growth_[i] = Growth::kAffine;  // a multiple plus a constant, to be confirmed
      t.slopes_[i] = (vb[i] - va[i]) / (size_b - size_a);
      t.confirmed_ = false;
    } else {
      std::ostringstream why;
      why << "a size of the graph goes from " << va[i] << " to " << vb[i] << " as the dynamic dims go from " << size_a
          << " to " << size_b << ", which is neither a multiple of them nor a whole number per unit of them";
      return why.str();
    }
  }
  // Buffers come first in for_each_size: two integers each, bytes first.
  for (size_t k = 0; k < base.buffers.size(); ++k) {
    Buffer& buffer = base.buffers[k];
    if (t.growth_[2 * k] == Growth::kFixed) continue;
    if (buffer.kind != BufferKind::kTemp && buffer.kind != BufferKind::kOutput &&
        buffer.kind != BufferKind::kArgument) {
      std::ostringstream why;
      why << "buffer %" << k << " (" << buffer_kind_name(buffer.kind)
          << ") outlives a call and changes size with the dynamic dims";
      return why.str();
    }
    buffer.storage.reset();  // its traced value is of size_b only: computed at every size
  }
  t.values_ = vb;
  t.base_ = std::move(base);
  t.size_a_ = size_a;
  t.size_b_ = size_b;
  return t;
}

std::variant<Graph, std::string> SizeTemplate::at(int64_t size) const {
  if (size < 1) return "size " + std::to_string(size) + " is not positive";
  Graph g = base_;
  size_t i = 0;
  bool whole = true, overflow = false, negative = false;
  for_each_size(g, [&](int64_t& v) {
    int64_t scaled = 0;
    switch (growth_[i]) {
      case Growth::kFixed:
        break;
      case Growth::kMultiple:
        overflow = overflow || __builtin_mul_overflow(values_[i], size, &scaled);
        whole = whole && scaled % size_b_ == 0;
        v = scaled / size_b_;
        break;
      case Growth::kAffine:
        overflow = overflow || __builtin_mul_overflow(slopes_[i], size - size_b_, &scaled) ||
                   __builtin_add_overflow(values_[i], scaled, &v);
        negative = negative || v < 0;
        break;
    }
    ++i;
  });
  if (overflow) return "a size of the graph would overflow 64 bits at size " + std::to_string(size);
  if (!whole) return "a size of the graph would not be a whole number at size " + std::to_string(size);
  if (negative) return "a size of the graph would be negative at size " + std::to_string(size);
  return g;
}

std::string SizeTemplate::confirm(const Graph& c, int64_t size_c) {
  if (std::string why = structure_difference(base_, c); !why.empty()) return why;
  auto made = at(size_c);
  if (auto* why = std::get_if<std::string>(&made)) return *why;
  Graph traced = c;
  const std::vector<int64_t> expected = sizes_of(std::get<Graph>(made)), seen = sizes_of(traced);
  for (size_t i = 0; i < seen.size(); ++i) {
    if (expected[i] == seen[i]) continue;
    std::ostringstream why;
    why << "a size of the graph is " << seen[i] << " at size " << size_c << " where the traces at sizes " << size_a_
        << " and " << size_b_ << " give " << expected[i]
        << ": it is not a multiple of the dynamic dims plus a constant";
    return why.str();
  }
  confirmed_ = true;
  return "";
}

void release_traced_temps(Graph& g) {
  Graph folded = g;
  PassStats stats;
  fold_constants(folded, stats);
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    Buffer& buffer = g.buffers[b];
    const bool temp = buffer.kind == BufferKind::kTemp || buffer.kind == BufferKind::kOutput;
    if (temp && folded.buffers[b].kind != BufferKind::kConstant) buffer.storage.reset();
  }
}

}  // namespace ember::graph
