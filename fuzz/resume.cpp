// libFuzzer target for the resume checks of training runs (`ember train mnist|gpt|ssm|diffusion
// --resume`; src/train/resume.cpp). Every input is a checkpoint: its header goes through the safetensors
// reader (src/io/safetensors_format.cpp, as ember::load_metadata reads it), and a header that passes
// has its metadata checked by check_resume against the rules of each command at its default
// settings, and against rules made from the metadata itself (its entries as this run's settings,
// so that the progress and state entries are reached for any metadata). Each decision must be the
// one the rules describe (ember/train/resume.h); an accepted checkpoint's progress and state must be the
// numbers written; rules' settings written as a checkpoint (encode_header) and read back must be
// accepted. ember::Error is the expected answer to a bad checkpoint; any other exception, a crash,
// a leak, a hang, a sanitizer report or a broken promise (checked below) is a finding.
//
// A target of its own rather than a part of the safetensors one: its seeds are checkpoints of the
// commands, its dictionary their settings, and its time goes to the checks of the metadata instead
// of the tensor table (which the safetensors target covers).
//
// Run: scripts/fuzz resume  (builds build-fuzz/resume with ASan + UBSan, replays fuzz/corpus/resume/,
// then fuzzes; see fuzz/README.md). Replay one input: build-fuzz/resume FILE
#include "ember/train/resume.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ember/error.h"
#include "fuzz/promise.h"
#include "io/safetensors_format.h"

const char* const ember_fuzz::kTarget = "resume";

