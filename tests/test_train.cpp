// The training library (ember/train.h): checkpoints, the model registry, the training step builder
// and the loop, from C++ as a user's program calls them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "ember/ember.h"
#include "ember/train.h"
#include "test_util.h"

namespace {

using ember::Tensor;
namespace train = ember::train;

class Train : public test_util::TempFolderTest {};

// --- checkpoints -------------------------------------------------------------------------------------

TEST_F(Train, CheckpointPartsAndSettingsRoundTrip) {
  ember::manual_seed(1);
  auto model = ember::models::mnist_mlp();
  ember::optim::Adam adam(model->parameters(), {.lr = 0.01});
  ember::optim::CosineAnnealingLR schedule(adam, 10);
  train::TrainingState state{.model = model.get(), .optimizer = adam.state_dict(), .schedule = &schedule};
  state.average = {{"w", ember::ones({2})}};
  train::save_checkpoint(path("run.safetensors"), state, {{"task", "mnist"}, {"model", "mlp"}, {"steps_done", "7"}});

  const train::Checkpoint c = train::read_checkpoint(path("run.safetensors"));
  EXPECT_EQ(c.format, train::FileFormat::kSafetensors);
  EXPECT_EQ(c.kind, "mnist_mlp");
  EXPECT_EQ(c.count("steps_done"), 7);
  EXPECT_EQ(c.setting("model"), "mlp");
  EXPECT_EQ(c.describe(), "a mnist_mlp model");
  const ember::StateDict weights = c.model_state();
  ASSERT_EQ(weights.size(), model->state_dict().size());
  for (const auto& [name, tensor] : model->state_dict())
    EXPECT_TRUE(test_util::bitwise_equal(weights.at(name), tensor));
  EXPECT_EQ(c.part(train::kOptimizerPrefix).size(), adam.state_dict().size());
  EXPECT_EQ(c.part(train::kSchedulePrefix).count("last_epoch"), 1u);
  EXPECT_TRUE(test_util::bitwise_equal(c.part(train::kAveragePrefix).at("w"), ember::ones({2})));

  test_util::expect_error([&] { (void)c.count("model", "resume"); },
                          {"[resume] checkpoint ", "run.safetensors has no valid model entry"});
  test_util::expect_error([&] { (void)c.setting("heads"); }, {"has no heads entry"});
}

TEST_F(Train, FormatIsToldByTheFirstBytes) {
  std::ofstream(path("text.safetensors")) << "not a checkpoint";
  test_util::expect_error([&] { (void)train::read_checkpoint(path("text.safetensors"), "read"); },
                          {"[read] ", "text.safetensors is neither a safetensors checkpoint nor a GGUF file"});
  test_util::expect_error([&] { (void)train::read_checkpoint(dir_.string(), "read"); }, {"is a folder"});
  // A GGUF file no ember command wrote.
  ember::gguf::File file;
  file.metadata = {{"general.architecture", "llama"}};
  file.tensors = {{"x", ember::ones({4})}};
  ember::gguf::save(path("model.bin"), file);
  test_util::expect_error([&] { (void)train::read_checkpoint(path("model.bin")); },
                          {"is a GGUF file without an ember.model entry"});
}

TEST_F(Train, NonFiniteModelsAreRefusedUnlessResuming) {
  auto model = ember::models::mnist_mlp();
  {
    ember::autograd::NoGradGuard no_grad;
    model->parameters()[0].view({-1}).narrow(0, 3, 1).fill_(NAN);
  }
  train::save_checkpoint(path("nan.safetensors"), {.model = model.get()}, {{"task", "mnist"}, {"model", "mlp"}});
  test_util::expect_error([&] { (void)train::read_checkpoint(path("nan.safetensors"), "eval"); },
                          {"[eval] checkpoint ", "holds 1 NaN and 0 infinite values"});
  EXPECT_NO_THROW((void)train::read_checkpoint(path("nan.safetensors"), "resume", /*finite=*/false));
}

TEST(TrainPrefixes, WithAndStrip) {
  const ember::StateDict dict = {{"a", ember::ones({1})}, {"b.c", ember::zeros({2})}};
  const ember::StateDict prefixed = train::with_prefix(dict, train::kModelPrefix);
  EXPECT_EQ(prefixed.count("model.a"), 1u);
  EXPECT_EQ(prefixed.count("model.b.c"), 1u);
  EXPECT_EQ(train::strip_prefix(prefixed, "model.").size(), 2u);
  EXPECT_TRUE(train::strip_prefix(prefixed, "optimizer.").empty());
  EXPECT_EQ(train::vocabulary_from_hex(train::vocabulary_to_hex(std::string("\0a\xff", 3)), "p", "op"),
            std::string("\0a\xff", 3));
  test_util::expect_error([] { (void)train::vocabulary_from_hex("zz", "file", "op"); }, {"corrupt vocabulary"});
  EXPECT_EQ(train::number_setting(0.1), "0.10000000000000001");
}

// --- the registry ------------------------------------------------------------------------------------

TEST_F(Train, EveryKindLoadsFromItsSettings) {
  const std::vector<train::ModelConfig> configs = {
      ember::models::MnistConfig{.model = "cnn"},
      ember::models::GPTConfig{.vocab_size = 5, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8},
      ember::models::MambaConfig{.vocab_size = 5, .d_model = 8, .n_layer = 1, .d_state = 4},
      ember::models::UNetConfig{.channels = 8, .multipliers = {1, 2}, .groups = 4, .num_classes = 3}};
  for (const train::ModelConfig& config : configs) {
    const std::string kind = train::kind_of(config);
    SCOPED_TRACE(kind);
    ember::manual_seed(3);
    const std::shared_ptr<ember::nn::Module> model = train::build_model(config);
    std::map<std::string, std::string> settings = train::config_settings(config);
    settings["task"] = train::model_kind(kind).task;
    settings["vocabulary"] = train::vocabulary_to_hex("abcde");
    settings["image_size"] = "8";
    settings["timesteps"] = "10";
    settings["schedule"] = "linear";
    settings["context"] = "8";
    train::save_checkpoint(path(kind + ".safetensors"), {.model = model.get()}, settings);
    const train::LoadedModel loaded = train::load_model(path(kind + ".safetensors"));
    EXPECT_EQ(loaded.kind, kind);
    EXPECT_EQ(train::kind_of(loaded.config), kind);
    EXPECT_EQ(train::config_settings(loaded.config), train::config_settings(config));
    EXPECT_FALSE(loaded.model->is_training());
    for (const auto& [name, tensor] : model->state_dict()) {
      EXPECT_TRUE(test_util::bitwise_equal(loaded.model->state_dict().at(name), tensor)) << name;
    }
    for (const std::string& key : train::model_kind(kind).architecture_keys) EXPECT_EQ(settings.count(key), 1u) << key;
  }
  const train::LoadedModel gpt = train::load_model(path("gpt.safetensors"));
  ASSERT_TRUE(gpt.tokenizer.has_value());
  EXPECT_EQ(gpt.tokenizer->vocabulary(), "abcde");
  EXPECT_EQ(gpt.context, 8);
  EXPECT_EQ(gpt.as<ember::models::GPT>().config.n_embd, 8);
  test_util::expect_error([&] { (void)gpt.as<ember::models::Mamba>(); }, {"holds a gpt model"});
  const train::LoadedModel unet = train::load_model(path("diffusion.safetensors"));
  ASSERT_TRUE(unet.schedule.has_value());
  EXPECT_EQ(unet.schedule->timesteps(), 10);
  test_util::expect_error(
      [&] { (void)train::load_model(path("diffusion.safetensors"), "sample", {.weights = train::kAveragePrefix}); },
      {"[sample] checkpoint ", "holds no tensors under \"ema.\""});
}

TEST_F(Train, LoadModelSaysWhatItWantedAndWhatItFound) {
  auto model = ember::models::mnist_mlp();
  train::save_checkpoint(path("mlp.safetensors"), {.model = model.get()}, {{"task", "mnist"}, {"model", "mlp"}});
  test_util::expect_error(
      [&] {
        (void)train::load_model(path("mlp.safetensors"), "generate",
                                {.kinds = {"gpt", "ssm"}, .expected = "a language model"});
      },
      {"[generate] checkpoint ", "mlp.safetensors is not a language model (it holds a mnist_mlp model)"});
  ember::save({{"x", ember::ones({2})}}, path("plain.safetensors"));
  test_util::expect_error([&] { (void)train::load_model(path("plain.safetensors"), "load"); },
                          {"[load] ", "holds task \"\": not a model ember knows (mnist_mlp, mnist_cnn, gpt"});
  // Settings no model can have, and tensors that do not fit.
  ember::save(
      {{"model.x", ember::ones({2})}}, path("gpt.safetensors"),
      {{"task", "gpt"}, {"layers", "1"}, {"heads", "0"}, {"dim", "8"}, {"context", "4"}, {"vocabulary", "6162"}});
  test_util::expect_error([&] { (void)train::load_model(path("gpt.safetensors"), "load"); },
                          {"its settings do not make a gpt model"});
  ember::save({{"model.x", ember::ones({2})}}, path("mlp2.safetensors"), {{"task", "mnist"}, {"model", "mlp"}});
  test_util::expect_error([&] { (void)train::load_model(path("mlp2.safetensors"), "load"); },
                          {"does not fit the mnist_mlp model its metadata describes"});
  test_util::expect_error([] { (void)train::model_kind("llama"); }, {"unknown model kind \"llama\"", "gpt, ssm"});
}

// --- the step and the loop ---------------------------------------------------------------------------

// A least-squares fit of y = x w: the smallest task a loop can run, with an epoch of 4 batches.
class LineTask : public train::Task {
 public:
  explicit LineTask(train::StepOptions options = {}) : options_(options) {
    ember::manual_seed(11);
    x_ = ember::randn({16, 3});
    y_ = x_.matmul(ember::tensor<float>({1.0f, -2.0f, 0.5f}).view({3, 1}));
  }
  std::string name() const override { return "line"; }
  std::map<std::string, std::string> settings() const override { return {{"task", "line"}, {"lr", "0.3"}}; }
  uint64_t seed() const override { return 5; }
  std::shared_ptr<ember::nn::Module> model() override {
    if (!model_) model_ = std::make_shared<ember::nn::Linear>(3, 1, /*bias=*/false);
    return model_;
  }
  train::OptimizerFactory optimizer() override { return train::optimizer_factory("adam", 0.3); }
  train::LossFn loss() override {
    return [this](const std::vector<Tensor>& b) {
      return std::vector<Tensor>{ember::nn::functional::mse_loss((*model_)(b[0]), b[1])};
    };
  }
  train::StepOptions step_options() const override { return options_; }
  int64_t steps() const override { return 3 * steps_per_epoch(); }
  int64_t steps_per_epoch() const override { return 4; }
  int64_t epoch_samples() const override { return 16; }
  int64_t save_every() const override { return steps_per_epoch(); }
  std::vector<Tensor> batch(int64_t step) override {
    const int64_t first = (step % 4) * 4;
    return {x_.narrow(0, first, 4), y_.narrow(0, first, 4)};
  }
  std::map<std::string, double> evaluate(int64_t) override {
    ember::autograd::NoGradGuard no_grad;
    return {{"mse", ember::nn::functional::mse_loss((*model_)(x_), y_).item<double>()}};
  }

