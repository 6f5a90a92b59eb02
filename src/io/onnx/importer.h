// The ONNX importer's internals: values, a node's view of its inputs and attributes, and the op
// table (ops.cpp) that maps each ONNX op onto ember ops.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/tensor.h"
#include "io/onnx/proto.h"

namespace ember::onnx::detail {

// A value of the graph. Static values are known before the inputs' data is: constants,
// integer initializers, and what ops compute from them and from the inputs' shapes (Shape). They
// are computed on the host, outside any trace, and may be read (a Reshape's target shape).
struct Value {
  Tensor tensor;
  bool is_static = false;
};

// ember's dtype for an ONNX element type, or an error naming `what`.
DType dtype_of(int32_t onnx_type, const std::string& what);
// A TensorProto as a new CPU tensor (tensor_bytes' rules; base_dir for external data).
Tensor tensor_of(const ::onnx::TensorProto& proto, const std::string& base_dir, const std::string& what);

// What an op handler sees of one node.
class NodeContext {
 public:
  NodeContext(const ::onnx::NodeProto& node, int64_t opset, std::span<const Value* const> inputs, bool training,
              const std::string& base_dir)
      : node_(node), opset_(opset), inputs_(inputs), training_(training), base_dir_(base_dir) {}

  const ::onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }
  bool training() const { return training_; }
  const std::string& base_dir() const { return base_dir_; }

  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has(int i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  const Tensor& input(int i) const;  // an error when absent
  bool is_static(int i) const { return has(i) && inputs_[i]->is_static; }
  // A static integer input's values (a shape, axes, pads...): an error when it is computed from data.
  std::vector<int64_t> ints(int i) const;
  // A static input's single value as a double.
  double scalar(int i) const;

  bool has_attr(std::string_view name) const { return attr(name) != nullptr; }
  const ::onnx::AttributeProto* attr(std::string_view name) const;
  int64_t attr_int(std::string_view name, int64_t fallback) const;
  float attr_float(std::string_view name, float fallback) const;
  std::string attr_string(std::string_view name, const std::string& fallback) const;
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;
  std::optional<std::vector<float>> attr_floats(std::string_view name) const;

  // "Conv node \"/conv1/Conv\"": the node as errors name it.
  std::string what() const;
  template <class... Args>
  [[noreturn]] void fail(Args&&... args) const {
    EMBER_FAIL("[onnx] ", what(), ": ", std::forward<Args>(args)...);
  }

 private:
  const ::onnx::NodeProto& node_;
  int64_t opset_;
  std::span<const Value* const> inputs_;
  bool training_;
  const std::string& base_dir_;
};

using OpFn = std::vector<Tensor> (*)(const NodeContext& ctx);

struct OpDef {
  std::string_view op_type;
  int since;  // the first opset of the default domain ember imports it at
  OpFn fn;
  // Ops whose outputs depend only on the inputs' shapes (Shape, Size): static even when the input is not.
  bool shape_only = false;
  // Ops that must never be computed ahead of time (random ones in training).
  bool never_static = false;
};

// The op `op_type` of `domain`, or nullptr.
const OpDef* find_op(std::string_view domain, std::string_view op_type);

// "" when the node can be imported at `opset`, else why not (an unknown op, an opset older than the
// table's, an attribute value ember does not implement).
std::string unsupported_reason(const ::onnx::NodeProto& node, int64_t opset);

}  // namespace ember::onnx::detail
