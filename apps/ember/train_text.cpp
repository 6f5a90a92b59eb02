// `ember train gpt` and `ember train ssm`: a character GPT or Mamba model on Shakespeare
// (train::TextTask), with a live progress bar, the evaluations of both splits, checkpoints and a
// sample at the end.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "ember/threads.h"
#include "ember/train/tasks.h"

namespace ember::cli {
namespace {

struct TrainTextOptions {
  train::TextOptions task;
  train::LoopOptions loop;
  int64_t sample_tokens = 300;
  std::string amp = "none";
  std::string device = "cpu";
  bool ddp = false;
  bool json = false;
  int threads = 0;
};

// A live bar of the steps on a terminal, and a line per evaluation (kept as the run's evals).
class StepPrinter {
 public:
  StepPrinter(bool live, bool json) : live_(live), json_(json) {}

  void operator()(const train::Progress& p) {
    if (p.kind == train::Progress::Kind::kEvaluation) {
      const double train_loss = p.metrics.at("train_loss"), val_loss = p.metrics.at("val_loss");
      evals.push_back({{"step", p.step},
                       {"train_loss", train_loss},
                       {"val_loss", val_loss},
                       {"tokens_per_second", p.samples_per_second}});
      if (!json_) {
        std::printf("%sstep %5lld/%lld  train loss %.4f  val loss %.4f  %7.0f tokens/s  %6.1fs\n", live_ ? "\r" : "",
                    static_cast<long long>(p.step), static_cast<long long>(p.steps), train_loss, val_loss,
                    p.samples_per_second, p.seconds);
        std::fflush(stdout);
      }
    } else if (p.kind == train::Progress::Kind::kStep && live_ && seconds_since(last_draw_) > 0.1) {
      last_draw_ = Clock::now();
      std::printf("\rstep %5lld/%lld [%s] loss %.4f  %7.0f tokens/s ", static_cast<long long>(p.step),
                  static_cast<long long>(p.steps), progress_bar(p.step, p.steps).c_str(), p.loss, p.samples_per_second);
      std::fflush(stdout);
    }
  }

  nlohmann::json evals = nlohmann::json::array();