 private:
  train::StepOptions options_;
  std::shared_ptr<ember::nn::Module> model_;
  Tensor x_, y_;
};

TEST_F(Train, LoopTrainsReportsAndResumesBitIdentically) {
  LineTask whole;
  std::vector<train::Progress> seen;
  const train::RunSummary run =
      train::fit(whole, {.save_path = path("whole.safetensors")}, [&](const train::Progress& p) { seen.push_back(p); });
  EXPECT_EQ(run.first_step, 0);
  EXPECT_EQ(run.last_step, 12);
  EXPECT_EQ(run.samples, 48);
  ASSERT_FALSE(seen.empty());
  EXPECT_LT(run.evaluation.at("mse"), 0.5 * seen.front().loss);  // it learns
  int epochs = 0, steps = 0, evaluations = 0;
  for (const train::Progress& p : seen) {
    epochs += p.kind == train::Progress::Kind::kEpoch;
    steps += p.kind == train::Progress::Kind::kStep;
    evaluations += p.kind == train::Progress::Kind::kEvaluation;
  }
  EXPECT_EQ(epochs, 3);
  EXPECT_EQ(steps, 12);
  EXPECT_EQ(evaluations, 1);
  EXPECT_EQ(train::read_checkpoint(path("whole.safetensors")).count("epochs_done"), 3);

  // Stopped after one epoch, then resumed: the same final checkpoint, byte for byte.
  LineTask first;
  const train::RunSummary part = train::fit(first, {.stop_after = 1, .save_path = path("part.safetensors")});
  EXPECT_EQ(part.last_step, 4);
  LineTask second;
  const train::RunSummary rest =
      train::fit(second, {.save_path = path("part.safetensors"), .resume_path = path("part.safetensors")});
  EXPECT_EQ(rest.first_step, 4);
  EXPECT_EQ(rest.final_loss, run.final_loss);
  std::ifstream a(path("whole.safetensors"), std::ios::binary), b(path("part.safetensors"), std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(b), {}));

