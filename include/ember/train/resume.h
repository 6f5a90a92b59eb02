// What resuming a training run checks in a checkpoint's metadata before it loads a tensor: that
// the checkpoint is of the same task, model and run, and how far the run got. One function for
// every kind of run. It needs no Tensor, so the fuzzer (fuzz/resume.cpp) links it with the
// safetensors header reader alone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember::train {

// What a command asks of the checkpoint it resumes.
struct ResumeRules {
  std::string op{};    // for errors: "train", "train gpt"
  std::string path{};  // the checkpoint, for errors
  // The settings this run records; the checkpoint must have been written with the same ones.
  // "task", when present, is checked first ("... is not a checkpoint of `ember train <task>`").
  std::map<std::string, std::string> settings{};
  // When not empty, the "vocabulary" setting is checked next, its error naming this text.
  std::string vocabulary_source{};
  // Checked next, each error naming the option: "another architecture: --dim 32 there, 48 in this run".
  std::vector<std::string> architecture_keys{};
  // The entry counting the run's progress ("epochs_done", "steps_done"), a whole number at most
  // `limit` ("already has 12 epochs, more than --epochs 10"; `unit` is "epochs" or "steps").
  std::string progress_key{};
  std::string unit{};
  int64_t limit = 0;
  // Entries of the state the run goes on from (whole numbers below 2^64, such as "batch_state").
  std::vector<std::string> state_keys{};
};

// Where the run goes on from.
struct ResumePoint {
  int64_t done = 0;                       // the progress entry: 0 <= done <= limit
  std::map<std::string, uint64_t> state;  // the state entries, by key
};

// Checks `metadata` (a checkpoint's "__metadata__") against `rules`; any mismatch or malformed
// entry is an ember::Error "[<op>] checkpoint <path> ...".
ResumePoint check_resume(const std::map<std::string, std::string>& metadata, const ResumeRules& rules);

}  // namespace ember::train
