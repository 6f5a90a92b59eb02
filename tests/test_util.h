// Small helpers shared by test files.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/error.h"

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

}  // namespace test_util
