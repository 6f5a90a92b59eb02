// Checkpoints: the files a training run writes and every reader of models reads. One contract,
// defined here once:
//
// - a training checkpoint holds each part of a run under its prefix (the model under "model.", the
//   optimizer under "optimizer.", the schedule, the loss scaler, the weights' moving average) and
//   the run's settings and progress as string metadata ("task", the architecture, "steps_done");
// - a model file (`ember quantize`'s GGUF) holds the model's tensors under their own names, the
//   source's settings as GGUF strings and ember.* keys (the model kind, its quantization).
//
// A file's format is told by its first bytes, never by its name. A training checkpoint is written as
// safetensors, or as GGUF when its name ends in ".gguf" (the same tensors and settings: GGUF strings,
// with ember.checkpoint = true); both read back the same. Writes are atomic: a checkpoint being
// written is never the one on disk until it is complete.
//
//   train::Checkpoint c = train::read_checkpoint("run.safetensors");
//   model.load_state_dict(c.part(train::kModelPrefix));
//   int64_t done = c.count(train::keys::kStepsDone);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/gguf.h"
#include "ember/state_dict.h"

namespace ember {
namespace nn {
class Module;
}
namespace optim {
class LRScheduler;
}
namespace amp {
class GradScaler;
}
}  // namespace ember

namespace ember::train {

/// The prefixes of a training checkpoint's parts.
inline constexpr std::string_view kModelPrefix = "model.";
inline constexpr std::string_view kOptimizerPrefix = "optimizer.";
inline constexpr std::string_view kSchedulePrefix = "schedule.";
inline constexpr std::string_view kScalerPrefix = "grad_scaler.";
inline constexpr std::string_view kAveragePrefix = "ema.";  // an exponential moving average of the weights

/// The metadata keys every kind of run shares (a model kind's own keys are in models.h).
namespace keys {
inline constexpr const char* kTask = "task";               // "mnist", "gpt", "ssm", "diffusion"
inline constexpr const char* kEpochsDone = "epochs_done";  // the progress of an epoch-based run
inline constexpr const char* kStepsDone = "steps_done";    // the progress of a step-based run
inline constexpr const char* kBatchState = "batch_state";  // where a text run's batch stream is
inline constexpr const char* kAmp = "amp";                 // "bf16" or "f16" (no entry: float32)
inline constexpr const char* kVocabulary = "vocabulary";   // a character model's characters, as hex
// The GGUF keys ember writes beside a model's settings.
inline constexpr const char* kGgufModel = "ember.model";                  // the model kind
inline constexpr const char* kGgufQuantization = "ember.quantization";    // "f32", "q8_0", "q4_0", "q4_1", "int8"
inline constexpr const char* kGgufDynamic = "ember.dynamic_activations";  // false: --weights-only
inline constexpr const char* kGgufCheckpoint = "ember.checkpoint";        // true: a training checkpoint's parts
}  // namespace keys

enum class FileFormat { kSafetensors, kGguf };
std::string_view format_name(FileFormat format);  // "safetensors", "gguf"

/// "GGUF" at the start, or a safetensors header (an 8-byte length, then '{'). A folder, a file
/// that cannot be read or one of neither format is an ember::Error starting with [op].
FileFormat detect_format(const std::string& path, std::string_view op);

/// A checkpoint or model file, read whole.
struct Checkpoint {
  std::string path{};
  FileFormat format = FileFormat::kSafetensors;
  /// The model kind (models.h: "gpt", "mnist_cnn", ...); empty for a file no ember run wrote.
  std::string kind{};
  std::string quantization = "f32";
  bool dynamic_activations = true;
  /// A training checkpoint (its tensors under the parts' prefixes), not a model file.
  bool training = false;
  /// The safetensors metadata, or the GGUF's string values.
  std::map<std::string, std::string> settings{};
  /// Every tensor of the file under its name in the file (prefixes included).
  StateDict tensors{};
  /// A GGUF's metadata (typed), for configs that are not strings (MiniLM's); no tensors.
  gguf::File gguf{};

  /// The tensors under `prefix`, the prefix stripped.
  StateDict part(std::string_view prefix) const;
  /// The model's tensors: the "model." part of a training checkpoint, every tensor of a model file.
  StateDict model_state() const;
  /// "a mnist_cnn model", or `task "..."` for a file of no known kind; for error messages.
  std::string describe() const;
  /// A setting that must be a whole number below 10^11 (a count, a size); a missing or malformed
  /// one is an ember::Error "[op] checkpoint <path> has no valid <key> entry".
  int64_t count(const std::string& key, std::string_view op = "checkpoint") const;
  /// A setting that must be present.
  const std::string& setting(const std::string& key, std::string_view op = "checkpoint") const;
};

/// Reads a checkpoint or model file of either format. A GGUF file no ember command wrote is an
/// error; so is, with `finite`, a model whose tensors hold NaN or Inf (the run that wrote it
/// diverged, or the file is damaged), naming the tensor. Resuming a run reads without that check:
/// the run itself shows where the values go wrong (autograd's anomaly mode names the op).
Checkpoint read_checkpoint(const std::string& path, std::string_view op = "checkpoint", bool finite = true);

/// Loads `state` into `model`: Linear layers the state holds quantized are quantized first (a
/// --weights-only file multiplies in float). A state that does not fit is an ember::Error naming
/// `source`'s file and listing the keys.
void load_model_state(nn::Module& model, const StateDict& state, const Checkpoint& source, std::string_view op);

/// Only the settings of a checkpoint (no tensor is read): a GGUF file's string values, else the
/// safetensors metadata (whose reader names what is wrong with a file that is neither).
std::map<std::string, std::string> read_settings(const std::string& path, std::string_view op = "checkpoint");

/// The parts of a training run that a checkpoint holds; each is left out when absent.
struct TrainingState {
  const nn::Module* model = nullptr;
  StateDict optimizer{};  // the optimizer's state_dict() (consolidated over ranks under ZeRO)
  const optim::LRScheduler* schedule = nullptr;
  const amp::GradScaler* scaler = nullptr;
  StateDict average{};  // the weights' moving average, by parameter name
};

/// Writes `state` and `metadata` to `path` atomically: a safetensors file, or a GGUF file when the
/// name ends in ".gguf".
void save_checkpoint(const std::string& path, const TrainingState& state,
                     const std::map<std::string, std::string>& metadata);

/// `dict` with `prefix` before each key, and the entries of `dict` under `prefix` without it.
StateDict with_prefix(const StateDict& dict, std::string_view prefix);
StateDict strip_prefix(const StateDict& dict, std::string_view prefix);

/// Writes a model's tensors as a GGUF file, atomically: general.architecture "ember", the ember.*
/// keys, `extra`, then the source's `settings` as strings (except keys of the general., ember. and
/// tokenizer. namespaces, which the file's own keys describe).
void save_model_gguf(const std::string& path, const std::string& kind, const std::string& quantization,
                     bool dynamic_activations, const std::map<std::string, std::string>& settings,
                     std::vector<std::pair<std::string, gguf::Value>> extra, const StateDict& state);

/// A float as a checkpoint records it (printf's %.17g, which reads back to the same double).
std::string number_setting(double value);

/// A character model's vocabulary as the hex text of its "vocabulary" setting (any byte survives a
/// JSON header), and back; a malformed one is an ember::Error naming `path`.
std::string vocabulary_to_hex(const std::string& vocabulary);
std::string vocabulary_from_hex(const std::string& hex, const std::string& path, std::string_view op);

}  // namespace ember::train
