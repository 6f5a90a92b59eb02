#include "io/onnx/proto.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <unordered_set>

#include "ember/error.h"

namespace ember::onnx_format {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX stores little-endian data; ember reads it as is");

using ::onnx::TensorProto;

bool is_default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

// The external-data entries of a tensor: location (required), offset and length (optional).
struct External {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
};

int64_t parse_size(const std::string& text, const std::string& key, const std::string& what) {
  EMBER_CHECK(!text.empty() && text.size() <= 18 && text.find_first_not_of("0123456789") == std::string::npos,
              "[onnx] ", what, ": external data ", key, " \"", text, "\" is not a non-negative integer");
  return std::stoll(text);
}

External external_of(const TensorProto& tensor, const std::string& what) {
  External ext;
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == "location") {
      ext.location = entry.value();
    } else if (entry.key() == "offset") {
      ext.offset = parse_size(entry.value(), "offset", what);
    } else if (entry.key() == "length") {
      ext.length = parse_size(entry.value(), "length", what);
    }
  }
  EMBER_CHECK(!ext.location.empty(), "[onnx] ", what, ": external data without a location");
  const std::filesystem::path location(ext.location);
  EMBER_CHECK(location.is_relative() && !location.has_root_name(), "[onnx] ", what, ": external data location \"",
              ext.location, "\" must be a path relative to the model's folder");
  for (const auto& part : location) {
    EMBER_CHECK(part != "..", "[onnx] ", what, ": external data location \"", ext.location,
                "\" must stay inside the model's folder (it has '..')");
  }
  return ext;
}

// Elements stored in the typed field that holds `type`'s values, or -1 when the type has none.
int64_t typed_count(const TensorProto& t) {
  switch (t.data_type()) {
    case TensorProto::FLOAT:
      return t.float_data_size();
    case TensorProto::DOUBLE:
      return t.double_data_size();
    case TensorProto::INT64:
      return t.int64_data_size();
    case TensorProto::UINT64:
    case TensorProto::UINT32:
      return t.uint64_data_size();
    case TensorProto::INT32:
    case TensorProto::INT16:
    case TensorProto::INT8:
    case TensorProto::UINT16:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      return t.int32_data_size();
    default:
      return -1;
  }
}

std::string tensor_what(const TensorProto& tensor, const std::string& what) {
  return what + ": tensor \"" + tensor.name() + "\"";
}

// The checks of tensor_bytes that need no file: type, dims, inline sizes, external entries.
int64_t check_tensor(const TensorProto& tensor, const std::string& what) {
  const std::string name = tensor_what(tensor, what);
  const int64_t size = element_size(tensor.data_type());
  EMBER_CHECK(size > 0, "[onnx] ", name, " has data type ", type_name(tensor.data_type()),
              ", which ember does not read");
  const int64_t count = element_count(tensor.dims(), name);
  EMBER_CHECK(count <= std::numeric_limits<int64_t>::max() / size, "[onnx] ", name, ": ", count,
              " elements overflow a byte count");
  const int64_t bytes = count * size;
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    const External ext = external_of(tensor, name);
    EMBER_CHECK(ext.length < 0 || ext.length == bytes, "[onnx] ", name, ": external data length ", ext.length,
                " does not match its shape and type (", bytes, " bytes)");
    return bytes;
  }
  if (tensor.has_raw_data()) {
    EMBER_CHECK(static_cast<int64_t>(tensor.raw_data().size()) == bytes, "[onnx] ", name, " holds ",
                tensor.raw_data().size(), " bytes of raw data, but its shape and type need ", bytes);
    return bytes;
  }
  const int64_t stored = typed_count(tensor);
  EMBER_CHECK(stored == count, "[onnx] ", name, " holds ", stored < 0 ? 0 : stored, " values, but its shape needs ",
              count);
  return bytes;
}

void check_opset(const ::onnx::ModelProto& model, const std::string& what) {
  bool found = false;
  for (const auto& opset : model.opset_import()) {
    if (!is_default_domain(opset.domain())) continue;
    EMBER_CHECK(!found, "[onnx] ", what, ": the default domain's opset is imported twice");
    found = true;
    EMBER_CHECK(opset.version() >= kMinOpset && opset.version() <= kMaxOpset, "[onnx] ", what, ": opset ",
                opset.version(), " of the default domain is not one ember reads (", kMinOpset, " to ", kMaxOpset, ")");
  }
  EMBER_CHECK(found, "[onnx] ", what, ": the model imports no opset of the default ONNX domain");
}

}  // namespace

