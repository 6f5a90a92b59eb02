// `ember train diffusion`: a class-conditional DDPM on MNIST (train::DiffusionTask), a line of
// progress every 100 steps. `ember sample diffusion`: digits from its checkpoint for every
// combination of step counts and guidance scales (train::sample_diffusion), each as a PNG grid (a
// row per digit), with an MNIST classifier's verdict when one is given.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "ember/io.h"
#include "ember/threads.h"
#include "ember/train/tasks.h"

namespace ember::cli {
namespace {

struct TrainDiffusionOptions {
  train::DiffusionOptions task;
  train::LoopOptions loop;
  std::string device = "cpu";
  bool json = false;
  int threads = 0;
};

int run_train_diffusion(TrainDiffusionOptions& o) {
  use_threads(o.threads);
  const std::string op = "train diffusion";
  o.task.device = device_option(o.device);
  train::DiffusionTask task(o.task);
  train::Trainer trainer(task, o.loop);
  const train::DiffusionOptions& t = task.options();
  const int64_t flops_per_step = task.flops_per_step();
  if (!o.json) {
    std::printf(
        "ember %s: U-Net %lld channels (x1,2,2), %.2fM parameters, %.2f GFLOP per step (forward and backward), "
        "%s schedule over %lld steps, batch %lld, %lld steps, AdamW lr %g (warmup %lld, cosine to %g), "
        "class dropped %g, EMA %g, %lld training images, %d threads\n",
        op.c_str(), static_cast<long long>(t.channels), static_cast<double>(task.parameter_count()) / 1e6,
        static_cast<double>(flops_per_step) / 1e9, t.schedule.c_str(), static_cast<long long>(t.timesteps),
        static_cast<long long>(t.batch_size), static_cast<long long>(t.steps), t.lr, static_cast<long long>(t.warmup),
        t.lr / 10, t.drop_class, t.ema, static_cast<long long>(task.train_size()), get_num_threads());
  }
  const bool live = ::isatty(::fileno(stdout)) != 0 && !o.json;
  nlohmann::json curve = nlohmann::json::array();
  double last_mean = NAN;
  const train::RunSummary run = trainer.run([&](const train::Progress& p) {
    if (p.kind != train::Progress::Kind::kLog) return;
    last_mean = p.loss;
    curve.push_back({{"step", p.step}, {"loss", p.loss}, {"seconds", p.seconds}});
    if (o.json) return;
    const double gflops = p.samples_per_second * static_cast<double>(flops_per_step / t.batch_size) / 1e9;
    std::printf("%sstep %5lld/%lld  loss %.4f  %6.1f images/s  %5.1f GFLOP/s  %6.1fs\n", live ? "\r" : "",
                static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss, p.samples_per_second, gflops,
                p.seconds);
    std::fflush(stdout);
  });
  const double rate = run.train_seconds > 0 ? static_cast<double>(run.samples) / run.train_seconds : 0.0;
  if (o.json) {
    std::cout << nlohmann::json{{"task", "diffusion"},
                                {"steps", run.last_step},
                                {"parameters", task.parameter_count()},
                                {"flops_per_step", flops_per_step},
                                {"loss", json_number(last_mean)},
                                {"curve", curve},
                                {"train_seconds", run.train_seconds},
                                {"seconds", run.seconds},
                                {"images_per_second", rate}}
                     .dump()
              << std::endl;
  } else {
    std::printf("trained %lld steps in %.1fs (%.1f images/s)%s%s\n",
                static_cast<long long>(run.last_step - run.first_step), run.train_seconds, rate,
                o.loop.save_path.empty() ? "" : "; checkpoint ", o.loop.save_path.c_str());
  }
  return 0;
}

struct SampleDiffusionOptions {
  train::DiffusionSampleOptions sample;
  std::string checkpoint;
  std::string out;                      // the PNG grid; "-s<steps>-g<guidance>" per combination when there are several
  std::string classifier;               // an `ember train mnist --save` checkpoint that classifies the samples
  bool raw_weights = false;             // sample with the trained weights instead of their moving average
  std::string data_dir = "data/mnist";  // the classifier's accuracy on real test digits, for reference
  std::string device = "cpu";           // where the U-Net samples; the images come back to the CPU
  bool json = false;
  int threads = 0;
};

// "samples.png" -> "samples-s50-g3.png" when a run has several combinations.
std::string combination_path(const std::string& path, int64_t steps, double guidance, bool several) {
  if (!several) return path;
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "-s%lld-g%g", static_cast<long long>(steps), guidance);
  return has_extension ? path.substr(0, dot) + suffix + path.substr(dot) : path + suffix;
}

int run_sample_diffusion(const SampleDiffusionOptions& o) {
  const std::string op = "sample diffusion";
  const train::DiffusionSampleOptions& s = o.sample;
  EMBER_CHECK(s.per_class >= 1 && s.batch_size >= 1, "[", op, "] --per-class and --batch-size must be at least 1");
  use_threads(o.threads);
  const Device device = device_option(o.device);
  train::Checkpoint checkpoint = train::read_checkpoint(o.checkpoint, op);
  EMBER_CHECK(checkpoint.kind == "diffusion", "[", op, "] ", o.checkpoint, " holds ", checkpoint.describe(),
              ", not a checkpoint of `ember train diffusion`");
  const train::LoadedModel model = train::load_model(
      std::move(checkpoint), op, {.weights = o.raw_weights ? train::kModelPrefix : train::kAveragePrefix});
  if (!device.is_cpu()) model.model->to(device);
  std::optional<train::LoadedModel> classifier;
  double real_accuracy = NAN;
  if (!o.classifier.empty()) {
    classifier = train::load_model(o.classifier, op, kMnistClassifier);
    const data::MNIST test_set(o.data_dir, data::Split::kTest);
    real_accuracy = train::classification_accuracy(*classifier->model, test_set.images(), test_set.labels());
  }
  const int64_t classes = model.as<models::UNet>().config.num_classes;
  const bool several = s.steps.size() * s.guidance.size() > 1;
  if (!o.json) {
    std::printf("ember %s: %s (%s weights, %s schedule over %lld steps), %s, %lld samples per digit, %d threads\n",
                op.c_str(), o.checkpoint.c_str(), o.raw_weights ? "trained" : "averaged",
                model.source.settings.at("schedule").c_str(), static_cast<long long>(model.schedule->timesteps()),
                s.sampler.c_str(), static_cast<long long>(s.per_class), get_num_threads());
    if (classifier) {
      std::printf("classifier %s: %.2f%% on the real test digits\n", o.classifier.c_str(), 100 * real_accuracy);
    }
    std::printf("%6s %9s %9s %9s %10s  %s\n", "steps", "guidance", "accuracy", "seconds", "images/s", "grid");
  }
  nlohmann::json results = nlohmann::json::array();
  train::sample_diffusion(
      model, s, classifier ? classifier->model.get() : nullptr, [&](const train::DiffusionSamples& samples) {
        const int64_t total = samples.labels.size(0);
        nlohmann::json result = {{"sampler", s.sampler}, {"steps", samples.steps}, {"guidance", samples.guidance},
                                 {"eta", s.eta},         {"samples", total},       {"seconds", samples.seconds}};
        if (samples.accuracy) {
          result["accuracy"] = *samples.accuracy;
          result["per_class_accuracy"] = samples.per_class_accuracy;
        }
        std::string path;
        if (!o.out.empty()) {
          path = combination_path(o.out, samples.steps, samples.guidance, several);
          save_bytes(path, encode_png(train::image_grid(samples.pixels, classes, s.per_class), op), op);
          result["png"] = path;
        }
        results.push_back(result);
        if (o.json) return;
        char accuracy_text[16] = "-";
        if (samples.accuracy) std::snprintf(accuracy_text, sizeof accuracy_text, "%.1f%%", 100 * *samples.accuracy);
        std::printf("%6lld %9g %9s %9.1f %10.1f  %s\n", static_cast<long long>(samples.steps), samples.guidance,
                    accuracy_text, samples.seconds, static_cast<double>(total) / samples.seconds, path.c_str());
        std::fflush(stdout);
      });
  if (o.json) {
    nlohmann::json out = {{"task", "diffusion_samples"},
                          {"checkpoint", o.checkpoint},
                          {"weights", o.raw_weights ? "trained" : "averaged"},
                          {"results", results}};
    if (classifier) out["classifier_test_accuracy"] = real_accuracy;
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

void add_train_diffusion(CLI::App& train, Commands& commands) {
  auto o = std::make_shared<TrainDiffusionOptions>();
  train::DiffusionOptions& t = o->task;
  CLI::App* cmd = train.add_subcommand(
      "diffusion", "Train a class-conditional diffusion model (DDPM, U-Net) on MNIST; sample it with `ember sample`");
  cmd->add_option("--channels", t.channels, "The U-Net's width at 28x28 (x2 at 14x14 and 7x7)")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--timesteps", t.timesteps, "Diffusion time steps T")->check(kPositiveCount)->capture_default_str();
  cmd->add_option("--schedule", t.schedule, "Noise schedule: cosine or linear")
      ->check(CLI::IsMember({"cosine", "linear"}))
      ->capture_default_str();
  cmd->add_option("--steps", t.steps, "Training steps")->check(kPositiveCount)->capture_default_str();
  cmd->add_option("--batch-size", t.batch_size, "Images per step")->check(kPositiveCount)->capture_default_str();
  cmd->add_option("--lr", t.lr, "Peak learning rate (cosine decay to a tenth of it)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", t.warmup, "Steps of linear warmup")->check(kNonNegativeCount)->capture_default_str();
  cmd->add_option("--drop-class", t.drop_class, "Fraction of images trained without their class")
      ->check(kFraction)
      ->capture_default_str();
  cmd->add_option("--ema", t.ema, "Decay of the weights' moving average (what sampling uses)")
      ->check(kFraction)
      ->capture_default_str();
  cmd->add_option("--seed", t.seed, "Seed for initialization, batches and noise")->capture_default_str();
  add_threads(cmd, o->threads);
  cmd->add_option("--device", o->device, "Where to train: cpu, cuda or cuda:N (eager, on a GPU)")
      ->capture_default_str();
  cmd->add_option("--data", t.data_dir, "MNIST IDX files, else the offline subset")->capture_default_str();
  cmd->add_option("--save", o->loop.save_path, "Write a checkpoint (safetensors) every --save-every steps");
  cmd->add_option("--save-every", t.save_every, "Steps between checkpoints")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--stop-after", o->loop.stop_after, "Train only this many steps now (then --resume)")
      ->check(kPositiveCount);
  cmd->add_option("--resume", o->loop.resume_path, "Continue from a checkpoint written by --save");
  cmd->add_flag("--json", o->json, "End with one JSON line of results");
  add_detect_anomaly(cmd, commands);
  commands.add(cmd, [o, &commands] {
    return commands.run_training("train diffusion", false, false, [&] { return run_train_diffusion(*o); });
  });
}

}  // namespace

void add_diffusion_commands(CLI::App& train, CLI::App& sample, Commands& commands) {
  add_train_diffusion(train, commands);
  auto o = std::make_shared<SampleDiffusionOptions>();
  train::DiffusionSampleOptions& s = o->sample;
  CLI::App* cmd = sample.add_subcommand(
      "diffusion", "Draw digits from a checkpoint of `ember train diffusion`: a PNG grid, and a classifier's verdict");
  cmd->add_option("--checkpoint", o->checkpoint, "A checkpoint of `ember train diffusion --save`")->required();
  cmd->add_option("--sampler", s.sampler, "ddim or ddpm (ancestral)")
      ->check(CLI::IsMember({"ddim", "ddpm"}))
      ->capture_default_str();
  cmd->add_option("--steps", s.steps, "Sampling steps (several values: one run each)")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--guidance", s.guidance,
                  "Classifier-free guidance scale: 0 unconditional, 1 conditional, more pushes toward the class "
                  "(several values: one run each)")
      ->check(kFiniteNumber)
      ->capture_default_str();
  cmd->add_option("--eta", s.eta, "DDIM's noise (0: deterministic, 1: as DDPM)")
      ->check(kFraction)
      ->capture_default_str();
  cmd->add_option("--per-class", s.per_class, "Samples of each digit (the grid's columns)")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Write the samples as a PNG grid, a row per digit");
  cmd->add_option("--classifier", o->classifier,
                  "A checkpoint of `ember train mnist --save`: report the fraction of samples classified as their "
                  "digit");
  cmd->add_flag("--raw-weights", o->raw_weights, "Use the trained weights, not their moving average");
  cmd->add_option("--batch-size", s.batch_size, "Samples drawn at once")->check(kPositiveCount)->capture_default_str();
  cmd->add_option("--seed", s.seed, "Seed of the noise")->capture_default_str();
  add_threads(cmd, o->threads);
  cmd->add_option("--device", o->device, "Where the U-Net samples: cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--data", o->data_dir, "MNIST, for the classifier's accuracy on real digits")->capture_default_str();
  cmd->add_flag("--json", o->json, "End with one JSON line of results");
  commands.add(cmd, [o] { return run_sample_diffusion(*o); });
}

}  // namespace ember::cli
