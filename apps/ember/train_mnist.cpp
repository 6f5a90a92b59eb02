// `ember train mnist`: the MLP or the LeNet-style CNN on MNIST (train::MnistTask), with a progress
// line per epoch, the test accuracy at the end, checkpoints, --resume, --compile, --amp and --ddp.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "ember/threads.h"
#include "ember/train/tasks.h"

namespace ember::cli {
namespace {

struct TrainMnistOptions {
  train::MnistOptions task;
  train::LoopOptions loop;
  std::string amp = "none";
  std::string device = "cpu";
  bool ddp = false;
  bool json = false;
  int threads = 0;
};

// One line of progress per epoch, redrawn in place on a terminal.
class EpochPrinter {
 public:
  explicit EpochPrinter(bool live) : live_(live) {}

  void operator()(const train::Progress& p) {
    const bool final = p.kind == train::Progress::Kind::kEpoch;
    if (p.kind != train::Progress::Kind::kStep && !final) return;
    const double rate = p.samples_per_second;
    if (live_) {
      if (!final && p.epoch_samples < p.epoch_total && seconds_since(last_draw_) < 0.1) return;
      last_draw_ = Clock::now();
      const double eta = rate > 0 ? static_cast<double>(p.epoch_total - p.epoch_samples) / rate : 0.0;
      std::printf("\repoch %lld/%lld [%s] %lld/%lld  loss %.4f  acc %5.1f%%  %6.0f samples/s  ETA %4.1fs ",
                  static_cast<long long>(p.epoch), static_cast<long long>(p.epochs),
                  progress_bar(p.epoch_samples, p.epoch_total).c_str(), static_cast<long long>(p.epoch_samples),
                  static_cast<long long>(p.epoch_total), p.loss, 100 * p.accuracy, rate, eta);
      if (final) std::fputc('\n', stdout);
      std::fflush(stdout);
    } else if (final) {
      std::printf("epoch %lld/%lld  loss %.4f  train acc %5.1f%%  %6.0f samples/s  %.1fs\n",
                  static_cast<long long>(p.epoch), static_cast<long long>(p.epochs), p.loss, 100 * p.accuracy, rate,
                  p.epoch_seconds);
      std::fflush(stdout);
    }
  }

