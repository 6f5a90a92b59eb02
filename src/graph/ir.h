// The graph IR: one representation for traced functions (ember::compile) and, later, imported
// models. Note [graph IR]:
//
// A graph is a list of nodes in execution order over buffers. A buffer is one block of memory the
// graph reads or writes (an argument's storage, a parameter, a temporary); a node reads and writes
// views of buffers (byte offset, dtype, shape, strides), exactly the operands its kernel receives.
// The IR is below views: view ops (reshape, permute, slice, expand) run no kernel and appear only as
// the geometry of the operands that read through them, so a double transpose or a reshape chain
// costs nothing and needs no pass.
//
// Node kinds:
//   kKernel     one primitive: op, typed attributes, operands; runs its registered kernel;
//   kFused      a group of elementwise kernels run tile by tile (graph/fused.cpp): `body` holds the
//               member nodes; buffers only the group uses are kScratch and never reach memory;
//   kHost       host code that changes state besides tensors (an optimizer's step, a scheduler):
//               replayed by calling it; its operands are the buffers it touched when traced;
//   kGradSlot   sets a parameter's .grad to a buffer's tensor (or to none), as backward did.
//
// Buffers are kArgument (bound to an argument per call), kState (outlives a call: parameters,
// gradients, optimizer state, captured tensors; kept at its traced address), kConstant (computed
// once by constant folding), kTemp (lives within a call: an offset in the arena), kOutput (returned:
// allocated per call) and kScratch (inside a fused group only).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/attrs.h"
#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/phase.h"
#include "ember/primitives.h"
#include "ember/shape.h"
#include "ember/tensor.h"
#include "ops/dispatch.h"

namespace ember::graph {

enum class BufferKind : uint8_t { kArgument, kState, kConstant, kTemp, kOutput, kScratch };
const char* buffer_kind_name(BufferKind kind);

struct Buffer {
  BufferKind kind = BufferKind::kTemp;
  int64_t nbytes = 0;
  Device device;
  std::shared_ptr<StorageImpl> storage;  // the traced storage (released for temps once planned)
  int argument = -1;                     // kArgument: which argument
  int64_t argument_offset = 0;           // kArgument: bytes from the storage start to the argument's first element
  int64_t arena_offset = -1;             // kTemp: planned offset in the arena
  uint32_t version = 0;                  // kState read by folded constants: the version they assumed
  bool guard_version = false;            // check `version` before each call
};

// An operand: a view of a buffer. buffer < 0 is an absent optional operand.
struct View {
  int buffer = -1;
  int64_t offset = 0;  // bytes from the buffer's start
  DType dtype = kFloat32;
  Shape shape;
  Strides strides;

  bool defined() const { return buffer >= 0; }
  bool contiguous() const { return is_contiguous_layout(shape, strides); }
  // Bytes from the first to one past the last element reached (0 for an empty view).
  int64_t extent_bytes() const;
  bool operator==(const View&) const = default;
};

enum class NodeKind : uint8_t { kKernel, kFused, kHost, kGradSlot };

struct Node {
  NodeKind kind = NodeKind::kKernel;
  OpKind op = OpKind::kCopy;  // kKernel; the first member of a kFused group
  Attrs attrs;
  std::vector<View> inputs;
  std::vector<View> outputs;
  int draw = -1;  // a random op: the draw (Graph::draws) its attributes carry
  // A kernel whose attributes the host computes before each run (Note [host attributes] in
  // ops/dispatch.h): the executor reads them from here, and leaves the kernel out when they say so.
  std::shared_ptr<dispatch::HostAttrs> host_attrs;
  int index = -1;                 // kHost: Graph::hosts; kGradSlot: Graph::grad_slots
  std::vector<Node> body;         // kFused: the members, in order
  std::string label;              // kFused: what it fused; kHost: the region's name
  Phase phase = Phase::kForward;  // when traced (forward, backward, optimizer), for the profiler
};

struct HostCall {
  std::string name;
  std::function<void()> replay;
};

// leaf.grad = grad (undefined: none).
struct GradSlot {
  std::shared_ptr<TensorImpl> leaf;
  std::shared_ptr<TensorImpl> grad;
  int buffer = -1;  // grad's buffer
};

// A leaf whose .grad the graph reads as it was when traced (accumulation): checked before each call.
struct GradGuard {
  std::shared_ptr<TensorImpl> leaf;
  const TensorImpl* grad = nullptr;
};

struct RandomDraw {
  uint64_t seed = 0;
  uint64_t first_block = 0;
  int64_t blocks = 0;
};

struct Graph {
  std::vector<Buffer> buffers;
  std::vector<Node> nodes;
  std::vector<View> outputs;  // the returned tensors
  std::vector<HostCall> hosts;
  std::vector<GradSlot> grad_slots;
  std::vector<GradGuard> grad_guards;
  std::vector<RandomDraw> draws;
  int num_arguments = 0;

  int add_buffer(Buffer b) {
    buffers.push_back(std::move(b));
    return static_cast<int>(buffers.size()) - 1;
  }
  // Text, one line per node: "%3 = mul(%1, %2) f32[64,128]"; buffers listed first.
  std::string dump() const;
  // Graphviz dot: buffers as ellipses, nodes as boxes.
  std::string dot() const;
};

// The buffers a node reads and writes (kUpdate outputs and partial writes count as reads too).
void for_each_read(const Node& node, const std::function<void(const View&)>& fn);
void for_each_write(const Node& node, const std::function<void(const View&)>& fn);
// Sets the Philox key of a random op's attributes (a draw's seed and first block).
void set_random_key(Attrs& attrs, uint64_t seed, uint64_t first_block);
// Does `view` cover all of its buffer, contiguously from its start?
bool covers(const Graph& g, const View& view);
// The op's short name of a node ("mul", "fused(mul, sigmoid, add)", "host Adam").
std::string node_name(const Node& node);

}  // namespace ember::graph
