// ember.models, ember.train, ember.onnx and ember.gguf: the models (GPT, Mamba, U-Net, BERT and its
// WordPiece tokenizer), the training library (checkpoints, load_model, the training step builder,
// the runs of `ember train` and their loop), ONNX import and GGUF files. Each binding converts its
// arguments and calls the C++ function (Note [the GIL] in bindings.h).
#include "ember/train.h"

#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/variant.h>

#include "bindings.h"
#include "ember/gguf.h"
#include "ember/models/chat.h"
#include "ember/onnx.h"
#include "ember/optim.h"

namespace ember::python {
namespace {

// --- configs as keyword arguments ------------------------------------------------------------------

models::GPTConfig gpt_config(int64_t vocab_size, int64_t block_size, int64_t n_layer, int64_t n_head, int64_t n_embd,
                             double dropout, bool bias) {
  return {.vocab_size = vocab_size,
          .block_size = block_size,
          .n_layer = n_layer,
          .n_head = n_head,
          .n_embd = n_embd,
          .dropout = dropout,
          .bias = bias};
}

nb::dict config_dict(const train::ModelConfig& config) {
  nb::dict d;
  for (const auto& [key, value] : train::config_settings(config)) d[key.c_str()] = value;
  return d;
}

// A Python callable as the loss function of a training step: called with the batch (a list of
// tensors), it returns the loss or a list/tuple whose first item is the loss.
train::LossFn loss_function(nb::callable fn) {
  return [ref = PyRef(fn)](const std::vector<Tensor>& batch) -> std::vector<Tensor> {
    const nb::gil_scoped_acquire gil;
    nb::object result = nb::handle(ref.get())(nb::cast(batch));
    Tensor loss;
    if (nb::try_cast<Tensor>(result, loss)) return {loss};
    std::vector<Tensor> many;
    if (nb::try_cast<std::vector<Tensor>>(result, many)) return many;
    throw nb::type_error(
        "[train] the loss function must return a tensor, or a list or tuple of tensors (the loss first)");
  };
}

train::ProgressFn progress_function(std::optional<nb::callable> fn) {
  if (!fn) return nullptr;
  return [ref = PyRef(*fn)](const train::Progress& p) {
    const nb::gil_scoped_acquire gil;
    nb::dict d;
    static const char* const kKinds[] = {"step", "epoch", "log", "evaluation"};
    d["kind"] = kKinds[static_cast<int>(p.kind)];
    d["step"] = p.step;
    d["steps"] = p.steps;
    d["epoch"] = p.epoch;
    d["epochs"] = p.epochs;
    d["loss"] = p.loss;
    d["accuracy"] = p.accuracy;
    d["seconds"] = p.seconds;
    d["samples_per_second"] = p.samples_per_second;
    d["metrics"] = p.metrics;
    nb::handle(ref.get())(d);
  };
}

std::optional<DType> autocast_dtype(const std::string& amp) {
  if (amp == "bf16") return kBFloat16;
  if (amp == "f16") return kFloat16;
  EMBER_CHECK(amp == "none", "[train] amp must be \"none\", \"bf16\" or \"f16\", got \"", amp, "\"");
  return std::nullopt;
}

nb::dict summary_dict(const train::RunSummary& s) {
  nb::dict d;
  d["first_step"] = s.first_step;
  d["last_step"] = s.last_step;
  d["final_loss"] = s.final_loss;
  d["train_seconds"] = s.train_seconds;
  d["seconds"] = s.seconds;
  d["samples"] = s.samples;
  d["evaluation"] = s.evaluation;
  return d;
}

// A run of `ember train` from Python: the task and the loop, with the CLI's options as keywords.
struct Run {
  std::unique_ptr<train::Task> task;
  std::unique_ptr<train::Trainer> trainer;
};

Run make_run(std::unique_ptr<train::Task> task, int64_t stop_after, const std::string& save,
             const std::string& resume) {
  Run run{std::move(task), nullptr};
  run.trainer = std::make_unique<train::Trainer>(
      *run.task, train::LoopOptions{.stop_after = stop_after, .save_path = save, .resume_path = resume});
  return run;
}

// --- GGUF metadata values <-> Python -----------------------------------------------------------------

nb::object value_to_python(const gguf::Value& v) {
  switch (v.type()) {
    case gguf::ValueType::kBool:
      return nb::bool_(v.as_bool());
    case gguf::ValueType::kString:
      return nb::str(v.as_string().c_str(), v.as_string().size());
    case gguf::ValueType::kFloat32:
      return nb::float_(v.as_float32());
    case gguf::ValueType::kFloat64:
      return nb::float_(v.as_float64());
    case gguf::ValueType::kArray: {
      nb::list items;
      for (const gguf::Value& item : v.items()) items.append(value_to_python(item));
      return items;
    }
    default:
      return nb::int_(v.as_integer());
  }
}

// Python values as GGUF's: bool, int (int64), float (float64), str, and lists of one of those.
gguf::Value value_from_python(nb::handle o, const std::string& key) {
  if (nb::isinstance<nb::bool_>(o)) return gguf::Value(nb::cast<bool>(o));
  if (nb::isinstance<nb::int_>(o)) return gguf::Value(nb::cast<int64_t>(o));
  if (nb::isinstance<nb::float_>(o)) return gguf::Value(nb::cast<double>(o));
  if (nb::isinstance<nb::str>(o)) return gguf::Value(nb::cast<std::string>(o));
  if (nb::isinstance<nb::list>(o) || nb::isinstance<nb::tuple>(o)) {
    std::vector<gguf::Value> items;
    for (nb::handle item : o) items.push_back(value_from_python(item, key));
    EMBER_CHECK(!items.empty(), "[gguf] metadata \"", key, "\": an empty list has no element type");
    const gguf::ValueType type = items.front().type();
    return gguf::Value::array(type, std::move(items));
  }
  EMBER_FAIL("[gguf] metadata \"", key, "\" must be a bool, int, float, str or a list of them, got ",
             nb::type_name(o.type()).c_str());
}

void bind_models(nb::module_& m) {
  nb::module_ models = m.def_submodule("models", "The models: GPT, Mamba, U-Net (DDPM), BERT (ember/models/)");
  nb::class_<data::CharTokenizer>(models, "CharTokenizer")
      .def(nb::init<std::string>(), "vocabulary"_a)
      .def_static("from_text", &data::CharTokenizer::from_text, "text"_a)
      .def("encode", &data::CharTokenizer::encode, "text"_a)
      .def("decode", &data::CharTokenizer::decode, "ids"_a)
      .def_prop_ro("vocab_size", &data::CharTokenizer::vocab_size)
      .def_prop_ro("vocabulary", [](const data::CharTokenizer& t) {
        return nb::bytes(t.vocabulary().data(), t.vocabulary().size());
      });
  nb::class_<data::WordPieceTokenizer>(models, "WordPieceTokenizer")
      .def_static("from_folder", &data::WordPieceTokenizer::from_folder, "folder"_a, nb::call_guard<Release>())
      .def("tokenize", &data::WordPieceTokenizer::tokenize, "text"_a)
      .def("encode", &data::WordPieceTokenizer::encode, "text"_a, "max_length"_a = nb::none(),
           "add_special_tokens"_a = true)
      .def(
          "encode_batch",
          [](const data::WordPieceTokenizer& t, const std::vector<std::string>& texts,
             std::optional<int64_t> max_length) {
            const data::BatchEncoding b = t.encode_batch(texts, max_length);
            nb::dict d;
            d["input_ids"] = b.input_ids;
            d["attention_mask"] = b.attention_mask;
            d["token_type_ids"] = b.token_type_ids;
            return d;
          },
          "texts"_a, "max_length"_a = nb::none())
      .def("id_to_token", &data::WordPieceTokenizer::id_to_token, "id"_a)
      .def("token_to_id", &data::WordPieceTokenizer::token_to_id, "token"_a)
      .def_prop_ro("vocab_size", &data::WordPieceTokenizer::vocab_size);

  nb::class_<models::LanguageModel, nn::Module>(models, "LanguageModel", nb::type_slots(module_type_slots()))
      .def("loss", &models::LanguageModel::loss, "idx"_a, "targets"_a, nb::call_guard<Release>())
      .def("num_parameters", &models::LanguageModel::num_parameters)
      .def(
          "generate",
          [](models::LanguageModel& model, const std::vector<int64_t>& prompt, int64_t tokens, double temperature,
             int64_t top_k, double top_p, uint64_t seed) {
            return train::generate_text(model, prompt, tokens,
                                        {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed});
          },
          "prompt"_a, "tokens"_a, "temperature"_a = 1.0, "top_k"_a = 0, "top_p"_a = 1.0, "seed"_a = 0,
          nb::call_guard<Release>(),
          "Continues the token ids `prompt` (a GPT through its KV cache, Mamba through its state).");
  nb::class_<models::GPT, models::LanguageModel>(models, "GPT", nb::type_slots(module_type_slots()))
      .def(nb::new_([](int64_t vocab_size, int64_t block_size, int64_t n_layer, int64_t n_head, int64_t n_embd,
                       double dropout, bool bias) {
             return make_python_module<models::GPT>(
                 gpt_config(vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias));
           }),
           "vocab_size"_a = 84, "block_size"_a = 64, "n_layer"_a = 4, "n_head"_a = 4, "n_embd"_a = 128,
           "dropout"_a = 0.0, "bias"_a = true)
      .def(
          "__call__", [](models::GPT& m, const Tensor& idx) { return m.forward(idx); }, "idx"_a,
          nb::call_guard<Release>())
      .def_prop_ro("config", [](const models::GPT& m) { return config_dict(m.config); });
  nb::class_<models::Mamba, models::LanguageModel>(models, "Mamba", nb::type_slots(module_type_slots()))
      .def(nb::new_([](int64_t vocab_size, int64_t d_model, int64_t n_layer, int64_t d_state, int64_t d_conv,
                       int64_t expand) {
             return make_python_module<models::Mamba>(models::MambaConfig{.vocab_size = vocab_size,
                                                                          .d_model = d_model,
                                                                          .n_layer = n_layer,
                                                                          .d_state = d_state,
                                                                          .d_conv = d_conv,
                                                                          .expand = expand});
           }),
           "vocab_size"_a = 65, "d_model"_a = 128, "n_layer"_a = 4, "d_state"_a = 16, "d_conv"_a = 4, "expand"_a = 2)
      .def(
          "__call__", [](models::Mamba& m, const Tensor& idx) { return m.forward(idx); }, "idx"_a,
          nb::call_guard<Release>())
      .def_prop_ro("config", [](const models::Mamba& m) { return config_dict(m.config); });
  nb::class_<models::UNet, nn::Module>(models, "UNet", nb::type_slots(module_type_slots()))
      .def(nb::new_([](int64_t channels, std::vector<int64_t> multipliers, int64_t groups, int64_t num_classes,
                       int64_t image_channels) {
             return make_python_module<models::UNet>(models::UNetConfig{.image_channels = image_channels,
                                                                        .channels = channels,
                                                                        .multipliers = std::move(multipliers),
                                                                        .groups = groups,
                                                                        .num_classes = num_classes});
           }),
           "channels"_a = 32, "multipliers"_a = std::vector<int64_t>{1, 2, 2}, "groups"_a = 8, "num_classes"_a = 10,
           "image_channels"_a = 1)
      .def(
          "__call__",
          [](models::UNet& m, const Tensor& x, const Tensor& t, const Tensor& labels) {
            return m.forward(x, t, labels);
          },
          "x"_a, "t"_a, "labels"_a, nb::call_guard<Release>())
      .def_prop_ro("config", [](const models::UNet& m) { return config_dict(m.config); });
  nb::class_<models::BertModel, nn::Module>(models, "Bert", nb::type_slots(module_type_slots()))
      .def_static("from_folder", &models::load_bert, "folder"_a, nb::call_guard<Release>())
      .def(
          "__call__",
          [](models::BertModel& m, const Tensor& input_ids, std::optional<Tensor> attention_mask,
             std::optional<Tensor> token_type_ids) {
            models::BertOutput out;
            {
              const Release release;
              out = m.forward(input_ids, attention_mask.value_or(Tensor()), token_type_ids.value_or(Tensor()));
            }
            // (last_hidden_state, pooler_output); the pooler is None for a model without one.
            return nb::make_tuple(out.last_hidden_state,
                                  out.pooler_output.defined() ? nb::cast(out.pooler_output) : nb::none());
          },
          "input_ids"_a, "attention_mask"_a = nb::none(), "token_type_ids"_a = nb::none());
  nb::class_<data::BpeTokenizer>(models, "BpeTokenizer")
      .def("encode", &data::BpeTokenizer::encode, "text"_a, "parse_special"_a = true)
      .def("decode", &data::BpeTokenizer::decode, "ids"_a)
      .def("pre_tokenize", &data::BpeTokenizer::pre_tokenize, "text"_a)
      .def("id_to_token", &data::BpeTokenizer::id_to_token, "id"_a)
      .def("token_to_id", &data::BpeTokenizer::token_to_id, "token"_a)
      .def_prop_ro("vocab_size", &data::BpeTokenizer::vocab_size)
      .def_prop_ro("bos_id", [](const data::BpeTokenizer& t) { return t.options().bos_id; })
      .def_prop_ro("eos_id", [](const data::BpeTokenizer& t) { return t.options().eos_id; });
  nb::class_<models::Llama, nn::Module>(models, "Llama", nb::type_slots(module_type_slots()))
      .def_static(
          "from_gguf",
          [](const std::string& path, bool dequantize) {
            return models::Llama::from_gguf(path, {.dequantize = dequantize});
          },
          "path"_a, "dequantize"_a = false, nb::call_guard<Release>(),
          "A Llama-family model from a GGUF file (quantized weights stay quantized unless `dequantize`).")
      .def(
          "__call__", [](models::Llama& m, const Tensor& idx) { return m.forward(idx); }, "idx"_a,
          nb::call_guard<Release>())
      .def(
          "generate",
          [](models::Llama& m, const std::vector<int64_t>& prompt, int64_t max_tokens, double temperature,
             int64_t top_k, double top_p, double min_p, double repetition_penalty, uint64_t seed,
             const std::vector<int64_t>& stop) {
            const int64_t needed = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(max_tokens, 1);
            models::LlamaCache cache = m.make_cache(std::min(needed, m.config.context_length));
            return models::generate(m, cache, prompt, max_tokens,
                                    {.temperature = temperature,
                                     .top_k = top_k,
                                     .top_p = top_p,
                                     .min_p = min_p,
                                     .repetition_penalty = repetition_penalty,
                                     .seed = seed},
                                    stop);
          },
          "prompt"_a, "max_tokens"_a, "temperature"_a = 0.0, "top_k"_a = 0, "top_p"_a = 1.0, "min_p"_a = 0.0,
          "repetition_penalty"_a = 1.0, "seed"_a = 0, "stop"_a = std::vector<int64_t>{}, nb::call_guard<Release>(),
          "Continues the token ids `prompt` by up to max_tokens ids, stopping after an id in `stop`.")
      .def_prop_ro("config", [](const models::Llama& m) {
        const models::LlamaConfig& c = m.config;
        nb::dict d;
        d["vocab_size"] = c.vocab_size;
        d["context_length"] = c.context_length;
        d["dim"] = c.dim;
        d["n_layer"] = c.n_layer;
        d["n_head"] = c.n_head;
        d["n_kv_head"] = c.n_kv_head;
        d["ffn_dim"] = c.ffn_dim;
        d["head_dim"] = c.head_dim;
        d["rope_dim"] = c.rope_dim;
        d["rope_base"] = c.rope_base;
        d["norm_eps"] = c.norm_eps;
        d["tied_output"] = c.tied_output;
        return d;
      });
  models.def(
      "load_tokenizer", [](const std::string& path) { return models::bpe_tokenizer(gguf::load(path), path); }, "path"_a,
      nb::call_guard<Release>(), "The byte-level BPE tokenizer of a GGUF file's tokenizer.ggml.* metadata.");
  nb::class_<models::ChatSession>(models, "Chat")
      .def(
          "__init__",
          [](models::ChatSession* self, const std::string& path, const std::string& system, int64_t context,
             int64_t max_tokens, double temperature, double top_p, double repetition_penalty, uint64_t seed,
             const std::string& chat_template) {
            const Release release;
            models::LlamaFile llm = models::load_llama(path);
            models::ChatTemplate t = chat_template.empty() ? models::ChatTemplate::from_file(llm)
                                                           : models::ChatTemplate::named(chat_template);
            new (self) models::ChatSession(std::move(llm), std::move(t),
                                           {.system = system,
                                            .context = context,
                                            .max_tokens = max_tokens,
                                            .sampling = {.temperature = temperature,
                                                         .top_p = top_p,
                                                         .repetition_penalty = repetition_penalty,
                                                         .seed = seed}});
          },
          "path"_a, "system"_a = "", "context"_a = 2048, "max_tokens"_a = 512, "temperature"_a = 0.2, "top_p"_a = 0.9,
          "repetition_penalty"_a = 1.1, "seed"_a = 0, "chat_template"_a = "")
      .def(
          "reply", [](models::ChatSession& c, const std::string& message) { return c.reply(message); }, "message"_a,
          nb::call_guard<Release>(), "Adds the message, generates the assistant's reply and returns it.")
      .def("reset", &models::ChatSession::reset)
      .def_prop_ro("messages", [](const models::ChatSession& c) {
        nb::list out;
        for (const models::ChatMessage& m : c.messages()) {
          nb::dict d;
          d["role"] = m.role;
          d["content"] = m.content;
          out.append(d);
        }
        return out;
      });
  nb::class_<models::SentenceEncoder>(models, "SentenceEncoder")
      .def_static("from_folder", &models::SentenceEncoder::from_folder, "folder"_a, nb::call_guard<Release>())
      .def("encode", &models::SentenceEncoder::encode, "texts"_a, "batch_size"_a = 32, nb::call_guard<Release>())
      .def_prop_ro("tokenizer", &models::SentenceEncoder::tokenizer, nb::rv_policy::reference_internal)
      .def_prop_ro("model", [](const models::SentenceEncoder& e) { return e.model().shared_from_this(); });
}

void bind_train(nb::module_& m) {
  nb::module_ t =
      m.def_submodule("train", "Checkpoints, the model registry, the training step and loop (ember/train.h)");
  nb::class_<train::Checkpoint>(t, "Checkpoint")
      .def_ro("path", &train::Checkpoint::path)
      .def_prop_ro("format", [](const train::Checkpoint& c) { return std::string(train::format_name(c.format)); })
      .def_ro("kind", &train::Checkpoint::kind)
      .def_ro("quantization", &train::Checkpoint::quantization)
      .def_ro("settings", &train::Checkpoint::settings)
      .def_ro("tensors", &train::Checkpoint::tensors)
      .def("part", &train::Checkpoint::part, "prefix"_a)
      .def("model_state", &train::Checkpoint::model_state);
  t.def("read_checkpoint", &train::read_checkpoint, "path"_a, "op"_a = "checkpoint", "finite"_a = true,
        nb::call_guard<Release>(), "Reads a checkpoint or model file (safetensors or GGUF, told by its first bytes).");
  t.attr("MODEL_PREFIX") = std::string(train::kModelPrefix);
  t.attr("OPTIMIZER_PREFIX") = std::string(train::kOptimizerPrefix);
  t.attr("SCHEDULE_PREFIX") = std::string(train::kSchedulePrefix);
  t.attr("SCALER_PREFIX") = std::string(train::kScalerPrefix);
  t.attr("AVERAGE_PREFIX") = std::string(train::kAveragePrefix);

  nb::class_<train::LoadedModel>(t, "LoadedModel")
      .def_ro("kind", &train::LoadedModel::kind)
      .def_ro("model", &train::LoadedModel::model)
      .def_prop_ro("config", [](const train::LoadedModel& l) { return config_dict(l.config); })
      .def_ro("tokenizer", &train::LoadedModel::tokenizer)
      .def_ro("context", &train::LoadedModel::context)
      .def_ro("encoder", &train::LoadedModel::encoder)
      .def_ro("source", &train::LoadedModel::source);
  t.def(
      "load_model",
      [](const std::string& path, std::vector<std::string> kinds, bool average) {
        return train::load_model(path, "load_model",
                                 {.kinds = std::move(kinds),
                                  .expected = "a model of the kinds asked for",
                                  .weights = average ? train::kAveragePrefix : train::kModelPrefix});
      },
      "path"_a, "kinds"_a = std::vector<std::string>{}, "average"_a = false, nb::call_guard<Release>(),
      "Rebuilds the model a checkpoint, a GGUF file of `ember quantize` or a sentence-transformers folder holds.");
  t.def(
      "model_kinds",
      [] {
        nb::list out;
        for (const train::ModelKind& k : train::model_kinds()) {
          nb::dict d;
          d["name"] = k.name;
          d["task"] = k.task;
          d["description"] = k.description;
          d["architecture_keys"] = k.architecture_keys;
          out.append(d);
        }
        return out;
      },
      "The registry's model kinds.");

  nb::class_<train::TrainingStep>(t, "TrainingStep",
                                  "One training step: zero_grad, forward and loss (under autocast), backward, "
                                  "clipping, the optimizer's step, optionally compiled.")
      .def(nb::new_([](std::shared_ptr<nn::Module> model, const std::string& optimizer, double lr, nb::callable loss,
                       double clip_grad_norm, const std::string& amp, bool compile) {
             return std::make_shared<train::TrainingStep>(
                 model, std::vector<optim::ParamGroup>{{.params = model->parameters(), .options = {}}},
                 train::optimizer_factory(optimizer, lr), loss_function(loss),
                 train::StepOptions{
                     .clip_grad_norm = clip_grad_norm, .autocast = autocast_dtype(amp), .compile = compile});
           }),
           "model"_a, "optimizer"_a = "adam", "lr"_a = 1e-3, "loss"_a, "clip_grad_norm"_a = 0.0, "amp"_a = "none",
           "compile"_a = false)
      .def("__call__", &train::TrainingStep::operator(), "batch"_a, nb::call_guard<Release>())
      .def("set_lr", &train::TrainingStep::set_lr, "lr"_a)
      .def(
          "state_dict",
          [](train::TrainingStep& s) {
            const train::TrainingState state = s.state();
            return state.optimizer;
          },
          "The optimizer's state (as a checkpoint's optimizer. part holds it).")
      .def(
          "load_checkpoint", [](train::TrainingStep& s, const train::Checkpoint& c) { s.load_state(c); },
          "checkpoint"_a, nb::call_guard<Release>(),
          "Restores the model, the optimizer (and scaler) from a training checkpoint.")
      .def(
          "save_checkpoint",
          [](train::TrainingStep& s, const std::string& path, const std::map<std::string, std::string>& settings) {
            train::save_checkpoint(path, s.state(), settings);
          },
          "path"_a, "settings"_a = std::map<std::string, std::string>{}, nb::call_guard<Release>());

  nb::class_<Run>(t, "Run", "A run of `ember train` (a task and its loop): run() trains and returns the summary.")
      .def(
          "run",
          [](Run& r, std::optional<nb::callable> on_progress) {
            const train::ProgressFn progress = progress_function(std::move(on_progress));
            train::RunSummary summary;
            {
              const Release release;
              summary = r.trainer->run(progress);
            }
            return summary_dict(summary);
          },
          "on_progress"_a = nb::none())
      .def_prop_ro("first_step", [](const Run& r) { return r.trainer->first_step(); })
      .def(
          "sample", [](Run& r, int64_t tokens) { return dynamic_cast<train::TextTask&>(*r.task).sample(tokens); },
          "tokens"_a = 300, nb::call_guard<Release>());
  t.def(
      "text_run",
      [](const std::string& model, int64_t layers, int64_t heads, int64_t dim, int64_t context, int64_t batch_size,
         int64_t steps, double lr, int64_t warmup, uint64_t seed, const std::string& data, int64_t eval_every,
         int64_t eval_batches, const std::string& amp, bool compile, int64_t stop_after, const std::string& save,
         const std::string& resume) {
        train::TextOptions o = model == "ssm" ? train::TextOptions::ssm_defaults() : train::TextOptions{};
        o.model = model;
        if (layers > 0) o.layers = layers;
        if (heads > 0) o.heads = heads;
        if (dim > 0) o.dim = dim;
        if (context > 0) o.context = context;
        if (batch_size > 0) o.batch_size = batch_size;
        if (steps > 0) o.steps = steps;
        if (lr > 0) o.lr = lr;
        if (warmup >= 0) o.warmup = warmup;
        o.seed = seed;
        o.data_path = data;
        if (eval_every > 0) o.eval_every = eval_every;
        if (eval_batches > 0) o.eval_batches = eval_batches;
        o.amp = autocast_dtype(amp);
        o.compile = compile;
        return make_run(std::make_unique<train::TextTask>(o), stop_after, save, resume);
      },
      "model"_a = "gpt", "layers"_a = 0, "heads"_a = 0, "dim"_a = 0, "context"_a = 0, "batch_size"_a = 0, "steps"_a = 0,
      "lr"_a = 0.0, "warmup"_a = -1, "seed"_a = 1337, "data"_a = "data/shakespeare/input.txt", "eval_every"_a = 0,
      "eval_batches"_a = 0, "amp"_a = "none", "compile"_a = false, "stop_after"_a = 0, "save"_a = "", "resume"_a = "",
      nb::call_guard<Release>(),
      "`ember train gpt|ssm` as a run: the CLI's options and defaults (0 or -1: the default); resume continues a "
      "checkpoint the CLI or Python wrote.");
  t.def(
      "mnist_run",
      [](const std::string& model, int64_t epochs, int64_t batch_size, const std::string& optimizer,
         std::optional<double> lr, const std::string& schedule, int64_t shift, uint64_t seed, const std::string& data,
         const std::string& amp, bool compile, int64_t stop_after, const std::string& save, const std::string& resume) {
        train::MnistOptions o{.model = model,
                              .epochs = epochs,
                              .batch_size = batch_size,
                              .optimizer = optimizer,
                              .lr = lr,
                              .schedule = schedule,
                              .shift = shift,
                              .seed = seed,
                              .data_dir = data,
                              .compile = compile,
                              .amp = autocast_dtype(amp)};
        return make_run(std::make_unique<train::MnistTask>(o), stop_after, save, resume);
      },
      "model"_a = "cnn", "epochs"_a = 10, "batch_size"_a = 64, "optimizer"_a = "adam", "lr"_a = nb::none(),
      "schedule"_a = "cosine", "shift"_a = 2, "seed"_a = 0, "data"_a = "data/mnist", "amp"_a = "none",
      "compile"_a = false, "stop_after"_a = 0, "save"_a = "", "resume"_a = "", nb::call_guard<Release>(),
      "`ember train mnist` as a run (its options and defaults).");
}

void bind_formats(nb::module_& m) {
  nb::module_ o = m.def_submodule("onnx", "ONNX import (ember/onnx.h)");
  nb::class_<onnx::Model, nn::Module>(o, "Model", nb::type_slots(module_type_slots()))
      .def_prop_ro("input_names", &onnx::Model::input_names)
      .def_prop_ro("output_names", &onnx::Model::output_names)
      .def(
          "run", [](onnx::Model& model, const std::map<std::string, Tensor>& inputs) { return model.run(inputs); },
          "inputs"_a, nb::call_guard<Release>(), "Inference (compiled): a dict of inputs by name -> outputs by name.")
      .def(
          "__call__", [](onnx::Model& model, const std::vector<Tensor>& inputs) { return model.forward(inputs); },
          "inputs"_a, nb::call_guard<Release>(), "Eager, with autograd (fine-tuning): the outputs in order.")
      .def("explain", &onnx::Model::explain);
  o.def(
      "load",
      [](const std::string& path, bool trainable, bool compile) {
        return onnx::load(path, {.trainable = trainable, .compile = compile, .compile_options = {}});
      },
      "path"_a, "trainable"_a = true, "compile"_a = true, nb::call_guard<Release>());

  nb::module_ g = m.def_submodule("gguf", "GGUF files (ember/gguf.h): typed metadata and tensors");
  g.def(
      "load",
      [](const std::string& path) {
        gguf::File file;
        {
          const Release release;
          file = gguf::load(path);
        }
        nb::dict metadata;
        for (const auto& [key, value] : file.metadata) metadata[key.c_str()] = value_to_python(value);
        nb::dict tensors;
        for (const auto& [name, tensor] : file.tensors) tensors[name.c_str()] = tensor;
        return nb::make_tuple(metadata, tensors);
      },
      "path"_a, "Reads a GGUF file: (metadata dict, tensors dict), in the file's order.");
  g.def(
      "save",
      [](const std::string& path, nb::dict metadata, nb::dict tensors) {
        gguf::File file;
        for (auto [key, value] : metadata) {
          const std::string name = nb::cast<std::string>(key);
          file.metadata.emplace_back(name, value_from_python(value, name));
        }
        for (auto [name, tensor] : tensors)
          file.tensors.emplace_back(nb::cast<std::string>(name), nb::cast<Tensor>(tensor));
        const Release release;
        gguf::save(path, file);
      },
      "path"_a, "metadata"_a, "tensors"_a,
      "Writes a GGUF file atomically (ints as int64, floats as float64, lists as arrays).");
}

}  // namespace

void bind_training(nb::module_& m) {
  bind_models(m);
  bind_train(m);
  bind_formats(m);
}

}  // namespace ember::python