 private:
  bool live_;
  Clock::time_point last_draw_{};
};

int run_train_mnist(TrainMnistOptions& o) {
  use_threads(o.threads);
  o.task.amp = amp_option(o.amp);
  o.task.device = device_option(o.device);
  if (o.ddp) o.task.group = o.loop.group = dist::init_process_group();
  train::MnistTask task(o.task);
  train::Trainer trainer(task, o.loop);
  const bool speaks = trainer.speaks();
  if (!o.json && speaks) {
    const train::MnistOptions& t = task.options();
    std::printf(
        "ember train mnist: %s, %s (lr %g, %s), batch %lld, shifts of up to %lld px, %lld train / %lld test "
        "images, %d threads%s%s%s\n",
        t.model.c_str(), t.optimizer.c_str(), task.lr(), t.schedule.c_str(), static_cast<long long>(t.batch_size),
        static_cast<long long>(t.shift), static_cast<long long>(task.train_set().size()),
        static_cast<long long>(task.test_set().size()), get_num_threads(), t.compile ? ", compiled step" : "",
        t.amp ? (", autocast " + o.amp).c_str() : "", t.device.is_cpu() ? "" : (", on " + o.device).c_str());
    if (t.group) {
      std::printf("data-parallel: %d ranks (%s), %lld images per rank per step, %zu gradient buckets%s\n",
                  trainer.world_size(), dist::backend_name(t.group->backend()),
                  static_cast<long long>(t.batch_size / trainer.world_size()), trainer.step().ddp()->buckets().size(),
                  t.zero ? ", optimizer state sharded (ZeRO-1)" : "");
    }
  }
  EpochPrinter printer(::isatty(::fileno(stdout)) != 0 && !o.json && speaks);
  const train::RunSummary run = trainer.run(std::ref(printer));
  if (run.profile && speaks) run.profile->export_chrome_trace(o.loop.profile_path);
  if (!speaks) return 0;
  const double accuracy = run.evaluation.at("test_accuracy");
  const double rate = run.train_seconds > 0 ? static_cast<double>(run.samples) / run.train_seconds : 0.0;
  if (o.json) {
    nlohmann::json result = {{"task", "mnist"},
                             {"model", o.task.model},
                             {"optimizer", o.task.optimizer},
                             {"epochs", o.task.epochs},
                             {"train_samples", task.train_set().size()},
                             {"test_samples", task.test_set().size()},
                             {"test_accuracy", accuracy},
                             {"final_loss", json_number(run.final_loss)},
                             {"seconds", run.seconds},
                             {"samples_per_second", rate},
                             {"system_allocs_per_step", json_number(run.system_allocs_per_step)},
                             {"compiled", run.compile.has_value()}};
    if (o.task.group) {
      add_ddp_report(result, run.communication, *o.task.group, *trainer.step().ddp(), trainer.step().zero());
    }
    if (run.compile) add_compile_stats(result, *run.compile);
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("test accuracy %.2f%% on %lld images  |  %.1fs wall, %.0f samples/s\n", 100 * accuracy,
                static_cast<long long>(task.test_set().size()), run.seconds, rate);
    if (run.compile) print_compile_stats(*run.compile);
    if (o.task.group) print_ddp_report(run.communication, *o.task.group, trainer.step().zero());
  }
  if (run.profile) print_profile(*run.profile, o.loop.profile_path, o.json ? std::cerr : std::cout);
  return 0;
}

}  // namespace

void add_train_mnist_command(CLI::App& train, Commands& commands) {
  auto o = std::make_shared<TrainMnistOptions>();
  train::MnistOptions& t = o->task;
  CLI::App* cmd = train.add_subcommand("mnist", "Train an MLP or a LeNet-style CNN on MNIST");
  cmd->add_option("--model", t.model, "cnn or mlp")->check(CLI::IsMember({"cnn", "mlp"}))->capture_default_str();
  cmd->add_option("--epochs", t.epochs, "Epochs to train")->check(kPositiveInt)->capture_default_str();
  cmd->add_option("--batch-size", t.batch_size, "Batch size")->check(kPositiveInt)->capture_default_str();
  cmd->add_option("--optimizer", t.optimizer, "sgd, momentum, adam, adamw, adagrad or rmsprop")
      ->check(CLI::IsMember({"sgd", "momentum", "adam", "adamw", "adagrad", "rmsprop"}))
      ->capture_default_str();
  cmd->add_option("--lr", t.lr, "Learning rate (default: 0.01 for sgd/momentum/adagrad, else 1e-3)")
      ->check(kPositiveNumber);
  cmd->add_option("--schedule", t.schedule, "Learning rate: cosine (decays to 0 over the run) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))
      ->capture_default_str();
  cmd->add_option("--shift", t.shift, "Augmentation: shift each training image by up to this many pixels (0: off)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  cmd->add_option("--seed", t.seed, "Seed for initialization and shuffling")->capture_default_str();
  add_threads(cmd, o->threads);
  cmd->add_option("--data", t.data_dir,
                  "Folder with the standard MNIST IDX files, or with mnist_5k.csv.gz (the offline subset that "
                  "scripts/setup fetches)")
      ->capture_default_str();
  cmd->add_option("--save", o->loop.save_path, "Write a checkpoint (safetensors) after every epoch");
  cmd->add_option("--stop-after", o->loop.stop_after,
                  "Train only this many epochs now, then stop (with --save, continue later with --resume)")
      ->check(kPositiveInt);
  cmd->add_option("--resume", o->loop.resume_path, "Continue from a checkpoint written by --save");
  cmd->add_flag("--json", o->json, "End with one JSON line of results");
  add_detect_anomaly(cmd, commands);
  cmd->add_option("--amp", o->amp, "Mixed precision: bf16 or f16 autocast (f16 scales the loss), or none")
      ->check(CLI::IsMember({"none", "bf16", "f16"}))
      ->capture_default_str();
  cmd->add_option("--device", o->device, "Where to train: cpu, cuda or cuda:N (eager, in one process, on a GPU)")
      ->capture_default_str();
  cmd->add_flag("--compile", t.compile,
                "Run each training step (zero_grad, forward, loss, backward, optimizer and schedule steps) through "
                "ember::compile: the first batch traces it, later batches replay the plan; the last, smaller batch "
                "of an epoch compiles a second plan for its shape (nothing is dropped or padded)");
  cmd->add_flag("--ddp", o->ddp,
                "Data-parallel: run as one rank of `mpirun -np N ember train mnist --ddp` (or of a Gloo job: "
                "EMBER_RANK, EMBER_WORLD_SIZE, EMBER_MASTER_ADDR, EMBER_MASTER_PORT); --batch-size is the global "
                "batch; rank 0 prints and saves");
  cmd->add_flag("--zero", t.zero, "With --ddp: shard the optimizer state over the ranks (ZeRO-1)");
  cmd->add_option("--bucket-mb", t.bucket_cap_mb, "With --ddp: gradient bucket size in MB")
      ->check(kPositiveNumber)
      ->capture_default_str();
  cmd->add_option(
      "--profile", o->loop.profile_path,
      "Profile the training steps: write a Chrome trace (open in ui.perfetto.dev) and print the top-15 ops");
  commands.add(cmd, [o, &commands] {
    return commands.run_training("train mnist", o->task.compile, o->ddp, [&] { return run_train_mnist(*o); });
  });
}

}  // namespace ember::cli