  // The same through a GGUF checkpoint (the format by the name when writing, by the bytes when reading).
  LineTask third;
  (void)train::fit(third, {.stop_after = 1, .save_path = path("part.gguf")});
  const train::Checkpoint gguf = train::read_checkpoint(path("part.gguf"));
  EXPECT_EQ(gguf.format, train::FileFormat::kGguf);
  EXPECT_TRUE(gguf.training);
  EXPECT_EQ(gguf.count("epochs_done"), 1);
  EXPECT_EQ(gguf.model_state().size(), 1u);  // the Linear's weight
  LineTask fourth;
  (void)train::fit(fourth, {.save_path = path("from_gguf.safetensors"), .resume_path = path("part.gguf")});
  std::ifstream c(path("whole.safetensors"), std::ios::binary), d(path("from_gguf.safetensors"), std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(c), {}, std::istreambuf_iterator<char>(d), {}));

  // A checkpoint of other settings is refused before anything is loaded.
  class OtherTask : public LineTask {
    std::map<std::string, std::string> settings() const override { return {{"task", "line"}, {"lr", "0.2"}}; }
  } other;
  test_util::expect_error([&] { train::Trainer(other, {.resume_path = path("whole.safetensors")}); },
                          {"[train line] checkpoint ", "was written with lr=0.3 but this run uses lr=0.2"});
}

