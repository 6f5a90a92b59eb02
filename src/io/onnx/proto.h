// The ONNX file format at the protobuf level: parsing a ModelProto from bytes, validating the graph
// before anything trusts it, and decoding a TensorProto's data (inline, typed fields or external
// data) into little-endian bytes. No tensors are made here (import.cpp does that), so a fuzzer can
// drive everything that reads untrusted bytes with only protobuf linked (scripts/fuzz).
//
// The schema is the protobuf one Debian packages (libonnx-dev), which may be older than the file:
// protobuf keeps fields it does not know, so files from newer exporters (IR 10 and later) parse;
// what matters is that the fields ember reads mean what they meant, which ONNX guarantees.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::onnx_format {

// The IR versions and default-domain opsets ember reads: IR 3 (opset imports) through 14, opsets
// 7 through 28 (what the onnx 1.23 package writes). The versions after 23 of the ops ember maps
// only add element types (float8, 4- and 2-bit integers...) and Range's stash_type, so the
// handlers' semantics hold for them. Anything outside is an error naming the version, not a guess.
inline constexpr int64_t kMinIrVersion = 3;
inline constexpr int64_t kMaxIrVersion = 14;
inline constexpr int64_t kMinOpset = 7;
inline constexpr int64_t kMaxOpset = 28;

// Parses `bytes` (a whole .onnx file) and validates it (validate() below). `what` names the file
// in errors; `base_dir` is where external data files are looked up ("" for none allowed).
::onnx::ModelProto parse_model(std::string_view bytes, const std::string& what);

// Checks what the importer relies on, each failure an ember::Error naming `what` and the problem:
// the IR version and the default domain's opset are known; the graph has a name-unique set of
// inputs, initializers and node outputs; every node input is defined before it is used (the graph
// is topologically sorted, as the spec requires); every graph output is defined; every initializer
// has a known data type, non-negative dims whose element count does not overflow, and data of the
// right size (checked by tensor_bytes' rules without reading external files).
void validate(const ::onnx::ModelProto& model, const std::string& what);

// The default-domain ("" or "ai.onnx") opset the model imports.
int64_t default_opset(const ::onnx::ModelProto& model);

// The size in bytes of one element of ONNX data type `type` (TensorProto::DataType), 0 for types
// ember does not read (strings, complex, 4- and 8-bit floats).
int64_t element_size(int32_t type);
// The data type's name as the spec writes it ("FLOAT", "INT64", ...), or "type N".
std::string type_name(int32_t type);

// The number of elements `dims` describe; an error naming `what` when one is negative or the
// product overflows int64.
int64_t element_count(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what);

// A tensor's data as packed little-endian bytes of its element type (element_count * element_size
// bytes): from raw_data, from the typed repeated fields (float_data, int32_data holding 8- and
// 16-bit values, int64_data, double_data, uint64_data), or from an external file under `base_dir`
// (location relative to it, no '..' and no absolute paths; offset and length inside the file).
std::string tensor_bytes(const ::onnx::TensorProto& tensor, const std::string& base_dir, const std::string& what);
// The same in two steps, with no intermediate copy: the size, after every check (an external file
// must hold it), then the bytes written to `out`, which holds that many.
int64_t tensor_data_size(const ::onnx::TensorProto& tensor, const std::string& base_dir, const std::string& what);
void read_tensor_data(const ::onnx::TensorProto& tensor, const std::string& base_dir, const std::string& what,
                      char* out);

// One line per node op type in graph order of first use: (domain, op type, how many nodes).
struct OpUse {
  std::string domain;
  std::string op_type;
  int count = 0;
};
std::vector<OpUse> op_uses(const ::onnx::GraphProto& graph);

}  // namespace ember::onnx_format
