// What the MiniLM tests share (test_tokenizer.cpp, test_bert.cpp): the model folder scripts/setup
// fills, tests/golden/minilm.json (made by tests/golden/make_minilm.py), and the message of an
// expected ember::Error.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "ember/error.h"

namespace minilm_golden {

inline const std::string kMiniLM = std::string(EMBER_DATA_DIR) + "/minilm";

inline const nlohmann::json& golden() {
  static const nlohmann::json data = [] {
    std::ifstream in(std::string(EMBER_GOLDEN_DIR) + "/minilm.json");
    EXPECT_TRUE(in.good()) << "tests/golden/minilm.json is missing (tests/golden/make_minilm.py writes it)";
    return nlohmann::json::parse(in);
  }();
  return data;
}

// The message of the ember::Error fn throws (a failure, and "", when it throws none).
inline std::string expect_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ember::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an ember::Error";
  return "";
}

}  // namespace minilm_golden