int64_t element_size(int32_t type) {
  switch (type) {
    case TensorProto::FLOAT:
    case TensorProto::INT32:
    case TensorProto::UINT32:
      return 4;
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
    case TensorProto::UINT64:
      return 8;
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
    case TensorProto::INT16:
    case TensorProto::UINT16:
      return 2;
    case TensorProto::INT8:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

std::string type_name(int32_t type) {
  if (TensorProto::DataType_IsValid(type)) return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(type));
  switch (type) {  // types newer than the packaged schema
    case 17:
      return "FLOAT8E4M3FN";
    case 18:
      return "FLOAT8E4M3FNUZ";
    case 19:
      return "FLOAT8E5M2";
    case 20:
      return "FLOAT8E5M2FNUZ";
    case 21:
      return "UINT4";
    case 22:
      return "INT4";
    case 23:
      return "FLOAT4E2M1";
    default:
      return "type " + std::to_string(type);
  }
}

int64_t element_count(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what) {
  int64_t count = 1;
  for (const int64_t d : dims) {
    EMBER_CHECK(d >= 0, "[onnx] ", what, " has a negative dimension (", d, ")");
    EMBER_CHECK(d == 0 || count <= std::numeric_limits<int64_t>::max() / d, "[onnx] ", what,
                ": its dimensions overflow an element count");
    count *= d;
  }
  return count;
}

::onnx::ModelProto parse_model(std::string_view bytes, const std::string& what) {
  EMBER_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX), "[onnx] ", what, " is ", bytes.size(),
              " bytes; a protobuf file holds at most 2 GiB (larger weights go in external data)");
  ::onnx::ModelProto model;
  EMBER_CHECK(model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())), "[onnx] ", what,
              " is not an ONNX model (protobuf parsing failed: a truncated or corrupt file?)");
  validate(model, what);
  return model;
}

int64_t default_opset(const ::onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (is_default_domain(opset.domain())) return opset.version();
  }
  return 0;
}

void validate(const ::onnx::ModelProto& model, const std::string& what) {
  EMBER_CHECK(model.ir_version() >= kMinIrVersion && model.ir_version() <= kMaxIrVersion, "[onnx] ", what,
              ": IR version ", model.ir_version(), " is not one ember reads (", kMinIrVersion, " to ", kMaxIrVersion,
              ")");
  check_opset(model, what);
  EMBER_CHECK(model.has_graph(), "[onnx] ", what, " has no graph");
  const ::onnx::GraphProto& graph = model.graph();
  EMBER_CHECK(graph.sparse_initializer_size() == 0, "[onnx] ", what,
              ": sparse initializers are not supported (the graph has ", graph.sparse_initializer_size(), ")");

  std::unordered_set<std::string> defined;
  for (const auto& input : graph.input()) {
    EMBER_CHECK(!input.name().empty(), "[onnx] ", what, ": a graph input has no name");
    EMBER_CHECK(defined.insert(input.name()).second, "[onnx] ", what, ": the graph input \"", input.name(),
                "\" is declared twice");
  }
  std::unordered_set<std::string> initializers;
  for (const auto& init : graph.initializer()) {
    EMBER_CHECK(!init.name().empty(), "[onnx] ", what, ": an initializer has no name");
    EMBER_CHECK(initializers.insert(init.name()).second, "[onnx] ", what, ": the initializer \"", init.name(),
                "\" is given twice");
    check_tensor(init, what);
    defined.insert(init.name());  // an initializer may also be a graph input (its default value)
  }
  for (int i = 0; i < graph.node_size(); ++i) {
    const ::onnx::NodeProto& node = graph.node(i);
    const std::string node_what = what + ": node " + std::to_string(i) + " (" + node.op_type() +
                                  (node.name().empty() ? "" : " \"" + node.name() + "\"") + ")";
    EMBER_CHECK(!node.op_type().empty(), "[onnx] ", node_what, " has no op type");
    for (const auto& input : node.input()) {
      EMBER_CHECK(input.empty() || defined.contains(input), "[onnx] ", node_what, " reads \"", input,
                  "\", which no graph input, initializer or earlier node defines");
    }
    for (const auto& attr : node.attribute()) {
      if (attr.has_t()) check_tensor(attr.t(), node_what);
    }
    for (const auto& output : node.output()) {
      if (output.empty()) continue;
      EMBER_CHECK(defined.insert(output).second, "[onnx] ", node_what, " defines \"", output,
                  "\", which is already defined");
    }
  }
  EMBER_CHECK(graph.output_size() > 0, "[onnx] ", what, ": the graph has no outputs");
  for (const auto& output : graph.output()) {
    EMBER_CHECK(defined.contains(output.name()), "[onnx] ", what, ": the graph output \"", output.name(),
                "\" is not defined by any input, initializer or node");
  }
}

// An external tensor's file, checked to hold `bytes` at the tensor's offset before anything is
// allocated for it (dims can claim terabytes).
struct ExternalSource {
  std::filesystem::path path;
  int64_t offset = 0;
};

