// ember::onnx: loading a model (initializers become parameters, buffers or constants), folding what
// constants determine, recognizing GELU's erf form, and running the graph through the op table.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "ember/autograd.h"
#include "ember/onnx.h"
#include "ember/ops.h"
#include "io/onnx/importer.h"
#include "ops/dispatch.h"

namespace ember::onnx {

using detail::NodeContext;
using detail::OpDef;
using detail::Value;

namespace {

std::string read_file(const std::string& path) {
  std::error_code error;  // a folder opens as a stream whose size reads as 2^63 - 1 bytes
  EMBER_CHECK(!std::filesystem::is_directory(path, error), "[onnx] ", path, " is a folder, not an ONNX model file");
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  EMBER_CHECK(file.good(), "[onnx] cannot open ", path);
  const std::streamoff size = file.tellg();
  EMBER_CHECK(size >= 0, "[onnx] cannot read ", path, " (not a regular file?)");
  EMBER_CHECK(size > 0, "[onnx] ", path, " is empty, not an ONNX model");
  std::string bytes(static_cast<size_t>(size), '\0');
  file.seekg(0);
  file.read(bytes.data(), size);
  EMBER_CHECK(file.good() || size == 0, "[onnx] reading ", path, " failed");
  return bytes;
}

std::string folder_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

ValueInfo value_info(const ::onnx::ValueInfoProto& proto) {
  ValueInfo info;
  info.name = proto.name();
  if (!proto.type().has_tensor_type()) {
    info.type = "not a tensor";
    return info;
  }
  const auto& tensor = proto.type().tensor_type();
  info.type = onnx_format::type_name(tensor.elem_type());
  try {
    info.dtype = detail::dtype_of(tensor.elem_type(), info.name);
  } catch (const Error&) {  // reported as the type name alone: inspect() must not throw for it
  }
  if (tensor.has_shape()) {
    info.shape.emplace();
    for (const auto& dim : tensor.shape().dim()) {
      if (dim.has_dim_value() && dim.dim_value() >= 0) {
        info.shape->push_back({dim.dim_value(), ""});
      } else {
        info.shape->push_back({-1, dim.dim_param()});
      }
    }
  }
  return info;
}

std::string shape_text(const ValueInfo& v) {
  if (!v.shape) return "[?]";
  std::string text = "[";
  for (size_t i = 0; i < v.shape->size(); ++i) {
    const Dim& d = (*v.shape)[i];
    if (i > 0) text += ", ";
    text += d.size >= 0 ? std::to_string(d.size) : (d.symbol.empty() ? "?" : d.symbol);
  }
  return text + "]";
}

ModelInfo info_of(const ::onnx::ModelProto& model) {
  ModelInfo info;
  info.ir_version = model.ir_version();
  info.opset = onnx_format::default_opset(model);
  for (const auto& opset : model.opset_import()) {
    info.opsets.emplace_back(opset.domain().empty() ? "ai.onnx" : opset.domain(), opset.version());
  }
  info.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
  const ::onnx::GraphProto& graph = model.graph();
  std::unordered_set<std::string> initializers;
  for (const auto& init : graph.initializer()) {
    initializers.insert(init.name());
    info.initializer_bytes +=
        onnx_format::element_count(init.dims(), init.name()) * onnx_format::element_size(init.data_type());
  }
  info.initializers = graph.initializer_size();
  for (const auto& input : graph.input()) {
    if (!initializers.contains(input.name())) info.inputs.push_back(value_info(input));
  }
  for (const auto& output : graph.output()) info.outputs.push_back(value_info(output));
  info.nodes = graph.node_size();
  const int64_t opset = info.opset;
  for (const auto& use : onnx_format::op_uses(graph)) {
    OpSupport op{use.domain, use.op_type, use.count, true, ""};
    for (const auto& node : graph.node()) {
      const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
      if (domain != use.domain || node.op_type() != use.op_type) continue;
      const std::string why = detail::unsupported_reason(node, opset);
      if (!why.empty()) {
        op.supported = false;
        op.note = why;
        break;
      }
    }
    info.ops.push_back(std::move(op));
  }
  return info;
}

bool is_float(DType d) { return is_floating(d); }

}  // namespace

bool ModelInfo::supported() const {
  return std::all_of(ops.begin(), ops.end(), [](const OpSupport& op) { return op.supported; });
}

std::string ModelInfo::report() const {
  std::ostringstream out;
  out << "IR version " << ir_version << ", opsets";
  for (const auto& [domain, version] : opsets) out << " " << domain << " " << version;
  if (!producer.empty()) out << ", produced by " << producer;
  out << "\n" << nodes << " nodes, " << initializers << " initializers (" << initializer_bytes << " bytes)\n";
  size_t width = 4;
  for (const auto& v : inputs) width = std::max(width, v.name.size());
  for (const auto& v : outputs) width = std::max(width, v.name.size());
  auto values = [&](const char* title, const std::vector<ValueInfo>& list) {
    out << title << ":\n";
    for (const auto& v : list) {
      out << "  " << std::left << std::setw(static_cast<int>(width)) << v.name << "  " << std::setw(8) << v.type << " "
          << shape_text(v) << "\n";
    }
  };
  values("inputs", inputs);
  values("outputs", outputs);
  const auto unsupported = std::count_if(ops.begin(), ops.end(), [](const OpSupport& op) { return !op.supported; });
  out << "ops: " << ops.size() << " types, "
      << (unsupported == 0 ? std::string("all supported") : std::to_string(unsupported) + " not supported") << "\n";
  size_t op_width = 4;
  for (const auto& op : ops)
    op_width = std::max(op_width, op.op_type.size() + (op.domain.empty() ? 0 : op.domain.size() + 1));
  for (const auto& op : ops) {
    const std::string name = op.domain.empty() ? op.op_type : op.domain + ":" + op.op_type;
    out << "  " << std::left << std::setw(static_cast<int>(op_width)) << name << std::right << std::setw(6) << op.count
        << "  " << (op.supported ? "supported" : "NOT SUPPORTED: " + op.note) << "\n";
  }
  return out.str();
}

ModelInfo inspect(const std::string& path) { return info_of(onnx_format::parse_model(read_file(path), path)); }

// --- the model -----------------------------------------------------------------------------------------

struct Model::Impl {
  ::onnx::ModelProto proto;  // the nodes (initializers are dropped once read)
  std::string base_dir;
  std::string what;
  ModelInfo info;
  LoadOptions options;