TEST_F(Train, CompiledStepsMatchEagerOnes) {
  LineTask eager;
  LineTask compiled({.compile = true});
  const train::RunSummary a = train::fit(eager, {});
  const train::RunSummary b = train::fit(compiled, {});
  ASSERT_TRUE(b.compile.has_value());
  EXPECT_EQ(b.compile->compiles, 1);
  EXPECT_EQ(b.compile->replays, 11);
  EXPECT_NEAR(a.final_loss, b.final_loss, 1e-6 * std::max(1.0, std::abs(a.final_loss)));
}

TEST_F(Train, StepOptionsThatCannotWorkTogetherAreRefused) {
  auto model = std::make_shared<ember::nn::Linear>(2, 1);
  auto loss = [](const std::vector<Tensor>& b) { return std::vector<Tensor>{b[0].sum()}; };
  const std::vector<ember::optim::ParamGroup> groups = {{.params = model->parameters(), .options = {}}};
  test_util::expect_error(
      [&] { train::TrainingStep(model, groups, train::optimizer_factory("sgd", 0.1), loss, {.zero = true}); },
      {"[train] --zero needs --ddp"});
  test_util::expect_error(
      [&] {
        train::TrainingStep(model, groups, train::optimizer_factory("sgd", 0.1), loss, {.autocast = ember::kInt8});
      },
      {"autocast runs in bfloat16 or float16"});
  test_util::expect_error([] { (void)train::optimizer_factory("lion", 0.1); },
                          {"unknown optimizer \"lion\"; choose sgd, momentum, adam, adamw, adagrad or rmsprop"});
  // A loss function that returns no loss.
  train::TrainingStep step(model, groups, train::optimizer_factory("sgd", 0.1),
                           [](const std::vector<Tensor>&) { return std::vector<Tensor>{}; }, {});
  test_util::expect_error([&] { step({ember::ones({1, 2})}); }, {"the loss function must return the loss first"});
}

TEST(TrainSchedule, WarmupCosine) {
  EXPECT_DOUBLE_EQ(train::warmup_cosine_lr(0, 1.0, 4, 20), 0.2);
  EXPECT_DOUBLE_EQ(train::warmup_cosine_lr(3, 1.0, 4, 20), 0.8);
  EXPECT_DOUBLE_EQ(train::warmup_cosine_lr(4, 1.0, 4, 20), 1.0);
  EXPECT_NEAR(train::warmup_cosine_lr(20, 1.0, 4, 20), 0.1, 1e-15);
  EXPECT_NEAR(train::warmup_cosine_lr(12, 1.0, 4, 20), 0.55, 1e-12);
}

}  // namespace
