// Small helpers shared by test files.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/info.h"

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

}  // namespace test_util
