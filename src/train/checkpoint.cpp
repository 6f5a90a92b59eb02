// Checkpoint files (ember/train/checkpoint.h): format detection, reading either format into one
// Checkpoint, writing training checkpoints and model files.
#include "ember/train/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ember/amp.h"
#include "ember/autograd.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/nn/quantize.h"
#include "ember/ops.h"
#include "ember/optim/lr_scheduler.h"

namespace ember::train {
namespace {

namespace fs = std::filesystem;

// A model whose weights hold NaN or Inf computes nothing but NaN (a run that diverged saved it, or
// the file was damaged): an error naming the tensor, rather than a loss or a text of garbage.
void check_finite(const Checkpoint& c, std::string_view op) {
  autograd::NoGradGuard no_grad;
  for (const auto& [name, tensor] : c.tensors) {
    if (!tensor.is_floating_point() || tensor.numel() == 0) continue;
    const int64_t nan = isnan(tensor).sum().item<int64_t>(), inf = isinf(tensor).sum().item<int64_t>();
    EMBER_CHECK(nan == 0 && inf == 0, "[", op, "] checkpoint ", c.path, ": tensor \"", name, "\" holds ", nan,
                " NaN and ", inf, " infinite values (of ", tensor.numel(),
                "): the run that wrote it diverged, or the file is damaged");
  }
}

// The kind of model a training run's settings describe ("" for none ember knows).
std::string kind_of_run(const std::map<std::string, std::string>& settings) {
  const auto task = settings.find(keys::kTask);
  if (task == settings.end()) return "";
  if (task->second == "gpt" || task->second == "ssm" || task->second == "diffusion") return task->second;
  const auto model = settings.find("model");
  if (task->second == "mnist" && model != settings.end()) return "mnist_" + model->second;
  return "";
}

}  // namespace

std::string_view format_name(FileFormat format) { return format == FileFormat::kGguf ? "gguf" : "safetensors"; }

FileFormat detect_format(const std::string& path, std::string_view op) {
  std::error_code error;
  EMBER_CHECK(!fs::is_directory(path, error), "[", op, "] ", path, " is a folder, not a checkpoint file");
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "[", op, "] cannot open ", path, ": ", std::strerror(errno));
  char head[9] = {};
  in.read(head, sizeof head);
  const std::streamsize got = in.gcount();
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return FileFormat::kGguf;
  if (got == sizeof head && head[8] == '{') return FileFormat::kSafetensors;
  EMBER_FAIL("[", op, "] ", path, " is neither a safetensors checkpoint nor a GGUF file");
}

StateDict with_prefix(const StateDict& dict, std::string_view prefix) {
  StateDict out;
  for (const auto& [key, value] : dict) out.emplace(std::string(prefix) + key, value);
  return out;
}

StateDict strip_prefix(const StateDict& dict, std::string_view prefix) {
  StateDict out;
  for (const auto& [key, value] : dict) {
    if (key.starts_with(prefix)) out.emplace(key.substr(prefix.size()), value);
  }
  return out;
}

StateDict Checkpoint::part(std::string_view prefix) const { return strip_prefix(tensors, prefix); }

StateDict Checkpoint::model_state() const { return training ? part(kModelPrefix) : tensors; }

std::string Checkpoint::describe() const {
  if (!kind.empty()) return "a " + kind + " model";
  const auto task = settings.find(keys::kTask);
  return "task \"" + (task == settings.end() ? std::string() : task->second) + "\"";
}

int64_t Checkpoint::count(const std::string& key, std::string_view op) const {
  const auto it = settings.find(key);
  const bool ok = it != settings.end() && !it->second.empty() && it->second.size() < 12 &&
                  it->second.find_first_not_of("0123456789") == std::string::npos;
  EMBER_CHECK(ok, "[", op, "] checkpoint ", path, " has no valid ", key, " entry");
  return std::stoll(it->second);
}

const std::string& Checkpoint::setting(const std::string& key, std::string_view op) const {
  const auto it = settings.find(key);
  EMBER_CHECK(it != settings.end(), "[", op, "] checkpoint ", path, " has no ", key, " entry");
  return it->second;
}