  struct Step {
    const ::onnx::NodeProto* node;
    const OpDef* op;
    std::vector<int> in;   // value slots, -1 for an absent optional input
    std::vector<int> out;  // -1 for an output nobody names
  };
  std::vector<Value> initial;  // per slot: initializers and constants folded at load; the rest empty
  std::vector<Step> steps;
  std::vector<int> input_slots, output_slots;
  std::vector<std::string> input_names, output_names;
  int folded = 0;
  ember::detail::CompiledCore compiled;

  explicit Impl(LoadOptions opts) : options(opts), compiled(opts.compile_options) {}

  std::vector<Tensor> execute(const std::vector<Tensor>& inputs, bool training) const {
    std::vector<Value> values = initial;
    for (size_t i = 0; i < inputs.size(); ++i) values[input_slots[i]] = Value{inputs[i], false};
    std::vector<const Value*> args;
    for (const Step& step : steps) run_step(step, values, args, training);
    std::vector<Tensor> outputs;
    outputs.reserve(output_slots.size());
    for (int slot : output_slots) outputs.push_back(values[slot].tensor);
    return outputs;
  }

  void run_step(const Step& step, std::vector<Value>& values, std::vector<const Value*>& args, bool training) const {
    args.clear();
    bool is_static = !step.op->never_static || !training;
    bool all_static = true;
    for (int slot : step.in) {
      args.push_back(slot < 0 ? nullptr : &values[slot]);
      if (slot >= 0) all_static = all_static && values[slot].is_static;
    }
    is_static = is_static && (step.op->shape_only || all_static);
    const NodeContext ctx(*step.node, info.opset, args, training, base_dir);
    std::vector<Tensor> out;
    if (is_static) {
      // Computed from constants and shapes: on the host, outside autograd and any trace.
      const dispatch::Unobserved host_side;
      const autograd::NoGradGuard no_grad;
      out = step.op->fn(ctx);
    } else {
      out = step.op->fn(ctx);
    }
    for (size_t i = 0; i < step.out.size(); ++i) {
      if (step.out[i] < 0) continue;
      if (i >= out.size() || !out[i].defined()) ctx.fail("output ", i, " is not produced");
      values[step.out[i]] = Value{std::move(out[i]), is_static};
    }
  }

  void check_inputs(const std::vector<Tensor>& inputs) const {
    EMBER_CHECK(inputs.size() == input_slots.size(), "[onnx] ", what, " takes ", input_slots.size(), " inputs (",
                names(input_names), "), got ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ValueInfo& v = info.inputs[i];
      const Tensor& t = inputs[i];
      EMBER_CHECK(t.defined(), "[onnx] input \"", v.name, "\" is undefined");
      EMBER_CHECK(!v.dtype || t.dtype() == *v.dtype, "[onnx] input \"", v.name, "\" is ", v.type, " (",
                  v.dtype ? dtype_name(*v.dtype) : "?", "), got ", t.dtype());
      if (!v.shape) continue;
      bool ok = static_cast<int64_t>(v.shape->size()) == t.dim();
      for (size_t d = 0; ok && d < v.shape->size(); ++d) ok = (*v.shape)[d].size < 0 || (*v.shape)[d].size == t.size(d);
      EMBER_CHECK(ok, "[onnx] input \"", v.name, "\" has shape ", shape_text(v), ", got ", t.shape());
    }
  }

