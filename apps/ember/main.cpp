// The ember command-line tool: `ember info` reports the build and this machine's SIMD target;
// `ember train mnist` trains a model on MNIST (the main job); `ember bench` times the benchmark's
// workloads (scripts/bench compares them with PyTorch and NumPy); `ember roofline` places ops and
// workloads under this machine's measured peaks; `ember train gpt|ssm` trains a character GPT or
// Mamba model on Shakespeare and `ember generate` writes with it; `ember embed` prints sentence similarities;
// `ember quantize` writes a trained model's Linear layers quantized as GGUF, `ember eval` measures
// a checkpoint (safetensors or GGUF) as training does, `ember nas mnist` searches architectures, and
// `ember train diffusion` / `ember sample diffusion` train a class-conditional DDPM and draw digits from it.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench.h"
#include "diffusion.h"
#include "embed.h"
#include "ember/dist.h"
#include "ember/ember.h"
#include "eval.h"
#include "nas.h"
#include "onnx.h"
#include "quantize.h"
#include "roofline.h"
#include "train.h"
#include "train_gpt.h"

namespace {

int run_info(bool as_json) {
  const ember::BuildInfo info = ember::build_info();
  std::vector<std::string> devices = {"cpu"};
  nlohmann::json gpus = nlohmann::json::array();
  for (int i = 0; i < ember::cuda::device_count(); ++i) {
    const ember::cuda::DeviceProperties p = ember::cuda::get_device_properties(i);
    devices.push_back("cuda:" + std::to_string(i));
    gpus.push_back({{"index", i},
                    {"name", p.name},
                    {"compute_capability", std::to_string(p.compute_major) + "." + std::to_string(p.compute_minor)},
                    {"memory_bytes", p.total_memory},
                    {"multiprocessors", p.multiprocessors}});
  }
  if (as_json) {
    nlohmann::json j = {
        {"version", info.version},
        {"compiler", info.compiler},
        {"simd_target", info.simd_target},
        {"simd_compiled", info.simd_compiled},
        {"gemm_kernel", info.gemm_kernel},
        {"dot_isa", info.dot_isa},
        {"num_threads", info.num_threads},
        {"num_threads_source", info.num_threads_source},
        {"build_type", info.build_type},
        {"options", {{"cuda", info.cuda}, {"blas", info.blas}}},
        {"devices", devices},
        {"cuda",
         {{"built", ember::cuda::is_built()},
          {"runtime", ember::cuda::runtime_version()},
          {"architectures", ember::cuda::compiled_architectures()},
          {"status", ember::cuda::status()},
          {"gpus", gpus}}},
    };
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "ember " << info.version << "\n"
            << "  compiler      " << info.compiler << "\n"
            << "  build type    " << info.build_type << "\n"
            << "  SIMD target   " << info.simd_target << " (compiled: " << info.simd_compiled << ")\n"
            << "  GEMM tile     " << info.gemm_kernel << "\n"
            << "  int8/bf16 dot " << info.dot_isa << " (EMBER_MAX_CPU_ISA caps it)\n"
            << "  threads       " << info.num_threads << " (from " << info.num_threads_source << ")\n"
            << "  CUDA          "
            << (info.cuda ? "on (runtime " + ember::cuda::runtime_version() + ", " +
                                ember::cuda::compiled_architectures() + "): " + ember::cuda::status()
                          : std::string("off"))
            << "\n"
            << "  BLAS          " << info.blas << "\n"
            << "  devices       cpu";
  for (const nlohmann::json& gpu : gpus) {
    std::cout << ", cuda:" << gpu["index"].get<int>() << " (" << gpu["name"].get<std::string>() << ")";
  }
  std::cout << "\n";
  return 0;
}

// A whole number in [min, max], with a short message otherwise (CLI11's PositiveNumber names its
// range up to the largest double, some 300 digits, and a number too large for an int field is
// only "Could not convert").
CLI::Validator count_in(long long min, long long max) {
  const bool open = max == std::numeric_limits<long long>::max();
  const std::string range =
      open ? "of at least " + std::to_string(min) : "from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        try {
          size_t used = 0;
          const long long n = std::stoll(value, &used);
          if (used == value.size() && n >= min && n <= max) return "";
        } catch (const std::exception&) {
        }
        return "must be a whole number " + range + ", got " + value;
      },
      open ? "INT >= " + std::to_string(min) : "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}
CLI::Validator count_at_least(long long min) { return count_in(min, std::numeric_limits<long long>::max()); }
const CLI::Validator kPositiveCount = count_at_least(1);  // an int64_t field
const CLI::Validator kNonNegativeCount = count_at_least(0);
const CLI::Validator kPositiveInt = count_in(1, std::numeric_limits<int>::max());  // an int field
const CLI::Validator kThreadCount = count_in(0, 4096);  // 0: all cores; set_num_threads takes up to 4096

// A finite number in [min, max] (`what` says which in the message). CLI11's Range and
// PositiveNumber let NaN through (NaN fails no comparison), and a NaN or infinite learning rate,
// probability or duration would train or sample garbage, or loop, without a word.
CLI::Validator finite_number(double min, double max, const std::string& what) {
  return CLI::Validator(
      [min, max, what](std::string& value) -> std::string {
        try {
          size_t used = 0;
          const double x = std::stod(value, &used);
          if (used == value.size() && std::isfinite(x) && x >= min && x <= max) return "";
        } catch (const std::exception&) {
        }
        return "must be " + what + ", got " + value;
      },
      "NUMBER: " + what);
}
constexpr double kHuge = std::numeric_limits<double>::max();
const CLI::Validator kFiniteNumber = finite_number(-kHuge, kHuge, "a finite number");
const CLI::Validator kNonNegativeNumber = finite_number(0, kHuge, "a finite number >= 0");
const CLI::Validator kPositiveNumber = finite_number(std::numeric_limits<double>::min(), kHuge, "a finite number > 0");
const CLI::Validator kFraction = finite_number(0, 1, "a number from 0 to 1");

// The command a parse error belongs to ("train gpt"): the subcommands parsed so far.
std::string command_of(const CLI::App* app) {
  std::string command;
  for (const CLI::App* sub = app; !sub->get_subcommands().empty();) {
    sub = sub->get_subcommands().front();
    command += (command.empty() ? "" : " ") + sub->get_name();
  }
  return command.empty() ? "ember" : command;
}

// The innermost subcommand the user ran.
const CLI::App* innermost_command(const CLI::App* app) {
  while (!app->get_subcommands().empty()) app = app->get_subcommands().front();
  return app;
}

// The options given on the command line, as "--name value" (for a request that cannot be met:
// which of them asked for it).
std::string given_options(const CLI::App* command) {
  std::string out;
  for (const CLI::Option* option : command->get_options()) {
    if (option->count() == 0 || option->get_type_size() == 0 || option->get_name().rfind("--", 0) != 0) continue;
    for (const std::string& value : option->results()) {
      out += (out.empty() ? "" : ", ") + option->get_name() + " " + value;
    }
  }
  return out;
}

// The dtypes of a kernel, shortened ("all" for every dtype, "floats" for the four float dtypes).
std::string dtype_summary(const std::vector<std::string>& dtypes) {
  if (dtypes.size() == static_cast<size_t>(ember::kNumElementDTypes)) return "all";
  std::string out;
  for (const std::string& d : dtypes) out += (out.empty() ? "" : ",") + d;
  if (out == "float32,float64,float16,bfloat16") return "floats";
  return out;
}

// `ember info --ops`: every op of the primitive table with its backends, dtypes, backward and cost.
int run_ops(bool as_json) {
  const std::vector<ember::OpTableRow> rows = ember::op_table();
  const bool cuda_built = ember::build_info().cuda;
  // A backend's column: its kernel's dtypes, or why there is none.
  auto backend = [&](const ember::OpTableRow& row, const std::vector<std::string>& dtypes, bool built) -> std::string {
    if (row.sort == "view") return "view";
    if (row.sort == "composite") return "composite";
    if (!built) return "not built";
    return dtypes.empty() ? "not implemented" : dtype_summary(dtypes);
  };
  if (as_json) {
    nlohmann::json ops = nlohmann::json::array();
    for (const ember::OpTableRow& row : rows) {
      ops.push_back({{"name", row.name},
                     {"sort", row.sort},
                     {"cpu", row.cpu_dtypes},
                     {"cuda", row.cuda_dtypes},
                     {"cuda_built", cuda_built},
                     {"backward", row.differentiable},
                     {"cost_rule", row.has_cost_rule}});
    }
    std::cout << nlohmann::json{{"ops", ops}}.dump(2) << "\n";
    return 0;
  }
  int primitives = 0, cpu = 0, cuda = 0;
  std::printf("%-34s %-10s %-34s %-16s %-9s %s\n", "op", "sort", "cpu", "cuda", "backward", "cost");
  for (const ember::OpTableRow& row : rows) {
    std::printf("%-34s %-10s %-34s %-16s %-9s %s\n", row.name.c_str(), row.sort.c_str(),
                backend(row, row.cpu_dtypes, true).c_str(), backend(row, row.cuda_dtypes, cuda_built).c_str(),
                row.differentiable ? "yes" : "-", row.has_cost_rule ? "yes" : "-");
    if (row.sort != "primitive") continue;
    ++primitives;
    cpu += row.cpu_dtypes.empty() ? 0 : 1;
    cuda += row.cuda_dtypes.empty() ? 0 : 1;
  }
  std::printf("%zu ops: %d primitives (CPU kernels for %d, CUDA kernels for %d), the rest views and composites\n",
              rows.size(), primitives, cpu, cuda);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember: a C++ tensor library with autograd, nn layers, optimizers and a fast CPU backend"};
  // Parse errors read as every other error: "[train gpt] --dim: must be ...". Set before the
  // subcommands are added: they copy it.
  app.failure_message([](const CLI::App* top, const CLI::Error& e) {
    return "error: [" + command_of(top) + "] " + e.what() + "\nRun with --help for more information.\n";
  });
  app.require_subcommand(1);
  bool as_json = false, list_ops = false;
  CLI::App* info = app.add_subcommand("info", "Version, compiler, SIMD target, threads and build options");
  info->add_flag("--json", as_json, "Print one JSON object");
  info->add_flag("--ops", list_ops, "List every op: its kernels per backend, dtypes, backward and cost rule");

  // --detect-anomaly (every training command): autograd's anomaly mode for the run, so the first op
  // whose output or gradient is NaN or Inf is named in the error (ember/autograd.h).
  bool detect_anomaly = false;
  const char* const kAnomalyHelp =
      "Check every op's output and gradient for NaN and Inf, and stop at the first with an error naming the op "
      "(slower; not with --compile, whose replays skip the checks)";

  ember::cli::TrainOptions train;
  CLI::App* train_cmd = app.add_subcommand("train", "Train a model on real data");
  train_cmd->require_subcommand(1);
  CLI::App* mnist = train_cmd->add_subcommand("mnist", "Train an MLP or a LeNet-style CNN on MNIST");
  mnist->add_option("--model", train.model, "cnn or mlp")->check(CLI::IsMember({"cnn", "mlp"}))->capture_default_str();
  mnist->add_option("--epochs", train.epochs, "Epochs to train")->check(kPositiveInt)->capture_default_str();
  mnist->add_option("--batch-size", train.batch_size, "Batch size")->check(kPositiveInt)->capture_default_str();
  mnist->add_option("--optimizer", train.optimizer, "sgd, momentum, adam, adamw, adagrad or rmsprop")
      ->check(CLI::IsMember({"sgd", "momentum", "adam", "adamw", "adagrad", "rmsprop"}))
      ->capture_default_str();
  mnist->add_option("--lr", train.lr, "Learning rate (default: 0.01 for sgd/momentum/adagrad, else 1e-3)")
      ->check(kPositiveNumber);
  mnist->add_option("--schedule", train.schedule, "Learning rate: cosine (decays to 0 over the run) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))
      ->capture_default_str();
  mnist
      ->add_option("--shift", train.shift, "Augmentation: shift each training image by up to this many pixels (0: off)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  mnist->add_option("--seed", train.seed, "Seed for initialization and shuffling")->capture_default_str();
  mnist->add_option("--threads", train.threads, "Threads (default: all cores)")->check(kThreadCount);
  mnist
      ->add_option("--data", train.data_dir,
                   "Folder with the standard MNIST IDX files, or with mnist_5k.csv.gz (the offline subset that "
                   "scripts/setup fetches)")
      ->capture_default_str();
  mnist->add_option("--save", train.save_path, "Write a checkpoint (safetensors) after every epoch");
  mnist
      ->add_option("--stop-after", train.stop_after,
                   "Train only this many epochs now, then stop (with --save, continue later with --resume)")
      ->check(kPositiveInt);
  mnist->add_option("--resume", train.resume_path, "Continue from a checkpoint written by --save");
  mnist->add_flag("--json", train.json, "End with one JSON line of results");
  mnist->add_flag("--detect-anomaly", detect_anomaly, kAnomalyHelp);
  mnist->add_option("--amp", train.amp, "Mixed precision: bf16 or f16 autocast (f16 scales the loss), or none")
      ->check(CLI::IsMember({"none", "bf16", "f16"}))
      ->capture_default_str();
  mnist->add_flag("--compile", train.compile,
                  "Run each training step (zero_grad, forward, loss, backward, optimizer and schedule steps) "
                  "through ember::compile: the first batch traces it, later batches replay the plan; the last, "
                  "smaller batch of an epoch compiles a second plan for its shape (nothing is dropped or padded)");
  mnist->add_flag("--ddp", train.ddp,
                  "Data-parallel: run as one rank of `mpirun -np N ember train mnist --ddp` (or of a Gloo job: "
                  "EMBER_RANK, EMBER_WORLD_SIZE, EMBER_MASTER_ADDR, EMBER_MASTER_PORT); --batch-size is the "
                  "global batch; rank 0 prints and saves");
  mnist->add_flag("--zero", train.zero, "With --ddp: shard the optimizer state over the ranks (ZeRO-1)");
  mnist->add_option("--bucket-mb", train.bucket_cap_mb, "With --ddp: gradient bucket size in MB")
      ->check(kPositiveNumber)
      ->capture_default_str();
  mnist->add_option(
      "--profile", train.profile_path,
      "Profile the training steps: write a Chrome trace (open in ui.perfetto.dev) and print the top-15 ops");

  // `train gpt` and `train ssm` share the recipe, the schedule and the files; the architecture options differ.
  auto add_language_model_options = [&](CLI::App* cmd, ember::cli::TrainGptOptions& o) {
    const bool ssm = o.model == "ssm";
    cmd->add_option("--layers", o.layers, ssm ? "Mamba blocks" : "Transformer blocks")
        ->check(kPositiveCount)
        ->capture_default_str();
    if (ssm) {
      cmd->add_option("--dim", o.dim, "Model width (the residual stream)")
          ->check(kPositiveCount)
          ->capture_default_str();
      cmd->add_option("--state", o.state, "The selective scan's state per channel")
          ->check(kPositiveCount)
          ->capture_default_str();
      cmd->add_option("--expand", o.expand, "Channels inside a mixer per model dim")
          ->check(kPositiveCount)
          ->capture_default_str();
      cmd->add_option("--conv", o.conv, "Width of the causal depthwise convolution")
          ->check(kPositiveCount)
          ->capture_default_str();
    } else {
      cmd->add_option("--heads", o.heads, "Attention heads per block")->check(kPositiveCount)->capture_default_str();
      cmd->add_option("--dim", o.dim, "Embedding width")->check(kPositiveCount)->capture_default_str();
    }
    cmd->add_option("--context", o.context, "Context length in characters (of each training sequence)")
        ->check(kPositiveCount)
        ->capture_default_str();
    cmd->add_option("--batch-size", o.batch_size, "Sequences per step")->check(kPositiveCount)->capture_default_str();
    cmd->add_option("--steps", o.steps, "Training steps")->check(kPositiveCount)->capture_default_str();
    cmd->add_option("--lr", o.lr, "Peak learning rate (cosine decay to a tenth of it)")
        ->check(kPositiveNumber)
        ->capture_default_str();
    cmd->add_option("--warmup", o.warmup, "Steps of linear warmup")->check(kNonNegativeCount)->capture_default_str();
    if (!ssm) {
      cmd->add_option("--dropout", o.dropout, "Dropout probability")
          ->check(finite_number(0.0, 0.99, "a number from 0 to 0.99"))
          ->capture_default_str();
    }
    cmd->add_option("--seed", o.seed, "Seed for initialization and batches")->capture_default_str();
    cmd->add_option("--threads", o.threads, "Threads (default: all cores)")->check(kThreadCount);
    cmd->add_option("--data", o.data_path, "A text file (scripts/setup fetches Shakespeare)")->capture_default_str();
    cmd->add_option("--eval-every", o.eval_every, "Steps between evaluations of both splits")
        ->check(kPositiveCount)
        ->capture_default_str();
    cmd->add_option("--eval-batches", o.eval_batches, "Batches per split in an evaluation")
        ->check(kPositiveCount)
        ->capture_default_str();
    cmd->add_option("--save", o.save_path, "Write a checkpoint (safetensors) at every evaluation");
    cmd->add_option("--stop-after", o.stop_after, "Train only this many steps now (continue later with --resume)")
        ->check(kPositiveCount);
    cmd->add_option("--resume", o.resume_path, "Continue from a checkpoint written by --save");
    cmd->add_option("--sample", o.sample_tokens, "Characters to generate at the end")
        ->check(kNonNegativeCount)
        ->capture_default_str();
    cmd->add_flag("--json", o.json, "End with one JSON line of results");
    cmd->add_flag("--detect-anomaly", detect_anomaly, kAnomalyHelp);
    cmd->add_option("--amp", o.amp, "Mixed precision: bf16 or f16 autocast (f16 scales the loss), or none")
        ->check(CLI::IsMember({"none", "bf16", "f16"}))
        ->capture_default_str();
    cmd->add_flag("--compile", o.compile,
                  "Run each training step (loss, zero_grad, backward, clipping, AdamW step) through "
                  "ember::compile: the first step traces it, later steps replay the plan (the learning rate is "
                  "set outside the step and read by each replayed AdamW step)");
    cmd->add_option("--profile", o.profile_path,
                    "Profile the training steps: write a Chrome trace and print the top-15 ops");
    cmd->add_flag("--ddp", o.ddp,
                  "Data-parallel: run as one rank of `mpirun -np N ember train ... --ddp` (or of a Gloo job); "
                  "--batch-size is the global batch; rank 0 evaluates, prints and saves");
    cmd->add_flag("--zero", o.zero, "With --ddp: shard AdamW's state over the ranks (ZeRO-1)");
    cmd->add_option("--bucket-mb", o.bucket_cap_mb, "With --ddp: gradient bucket size in MB")
        ->check(kPositiveNumber)
        ->capture_default_str();
  };
  ember::cli::TrainGptOptions gpt;
  CLI::App* gpt_cmd = train_cmd->add_subcommand("gpt", "Train a character-level GPT (nanoGPT) on Shakespeare");
  add_language_model_options(gpt_cmd, gpt);
  ember::cli::TrainGptOptions ssm = ember::cli::TrainGptOptions::ssm_defaults();
  CLI::App* ssm_cmd = train_cmd->add_subcommand(
      "ssm", "Train a character-level Mamba model (selective state spaces, no attention) on Shakespeare");
  add_language_model_options(ssm_cmd, ssm);

  ember::cli::TrainDiffusionOptions diffusion;
  CLI::App* diffusion_cmd = train_cmd->add_subcommand(
      "diffusion", "Train a class-conditional diffusion model (DDPM, U-Net) on MNIST; sample it with `ember sample`");
  diffusion_cmd->add_option("--channels", diffusion.channels, "The U-Net's width at 28x28 (x2 at 14x14 and 7x7)")
      ->check(kPositiveCount)
      ->capture_default_str();
  diffusion_cmd->add_option("--timesteps", diffusion.timesteps, "Diffusion time steps T")
      ->check(kPositiveCount)
      ->capture_default_str();
  diffusion_cmd->add_option("--schedule", diffusion.schedule, "Noise schedule: cosine or linear")
      ->check(CLI::IsMember({"cosine", "linear"}))
      ->capture_default_str();
  diffusion_cmd->add_option("--steps", diffusion.steps, "Training steps")->check(kPositiveCount)->capture_default_str();
  diffusion_cmd->add_option("--batch-size", diffusion.batch_size, "Images per step")
      ->check(kPositiveCount)
      ->capture_default_str();
  diffusion_cmd->add_option("--lr", diffusion.lr, "Peak learning rate (cosine decay to a tenth of it)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  diffusion_cmd->add_option("--warmup", diffusion.warmup, "Steps of linear warmup")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  diffusion_cmd->add_option("--drop-class", diffusion.drop_class, "Fraction of images trained without their class")
      ->check(kFraction)
      ->capture_default_str();
  diffusion_cmd->add_option("--ema", diffusion.ema, "Decay of the weights' moving average (what sampling uses)")
      ->check(kFraction)
      ->capture_default_str();
  diffusion_cmd->add_option("--seed", diffusion.seed, "Seed for initialization, batches and noise")
      ->capture_default_str();
  diffusion_cmd->add_option("--threads", diffusion.threads, "Threads (default: all cores)")->check(kThreadCount);
  diffusion_cmd->add_option("--data", diffusion.data_dir, "MNIST IDX files, else the offline subset")
      ->capture_default_str();
  diffusion_cmd->add_option("--save", diffusion.save_path, "Write a checkpoint (safetensors) every --save-every steps");
  diffusion_cmd->add_option("--save-every", diffusion.save_every, "Steps between checkpoints")
      ->check(kPositiveCount)
      ->capture_default_str();
  diffusion_cmd->add_option("--stop-after", diffusion.stop_after, "Train only this many steps now (then --resume)")
      ->check(kPositiveCount);
  diffusion_cmd->add_option("--resume", diffusion.resume_path, "Continue from a checkpoint written by --save");
  diffusion_cmd->add_flag("--json", diffusion.json, "End with one JSON line of results");
  diffusion_cmd->add_flag("--detect-anomaly", detect_anomaly, kAnomalyHelp);

  ember::cli::SampleDiffusionOptions sample;
  CLI::App* sample_cmd = app.add_subcommand("sample", "Draw samples from a generative model");
  sample_cmd->require_subcommand(1);
  CLI::App* sample_diffusion = sample_cmd->add_subcommand(
      "diffusion", "Draw digits from a checkpoint of `ember train diffusion`: a PNG grid, and a classifier's verdict");
  sample_diffusion->add_option("--checkpoint", sample.checkpoint, "A checkpoint of `ember train diffusion --save`")
      ->required();
  sample_diffusion->add_option("--sampler", sample.sampler, "ddim or ddpm (ancestral)")
      ->check(CLI::IsMember({"ddim", "ddpm"}))
      ->capture_default_str();
  sample_diffusion->add_option("--steps", sample.steps, "Sampling steps (several values: one run each)")
      ->check(kPositiveCount)
      ->capture_default_str();
  sample_diffusion
      ->add_option("--guidance", sample.guidance,
                   "Classifier-free guidance scale: 0 unconditional, 1 conditional, more pushes "
                   "toward the class (several values: one run each)")
      ->check(kFiniteNumber)
      ->capture_default_str();
  sample_diffusion->add_option("--eta", sample.eta, "DDIM's noise (0: deterministic, 1: as DDPM)")
      ->check(kFraction)
      ->capture_default_str();
  sample_diffusion->add_option("--per-class", sample.per_class, "Samples of each digit (the grid's columns)")
      ->check(kPositiveCount)
      ->capture_default_str();
  sample_diffusion->add_option("--out", sample.out, "Write the samples as a PNG grid, a row per digit");
  sample_diffusion->add_option("--classifier", sample.classifier,
                               "A checkpoint of `ember train mnist --save`: report the fraction of samples "
                               "classified as their digit");
  sample_diffusion->add_flag("--raw-weights", sample.raw_weights, "Use the trained weights, not their moving average");
  sample_diffusion->add_option("--batch-size", sample.batch_size, "Samples drawn at once")
      ->check(kPositiveCount)
      ->capture_default_str();
  sample_diffusion->add_option("--seed", sample.seed, "Seed of the noise")->capture_default_str();
  sample_diffusion->add_option("--threads", sample.threads, "Threads (default: all cores)")->check(kThreadCount);
  sample_diffusion->add_option("--data", sample.data_dir, "MNIST, for the classifier's accuracy on real digits")
      ->capture_default_str();
  sample_diffusion->add_flag("--json", sample.json, "End with one JSON line of results");

  ember::cli::GenerateOptions generate;
  CLI::App* generate_cmd =
      app.add_subcommand("generate", "Stream text from a checkpoint of `ember train gpt` or `ember train ssm`");
  generate_cmd
      ->add_option("--checkpoint", generate.checkpoint,
                   "A checkpoint written by `ember train gpt|ssm --save`, or a GGUF file of `ember quantize`")
      ->required();
  generate_cmd->add_option("--prompt", generate.prompt, "Text to continue (default: a newline)");
  generate_cmd->add_option("--tokens", generate.tokens, "Characters to generate")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  generate_cmd->add_option("--temperature", generate.temperature, "Sampling temperature (0: greedy)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  generate_cmd->add_option("--top-k", generate.top_k, "Sample among the k most likely (0: all)")
      ->check(kNonNegativeCount)
      ->capture_default_str();
  generate_cmd->add_option("--top-p", generate.top_p, "Nucleus sampling: the most likely tokens summing to p")
      ->check(finite_number(std::numeric_limits<double>::min(), 1, "a number in (0, 1]"))
      ->capture_default_str();
  generate_cmd->add_option("--seed", generate.seed, "Seed of the sampler")->capture_default_str();
  generate_cmd->add_option("--threads", generate.threads, "Threads (default: all cores)")->check(kThreadCount);
  generate_cmd->add_flag("--no-cache", generate.no_cache, "Recompute the whole window for every token");

  ember::cli::BenchOptions bench;
  CLI::App* bench_cmd = app.add_subcommand("bench", "Time ember on the benchmark's workloads (scripts/bench compares)");
  bench_cmd->add_option("--filter", bench.filter, "Only workloads whose name matches this regular expression");
  bench_cmd->add_flag("--quick", bench.quick, "Shorter and fewer samples");
  bench_cmd->add_flag("--list", bench.list, "List the workloads instead of running them");
  bench_cmd->add_flag("--json", bench.json, "One JSON object per line");
  bench_cmd->add_flag("--machine", bench.machine, "Measure this machine's FMA peak and bandwidths instead");
  bench_cmd->add_option("--threads", bench.threads, "Threads (default: all cores)")->check(kThreadCount);
  bench_cmd->add_option("--repeats", bench.repeats, "Samples per workload")->check(kPositiveInt)->capture_default_str();
  bench_cmd
      ->add_option("--latency", bench.latency,
                   "Time single calls for this many seconds and report their median and p99 instead")
      ->check(kNonNegativeNumber);
  bench_cmd->add_option("--data", bench.data_dir, "MNIST folder for train_mnist_epoch")->capture_default_str();
  ember::cli::EmbedOptions embed;
  CLI::App* embed_cmd =
      app.add_subcommand("embed", "Sentence embeddings with a pretrained MiniLM: cosine similarities of the texts");
  embed_cmd->add_option("texts", embed.texts, "Texts to embed")->required();
  embed_cmd
      ->add_option("--model", embed.model_dir,
                   "A sentence-transformers folder (scripts/setup fetches data/minilm), or a GGUF file `ember "
                   "quantize` wrote from one")
      ->capture_default_str();
  embed_cmd->add_flag("--json", embed.json, "Print one JSON object with the vectors instead");
  embed_cmd->add_option("--threads", embed.threads, "Threads (default: all cores)")->check(kThreadCount);
  ember::cli::QuantizeOptions quantize;
  CLI::App* quantize_cmd = app.add_subcommand(
      "quantize", "Quantize a trained model's Linear layers (q8_0, q4_0 or int8) and write it as GGUF");
  quantize_cmd
      ->add_option("input", quantize.input,
                   "A checkpoint of `ember train gpt|mnist --save`, or a MiniLM folder (data/minilm)")
      ->required();
  quantize_cmd->add_option("output", quantize.output, "The GGUF file to write")->required();
  quantize_cmd
      ->add_option("--type", quantize.type,
                   "q8_0 or q4_0 (llama.cpp's 32-value blocks), int8 (per output channel), or f32 (no quantization)")
      ->required();
  quantize_cmd->add_option("--skip", quantize.skip, "Linear layers (or modules) to keep in float, by dotted name")
      ->delimiter(',');
  quantize_cmd->add_flag("--weights-only", quantize.weights_only,
                         "Keep the activations in float: each call multiplies by the dequantized weight");
  quantize_cmd->add_flag("--json", quantize.json, "Print one JSON line");
  quantize_cmd->add_option("--threads", quantize.threads, "Threads (default: all cores)")->check(kThreadCount);

  ember::cli::EvalGptOptions eval_gpt;
  ember::cli::EvalMnistOptions eval_mnist;
  CLI::App* eval_cmd = app.add_subcommand("eval", "Evaluate a checkpoint (safetensors or GGUF) as training does");
  eval_cmd->require_subcommand(1);
  CLI::App* eval_gpt_cmd =
      eval_cmd->add_subcommand("gpt", "The validation loss of `ember train gpt`'s (or `train ssm`'s) evaluation");
  eval_gpt_cmd->add_option("--checkpoint", eval_gpt.checkpoint, "`ember train gpt|ssm --save`'s or `ember quantize`'s")
      ->required();
  eval_gpt_cmd->add_option("--data", eval_gpt.data_path, "The text the model was trained on")->capture_default_str();
  eval_gpt_cmd->add_option("--batches", eval_gpt.batches, "Batches of the validation split")
      ->check(kPositiveCount)
      ->capture_default_str();
  eval_gpt_cmd->add_option("--batch-size", eval_gpt.batch_size, "Sequences per batch (default: the run's)")
      ->check(kPositiveCount);
  eval_gpt_cmd->add_option("--seed", eval_gpt.seed, "The run's seed, which picks the batches (default: the run's)");
  eval_gpt_cmd->add_option("--threads", eval_gpt.threads, "Threads (default: all cores)")->check(kThreadCount);
  eval_gpt_cmd->add_flag("--json", eval_gpt.json, "Print one JSON line");
  CLI::App* eval_mnist_cmd = eval_cmd->add_subcommand("mnist", "The test accuracy of `ember train mnist`");
  eval_mnist_cmd
      ->add_option("--checkpoint", eval_mnist.checkpoint, "`ember train mnist --save`'s or `ember quantize`'s")
      ->required();
  eval_mnist_cmd->add_option("--data", eval_mnist.data_dir, "MNIST folder (as for `ember train mnist`)")
      ->capture_default_str();
  eval_mnist_cmd->add_option("--threads", eval_mnist.threads, "Threads (default: all cores)")->check(kThreadCount);
  eval_mnist_cmd->add_flag("--json", eval_mnist.json, "Print one JSON line");

  ember::cli::RooflineOptions roofline;
  CLI::App* roofline_cmd =
      app.add_subcommand("roofline", "This machine's roofline (measured peaks), with ops from a profile or benchmark");
  roofline_cmd->add_flag("--json", roofline.json, "Print one JSON object");
  roofline_cmd->add_option("--svg", roofline.svg_path, "Draw the roofline as a self-contained SVG file");
  roofline_cmd->add_option("--from-trace", roofline.from_trace, "Place the ops of a trace written by --profile");
  roofline_cmd->add_option("--from-bench", roofline.from_bench, "Place the workloads of bench/results/latest.json");
  roofline_cmd->add_flag("--refresh", roofline.refresh,
                         "Measure the peaks again (the cache keeps the best of old and new)");
  roofline_cmd->add_option("--threads", roofline.threads, "Threads (default: all cores)")->check(kThreadCount);
  ember::cli::NasOptions nas;
  CLI::App* nas_cmd = app.add_subcommand("nas", "Search for an architecture (evolutionary, two objectives)");
  nas_cmd->require_subcommand(1);
  CLI::App* nas_mnist = nas_cmd->add_subcommand(
      "mnist", "Evolve small CNNs and MLPs for MNIST: validation accuracy against parameter count");
  nas_mnist->add_option("--population", nas.population, "Candidates per generation")
      ->check(count_in(2, std::numeric_limits<int>::max()))
      ->capture_default_str();
  nas_mnist->add_option("--generations", nas.generations, "Generations at most")
      ->check(kPositiveInt)
      ->capture_default_str();
  nas_mnist->add_option("--budget-minutes", nas.budget_minutes, "No generation starts after this")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  nas_mnist->add_option("--candidate-epochs", nas.candidate_epochs, "Epochs of the training that scores a candidate")
      ->check(kPositiveInt)
      ->capture_default_str();
  nas_mnist->add_option("--final-epochs", nas.final_epochs, "Epochs of the winner's and the default CNN's training")
      ->check(kPositiveInt)
      ->capture_default_str();
  nas_mnist->add_option("--validation", nas.validation, "Training images held out to score candidates")
      ->check(kPositiveCount)
      ->capture_default_str();
  nas_mnist->add_option("--tournament", nas.tournament, "Candidates drawn per parent selection")
      ->check(kPositiveInt)
      ->capture_default_str();
  nas_mnist->add_option("--crossover", nas.crossover, "Probability that a child mixes two parents")
      ->check(kFraction)
      ->capture_default_str();
  nas_mnist->add_option("--max-parameters", nas.max_parameters, "The winner's limit (default: the default CNN's)")
      ->check(kNonNegativeCount);
  nas_mnist->add_option("--seed", nas.seed, "Seed of the whole search")->capture_default_str();
  nas_mnist->add_option("--threads", nas.threads, "Threads (default: all cores)")->check(kThreadCount);
  nas_mnist->add_option("--data", nas.data_dir, "MNIST IDX files, else the offline subset")->capture_default_str();
  nas_mnist->add_option("--save-search", nas.json_path, "Write the whole search (every generation) as JSON");
  nas_mnist->add_flag("--json", nas.json, "End with one JSON line of the result");
  ember::cli::OnnxOptions onnx;
  CLI::App* onnx_cmd = app.add_subcommand("onnx", "Import ONNX models: what they use, and run them");
  onnx_cmd->require_subcommand(1);
  CLI::App* onnx_info = onnx_cmd->add_subcommand("info", "Inputs, outputs, opsets and which ops ember imports");
  onnx_info->add_option("model", onnx.model, "A .onnx file")->required();
  onnx_info->add_flag("--json", onnx.json, "Print one JSON object");
  CLI::App* onnx_run = onnx_cmd->add_subcommand("run", "Run a model on NumPy .npy inputs; write each output as .npy");
  onnx_run->add_option("model", onnx.model, "A .onnx file")->required();
  onnx_run->add_option("--input,-i", onnx.inputs, "name=file.npy (just file.npy for a single-input model)");
  onnx_run->add_option("--output-dir,-o", onnx.output_dir, "Folder for <output name>.npy")->capture_default_str();
  onnx_run->add_flag("--bench", onnx.bench, "Time repeated runs after the first (median, p90, min)");
  onnx_run->add_option("--bench-seconds", onnx.bench_seconds, "How long --bench runs")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  onnx_run->add_flag("--eager", onnx.eager, "Run the graph op by op instead of compiling it");
  onnx_run->add_flag("--detect-anomaly", onnx.detect_anomaly,
                     "Run op by op, checking every op's output for NaN and Inf; stop at the first with an error "
                     "naming the op");
  onnx_run->add_flag("--json", onnx.json, "Print one JSON object");
  onnx_run->add_option("--threads", onnx.threads, "Threads (default: all cores)")->check(kThreadCount);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string command = command_of(&app);
  try {
    std::optional<ember::autograd::DetectAnomalyGuard> anomaly;
    if (detect_anomaly) {
      EMBER_CHECK(!(train.compile || gpt.compile || ssm.compile), "[", command,
                  "] --detect-anomaly checks ops as they run eagerly; it cannot be combined with --compile");
      anomaly.emplace();
    }
    if (info->parsed()) return list_ops ? run_ops(as_json) : run_info(as_json);
    if (mnist->parsed()) return ember::cli::run_train_mnist(train);
    if (gpt_cmd->parsed()) return ember::cli::run_train_gpt(gpt);
    if (ssm_cmd->parsed()) return ember::cli::run_train_gpt(ssm);
    if (diffusion_cmd->parsed()) return ember::cli::run_train_diffusion(diffusion);
    if (sample_diffusion->parsed()) return ember::cli::run_sample_diffusion(sample);
    if (generate_cmd->parsed()) return ember::cli::run_generate(generate);
    if (bench_cmd->parsed()) return ember::cli::run_bench(bench);
    if (roofline_cmd->parsed()) return ember::cli::run_roofline(roofline);
    if (onnx_info->parsed()) return ember::cli::run_onnx_info(onnx);
    if (onnx_run->parsed()) return ember::cli::run_onnx_run(onnx);
    if (embed_cmd->parsed()) return ember::cli::run_embed(embed);
    if (quantize_cmd->parsed()) return ember::cli::run_quantize(quantize);
    if (eval_gpt_cmd->parsed()) return ember::cli::run_eval_gpt(eval_gpt);
    if (eval_mnist_cmd->parsed()) return ember::cli::run_eval_mnist(eval_mnist);
    if (nas_mnist->parsed()) return ember::cli::run_nas_mnist(nas);
  } catch (const ember::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    // A request for more memory than the machine has (Note [what cannot be allocated]) comes from
    // the sizes the options asked for: say which were given.
    const std::string options = given_options(innermost_command(&app));
    if (std::string_view(e.what()).find("] cannot allocate ") != std::string_view::npos && !options.empty()) {
      std::cerr << "  (the options given: " << options << ")\n";
    }
    // A rank of a data-parallel job may have a collective stuck in the communication library: end
    // at once (mpirun then stops the other ranks) instead of waiting for it at exit.
    if (train.ddp || gpt.ddp || ssm.ddp) ember::dist::abort_job(1);
    return 1;
  } catch (const std::exception& e) {
    // Memory outside tensors (a std::vector, a string) sized from the options or a file:
    // std::bad_alloc, or std::length_error for a size beyond what a vector can hold.
    const bool memory =
        dynamic_cast<const std::bad_alloc*>(&e) != nullptr || dynamic_cast<const std::length_error*>(&e) != nullptr;
    if (!memory) {
      // Never "terminate called": an exception that is not an ember::Error is a bug, reported as one.
      std::cerr << "error: [" << command << "] internal error (please report it): " << e.what() << "\n";
      if (train.ddp || gpt.ddp || ssm.ddp) ember::dist::abort_job(1);
      return 1;
    }
    std::cerr << "error: [" << command << "] cannot allocate the memory this run asks for (" << e.what() << ")\n";
    const std::string options = given_options(innermost_command(&app));
    if (!options.empty()) std::cerr << "  (the options given: " << options << ")\n";
    if (train.ddp || gpt.ddp || ssm.ddp) ember::dist::abort_job(1);
    return 1;
  }
  return 0;
}
