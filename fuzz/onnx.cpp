// libFuzzer target for the ONNX file parser (src/io/onnx/proto.cpp). Every input goes through
// parse_model (protobuf parsing + validation); a model that passes has each initializer and each
// Constant node's tensor decoded by tensor_bytes (with no base folder, so external data must be
// refused, never read) and its ops counted by op_uses. ember::Error is the expected answer to a bad
// file; any other exception, a crash, a leak, a hang, a sanitizer report or a broken promise of the
// API (checked below) is a finding.
//
// Run: scripts/fuzz onnx  (builds build-fuzz/onnx with ASan + UBSan, replays fuzz/corpus/onnx/ and
// the test models, then fuzzes; see fuzz/README.md). Replay one input: build-fuzz/onnx FILE
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ember/error.h"
#include "fuzz/promise.h"
#include "io/onnx/proto.h"

const char* const ember_fuzz::kTarget = "onnx";

namespace {

using ember_fuzz::require;

// Decodes one tensor of a validated model. A refusal (external data, which needs a base folder)
// is fine; bytes of the wrong size are not.
void decode(const ::onnx::TensorProto& tensor) {
  try {
    const std::string bytes = ember::onnx_format::tensor_bytes(tensor, /*base_dir=*/"", "<fuzz>");
    int64_t count = 1;
    for (const int64_t d : tensor.dims()) count *= d;  // validated: non-negative, no overflow
    require(static_cast<int64_t>(bytes.size()) == count * ember::onnx_format::element_size(tensor.data_type()),
            "tensor_bytes returns element_count * element_size bytes");
    require(tensor.data_location() != ::onnx::TensorProto::EXTERNAL, "external data is refused without a base_dir");
  } catch (const ember::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ::onnx::ModelProto model;
  try {
    model = ember::onnx_format::parse_model(bytes, "<fuzz>");
  } catch (const ember::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  }
  const ::onnx::GraphProto& graph = model.graph();
  for (const auto& init : graph.initializer()) decode(init);
  for (const auto& node : graph.node()) {
    if (node.op_type() != "Constant") continue;
    for (const auto& attr : node.attribute()) {
      if (attr.has_t()) decode(attr.t());
    }
  }
  int nodes = 0;
  for (const auto& use : ember::onnx_format::op_uses(graph)) nodes += use.count;
  require(nodes == graph.node_size(), "op_uses counts every node once");
  return 0;
}