  static std::string names(const std::vector<std::string>& list) {
    std::string text;
    for (const auto& n : list) text += (text.empty() ? "" : ", ") + n;
    return text;
  }
};

namespace {

// Registers `tensor` under a dotted ONNX name ("layer1.0.conv1.weight") as child modules and a
// leaf, so state_dict() keys equal the initializer names; names that cannot nest ("a..b", a name
// that is also a prefix of another) are flattened with '_'.
void register_named(nn::Module& root, const std::string& name, const Tensor& tensor, bool parameter) {
  auto leaf = [&](nn::Module& m, const std::string& n) {
    if (parameter) {
      m.register_parameter(n, tensor, true);
    } else {
      m.register_buffer(n, tensor);
    }
  };
  std::vector<std::string> parts;
  std::stringstream stream(name);
  for (std::string part; std::getline(stream, part, '.');) parts.push_back(part);
  const bool nestable = !name.empty() && name.back() != '.' &&
                        std::none_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); });
  if (nestable && parts.size() > 1) {
    try {
      nn::Module* m = &root;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        std::shared_ptr<nn::Module> child;
        for (const auto& [child_name, c] : m->named_children()) {
          if (child_name == parts[i]) child = c;
        }
        if (!child) child = m->register_module(parts[i], std::make_shared<nn::Module>());
        m = child.get();
      }
      leaf(*m, parts.back());
      return;
    } catch (const Error&) {  // a clash with an existing name: flattened below
    }
  }
  std::string flat = name;
  std::replace(flat.begin(), flat.end(), '.', '_');
  leaf(root, flat);
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

namespace {
std::shared_ptr<Model> load_model(std::string bytes, const std::string& what, const std::string& base_dir,
                                  LoadOptions options);
}  // namespace

std::shared_ptr<Model> load(const std::string& path, LoadOptions options) {
  return load_model(read_file(path), path, folder_of(path), options);
}

std::shared_ptr<Model> load_bytes(std::span<const uint8_t> bytes, LoadOptions options) {
  return load_model(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "<memory>", "", options);
}

namespace {

// Builds the slots, parameters and steps of `impl` from its proto.
class Builder {
 public:
  Builder(Model& model, Model::Impl& impl) : model_(model), impl_(impl), graph_(impl.proto.graph()) {}

  void build() {
    check_coverage();
    read_initializers();
    for (const auto& input : graph_.input()) {
      if (slots_.contains(input.name())) continue;  // an initializer's declaration
      impl_.input_slots.push_back(slot(input.name()));
      impl_.input_names.push_back(input.name());
    }
    for (const auto& node : graph_.node()) add_step(node);
    for (const auto& output : graph_.output()) {
      impl_.output_slots.push_back(slots_.at(output.name()));
      impl_.output_names.push_back(output.name());
    }
    impl_.initial.resize(slots_.size());
    fold_constants();
    impl_.proto.mutable_graph()->clear_initializer();  // read into tensors; nodes stay
  }

 private:
  int slot(const std::string& name) {
    auto [it, inserted] = slots_.try_emplace(name, static_cast<int>(slots_.size()));
    return it->second;
  }

  void check_coverage() {
    std::string missing;
    for (const OpSupport& op : impl_.info.ops) {
      if (op.supported) continue;
      missing += "\n  " + (op.domain.empty() ? op.op_type : op.domain + ":" + op.op_type) + " (" +
                 std::to_string(op.count) + " nodes): " + op.note;
    }
    EMBER_CHECK(missing.empty(), "[onnx] ", impl_.what, " uses ops ember does not import (opset ", impl_.info.opset,
                "):", missing);
  }

  void read_initializers() {
    std::unordered_set<std::string> statistics;  // BatchNormalization's running mean and variance
    for (const auto& node : graph_.node()) {
      if (node.op_type() != "BatchNormalization") continue;
      for (int i = 3; i < std::min(node.input_size(), 5); ++i) statistics.insert(node.input(i));
    }
    for (auto& init : *impl_.proto.mutable_graph()->mutable_initializer()) {
      Tensor t = detail::tensor_of(init, impl_.base_dir, impl_.what);
      init.clear_raw_data();  // read: the model's bytes need not stay twice in memory
      const int s = slot(init.name());
      impl_.initial.resize(slots_.size());
      // Float tensors of rank 1 and up are the model's weights; scalars are constants (an epsilon,
      // a scale), integers are shapes and indices.
      if (is_float(t.dtype()) && t.dim() > 0) {
        const bool parameter = impl_.options.trainable && !statistics.contains(init.name());
        register_named(model_, init.name(), t, parameter);
        impl_.initial[s] = Value{t, false};
      } else {
        impl_.initial[s] = Value{t, true};
      }
    }
  }

