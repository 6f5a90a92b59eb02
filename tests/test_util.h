// Small helpers shared by test files.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/kernel.h"
#include "ember/error.h"
#include "ember/info.h"
#include "ember/tensor.h"
#include "ops/cost.h"

// Defined in a build under AddressSanitizer or ThreadSanitizer, where tests that measure memory, or
// repeat in floats what the Release run already checks at length, skip.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EMBER_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define EMBER_TEST_SANITIZED 1
#endif
#endif

namespace test_util {

// The message of the ember::Error that `fn` throws, "(no error)" if it throws none.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ember::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Runs fn and expects an ember::Error whose message contains every one of `parts`.
template <class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an ember::Error containing '" << parts.front() << "'";
  } catch (const ember::Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nexpected to contain: " << part;
    }
  }
}

// Runs `write` as on a full disk (the process's file size limit at 4096 bytes: write() fails with
// EFBIG; SIGXFSZ ignored) and returns the ember::Error message it threw, "" if none.
template <class Fn>
std::string error_on_a_full_disk(Fn&& write) {
  rlimit old_limit{};
  EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 4096;
  EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write();
  } catch (const ember::Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  return message;
}

// Same dtype, shape and bytes (NaNs and -0.0 included).
inline bool bitwise_equal(const ember::Tensor& a, const ember::Tensor& b) {
  const ember::Tensor x = a.contiguous(), y = b.contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(ember::storage_bytes(x.dtype(), x.numel()))) == 0;
}

// As bitwise_equal for float32 and float64, except that a NaN equals any NaN (its sign and payload
// aside).
inline bool bitwise_equal_but_nan_payloads(const ember::Tensor& a, const ember::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const ember::Tensor x = a.contiguous().to(ember::kFloat64), y = b.contiguous().to(ember::kFloat64);
  const double* p = x.data_ptr<double>();
  const double* q = y.data_ptr<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::isnan(p[i]) ? !std::isnan(q[i]) : std::memcmp(p + i, q + i, sizeof(double)) != 0) return false;
  }
  return true;
}

// Restores the thread count a test changes.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(ember::get_num_threads()) {}
  ~ThreadCountGuard() { ember::set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

// The cost rule of `kind` applied to a call on these tensors (undefined tensors: absent operands).
inline ember::OpCost cost_of(ember::OpKind kind, const ember::Attrs& attrs, const std::vector<ember::Tensor>& inputs,
                             const std::vector<ember::Tensor>& outputs) {
  std::vector<ember::Operand> operands;
  for (const std::vector<ember::Tensor>* list : {&inputs, &outputs}) {
    for (const ember::Tensor& t : *list) {
      operands.push_back(
          t.defined() ? ember::Operand{t.data_ptr(), t.dtype(), t.device(), &t.shape(), &t.strides(), t.is_contiguous()}
                      : ember::Operand{});
    }
  }
  const ember::KernelCall call{kind, attrs, std::span(operands.data(), inputs.size()),
                               std::span(operands.data() + inputs.size(), outputs.size())};
  return ember::op_cost(call);
}

// A fresh folder per test, removed afterwards (with its permissions restored first, so a test that
// made it read-only still cleans up).
class TempFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("ember_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, error);
    std::filesystem::remove_all(dir_, error);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Names in the folder other than `keep` (a failed save must leave no temporary file behind).
  std::vector<std::string> other_files(const std::string& keep) const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (entry.path().filename() != keep) names.push_back(entry.path().filename().string());
    }
    return names;
  }
  std::filesystem::path dir_;
};

}  // namespace test_util