ExternalSource external_source(const TensorProto& tensor, const std::string& base_dir, const std::string& what,
                               int64_t bytes) {
  const std::string name = tensor_what(tensor, what);
  const External ext = external_of(tensor, name);
  EMBER_CHECK(!base_dir.empty(), "[onnx] ", name, " keeps its data in \"", ext.location,
              "\", but the model was not read from a file (load it by path)");
  const std::filesystem::path path = std::filesystem::path(base_dir) / ext.location;
  std::error_code error;
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  EMBER_CHECK(!error, "[onnx] ", name, ": cannot open its external data file ", path.string());
  EMBER_CHECK(ext.offset <= file_size && bytes <= file_size - ext.offset, "[onnx] ", name, ": ", bytes,
              " bytes at offset ", ext.offset, " run past the end of ", path.string(), " (", file_size, " bytes)");
  return {path, ext.offset};
}

int64_t tensor_data_size(const TensorProto& tensor, const std::string& base_dir, const std::string& what) {
  const int64_t bytes = check_tensor(tensor, what);
  if (tensor.data_location() == TensorProto::EXTERNAL) external_source(tensor, base_dir, what, bytes);
  return bytes;
}

void read_tensor_data(const TensorProto& tensor, const std::string& base_dir, const std::string& what, char* out) {
  const int64_t bytes = check_tensor(tensor, what);
  const std::string name = tensor_what(tensor, what);
  if (tensor.data_location() == TensorProto::EXTERNAL) {
    const ExternalSource source = external_source(tensor, base_dir, what, bytes);
    std::ifstream file(source.path, std::ios::binary);
    EMBER_CHECK(file.good(), "[onnx] ", name, ": cannot open its external data file ", source.path.string());
    file.seekg(source.offset);
    file.read(out, bytes);
    EMBER_CHECK(file.good() || bytes == 0, "[onnx] ", name, ": reading ", source.path.string(), " failed");
    return;
  }
  if (tensor.has_raw_data()) {
    if (bytes > 0) std::memcpy(out, tensor.raw_data().data(), static_cast<size_t>(bytes));
    return;
  }
  auto put = [&](const auto& field, auto convert) {
    for (int64_t i = 0; i < static_cast<int64_t>(field.size()); ++i) {
      const auto value = convert(field.Get(static_cast<int>(i)));
      std::memcpy(out + i * sizeof(value), &value, sizeof(value));
    }
  };
  switch (tensor.data_type()) {
    case TensorProto::FLOAT:
      put(tensor.float_data(), [](float v) { return v; });
      break;
    case TensorProto::DOUBLE:
      put(tensor.double_data(), [](double v) { return v; });
      break;
    case TensorProto::INT64:
      put(tensor.int64_data(), [](int64_t v) { return v; });
      break;
    case TensorProto::UINT64:
      put(tensor.uint64_data(), [](uint64_t v) { return v; });
      break;
    case TensorProto::UINT32:
      put(tensor.uint64_data(), [](uint64_t v) { return static_cast<uint32_t>(v); });
      break;
    case TensorProto::INT32:
      put(tensor.int32_data(), [](int32_t v) { return v; });
      break;
    case TensorProto::INT16:
      put(tensor.int32_data(), [](int32_t v) { return static_cast<int16_t>(v); });
      break;
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      put(tensor.int32_data(), [](int32_t v) { return static_cast<uint16_t>(v); });
      break;
    case TensorProto::INT8:
      put(tensor.int32_data(), [](int32_t v) { return static_cast<int8_t>(v); });
      break;
    case TensorProto::UINT8:
      put(tensor.int32_data(), [](int32_t v) { return static_cast<uint8_t>(v); });
      break;
    case TensorProto::BOOL:
      put(tensor.int32_data(), [](int32_t v) { return static_cast<uint8_t>(v != 0); });
      break;
    default:
      EMBER_FAIL("[onnx] ", name, " has data type ", type_name(tensor.data_type()), ", which ember does not read");
  }
}

std::string tensor_bytes(const TensorProto& tensor, const std::string& base_dir, const std::string& what) {
  std::string data(static_cast<size_t>(tensor_data_size(tensor, base_dir, what)), '\0');
  read_tensor_data(tensor, base_dir, what, data.data());
  return data;
}

std::vector<OpUse> op_uses(const ::onnx::GraphProto& graph) {
  std::vector<OpUse> uses;
  std::map<std::pair<std::string, std::string>, size_t> index;  // (domain, op type) -> position in uses
  for (const auto& node : graph.node()) {
    const std::string domain = is_default_domain(node.domain()) ? "" : node.domain();
    auto [it, inserted] = index.try_emplace({domain, node.op_type()}, uses.size());
    if (inserted) {
      uses.push_back({domain, node.op_type(), 1});
    } else {
      ++uses[it->second].count;
    }
  }
  return uses;
}

}  // namespace ember::onnx_format
