// `ember nas mnist`: the evolutionary architecture search of train::NasSearch, a line per
// generation, the whole search as JSON with --save-search.
#include "ember/train/nas.h"

#include <cstdio>
#include <iostream>
#include <limits>

#include "cli_util.h"
#include "ember/io.h"
#include "ember/threads.h"

namespace ember::cli {
namespace {

struct NasCommandOptions {
  train::NasOptions search;
  int threads = 0;
  std::string json_path;  // the whole search as JSON
  bool json = false;      // end with one JSON line of the result
};

nlohmann::json to_json(const train::NasCandidate& c) {
  return {{"id", c.id},
          {"generation", c.generation},
          {"genome", c.genome},
          {"parameters", c.parameters},
          {"val_accuracy", c.val_accuracy},
          {"rank", c.rank},
          {"seconds", c.seconds}};
}

int run_nas_mnist(const NasCommandOptions& o) {
  use_threads(o.threads);
  train::NasSearch search(o.search);
  const train::NasOptions& s = search.options();
  if (!o.json) {
    std::printf(
        "ember nas mnist: population %d, up to %d generations or %g minutes, %d epochs per candidate on %lld "
        "images scored on %lld held-out ones, winner at most %lld parameters (the default CNN has %lld), %d "
        "threads\n",
        s.population, s.generations, s.budget_minutes, s.candidate_epochs,
        static_cast<long long>(search.train_size() - s.validation), static_cast<long long>(s.validation),
        static_cast<long long>(search.parameter_limit()), static_cast<long long>(search.default_parameters()),
        get_num_threads());
  }
  const train::NasResult r = search.run([&](const train::NasGeneration& g) {
    if (o.json) return;
    const train::NasCandidate& best = g.population.front();
    std::printf("generation %2d  best val %.1f%% (%s, %lld parameters)  front %lld  trained %zu  %.0fs\n", g.generation,
                100 * best.val_accuracy, best.genome.c_str(), static_cast<long long>(best.parameters),
                static_cast<long long>(g.front), g.trained, g.seconds);
    std::fflush(stdout);
  });
  nlohmann::json result = {
      {"task", "nas"},
      {"seed", s.seed},
      {"population", s.population},
      {"generations_run", r.generations_run},
      {"candidates_trained", r.candidates_trained},
      {"search_seconds", r.search_seconds},
      {"parameter_limit", search.parameter_limit()},
      {"best",
       {{"genome", r.best.genome},
        {"parameters", r.best.parameters},
        {"val_accuracy", r.best.val_accuracy},
        {"test_accuracy", r.best_test_accuracy}}},
      {"default_cnn", {{"parameters", r.default_parameters}, {"test_accuracy", r.default_test_accuracy}}},
      {"beats_default_cnn", r.beats_default}};
  if (!o.json_path.empty()) {
    nlohmann::json whole = result;
    whole["generations"] = nlohmann::json::array();
    for (const train::NasGeneration& g : r.generations) {
      nlohmann::json members = nlohmann::json::array();
      for (const train::NasCandidate& c : g.population) members.push_back(to_json(c));
      whole["generations"].push_back({{"generation", g.generation}, {"seconds", g.seconds}, {"population", members}});
    }
    save_bytes(o.json_path, whole.dump(1), "nas");
  }
  if (o.json) {
    std::cout << result.dump() << std::endl;
    return 0;
  }
  std::printf(
      "searched %d generations, %zu candidates in %.0fs\nbest: %s, %lld parameters, val %.1f%%, test %.2f%% after %d "
      "epochs on all %lld training images\ndefault CNN: %lld parameters, test %.2f%% trained alike\n%s\n",
      r.generations_run, r.candidates_trained, r.search_seconds, r.best.genome.c_str(),
      static_cast<long long>(r.best.parameters), 100 * r.best.val_accuracy, 100 * r.best_test_accuracy, s.final_epochs,
      static_cast<long long>(search.train_size()), static_cast<long long>(r.default_parameters),
      100 * r.default_test_accuracy,
      r.beats_default ? "the search found an architecture that beats the default CNN at no more parameters"
                      : "the search did not beat the default CNN at no more parameters");
  return 0;
}

}  // namespace

void add_nas_command(CLI::App& app, Commands& commands) {
  CLI::App* nas = app.add_subcommand("nas", "Search for an architecture (evolutionary, two objectives)");
  nas->require_subcommand(1);
  auto o = std::make_shared<NasCommandOptions>();
  train::NasOptions& s = o->search;
  CLI::App* cmd =
      nas->add_subcommand("mnist", "Evolve small CNNs and MLPs for MNIST: validation accuracy against parameter count");
  cmd->add_option("--population", s.population, "Candidates per generation")
      ->check(count_in(2, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--generations", s.generations, "Generations at most")->check(kPositiveInt)->capture_default_str();
  cmd->add_option("--budget-minutes", s.budget_minutes, "No generation starts after this")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--candidate-epochs", s.candidate_epochs, "Epochs of the training that scores a candidate")
      ->check(kPositiveInt)
      ->capture_default_str();
  cmd->add_option("--final-epochs", s.final_epochs, "Epochs of the winner's and the default CNN's training")
      ->check(kPositiveInt)
      ->capture_default_str();
  cmd->add_option("--validation", s.validation, "Training images held out to score candidates")
      ->check(kPositiveCount)
      ->capture_default_str();
  cmd->add_option("--tournament", s.tournament, "Candidates drawn per parent selection")
      ->check(kPositiveInt)
      ->capture_default_str();
  cmd->add_option("--crossover", s.crossover, "Probability that a child mixes two parents")
      ->check(kFraction)
      ->capture_default_str();
  cmd->add_option("--max-parameters", s.max_parameters, "The winner's limit (default: the default CNN's)")
      ->check(kNonNegativeCount);
  cmd->add_option("--seed", s.seed, "Seed of the whole search")->capture_default_str();
  add_threads(cmd, o->threads);
  cmd->add_option("--data", s.data_dir, "MNIST IDX files, else the offline subset")->capture_default_str();
  cmd->add_option("--save-search", o->json_path, "Write the whole search (every generation) as JSON");
  cmd->add_flag("--json", o->json, "End with one JSON line of the result");
  commands.add(cmd, [o] { return run_nas_mnist(*o); });
}

}  // namespace ember::cli