Checkpoint read_checkpoint(const std::string& path, std::string_view op, bool finite) {
  Checkpoint c;
  c.path = path;
  c.format = detect_format(path, op);
  if (c.format == FileFormat::kSafetensors) {
    c.settings = load_metadata(path);
    c.kind = kind_of_run(c.settings);
    c.tensors = load(path);
    c.training = true;  // a model file of ember is GGUF; a safetensors file holds a run's parts
    if (finite) {       // the model's tensors (an optimizer's state may hold any value)
      Checkpoint model;
      model.path = path;
      model.tensors = c.model_state();
      check_finite(model, op);
    }
    return c;
  }
  c.gguf = gguf::load(path);
  for (auto& [name, tensor] : c.gguf.tensors) c.tensors.emplace(name, std::move(tensor));
  c.gguf.tensors.clear();
  for (const auto& [key, value] : c.gguf.metadata) {
    if (value.type() == gguf::ValueType::kString) c.settings.emplace(key, value.as_string());
  }
  const gguf::Value* kind = c.gguf.find_value(keys::kGgufModel);
  EMBER_CHECK(kind != nullptr, "[", op, "] ", path, " is a GGUF file without an ", keys::kGgufModel,
              " entry: not a model `ember quantize` wrote");
  auto entry = [&](const char* key, auto read) {
    try {
      return read(c.gguf.value(key));
    } catch (const Error& e) {
      EMBER_FAIL("[", op, "] ", path, ": ", key, ": ", e.what());
    }
  };
  c.kind = entry(keys::kGgufModel, [](const gguf::Value& v) { return v.as_string(); });
  c.quantization = entry(keys::kGgufQuantization, [](const gguf::Value& v) { return v.as_string(); });
  if (c.gguf.find_value(keys::kGgufDynamic) != nullptr) {
    c.dynamic_activations = entry(keys::kGgufDynamic, [](const gguf::Value& v) { return v.as_bool(); });
  }
  if (c.gguf.find_value(keys::kGgufCheckpoint) != nullptr) {
    c.training = entry(keys::kGgufCheckpoint, [](const gguf::Value& v) { return v.as_bool(); });
  }
  if (c.training && c.kind.empty()) c.kind = kind_of_run(c.settings);
  if (finite) check_finite(c, op);
  return c;
}

void load_model_state(nn::Module& model, const StateDict& state, const Checkpoint& source, std::string_view op) {
  try {
    quant::prepare(model, state);
    if (!source.dynamic_activations) {
      for (const auto& [name, module] : model.named_modules()) {
        if (auto* linear = module->as<nn::Linear>(); linear != nullptr && linear->is_quantized()) {
          linear->dynamic_activations = false;
        }
      }
    }
    model.load_state_dict(state);
  } catch (const Error& e) {
    EMBER_FAIL("[", op, "] checkpoint ", source.path, " does not fit the ", source.kind,
               " model its metadata describes: ", e.what());
  }
}

std::map<std::string, std::string> read_settings(const std::string& path, std::string_view op) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, sizeof magic);
  if (in.gcount() != 4 || std::memcmp(magic, "GGUF", 4) != 0) return load_metadata(path);
  std::map<std::string, std::string> settings;
  for (const auto& [key, value] : gguf::load(path).metadata) {
    if (value.type() == gguf::ValueType::kString) settings.emplace(key, value.as_string());
  }
  return settings;
}

void save_checkpoint(const std::string& path, const TrainingState& state,
                     const std::map<std::string, std::string>& metadata) {
  StateDict tensors;
  if (state.model != nullptr) tensors = with_prefix(state.model->state_dict(), kModelPrefix);
  tensors.merge(with_prefix(state.optimizer, kOptimizerPrefix));
  if (state.schedule != nullptr) tensors.merge(with_prefix(state.schedule->state_dict(), kSchedulePrefix));
  if (state.scaler != nullptr) tensors.merge(with_prefix(state.scaler->state_dict(), kScalerPrefix));
  tensors.merge(with_prefix(state.average, kAveragePrefix));
  if (!path.ends_with(".gguf")) {
    save(tensors, path, metadata);
    return;
  }
  gguf::File file;
  file.metadata = {{"general.architecture", "ember"},
                   {keys::kGgufModel, kind_of_run(metadata)},
                   {keys::kGgufQuantization, "f32"},
                   {keys::kGgufCheckpoint, true}};
  for (const auto& [key, value] : metadata) {
    if (key.starts_with("general.") || key.starts_with("ember.")) continue;
    file.metadata.emplace_back(key, value);
  }
  for (const auto& [name, tensor] : tensors) file.tensors.emplace_back(name, tensor);
  gguf::save(path, file);
}

void save_model_gguf(const std::string& path, const std::string& kind, const std::string& quantization,
                     bool dynamic_activations, const std::map<std::string, std::string>& settings,
                     std::vector<std::pair<std::string, gguf::Value>> extra, const StateDict& state) {
  gguf::File file;
  file.metadata = {{"general.architecture", "ember"},
                   {keys::kGgufModel, kind},
                   {keys::kGgufQuantization, quantization},
                   {keys::kGgufDynamic, dynamic_activations}};
  for (auto& entry : extra) file.metadata.push_back(std::move(entry));
  for (const auto& [key, value] : settings) {
    if (key.starts_with("general.") || key.starts_with("ember.") || key.starts_with("tokenizer.")) continue;
    file.metadata.emplace_back(key, value);
  }
  for (const auto& [name, tensor] : state) file.tensors.emplace_back(name, tensor);
  gguf::save(path, file);
}

std::string number_setting(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

std::string vocabulary_to_hex(const std::string& vocabulary) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const char c : vocabulary) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::string vocabulary_from_hex(const std::string& hex, const std::string& path, std::string_view op) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    EMBER_FAIL("[", op, "] checkpoint ", path, " has a corrupt vocabulary");
  };
  EMBER_CHECK(hex.size() % 2 == 0 && !hex.empty(), "[", op, "] checkpoint ", path, " has a corrupt vocabulary");
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) out += static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
  return out;
}

}  // namespace ember::train