namespace {

namespace format = ember::safetensors_format;
using ember::train::check_resume;
using ember::train::ResumePoint;
using ember::train::ResumeRules;
using Metadata = std::map<std::string, std::string>;

using ember_fuzz::require;

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

// The rules of each command at its default settings (apps/ember/train.cpp, train_gpt.cpp,
// diffusion.cpp; the vocabulary of a text of "ab\n").
std::vector<ResumeRules> command_rules() {
  const Metadata gpt_shared = {{"layers", "4"},          {"dim", "192"},       {"context", "128"},
                               {"vocabulary", "0a6162"}, {"lr", number(1e-3)}, {"warmup", "100"},
                               {"steps", "1800"},        {"batch_size", "16"}, {"seed", "1337"}};
  Metadata gpt = gpt_shared, ssm = gpt_shared;
  gpt.insert({{"task", "gpt"}, {"heads", "4"}, {"dropout", number(0.0)}});
  ssm.insert({{"task", "ssm"}, {"state", "16"}, {"expand", "2"}, {"conv", "4"}});
  return {
      {.op = "train",
       .path = "<mnist>",
       .settings = {{"task", "mnist"},
                    {"model", "cnn"},
                    {"optimizer", "adam"},
                    {"lr", number(3e-3)},
                    {"batch_size", "64"},
                    {"shift", "2"},
                    {"schedule", "cosine"},
                    {"epochs", "10"},
                    {"seed", "0"}},
       .progress_key = "epochs_done",
       .unit = "epochs",
       .limit = 10},
      {.op = "train gpt",
       .path = "<gpt>",
       .settings = gpt,
       .vocabulary_source = "<text>",
       .architecture_keys = {"layers", "heads", "dim", "context", "vocabulary"},
       .progress_key = "steps_done",
       .unit = "steps",
       .limit = 1800,
       .state_keys = {"batch_state"}},
      {.op = "train ssm",
       .path = "<ssm>",
       .settings = ssm,
       .vocabulary_source = "<text>",
       .architecture_keys = {"layers", "dim", "state", "expand", "conv", "vocabulary"},
       .progress_key = "steps_done",
       .unit = "steps",
       .limit = 1800,
       .state_keys = {"batch_state"}},
      {.op = "train diffusion",
       .path = "<diffusion>",
       .settings = {{"task", "diffusion"},
                    {"channels", "32"},
                    {"multipliers", "1,2,2"},
                    {"groups", "8"},
                    {"classes", "10"},
                    {"image_size", "28"},
                    {"timesteps", "1000"},
                    {"schedule", "cosine"},
                    {"steps", "1700"},
                    {"batch_size", "64"},
                    {"lr", number(1e-3)},
                    {"warmup", "200"},
                    {"drop_class", number(0.1)},
                    {"ema", number(0.999)},
                    {"seed", "0"}},
       .progress_key = "steps_done",
       .unit = "steps",
       .limit = 1700},
  };
}

const std::string& entry(const Metadata& metadata, const std::string& key) {
  static const std::string kNone;
  const auto it = metadata.find(key);
  return it == metadata.end() ? kNone : it->second;
}

// `text` as a whole number below 2^64 (decimal digits, nothing else), if it is one: what resume.h
// promises to accept.
bool decimal(const std::string& text, uint64_t& value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  const std::string digits = text.substr(std::min(text.find_first_not_of('0'), text.size() - 1));
  if (digits.size() > 20 || (digits.size() == 20 && digits > "18446744073709551615")) return false;
  value = std::stoull(digits);
  return true;
}

// Whether `rules` accept `metadata`, as resume.h describes the checks, and where the run goes on.
bool expected(const Metadata& metadata, const ResumeRules& rules, ResumePoint& point) {
  for (const auto& [key, value] : rules.settings) {
    if (entry(metadata, key) != value) return false;
  }
  uint64_t done = 0;
  if (!decimal(entry(metadata, rules.progress_key), done) || done > static_cast<uint64_t>(rules.limit)) return false;
  point.done = static_cast<int64_t>(done);
  for (const std::string& key : rules.state_keys) {
    if (!decimal(entry(metadata, key), point.state[key])) return false;
  }
  return true;
}

void check(const Metadata& metadata, const ResumeRules& rules) {
  ResumePoint want;
  const bool accept = expected(metadata, rules, want);
  try {
    const ResumePoint got = check_resume(metadata, rules);
    require(accept, "check_resume accepts only what its rules accept");
    require(got.done == want.done && got.state == want.state, "the progress and state are the numbers written");
  } catch (const ember::Error& e) {
    const std::string prefix = "[" + rules.op + "] checkpoint " + rules.path + " ";
    require(std::string(e.what()).rfind(prefix, 0) == 0, "an error starts with [op] checkpoint <path>");
    if (accept) std::fprintf(stderr, "[fuzz resume] %s\n", e.what());
    require(!accept, "check_resume accepts what its rules accept");
  }
}

// `rules`' settings, with `done` and a state, written as a checkpoint and read back: accepted.
void check_written(const ResumeRules& rules, int64_t done) {
  Metadata metadata = rules.settings;
  metadata[rules.progress_key] = std::to_string(done);
  for (const std::string& key : rules.state_keys) metadata[key] = std::to_string(UINT64_MAX - done);
  std::string bytes;
  try {
    bytes = format::encode_header({}, metadata, "<fuzz again>");
  } catch (const ember::Error&) {
    return;  // settings that are not UTF-8 cannot be written
  }
  const ember::detail::MemorySource source(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  const ResumePoint point = ember_fuzz::must_succeed("a checkpoint of this run's settings is accepted", [&] {
    return check_resume(format::read_header(source, "<fuzz again>").metadata, rules);
  });
  require(point.done == done, "a checkpoint's progress is read as written");
  for (const std::string& key : rules.state_keys) {
    require(point.state.at(key) == UINT64_MAX - static_cast<uint64_t>(done), "a checkpoint's state is read as written");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ember::detail::MemorySource source(std::span(data, size));
  Metadata metadata;
  try {
    metadata = format::read_header(source, "<fuzz>").metadata;
  } catch (const ember::Error&) {
    return 0;  // a rejected file: the expected outcome for most inputs
  }
  for (const ResumeRules& rules : command_rules()) check(metadata, rules);

  // This run's settings are the checkpoint's own (all but the progress and state entries).
  ResumeRules own{.op = "train own",
                  .path = "<own>",
                  .settings = metadata,
                  .vocabulary_source = metadata.count("vocabulary") != 0 ? "<text>" : "",
                  .architecture_keys = {"layers", "dim"},
                  .progress_key = "steps_done",
                  .unit = "steps",
                  .limit = 1800,
                  .state_keys = {"batch_state"}};
  own.settings.erase("steps_done");
  own.settings.erase("batch_state");
  check(metadata, own);
  check_written(own, static_cast<int64_t>(size % 1801));
  // And with one setting changed: refused.
  if (!own.settings.empty()) {
    own.settings.begin()->second += "x";
    check(metadata, own);
  }
  return 0;
}
