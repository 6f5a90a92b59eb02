// Dynamic dims: one traced graph stands for every size of the dims marked dynamic. Note [dynamic dims]:
//
// ember::compile records kernels with their sizes, so a new batch size would mean a new trace (an
// eager run of the whole function under the tracer). With CompileOptions::dynamic, the raw traces
// (before any pass) at two sizes a != b of the marked dims are compared instead. When they hold the
// same kernels, attributes, buffers and views, and every integer that differs between them (a
// buffer's bytes, a view's offset, sizes and strides, a random draw's blocks) is the same multiple
// of the size in both (v_a / a == v_b / b), the pair becomes a SizeTemplate: the graph at any size s
// is the trace at b with each such integer scaled to v_b * s / b. The passes, the memory plan and the
// executable are then built for s as for a trace, but nothing runs eagerly.
//
// Why proportional, and why two traces: a batch dim enters a graph only through products (bytes,
// strides of the dims before it, element counts), which are multiples of it. Two sizes tell such a
// product from most else the trace holds: a size the function squares (attention's L x L scores)
// or rounds has a different ratio at a and at b, and a value computed from the size (1 / batch in a
// fill, arange(L)) is an attribute that differs, so either makes the traces not generalize and
// every size traces as before; explain() says why. A scaled integer that would not be whole at s (a
// size halved by a stride of 2) makes that s trace as well. What two sizes cannot reveal is a size
// the function clamps or rounds only beyond them (max(batch, 8) traced at 16 and 32): leave such a
// dim static.
//
// Offsets from a multiple: a growing KV cache (keys of L positions concatenated with the new one's)
// holds sizes L + 1, strides (L + 1) * d and bytes that are a multiple of the size plus a constant.
// An integer that is not proportional but changes by a whole number per unit of the size (v_b - v_a
// divisible by b - a) is taken as v = slope * s + constant. Any two points fit such a line (L x L
// at 4 and 6 as 10 L - 24), so a template holding one is not used until a trace at a third size
// equals the graph the template gives there; until then every size traces, and a template the third
// trace contradicts is dropped. A cache of L positions costs three traces (L, L + 1, L + 2), and
// every later length is built from the template.
//
// The first trace of a training step differs from the later ones (gradients and optimizer state are
// created by it), so the template comes from the first two traces with the same structure: the
// sizes of a warm-up call and two more traced, every further size instantiated. Buffers that outlive
// a call (parameters, gradients, optimizer state) must keep their size; they are shared by the
// plans of every size, as the plans of one traced function always share them.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "graph/ir.h"

namespace ember::graph {

class SizeTemplate {
 public:
  // A template from the raw traces `a` (at size_a) and `b` (at size_b), or why they do not make one.
  static std::variant<SizeTemplate, std::string> generalize(const Graph& a, int64_t size_a, const Graph& b,
                                                            int64_t size_b);
  // The raw graph a trace at `size` would record, or why it cannot be derived.
  std::variant<Graph, std::string> at(int64_t size) const;
  // Whether sizes may be built from it: at once when every integer that changes is a multiple of
  // the size, else once a trace at a third size has followed it (confirm).
  bool confirmed() const { return confirmed_; }
  // Checks the raw trace `c` at a third size against the graph the template gives there: "" (and the
  // template confirmed) when they agree, else where they differ.
  std::string confirm(const Graph& c, int64_t size_c);

  int64_t size_a() const { return size_a_; }
  int64_t size_b() const { return size_b_; }

 private:
  enum class Growth : uint8_t { kFixed, kMultiple, kAffine };
  Graph base_;  // the trace at size_b_
  int64_t size_a_ = 0, size_b_ = 0;
  std::vector<int64_t> values_;  // every integer for_each_size visits, at size_b_
  std::vector<Growth> growth_;   // how each of them follows the size
  std::vector<int64_t> slopes_;  // kAffine: what each unit of the size adds to it
  bool confirmed_ = true;
};

// Why two raw traces differ in more than their sizes ("" when they do not).
std::string structure_difference(const Graph& a, const Graph& b);

// Drops the traced storage of the temporaries that constant folding would not turn into constants:
// a raw trace kept for a template holds only the values folding reads.
void release_traced_temps(Graph& g);

}  // namespace ember::graph
