// The runs `ember train mnist|gpt|ssm|diffusion` configure: each a Task of the shared loop
// (loop.h) that differs only in its model, data and defaults, and the evaluations they run.
//
//   train::TextTask task({.model = "gpt", .steps = 300});
//   train::Trainer trainer(task, {.save_path = "gpt.safetensors"});
//   train::RunSummary summary = trainer.run();
//   std::string text = task.sample(200);
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ember/data.h"
#include "ember/models/diffusion.h"
#include "ember/models/language_model.h"
#include "ember/png.h"
#include "ember/tokenizer.h"
#include "ember/train/loop.h"
#include "ember/train/registry.h"

namespace ember::train {

// --- the evaluations ------------------------------------------------------------------------------

/// The mean loss over `batches` batches of a split, without gradients, in eval mode (nanoGPT's
/// estimate_loss). The batches depend only on `seed`, so every evaluation sees the same ones.
double text_split_loss(models::LanguageModel& model, const data::TextSplit& split, std::string_view name,
                       int64_t batches, int64_t batch_size, int64_t context, uint64_t seed);
/// The seed of the evaluation batches of `split` ("train" or "val") in a run seeded with run_seed.
uint64_t text_eval_seed(uint64_t run_seed, std::string_view split);
/// The fraction of `images` whose most likely class is their label, without gradients, in eval mode.
double classification_accuracy(nn::Module& model, const Tensor& images, const Tensor& labels);

/// Continues `prompt` with a GPT (through its KV cache unless !use_cache) or a Mamba model
/// (through its recurrent state); calls on_token(id) as each token is drawn.
std::vector<int64_t> generate_text(models::LanguageModel& model, const std::vector<int64_t>& prompt, int64_t tokens,
                                   const models::SamplingOptions& options, bool use_cache = true,
                                   const std::function<void(int64_t)>& on_token = nullptr);

// --- MNIST classification -------------------------------------------------------------------------

struct MnistOptions {
  std::string model = "cnn";  // "cnn" or "mlp" (models/mnist.h)
  int64_t epochs = 10;
  int64_t batch_size = 64;          // the global batch (each rank of a data-parallel run takes its share)
  std::string optimizer = "adam";   // sgd, momentum, adam, adamw, adagrad or rmsprop
  std::optional<double> lr{};       // unset: 0.01 for sgd, momentum and adagrad; 1e-3 rmsprop; 3e-3 adam(w)
  std::string schedule = "cosine";  // "cosine": decay to 0 over the run, stepped per batch; "constant"
  int64_t shift = 2;                // augmentation: random shifts of up to this many pixels (0: none)
  uint64_t seed = 0;
  std::string data_dir = "data/mnist";  // IDX files, else the offline 5,000-image subset
  bool compile = false;
  std::optional<DType> amp{};  // autocast: kBFloat16 or kFloat16 (with loss scaling)
  bool zero = false;           // data-parallel: the optimizer state sharded over the ranks (ZeRO-1)
  double bucket_cap_mb = 25;
  std::shared_ptr<dist::ProcessGroup> group{};  // data-parallel: this process's group (LoopOptions too)
  /// Where the model trains: initialized on the CPU (the same values on every device for a seed)
  /// and moved there; batches and the test images are copied there; checkpoints hold host copies.
  Device device = kCPU;
};

class MnistTask : public Task {
 public:
  explicit MnistTask(MnistOptions options);
  std::string name() const override { return "mnist"; }
  std::string op() const override { return "train"; }
  std::map<std::string, std::string> settings() const override;
  uint64_t seed() const override { return options_.seed; }
  std::shared_ptr<nn::Module> model() override;
  OptimizerFactory optimizer() override;
  LossFn loss() override;
  StepOptions step_options() const override;
  void setup(TrainingStep& step) override;
  int64_t steps() const override { return options_.epochs * steps_per_epoch(); }
  int64_t steps_per_epoch() const override;
  int64_t epoch_samples() const override { return train_set_.size(); }
  int64_t save_every() const override { return steps_per_epoch(); }
  std::vector<Tensor> batch(int64_t step) override;
  StepMetrics metrics(const std::vector<Tensor>& batch, const std::vector<Tensor>& outputs) override;
  std::map<std::string, double> evaluate(int64_t step) override;  // "test_accuracy"