 private:
  bool live_;
  bool json_;
  Clock::time_point last_draw_ = Clock::now();
};

int run_train_text(TrainTextOptions& o) {
  use_threads(o.threads);
  o.task.amp = amp_option(o.amp);
  o.task.device = device_option(o.device);
  const std::string op = "train " + o.task.model;
  if (o.ddp) o.task.group = o.loop.group = dist::init_process_group();
  train::TextTask task(o.task);
  train::Trainer trainer(task, o.loop);
  const bool speaks = trainer.speaks();
  const train::TextOptions& t = task.options();
  if (!o.json && speaks) {
    std::printf(
        "ember %s: %s (%.2fM parameters), batch %lld, %lld steps, AdamW lr %g (warmup %lld, cosine to %g), "
        "%lld train / %lld val characters, %d threads%s%s\n",
        op.c_str(), task.describe().c_str(), static_cast<double>(task.language_model().num_parameters()) / 1e6,
        static_cast<long long>(t.batch_size), static_cast<long long>(t.steps), t.lr, static_cast<long long>(t.warmup),
        t.lr / 10, static_cast<long long>(task.split().train_size()), static_cast<long long>(task.split().val_size()),
        get_num_threads(), t.compile ? ", compiled step" : "", t.amp ? (", autocast " + o.amp).c_str() : "");
    if (t.group) {
      std::printf("data-parallel: %d ranks (%s), %lld sequences per rank per step, %zu gradient buckets%s\n",
                  trainer.world_size(), dist::backend_name(t.group->backend()),
                  static_cast<long long>(t.batch_size / trainer.world_size()), trainer.step().ddp()->buckets().size(),
                  t.zero ? ", AdamW state sharded (ZeRO-1)" : "");
    }
  }
  StepPrinter printer(::isatty(::fileno(stdout)) != 0 && !o.json && speaks, o.json);
  const train::RunSummary run = trainer.run(std::ref(printer));
  if (run.profile && speaks) run.profile->export_chrome_trace(o.loop.profile_path);
  if (!speaks) return 0;
  const std::string sample = task.sample(o.sample_tokens);
  const double rate = run.train_seconds > 0 ? static_cast<double>(run.samples) / run.train_seconds : 0.0;
  auto metric = [&](const char* name) {
    const auto it = run.evaluation.find(name);
    return it == run.evaluation.end() ? nlohmann::json() : nlohmann::json(it->second);
  };
  if (o.json) {
    nlohmann::json result = {{"task", t.model},
                             {"steps", run.last_step},
                             {"parameters", task.language_model().num_parameters()},
                             {"train_loss", metric("train_loss")},
                             {"val_loss", metric("val_loss")},
                             {"final_loss", json_number(run.final_loss)},
                             {"train_seconds", run.train_seconds},
                             {"seconds", run.seconds},
                             {"tokens_per_second", rate},
                             {"evals", printer.evals},
                             {"sample", sample},
                             {"compiled", run.compile.has_value()}};
    if (run.compile) add_compile_stats(result, *run.compile);
    if (t.group) add_ddp_report(result, run.communication, *t.group, *trainer.step().ddp(), trainer.step().zero());
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("trained %lld steps in %.1fs (%.0f tokens/s)\n--- sample (temperature 0.8, top-k 40) ---\n%s\n",
                static_cast<long long>(run.last_step - run.first_step), run.train_seconds, rate, sample.c_str());
    if (run.compile) print_compile_stats(*run.compile);
    if (t.group) print_ddp_report(run.communication, *t.group, trainer.step().zero());
  }
  if (run.profile) print_profile(*run.profile, o.loop.profile_path, o.json ? std::cerr : std::cout);
  return 0;
}

// `train gpt` and `train ssm` share the recipe, the schedule and the files; the architecture options differ.
void add_options(CLI::App* cmd, TrainTextOptions& o, Commands& commands) {
  train::TextOptions& t = o.task;
  const bool ssm = t.model == "ssm";
  cmd->add_option("--layers", t.layers, ssm ? "Mamba blocks" : "Transformer blocks")
      ->check(kPositiveCount)
      ->capture_default_str();
  if (ssm) {
    cmd->add_option("--dim", t.dim, "Model width (the residual stream)")->check(kPositiveCount)->capture_default_str();
    cmd->add_option("--state", t.state, "The selective scan's state per channel")
        ->check(kPositiveCount)
        ->capture_default_str();
    cmd->add_option("--expand", t.expand, "Channels inside a mixer per model dim")
        ->check(kPositiveCount)
        ->capture_default_str();
    cmd->add_option("--conv", t.conv, "Width of the causal depthwise convolution")
        ->check(kPositiveCount)
        ->capture_default_str();
  } else {
    cmd->add_option("--heads", t.heads, "Attention heads per block")->check(kPositiveCount)->capture_default_str();
    cmd->add_option("--dim", t.dim, "Embedding width")->check(kPositiveCount)->capture_default_str();
  }
  cmd->add_option("--context", t.context, "Context length in characters (of each training sequence)")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--batch-size", t.batch_size, "Sequences per step")->check(kPositiveCount)->capture_default_str();
  cmd->add_option("--steps", t.steps, "Training steps")->check(kPositiveCount)->capture_default_str();
  cmd->add_option("--lr", t.lr, "Peak learning rate (cosine decay to a tenth of it)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", t.warmup, "Steps of linear warmup")->check(kNonNegativeCount)->capture_default_str();
  if (!ssm) {
    cmd->add_option("--dropout", t.dropout, "Dropout probability")
        ->check(finite_number(0.0, 0.99, "a number from 0 to 0.99"))
        ->capture_default_str();
  }
  cmd->add_option("--seed", t.seed, "Seed for initialization and batches")->capture_default_str();
  add_threads(cmd, o.threads);
  cmd->add_option("--data", t.data_path, "A text file (scripts/setup fetches Shakespeare)")->capture_default_str();
  cmd->add_option("--eval-every", t.eval_every, "Steps between evaluations of both splits")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--eval-batches", t.eval_batches, "Batches per split in an evaluation")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--save", o.loop.save_path, "Write a checkpoint (safetensors) at every evaluation");
  cmd->add_option("--stop-after", o.loop.stop_after, "Train only this many steps now (continue later with --resume)")
      ->check(kPositiveCount);
  cmd->add_option("--resume", o.loop.resume_path, "Continue from a checkpoint written by --save");
  cmd->add_option("--sample", o.sample_tokens, "Characters to generate at the end")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  cmd->add_flag("--json", o.json, "End with one JSON line of results");
  add_detect_anomaly(cmd, commands);
  cmd->add_option("--amp", o.amp, "Mixed precision: bf16 or f16 autocast (f16 scales the loss), or none")
      ->check(CLI::IsMember({"none", "bf16", "f16"}))
      ->capture_default_str();
  cmd->add_option("--device", o.device,
                  "Where to train: cpu, cuda or cuda:N (the GPT; eager, in one process, on a GPU)")
      ->capture_default_str();
  cmd->add_flag("--compile", t.compile,
                "Run each training step (loss, zero_grad, backward, clipping, AdamW step) through ember::compile: "
                "the first step traces it, later steps replay the plan (the learning rate is set outside the step "
                "and read by each replayed AdamW step)");
  cmd->add_option("--profile", o.loop.profile_path,
                  "Profile the training steps: write a Chrome trace and print the top-15 ops");
  cmd->add_flag("--ddp", o.ddp,
                "Data-parallel: run as one rank of `mpirun -np N ember train ... --ddp` (or of a Gloo job); "
                "--batch-size is the global batch; rank 0 evaluates, prints and saves");
  cmd->add_flag("--zero", t.zero, "With --ddp: shard AdamW's state over the ranks (ZeRO-1)");
  cmd->add_option("--bucket-mb", t.bucket_cap_mb, "With --ddp: gradient bucket size in MB")
      ->check(kPositiveNumber)
      ->capture_default_str();
}

}  // namespace

void add_train_text_commands(CLI::App& train, Commands& commands) {
  auto gpt = std::make_shared<TrainTextOptions>();
  CLI::App* gpt_cmd = train.add_subcommand("gpt", "Train a character-level GPT (nanoGPT) on Shakespeare");
  add_options(gpt_cmd, *gpt, commands);
  auto ssm = std::make_shared<TrainTextOptions>();
  ssm->task = train::TextOptions::ssm_defaults();
  CLI::App* ssm_cmd = train.add_subcommand(
      "ssm", "Train a character-level Mamba model (selective state spaces, no attention) on Shakespeare");
  add_options(ssm_cmd, *ssm, commands);
  for (const auto& [cmd, o] : {std::pair{gpt_cmd, gpt}, std::pair{ssm_cmd, ssm}}) {
    commands.add(cmd, [o, &commands] {
      return commands.run_training("train " + o->task.model, o->task.compile, o->ddp,
                                   [&] { return run_train_text(*o); });
    });
  }
}

}  // namespace ember::cli
