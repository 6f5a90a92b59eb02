// `ember train gpt` and `ember train ssm`: nanoGPT's character model, or a Mamba model of the same
// characters, on Shakespeare, with nanoGPT's recipe for both (AdamW with decay on the 2-D weights,
// betas (0.9, 0.99), gradient clipping at 1, linear warmup then cosine decay to lr / 10), with
// evaluations of both splits (eval.h), checkpoints that record the architecture and the vocabulary
// (which checkpoint.h reads back for `ember generate`, `ember eval gpt` and `ember quantize`), and a
// sample at the end.
#include "train_gpt.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint.h"
#include "cli_util.h"
#include "ember/dist.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models/gpt.h"
#include "ember/models/mamba.h"
#include "ember/optim.h"
#include "ember/profiler.h"
#include "eval.h"
#include "resume.h"

namespace ember::cli {
namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";

// The settings a checkpoint records: the architecture (needed to rebuild the model) and the run's
// schedule (a resumed run must keep them).
std::map<std::string, std::string> run_settings(const TrainGptOptions& o, const std::string& vocabulary) {
  auto number = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    return std::string(text);
  };
  std::map<std::string, std::string> settings = {{"task", o.model},
                                                 {"layers", std::to_string(o.layers)},
                                                 {"dim", std::to_string(o.dim)},
                                                 {"context", std::to_string(o.context)},
                                                 {"vocabulary", vocabulary_to_hex(vocabulary)},
                                                 {"lr", number(o.lr)},
                                                 {"warmup", std::to_string(o.warmup)},
                                                 {"steps", std::to_string(o.steps)},
                                                 {"batch_size", std::to_string(o.batch_size)},
                                                 {"seed", std::to_string(o.seed)}};
  if (o.model == "ssm") {
    settings.insert(
        {{"state", std::to_string(o.state)}, {"expand", std::to_string(o.expand)}, {"conv", std::to_string(o.conv)}});
  } else {
    settings.insert({{"heads", std::to_string(o.heads)}, {"dropout", number(o.dropout)}});
  }
  return settings;
}

std::shared_ptr<models::LanguageModel> make_model(const TrainGptOptions& o, int64_t vocab_size) {
  if (o.model == "ssm") {
    return std::make_shared<models::Mamba>(models::MambaConfig{.vocab_size = vocab_size,
                                                               .d_model = o.dim,
                                                               .n_layer = o.layers,
                                                               .d_state = o.state,
                                                               .d_conv = o.conv,
                                                               .expand = o.expand});
  }
  return std::make_shared<models::GPT>(models::GPTConfig{.vocab_size = vocab_size,
                                                         .block_size = o.context,
                                                         .n_layer = o.layers,
                                                         .n_head = o.heads,
                                                         .n_embd = o.dim,
                                                         .dropout = o.dropout});
}

// "4 layers, 4 heads, 192 dims, context 128, dropout 0" or "4 layers, 256 dims (512 inner), state 16, conv 4, context
// 128".
std::string describe_architecture(const TrainGptOptions& o) {
  char text[160];
  if (o.model == "ssm") {
    std::snprintf(text, sizeof text, "%lld layers, %lld dims (%lld inner), state %lld, conv %lld, context %lld",
                  static_cast<long long>(o.layers), static_cast<long long>(o.dim),
                  static_cast<long long>(o.expand * o.dim), static_cast<long long>(o.state),
                  static_cast<long long>(o.conv), static_cast<long long>(o.context));
  } else {
    std::snprintf(text, sizeof text, "%lld layers, %lld heads, %lld dims, context %lld, dropout %g",
                  static_cast<long long>(o.layers), static_cast<long long>(o.heads), static_cast<long long>(o.dim),
                  static_cast<long long>(o.context), o.dropout);
  }
  return text;
}

}  // namespace

std::vector<int64_t> generate_text(models::LanguageModel& model, const std::vector<int64_t>& prompt, int64_t tokens,
                                   const models::SamplingOptions& options, bool use_cache,
                                   const std::function<void(int64_t)>& on_token) {
  if (auto* mamba = dynamic_cast<models::Mamba*>(&model))
    return models::generate(*mamba, prompt, tokens, options, on_token);
  return models::generate(dynamic_cast<models::GPT&>(model), prompt, tokens, options, use_cache, on_token);
}

namespace {

std::string sample_text(models::LanguageModel& model, const data::CharTokenizer& tokenizer, int64_t tokens,
                        uint64_t seed) {
  const std::vector<int64_t> prompt = tokenizer.encode("\n");
  return tokenizer.decode(generate_text(model, prompt, tokens, {.temperature = 0.8, .top_k = 40, .seed = seed}));
}

}  // namespace