  const MnistOptions& options() const { return options_; }
  double lr() const { return lr_; }
  const data::MNIST& train_set() const { return train_set_; }
  const data::MNIST& test_set() const { return test_set_; }

 private:
  MnistOptions options_;
  double lr_;
  data::MNIST train_set_;
  data::MNIST test_set_;
  std::shared_ptr<nn::Sequential> model_;
  std::unique_ptr<data::DataLoader> loader_;
  std::optional<data::DataLoader::Iterator> next_;
  int rank_ = 0;
  int world_size_ = 1;
};

// --- character language models: the GPT and the Mamba model on a text --------------------------------

struct TextOptions {
  // "gpt" or "ssm" (the Mamba model: heads and dropout do not apply; state, expand and conv do).
  // The GPT defaults train in about 5 minutes on 2 cores (about 12k tokens/s); nanoGPT's small
  // character model is dim 128, context 64, batch_size 12, steps 2000.
  std::string model = "gpt";
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t dim = 192;
  int64_t state = 16;  // ssm: the scan's state per channel
  int64_t expand = 2;  // ssm: channels inside a mixer per model dim
  int64_t conv = 4;    // ssm: the causal convolution's width
  int64_t context = 128;
  int64_t batch_size = 16;  // the global batch
  int64_t steps = 1800;
  double lr = 1e-3;  // peak; cosine decay to lr / 10 at the last step (nanoGPT's recipe)
  int64_t warmup = 100;
  double dropout = 0.0;
  uint64_t seed = 1337;
  std::string data_path = "data/shakespeare/input.txt";
  int64_t eval_every = 300;
  int64_t eval_batches = 20;  // batches per split in each evaluation
  bool compile = false;
  std::optional<DType> amp{};
  bool zero = false;
  double bucket_cap_mb = 25;
  std::shared_ptr<dist::ProcessGroup> group{};
  /// Where the model trains: its parameters are initialized on the CPU (the same values on every
  /// device for a seed) and moved there; batches are copied there; checkpoints hold host copies.
  Device device = kCPU;

  /// The Mamba model's defaults: about the default GPT's parameter count, trained for about its
  /// wall time.
  static TextOptions ssm_defaults();
};

class TextTask : public Task {
 public:
  explicit TextTask(TextOptions options);
  std::string name() const override { return options_.model; }
  std::map<std::string, std::string> settings() const override;
  ResumeRules resume_rules() const override;
  uint64_t seed() const override { return options_.seed; }
  std::shared_ptr<nn::Module> model() override;
  std::vector<optim::ParamGroup> param_groups() override;
  OptimizerFactory optimizer() override;
  LossFn loss() override;
  StepOptions step_options() const override;
  int64_t steps() const override { return options_.steps; }
  int64_t save_every() const override { return options_.eval_every; }
  int64_t evaluate_every() const override { return options_.eval_every; }
  std::optional<double> lr_at(int64_t step) const override;
  std::vector<Tensor> batch(int64_t step) override;
  StepMetrics metrics(const std::vector<Tensor>& batch, const std::vector<Tensor>& outputs) override;
  std::map<std::string, double> evaluate(int64_t step) override;  // "train_loss", "val_loss"
  void save(TrainingState& state, std::map<std::string, std::string>& metadata) override;
  std::vector<std::string> state_keys() const override { return {keys::kBatchState}; }
  void load(const Checkpoint& checkpoint, const std::map<std::string, uint64_t>& state) override;

  /// `tokens` characters from a newline at temperature 0.8, top-k 40, seeded with the run's seed.
  std::string sample(int64_t tokens);
  /// "4 layers, 4 heads, 192 dims, context 128, dropout 0" (or the Mamba model's).
  std::string describe() const;
  const TextOptions& options() const { return options_; }
  const data::CharTokenizer& tokenizer() const { return tokenizer_; }
  const data::TextSplit& split() const { return split_; }
  models::LanguageModel& language_model() { return *model_; }

 private:
  TextTask(TextOptions options, const std::string& text);

