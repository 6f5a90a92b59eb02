// An evolutionary architecture search over small CNNs and MLPs for MNIST (`ember nas mnist`),
// with two objectives: validation accuracy and parameter count.
//
// A genome is a small CNN (1-3 convolutions, each with its channels, kernel, padding and an optional
// 2x2 max-pool, then 0-2 hidden Linear layers) or an MLP (1-3 hidden Linear layers), with one
// activation throughout. Candidates are scored by a short training on the training images less a
// held-out validation set (never the test images). Each generation keeps its Pareto front (at most
// half the population) and fills the rest with children: parents drawn by tournament, crossed over
// with some probability, then mutated once. Everything random comes from the seed, so a search with
// a generation cap is the same run twice; the time budget only stops it earlier. The winner (the
// most accurate candidate with at most the limit's parameters) and the default CNN are then trained
// alike on all training images and measured on the test images.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember/data.h"

namespace ember::train {

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
  std::string data_dir = "data/mnist";
};

struct NasCandidate {
  int64_t id = 0;
  int generation = 0;
  std::string genome{};  // "cnn conv16k5/pool conv32k5s/pool fc64 relu" (s: same padding)
  int64_t parameters = 0;
  double val_accuracy = 0;
  double seconds = 0;
  int rank = 0;  // Pareto rank in its generation's population (0: not dominated)
};

struct NasGeneration {
  int generation = 0;
  double seconds = 0;                      // since the search started
  std::vector<NasCandidate> population{};  // best first
  int64_t front = 0;                       // candidates of rank 0
  size_t trained = 0;                      // candidates trained so far
};

struct NasResult {
  int generations_run = 0;
  size_t candidates_trained = 0;
  double search_seconds = 0;
  NasCandidate best{};
  double best_test_accuracy = 0;
  int64_t default_parameters = 0;
  double default_test_accuracy = 0;
  bool beats_default = false;  // more accurate on the test images at no more parameters
  std::vector<NasGeneration> generations{};
};

class NasSearch {
 public:
  /// Loads MNIST and holds out the validation images; bad options are ember::Errors starting [nas].
  explicit NasSearch(NasOptions options);
  /// Searches, calling on_generation after each generation is scored; then trains the winner and
  /// the default CNN on all training images and measures both on the test images.
  NasResult run(const std::function<void(const NasGeneration&)>& on_generation = nullptr);

  int64_t train_size() const { return train_set_.size(); }
  int64_t parameter_limit() const { return limit_; }
  int64_t default_parameters() const { return default_parameters_; }
  const NasOptions& options() const { return options_; }

 private:
  NasOptions options_;
  data::MNIST train_set_;
  data::MNIST test_set_;
  int64_t default_parameters_ = 0;
  int64_t limit_ = 0;
};

}  // namespace ember::train
