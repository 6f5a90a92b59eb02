// The graph IR's helpers: read/write sets, coverage, and the text and Graphviz dumps.
#include "graph/ir.h"

#include <sstream>

namespace ember::graph {

const char* buffer_kind_name(BufferKind kind) {
  switch (kind) {
    case BufferKind::kArgument:
      return "arg";
    case BufferKind::kState:
      return "state";
    case BufferKind::kConstant:
      return "const";
    case BufferKind::kTemp:
      return "temp";
    case BufferKind::kOutput:
      return "out";
    case BufferKind::kScratch:
      return "scratch";
  }
  return "?";
}

int64_t View::extent_bytes() const {
  if (shape.numel() == 0) return 0;
  int64_t last = 0;
  for (int d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
  return (last + 1) * dtype_size(dtype);
}

void for_each_read(const Node& node, const std::function<void(const View&)>& fn) {
  for (const View& v : node.inputs) {
    if (v.defined()) fn(v);
  }
  // An update reads what it writes; so do host calls (their outputs are what they touched).
  const bool reads_outputs =
      node.kind == NodeKind::kHost || (node.kind == NodeKind::kKernel && has_trait(node.op, kUpdate));
  if (reads_outputs) {
    for (const View& v : node.outputs) {
      if (v.defined()) fn(v);
    }
  }
}

void for_each_write(const Node& node, const std::function<void(const View&)>& fn) {
  for (const View& v : node.outputs) {
    if (v.defined()) fn(v);
  }
}

void set_random_key(Attrs& attrs, uint64_t seed, uint64_t first_block) {
  std::visit(
      [&](auto& a) {
        if constexpr (requires {
                        a.seed;
                        a.first_block;
                      }) {
          a.seed = seed;
          a.first_block = first_block;
        }
      },
      attrs);
}

bool covers(const Graph& g, const View& view) {
  return view.defined() && view.offset == 0 && view.contiguous() &&
         view.shape.numel() * dtype_size(view.dtype) == g.buffers[view.buffer].nbytes;
}

std::string node_name(const Node& node) {
  switch (node.kind) {
    case NodeKind::kKernel:
      return op_name(node.op);
    case NodeKind::kFused:
      return node.label;
    case NodeKind::kHost:
      return "host " + node.label;
    case NodeKind::kGradSlot:
      return "set_grad";
  }
  return "?";
}

namespace {

void write_view(std::ostream& out, const View& v) {
  if (!v.defined()) {
    out << "_";
    return;
  }
  out << "%" << v.buffer;
  if (v.offset != 0) out << "+" << v.offset;
  if (!v.contiguous()) out << "/" << v.strides;
}

void write_geometry(std::ostream& out, const View& v) { out << dtype_name(v.dtype) << v.shape; }

void write_node(std::ostream& out, const Node& n, const std::string& indent) {
  out << indent;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    out << (i ? ", " : "");
    write_view(out, n.outputs[i]);
  }
  out << (n.outputs.empty() ? "" : " = ") << node_name(n) << "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    out << (i ? ", " : "");
    write_view(out, n.inputs[i]);
  }
  out << ")";
  if (!n.outputs.empty() && n.outputs[0].defined()) {
    out << " ";
    write_geometry(out, n.outputs[0]);
  }
  if (n.draw >= 0) out << " draw " << n.draw;
  out << "\n";
  for (const Node& m : n.body) write_node(out, m, indent + "    ");
}

}  // namespace

std::string Graph::dump() const {
  std::ostringstream out;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const Buffer& buf = buffers[b];
    out << "%" << b << ": " << buffer_kind_name(buf.kind) << " " << buf.nbytes << " bytes";
    if (buf.kind == BufferKind::kArgument) out << " (argument " << buf.argument << ")";
    if (buf.arena_offset >= 0) out << " @" << buf.arena_offset;
    out << "\n";
  }
  for (const Node& n : nodes) write_node(out, n, "  ");
  out << "  return";
  for (size_t i = 0; i < outputs.size(); ++i) {
    out << (i ? ", " : " ");
    write_view(out, outputs[i]);
  }
  out << "\n";
  return out.str();
}

std::string Graph::dot() const {
  std::ostringstream out;
  out << "digraph ember {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  for (size_t b = 0; b < buffers.size(); ++b) {
    out << "  b" << b << " [shape=ellipse, label=\"%" << b << " " << buffer_kind_name(buffers[b].kind) << "\"];\n";
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    out << "  n" << i << " [shape=box, label=\"" << node_name(n) << "\"];\n";
    for_each_read(n, [&](const View& v) { out << "  b" << v.buffer << " -> n" << i << ";\n"; });
    for_each_write(n, [&](const View& v) { out << "  n" << i << " -> b" << v.buffer << ";\n"; });
  }
  out << "}\n";
  return out.str();
}

}  // namespace ember::graph