  void add_step(const ::onnx::NodeProto& node) {
    Model::Impl::Step step{&node, detail::find_op(node.domain(), node.op_type()), {}, {}};
    for (const auto& input : node.input()) step.in.push_back(input.empty() ? -1 : slots_.at(input));
    for (const auto& output : node.output()) step.out.push_back(output.empty() ? -1 : slot(output));
    impl_.steps.push_back(std::move(step));
  }

  // Runs, once, every step whose inputs are all constants (not parameters, not graph inputs), and
  // keeps its outputs as constants.
  void fold_constants() {
    std::vector<Model::Impl::Step> kept;
    std::vector<const Value*> args;
    for (const auto& step : impl_.steps) {
      // Shape and Size fold when their input is an initializer (a parameter's shape is fixed).
      bool foldable = !step.op->never_static;
      for (int s : step.in) {
        foldable = foldable &&
                   (s < 0 || impl_.initial[s].is_static || (step.op->shape_only && impl_.initial[s].tensor.defined()));
      }
      if (foldable) {
        impl_.run_step(step, impl_.initial, args, false);
        ++impl_.folded;
      } else {
        kept.push_back(step);
      }
    }
    impl_.steps = std::move(kept);
  }

  Model& model_;
  Model::Impl& impl_;
  const ::onnx::GraphProto& graph_;
  std::unordered_map<std::string, int> slots_;
};

std::shared_ptr<Model> load_model(std::string bytes, const std::string& what, const std::string& base_dir,
                                  LoadOptions options) {
  auto owned = std::make_unique<Model::Impl>(options);
  Model::Impl& impl = *owned;
  auto model = std::make_shared<Model>(std::move(owned));
  impl.proto = onnx_format::parse_model(bytes, what);
  bytes.clear();
  impl.what = what;
  impl.base_dir = base_dir;
  impl.info = info_of(impl.proto);
  Builder(*model, impl).build();
  model->eval();
  return model;
}

}  // namespace

const ModelInfo& Model::info() const { return impl_->info; }
const std::vector<std::string>& Model::input_names() const { return impl_->input_names; }
const std::vector<std::string>& Model::output_names() const { return impl_->output_names; }

std::vector<Tensor> Model::forward(const std::vector<Tensor>& inputs) {
  impl_->check_inputs(inputs);
  return impl_->execute(inputs, is_training());
}

Tensor Model::forward(const Tensor& input) {
  EMBER_CHECK(impl_->input_slots.size() == 1, "[onnx] ", impl_->what, " takes ", impl_->input_slots.size(),
              " inputs; call forward with a vector of them");
  return forward(std::vector<Tensor>{input}).at(0);
}

std::vector<Tensor> Model::run(const std::vector<Tensor>& inputs) {
  impl_->check_inputs(inputs);
  const autograd::NoGradGuard no_grad;
  const bool training = is_training();
  if (!impl_->options.compile) return impl_->execute(inputs, training);
  std::vector<ember::detail::CompileArg> args(inputs.begin(), inputs.end());
  args.emplace_back(Scalar(static_cast<int64_t>(training)));  // a mode change compiles again
  auto body = [&] { return impl_->execute(inputs, training); };
  return impl_->compiled.call(args, ember::detail::BodyRef(body));
}

std::map<std::string, Tensor> Model::run(const std::map<std::string, Tensor>& inputs) {
  // An unknown name first: a misspelt input is also a missing one, and the misspelling is the news.
  for (const auto& [name, t] : inputs) {
    EMBER_CHECK(std::find(impl_->input_names.begin(), impl_->input_names.end(), name) != impl_->input_names.end(),
                "[onnx] ", impl_->what, " has no input \"", name, "\" (it takes ", Impl::names(impl_->input_names),
                ")");
  }
  std::vector<Tensor> ordered;
  for (const std::string& name : impl_->input_names) {
    auto it = inputs.find(name);
    EMBER_CHECK(it != inputs.end(), "[onnx] ", impl_->what, ": no value for input \"", name, "\" (it takes ",
                Impl::names(impl_->input_names), ")");
    ordered.push_back(it->second);
  }
  std::vector<Tensor> outputs = run(ordered);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < outputs.size(); ++i) named.emplace(impl_->output_names[i], std::move(outputs[i]));
  return named;
}

const CompileStats& Model::compile_stats() const { return impl_->compiled.stats(); }
GraphText Model::graph() const { return impl_->compiled.graph(); }

std::string Model::explain() const {
  std::ostringstream out;
  out << "import: " << impl_->steps.size() << " steps from " << impl_->info.nodes << " nodes (" << impl_->folded
      << " folded at load)\n";
  return out.str() + impl_->compiled.explain();
}

}  // namespace ember::onnx
