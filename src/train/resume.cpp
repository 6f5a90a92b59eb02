// The resume checks of training runs (ember/train/resume.h).
#include "ember/train/resume.h"

#include "ember/error.h"

namespace ember::train {
namespace {

// The entry `key` of `metadata`, "" when there is none.
const std::string& entry(const std::map<std::string, std::string>& metadata, const std::string& key) {
  static const std::string kNone;
  const auto it = metadata.find(key);
  return it == metadata.end() ? kNone : it->second;
}

// `text` as a whole number below 2^64 (decimal digits, nothing else), if it is one.
bool whole_number(const std::string& text, uint64_t& value) {
  if (text.empty()) return false;
  value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(value, uint64_t{10}, &value) ||
        __builtin_add_overflow(value, static_cast<uint64_t>(c - '0'), &value)) {
      return false;
    }
  }
  return true;
}

}  // namespace

ResumePoint check_resume(const std::map<std::string, std::string>& metadata, const ResumeRules& rules) {
  const std::string& op = rules.op;
  const std::string& path = rules.path;
  const auto task = rules.settings.find("task");
  if (task != rules.settings.end()) {
    EMBER_CHECK(entry(metadata, "task") == task->second, "[", op, "] checkpoint ", path,
                " is not a checkpoint of `ember train ", task->second, "` (task \"", entry(metadata, "task"), "\")");
  }
  // The model first (a different model, whatever the schedule), then the run's schedule.
  if (!rules.vocabulary_source.empty()) {
    EMBER_CHECK(entry(metadata, "vocabulary") == entry(rules.settings, "vocabulary"), "[", op, "] checkpoint ", path,
                " was trained on a text with another vocabulary than ", rules.vocabulary_source);
  }
  for (const std::string& key : rules.architecture_keys) {
    EMBER_CHECK(entry(metadata, key) == entry(rules.settings, key), "[", op, "] checkpoint ", path,
                " holds a model of another architecture: --", key, " ", entry(metadata, key), " there, ",
                entry(rules.settings, key), " in this run");
  }
  for (const auto& [key, value] : rules.settings) {
    EMBER_CHECK(entry(metadata, key) == value, "[", op, "] checkpoint ", path, " was written with ", key, "=",
                entry(metadata, key), " but this run uses ", key, "=", value);
  }

  ResumePoint point;
  const std::string& done_text = entry(metadata, rules.progress_key);
  uint64_t done = 0;
  EMBER_CHECK(whole_number(done_text, done), "[", op, "] checkpoint ", path, " has no valid ", rules.progress_key,
              " entry (got \"", done_text, "\")");
  EMBER_CHECK(done <= static_cast<uint64_t>(rules.limit), "[", op, "] checkpoint ", path, " already has ", done, " ",
              rules.unit, ", more than --", rules.unit, " ", rules.limit);
  point.done = static_cast<int64_t>(done);
  // Each state entry is checked as the progress is: a missing or malformed one is an error, never a
  // number read from part of it.
  for (const std::string& key : rules.state_keys) {
    const std::string& text = entry(metadata, key);
    EMBER_CHECK(whole_number(text, point.state[key]), "[", op, "] checkpoint ", path, " has no valid ", key,
                " entry (got \"", text, "\")");
  }
  return point;
}

}  // namespace ember::train
