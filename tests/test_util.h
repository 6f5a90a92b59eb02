// Small helpers shared by test files.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "base/kernel.h"
#include "ember/error.h"
#include "ember/info.h"
#include "ember/tensor.h"
#include "ops/cost.h"

namespace test_util {

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

}  // namespace test_util
