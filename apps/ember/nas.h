// `ember nas mnist`: an evolutionary search over small CNN and MLP architectures for MNIST (nas.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace ember::cli {

struct NasOptions {
  int population = 12;
  int generations = 30;        // at most; the time budget usually ends the search first
  double budget_minutes = 10;  // no generation starts after this (the final training comes after)
  int candidate_epochs = 2;    // the short training that scores a candidate on the validation images
  int final_epochs = 10;       // the full training of the best architecture (and of the default CNN)
  int64_t validation = 500;    // training images held out to score candidates (never the test set)
  int tournament = 3;          // candidates drawn per parent selection
  double crossover = 0.3;      // probability that a child mixes two parents before its mutation
  int64_t max_parameters = 0;  // 0: the default CNN's count; the winner must have at most this many
  uint64_t seed = 0;
  int threads = 0;
  std::string data_dir = "data/mnist";
  std::string json_path;  // the whole search as JSON
  bool json = false;      // end with one JSON line of the result
};

int run_nas_mnist(const NasOptions& options);

}  // namespace ember::cli