int run_train_gpt(const TrainGptOptions& o) {
  const std::string op = "train " + o.model;
  EMBER_CHECK(o.model == "gpt" || o.model == "ssm", "[train] unknown language model \"", o.model, "\"");
  EMBER_CHECK(o.steps >= 1 && o.batch_size >= 1 && o.context >= 1 && o.eval_every >= 1 && o.eval_batches >= 1, "[", op,
              "] --steps, --batch-size, --context, --eval-every and --eval-batches must be at least 1");
  EMBER_CHECK(o.warmup >= 0 && o.warmup < o.steps, "[", op, "] --warmup must be in [0, --steps), got ", o.warmup);
  EMBER_CHECK(o.lr > 0 && std::isfinite(o.lr), "[", op, "] --lr must be a positive number, got ", o.lr);
  if (o.threads > 0) set_num_threads(o.threads);
  std::string text;
  try {
    text = data::read_text_file(o.data_path);
  } catch (const Error&) {
    EMBER_FAIL("[", op, "] cannot read ", o.data_path, ": run scripts/setup, which downloads Shakespeare there");
  }
  EMBER_CHECK(!text.empty(), "[", op, "] ", o.data_path, " is empty: there is no text to train on");
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_text(text);
  const data::TextSplit split(tokenizer.encode(text));
  std::map<std::string, std::string> settings = run_settings(o, tokenizer.vocabulary());
  // --amp: the loss under autocast; float16 also scales it (GradScaler, in the checkpoint).
  const std::optional<DType> amp_dtype = amp_option(o.amp, "train gpt");
  if (amp_dtype) settings["amp"] = o.amp;
  std::optional<amp::GradScaler> scaler;
  if (amp_dtype == kFloat16) scaler.emplace();
  EMBER_CHECK(!(scaler && o.compile), "[", op,
              "] --amp f16 cannot run with --compile: the loss scaler reads the "
              "gradients on the host to decide whether to step (--amp bf16 can)");

  // --ddp: this process is one rank; the others run the same command.
  EMBER_CHECK(o.ddp || !o.zero, "[", op, "] --zero needs --ddp");
  EMBER_CHECK(!(o.ddp && o.compile), "[", op, "] --ddp cannot run with --compile yet: the compiled step has no ",
              "place for the gradient all-reduce");
  EMBER_CHECK(!(scaler && o.zero), "[", op, "] --amp f16 cannot run with --zero: the loss scaler steps one ",
              "optimizer, not a sharded one (--amp bf16 can)");
  std::shared_ptr<dist::ProcessGroup> group;
  if (o.ddp) {
    group = dist::init_process_group();
    EMBER_CHECK(o.batch_size % group->world_size() == 0, "[", op, "] --batch-size ", o.batch_size,
                " is not divisible by the ", group->world_size(), " ranks");
  }
  const int world = group ? group->world_size() : 1;
  const int rank = group ? group->rank() : 0;
  const bool speaks = rank == 0;  // evaluates, prints and writes checkpoints

  manual_seed(o.seed);
  const std::shared_ptr<models::LanguageModel> model_ptr = make_model(o, tokenizer.vocab_size());
  models::LanguageModel& model = *model_ptr;
  // AdamW with weight decay on the matrices only; under --zero each rank holds its shard's state.
  std::vector<optim::ParamGroup> groups = {
      {.params = model.decayed_parameters(), .options = {{"weight_decay", 0.1}}},
      {.params = model.undecayed_parameters(), .options = {{"weight_decay", 0.0}}}};
  auto make_adamw = [&](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::AdamW>(std::move(g), optim::AdamWOptions{.lr = o.lr, .beta1 = 0.9, .beta2 = 0.99});
  };
  std::unique_ptr<dist::ZeroRedundancyOptimizer> sharded;
  std::unique_ptr<optim::Optimizer> whole;
  if (o.zero) {
    sharded = std::make_unique<dist::ZeroRedundancyOptimizer>(groups, group, make_adamw);
  } else {
    whole = make_adamw(groups);
  }
  optim::Optimizer& optimizer = sharded ? sharded->local_optimizer() : *whole;
  uint64_t batch_state = o.seed;
  int64_t first_step = 0;
  if (!o.resume_path.empty()) {
    const ResumePoint point =
        check_resume(load_metadata(o.resume_path), {.op = op,
                                                    .path = o.resume_path,
                                                    .settings = settings,
                                                    .vocabulary_source = o.data_path,
                                                    .architecture_keys = architecture_keys(o.model),
                                                    .progress_key = "steps_done",
                                                    .unit = "steps",
                                                    .limit = o.steps,
                                                    .state_keys = {"batch_state"}});
    first_step = point.done;
    batch_state = point.state.at("batch_state");
    const StateDict checkpoint = load(o.resume_path);
    model.load_state_dict(strip_prefix(checkpoint, kModelPrefix));
    if (sharded) {
      sharded->load_state_dict(strip_prefix(checkpoint, kOptimizerPrefix));
    } else {
      optimizer.load_state_dict(strip_prefix(checkpoint, kOptimizerPrefix));
    }
    if (scaler) scaler->load_state_dict(strip_prefix(checkpoint, kScalerPrefix));
  }
  std::optional<dist::DistributedDataParallel> ddp;
  if (group) ddp.emplace(model_ptr, group, dist::DdpOptions{.bucket_cap_mb = o.bucket_cap_mb});
  DdpReport ddp_report;
  auto save_checkpoint = [&](int64_t steps_done) {
    if (o.save_path.empty()) return;
    // Under --zero every rank sends its shard of the optimizer state (a collective), rank 0 saves.
    StateDict optimizer_state = sharded ? sharded->consolidated_state_dict() : optimizer.state_dict();
    if (!speaks) return;
    StateDict checkpoint = with_prefix(model.state_dict(), kModelPrefix);
    checkpoint.merge(with_prefix(optimizer_state, kOptimizerPrefix));
    if (scaler) checkpoint.merge(with_prefix(scaler->state_dict(), kScalerPrefix));
    std::map<std::string, std::string> meta = settings;
    meta["steps_done"] = std::to_string(steps_done);
    meta["batch_state"] = std::to_string(batch_state);
    save(checkpoint, o.save_path, meta);
  };

  const bool live = ::isatty(::fileno(stdout)) != 0 && !o.json && speaks;
  const int64_t tokens_per_step = o.batch_size * o.context;
  if (!o.json && speaks) {
    std::printf(
        "ember %s: %s (%.2fM parameters), batch %lld, %lld steps, AdamW lr %g (warmup %lld, cosine to %g), "
        "%lld train / %lld val characters, %d threads%s%s\n",
        op.c_str(), describe_architecture(o).c_str(), static_cast<double>(model.num_parameters()) / 1e6,
        static_cast<long long>(o.batch_size), static_cast<long long>(o.steps), o.lr, static_cast<long long>(o.warmup),
        o.lr / 10, static_cast<long long>(split.train_size()), static_cast<long long>(split.val_size()),
        get_num_threads(), o.compile ? ", compiled step" : "", amp_dtype ? (", autocast " + o.amp).c_str() : "");
    if (group) {
      std::printf("data-parallel: %d ranks (%s), %lld sequences per rank per step, %zu gradient buckets%s\n", world,
                  dist::backend_name(group->backend()), static_cast<long long>(o.batch_size / world),
                  ddp->buckets().size(), sharded ? ", AdamW state sharded (ZeRO-1)" : "");
    }
  }
  std::unique_ptr<profiler::Profiler> profile;
  if (!o.profile_path.empty()) profile = std::make_unique<profiler::Profiler>();
  const int64_t last_step = o.stop_after > 0 ? std::min(o.steps, first_step + o.stop_after) : o.steps;
  const auto start = Clock::now();
  double train_seconds = 0, train_loss = NAN, val_loss = NAN, last_loss = NAN;
  nlohmann::json evals = nlohmann::json::array();
  model.train();
  auto evaluate = [&](int64_t step) {
    const profiler::Range eval_range("evaluation");
    // The same batches at every evaluation, so the curve compares like with like.
    train_loss =
        text_split_loss(model, split, "train", o.eval_batches, o.batch_size, o.context, gpt_eval_seed(o.seed, "train"));
    val_loss =
        text_split_loss(model, split, "val", o.eval_batches, o.batch_size, o.context, gpt_eval_seed(o.seed, "val"));
    const double rate =
        train_seconds > 0 ? static_cast<double>((step - first_step) * tokens_per_step) / train_seconds : 0.0;
    evals.push_back({{"step", step}, {"train_loss", train_loss}, {"val_loss", val_loss}, {"tokens_per_second", rate}});
    if (!o.json) {
      std::printf("%sstep %5lld/%lld  train loss %.4f  val loss %.4f  %7.0f tokens/s  %6.1fs\n", live ? "\r" : "",
                  static_cast<long long>(step), static_cast<long long>(o.steps), train_loss, val_loss, rate,
                  seconds_since(start));
      std::fflush(stdout);
    }
  };
  // One training step: the loss, zero_grad, backward, clipping, AdamW's step (the learning rate is
  // set before it, outside: a replayed AdamW step reads its param groups' current options).
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      const amp::Autocast autocast(amp_dtype.value_or(kBFloat16), amp_dtype.has_value());
      loss = model.loss(x, y);
    }
    sharded ? sharded->zero_grad() : optimizer.zero_grad();
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->unscale_(optimizer);  // clip the true gradients
      optim::clip_grad_norm_(model.parameters(), 1.0);
      scaler->step(optimizer);
      scaler->update();
    } else {
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 1.0);
      sharded ? sharded->step() : optimizer.step();
    }
    if (ddp) ddp_report.add(ddp->last_stats());
    return loss;
  };
  // --compile: the first step traces it, later steps replay the plan (every batch has one shape).
  std::optional<Compiled<decltype(train_step)>> compiled_step;
  if (o.compile) compiled_step.emplace(ember::compile(train_step));
  auto last_draw = Clock::now();
  bool evaluated = false;  // (and saved) at some step of this run
  for (int64_t step = first_step; step < last_step; ++step) {
    const auto step_start = Clock::now();
    {
      const profiler::Range step_range("train step");
      for (optim::ParamGroup& param_group : optimizer.param_groups())
        param_group.set_lr(warmup_cosine_lr(step, o.lr, o.warmup, o.steps));
      const auto [x, y] = split.batch("train", o.batch_size, o.context, batch_state);
      if (group) {  // this rank's rows of the global batch; the global batch's loss
        const int64_t rows = o.batch_size / world;
        const Tensor loss = train_step(x.narrow(0, rank * rows, rows), y.narrow(0, rank * rows, rows));
        const Tensor global = loss.detach().to(kFloat64).reshape({1});
        group->all_reduce(global, dist::ReduceOp::kAvg)->wait();
        last_loss = global.item<double>();
      } else {
        const Tensor loss = compiled_step ? (*compiled_step)(x, y) : train_step(x, y);
        last_loss = loss.item<double>();
      }
    }
    train_seconds += seconds_since(step_start);
    const int64_t done = step + 1;
    if (live && seconds_since(last_draw) > 0.1) {
      last_draw = Clock::now();
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * done / o.steps);
      std::string bar(static_cast<size_t>(filled), '#');
      bar.append(static_cast<size_t>(kWidth - filled), '.');
      const double rate = static_cast<double>((done - first_step) * tokens_per_step) / train_seconds;
      std::printf("\rstep %5lld/%lld [%s] loss %.4f  %7.0f tokens/s ", static_cast<long long>(done),
                  static_cast<long long>(o.steps), bar.c_str(), last_loss, rate);
      std::fflush(stdout);
    }
    if (done % o.eval_every == 0 || done == o.steps) {
      evaluated = true;
      if (speaks) evaluate(done);
      save_checkpoint(done);
    }
  }
  if (last_step < o.steps || !evaluated) save_checkpoint(last_step);
  if (profile) {
    profile->stop();
    if (speaks) profile->export_chrome_trace(o.profile_path);
  }
  if (!speaks) return 0;
  const std::string sample = sample_text(model, tokenizer, o.sample_tokens, o.seed);
  const double rate =
      train_seconds > 0 ? static_cast<double>((last_step - first_step) * tokens_per_step) / train_seconds : 0.0;
  if (o.json) {
    nlohmann::json result = {{"task", o.model},
                             {"steps", last_step},
                             {"parameters", model.num_parameters()},
                             {"train_loss", std::isnan(train_loss) ? nlohmann::json() : nlohmann::json(train_loss)},
                             {"val_loss", std::isnan(val_loss) ? nlohmann::json() : nlohmann::json(val_loss)},
                             {"final_loss", std::isnan(last_loss) ? nlohmann::json() : nlohmann::json(last_loss)},
                             {"train_seconds", train_seconds},
                             {"seconds", seconds_since(start)},
                             {"tokens_per_second", rate},
                             {"evals", evals},
                             {"sample", sample},
                             {"compiled", compiled_step.has_value()}};
    if (compiled_step) add_compile_stats(result, compiled_step->stats());
    if (group) ddp_report.write(result, *group, *ddp, sharded.get());
    std::cout << result.dump() << std::endl;
  } else {
    std::printf("trained %lld steps in %.1fs (%.0f tokens/s)\n--- sample (temperature 0.8, top-k 40) ---\n%s\n",
                static_cast<long long>(last_step - first_step), train_seconds, rate, sample.c_str());
    if (compiled_step) print_compile_stats(compiled_step->stats());
    if (group) ddp_report.print(*group, sharded.get());
  }
  if (profile) print_profile(*profile, o.profile_path, o.json ? std::cerr : std::cout);
  return 0;
}

}  // namespace ember::cli