  TextOptions options_;
  data::CharTokenizer tokenizer_;
  data::TextSplit split_;
  std::shared_ptr<models::LanguageModel> model_;
  uint64_t batch_state_;
  int rank_ = 0;
  int world_size_ = 1;
};

// --- diffusion: a class-conditional DDPM on MNIST ---------------------------------------------------

struct DiffusionOptions {
  int64_t channels = 32;     // the U-Net's width at full resolution (x1, x2, x2 at 28, 14, 7 pixels)
  int64_t timesteps = 1000;  // T
  std::string schedule = "cosine";
  int64_t steps = 1700;  // training steps (about 19 minutes on 2 cores)
  int64_t batch_size = 64;
  double lr = 1e-3;  // AdamW's peak: linear warmup, then cosine decay to lr / 10
  int64_t warmup = 200;
  double drop_class = 0.1;  // the fraction of examples trained without their class (for guidance)
  double ema = 0.999;       // the decay of the weights' moving average the samplers use
  uint64_t seed = 0;
  std::string data_dir = "data/mnist";
  int64_t save_every = 500;
  /// Where the U-Net trains: initialized on the CPU and moved there, with its moving average;
  /// batches are copied there and the step's draws made there (the CPU's numbers for a seed).
  Device device = kCPU;
};

class DiffusionTask : public Task {
 public:
  explicit DiffusionTask(DiffusionOptions options);
  std::string name() const override { return "diffusion"; }
  std::map<std::string, std::string> settings() const override;
  uint64_t seed() const override { return options_.seed; }
  std::shared_ptr<nn::Module> model() override;
  OptimizerFactory optimizer() override;
  LossFn loss() override;
  StepOptions step_options() const override { return {.clip_grad_norm = 1.0}; }
  int64_t steps() const override { return options_.steps; }
  int64_t save_every() const override { return options_.save_every; }
  std::optional<double> lr_at(int64_t step) const override;
  std::vector<Tensor> batch(int64_t step) override;
  std::optional<Progress> after_step(int64_t done, int64_t last_step, double loss) override;  // every 100 steps
  void save(TrainingState& state, std::map<std::string, std::string>& metadata) override;
  void load(const Checkpoint& checkpoint, const std::map<std::string, uint64_t>& state) override;

  /// FLOPs of one training step (forward and backward, 3x the forward's).
  int64_t flops_per_step() const;
  int64_t parameter_count() const;
  int64_t train_size() const { return images_.size(0); }
  const DiffusionOptions& options() const { return options_; }

 private:
  StateDict average_state() const;

  DiffusionOptions options_;
  models::DiffusionSchedule schedule_;
  Tensor images_;  // (n, 1, 28, 28) in [-1, 1]
  Tensor labels_;
  std::shared_ptr<models::UNet> model_;
  std::vector<Tensor> parameters_;
  std::vector<Tensor> average_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
  double window_loss_ = 0;  // the losses since the last line
  int64_t window_ = 0;
};

/// How `ember sample diffusion` samples: every combination of steps and guidance scales.
struct DiffusionSampleOptions {
  std::string sampler = "ddim";  // "ddim" or "ddpm"
  std::vector<int64_t> steps{50};
  std::vector<double> guidance{3.0};
  double eta = 0.0;
  int64_t per_class = 10;    // samples of each class
  int64_t batch_size = 250;  // samples drawn at once
  uint64_t seed = 0;
};

/// The samples of one combination.
struct DiffusionSamples {
  int64_t steps = 0;
  double guidance = 0;
  double seconds = 0;
  Tensor pixels{};  // (N, C, H, W) in [0, 1], per_class of class 0, then of class 1, ...
  Tensor labels{};  // (N) int64
  /// With a classifier: the fraction of samples classified as the class they were drawn for,
  /// overall and per class.
  std::optional<double> accuracy{};
  std::vector<double> per_class_accuracy{};
};

/// Draws from a diffusion model (load_model of a `train diffusion` checkpoint; its moving average
/// with weights = kAveragePrefix) for every combination of steps and guidance, each from
/// manual_seed(options.seed); `classifier` (an MNIST model) judges them when given. Calls
/// on_samples as each combination is done.
void sample_diffusion(const LoadedModel& model, const DiffusionSampleOptions& options, nn::Module* classifier,
                      const std::function<void(const DiffusionSamples&)>& on_samples);

/// Images (N, 1, H, W) in [0, 1] as one grid image: `rows` rows of `columns`, with 2-pixel gray gaps.
GrayImage image_grid(const Tensor& pixels, int64_t rows, int64_t columns);

}  // namespace ember::train
