// The architecture search of ember/train/nas.h: genomes, their mutation and crossover, scoring by
// a short training, Pareto ranks, and the final comparison with the default CNN.
#include "ember/train/nas.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ember/models/mnist.h"
#include "ember/nn.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "ember/train/tasks.h"
#include "train/clock.h"

namespace ember::train {
namespace {

// --- genomes -------------------------------------------------------------------------------------

struct ConvGene {
  int64_t channels = 16;
  int64_t kernel = 5;
  bool same = false;  // padding kernel / 2 (the size kept) or none
  bool pool = true;   // a 2x2 max-pool after the activation
  bool operator==(const ConvGene&) const = default;
};

struct Genome {
  bool cnn = true;
  std::vector<ConvGene> convs;  // cnn: 1..3
  std::vector<int64_t> dense;   // hidden widths: cnn 0..2, mlp 1..3
  std::string activation = "relu";
  bool operator==(const Genome&) const = default;
};

constexpr int64_t kChannels[] = {4, 8, 12, 16, 24, 32, 48};
constexpr int64_t kKernels[] = {3, 5, 7};
constexpr int64_t kCnnWidths[] = {16, 32, 64, 128};
constexpr int64_t kMlpWidths[] = {32, 64, 128, 256, 512};
constexpr const char* kActivations[] = {"relu", "gelu", "silu", "tanh"};

// "cnn conv16k5/pool conv32k5s/pool fc64 relu": s for same padding.
std::string describe(const Genome& g) {
  std::string text = g.cnn ? "cnn" : "mlp";
  for (const ConvGene& c : g.convs) {
    text += " conv" + std::to_string(c.channels) + "k" + std::to_string(c.kernel) + (c.same ? "s" : "");
    if (c.pool) text += "/pool";
  }
  for (const int64_t w : g.dense) text += " fc" + std::to_string(w);
  return text + " " + g.activation;
}

// The feature count after the convolutions, or 0 when an image shrinks away.
int64_t flat_features(const Genome& g) {
  if (!g.cnn) return 28 * 28;
  int64_t size = 28, channels = 1;
  for (const ConvGene& c : g.convs) {
    if (!c.same) size -= c.kernel - 1;
    if (size < 1) return 0;
    if (c.pool) size /= 2;
    if (size < 1) return 0;
    channels = c.channels;
  }
  return channels * size * size;
}

bool valid(const Genome& g) {
  if (g.cnn && (g.convs.empty() || g.convs.size() > 3 || g.dense.size() > 2)) return false;
  if (!g.cnn && (g.dense.empty() || g.dense.size() > 3 || !g.convs.empty())) return false;
  return flat_features(g) > 0;
}

std::shared_ptr<nn::Module> activation(const std::string& name) {
  if (name == "gelu") return std::make_shared<nn::GELU>();
  if (name == "silu") return std::make_shared<nn::SiLU>();
  if (name == "tanh") return std::make_shared<nn::Tanh>();
  return std::make_shared<nn::ReLU>();
}

std::shared_ptr<nn::Sequential> build(const Genome& g) {
  auto model = std::make_shared<nn::Sequential>();
  int64_t channels = 1;
  for (const ConvGene& c : g.convs) {
    model->push_back(std::make_shared<nn::Conv2d>(channels, c.channels, c.kernel, 1, c.same ? c.kernel / 2 : 0));
    model->push_back(activation(g.activation));
    if (c.pool) model->push_back(std::make_shared<nn::MaxPool2d>(2));
    channels = c.channels;
  }
  model->push_back(std::make_shared<nn::Flatten>());
  int64_t features = flat_features(g);
  for (const int64_t width : g.dense) {
    model->push_back(std::make_shared<nn::Linear>(features, width));
    model->push_back(activation(g.activation));
    features = width;
  }
  model->push_back(std::make_shared<nn::Linear>(features, 10));
  return model;
}

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

// --- the search's random stream (splitmix64: the same numbers on every platform) ---------------------

class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed ^ 0x6A09E667F3BCC909ULL) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  bool coin() { return (next() & 1) != 0; }
  template <class T, size_t N>
  T pick(const T (&values)[N]) {
    return values[below(static_cast<int64_t>(N))];
  }

 private:
  uint64_t state_;
};

ConvGene random_conv(Random& r) { return {r.pick(kChannels), r.pick(kKernels), r.coin(), r.coin()}; }

Genome random_genome(Random& r) {
  for (;;) {
    Genome g;
    g.cnn = r.uniform() < 0.75;
    g.activation = r.pick(kActivations);
    if (g.cnn) {
      for (int64_t i = 0, n = 1 + r.below(3); i < n; ++i) g.convs.push_back(random_conv(r));
      for (int64_t i = 0, n = r.below(3); i < n; ++i) g.dense.push_back(r.pick(kCnnWidths));
    } else {
      for (int64_t i = 0, n = 1 + r.below(3); i < n; ++i) g.dense.push_back(r.pick(kMlpWidths));
    }
    if (valid(g)) return g;
  }
}

// One change: a layer added, removed or resized, a kernel, padding or pool changed, the activation
// swapped, or (rarely) a fresh genome of the other kind.
Genome mutate(const Genome& parent, Random& r) {
  for (;;) {
    Genome g = parent;
    const int64_t choice = r.below(g.cnn ? 10 : 5);
    const auto index = [&](size_t n) { return static_cast<size_t>(r.below(static_cast<int64_t>(n))); };
    if (choice == 0) {
      g.activation = r.pick(kActivations);
    } else if (choice == 1) {
      Genome other = random_genome(r);
      if (other.cnn != g.cnn) g = other;
    } else if (choice == 2) {  // add a hidden layer
      const auto& widths = g.cnn ? std::vector<int64_t>(std::begin(kCnnWidths), std::end(kCnnWidths))
                                 : std::vector<int64_t>(std::begin(kMlpWidths), std::end(kMlpWidths));
      g.dense.insert(g.dense.begin() + static_cast<int64_t>(index(g.dense.size() + 1)), widths[index(widths.size())]);
    } else if (choice == 3) {  // remove one
      if (!g.dense.empty()) g.dense.erase(g.dense.begin() + static_cast<int64_t>(index(g.dense.size())));
    } else if (choice == 4) {  // resize one
      if (!g.dense.empty()) g.dense[index(g.dense.size())] = g.cnn ? r.pick(kCnnWidths) : r.pick(kMlpWidths);
    } else if (choice == 5) {
      g.convs.insert(g.convs.begin() + static_cast<int64_t>(index(g.convs.size() + 1)), random_conv(r));
    } else if (choice == 6) {
      if (!g.convs.empty()) g.convs.erase(g.convs.begin() + static_cast<int64_t>(index(g.convs.size())));
    } else {
      ConvGene& c = g.convs[index(g.convs.size())];
      if (choice == 7) c.channels = r.pick(kChannels);
      if (choice == 8) c.kernel = r.pick(kKernels);
      if (choice == 9) (r.coin() ? c.pool : c.same) ^= true;
    }
    if (valid(g) && !(g == parent)) return g;
  }
}

// Each layer position from either parent (the length from one of them); the activation from one.
Genome cross(const Genome& a, const Genome& b, Random& r) {
  if (a.cnn != b.cnn) return a;
  for (int attempt = 0; attempt < 8; ++attempt) {
    Genome g = a;
    const auto mix = [&](auto& out, const auto& x, const auto& y) {
      out = r.coin() ? x : y;
      for (size_t i = 0; i < out.size(); ++i) {
        if (i < x.size() && i < y.size()) out[i] = r.coin() ? x[i] : y[i];
      }
    };
    mix(g.convs, a.convs, b.convs);
    mix(g.dense, a.dense, b.dense);
    g.activation = r.coin() ? a.activation : b.activation;
    if (valid(g)) return g;
  }
  return a;
}

// --- scoring -------------------------------------------------------------------------------------------

struct Candidate {
  int64_t id = 0;
  int generation = 0;
  Genome genome;
  int64_t parameters = 0;
  double val_accuracy = 0;
  double seconds = 0;
  int rank = 0;  // Pareto rank in its generation's population (0: not dominated)
};

// Trains `model` as `ember train mnist` does (Adam 3e-3 with a cosine decay to 0 over the run, batch
// 64, random shifts of up to 2 pixels), from batches and shifts drawn from `seed`.
void train_model(nn::Module& model, const Tensor& images, const Tensor& labels, int epochs, uint64_t seed) {
  constexpr int64_t kBatch = 64;
  optim::Adam optimizer(model.parameters(), {.lr = 3e-3});
  data::DataLoader loader(data::TensorDataset(images, labels), kBatch, /*shuffle=*/true, seed);
  const int64_t batches = (images.size(0) + kBatch - 1) / kBatch;
  optim::CosineAnnealingLR schedule(optimizer, batches * epochs);
  const double background = (0.0 - data::MNIST::kMean) / data::MNIST::kStd;
  model.train();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader.set_epoch(static_cast<uint64_t>(epoch));
    int64_t index = 0;
    for (const data::Batch& batch : loader) {
      const Tensor inputs =
          data::random_shift(batch.inputs, 2, background, seed + 1, (static_cast<uint64_t>(epoch) << 32) + index++);
      optimizer.zero_grad();
      nn::functional::cross_entropy(model(inputs), batch.targets).backward();
      optimizer.step();
      schedule.step();
    }
  }
}

// A seed per genome and search: the same candidate scores the same whenever it is drawn.
uint64_t genome_seed(const Genome& g, uint64_t search_seed) {
  uint64_t h = 1469598103934665603ULL ^ search_seed;
  for (const char c : describe(g)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

bool dominates(const Candidate& a, const Candidate& b) {
  return a.val_accuracy >= b.val_accuracy && a.parameters <= b.parameters &&
         (a.val_accuracy > b.val_accuracy || a.parameters < b.parameters);
}

// Lower rank, then higher accuracy, then fewer parameters, then the earlier candidate.
bool better(const Candidate& a, const Candidate& b) {
  if (a.rank != b.rank) return a.rank < b.rank;
  if (a.val_accuracy != b.val_accuracy) return a.val_accuracy > b.val_accuracy;
  if (a.parameters != b.parameters) return a.parameters < b.parameters;
  return a.id < b.id;
}

// Non-dominated sorting: rank 0 for the front, rank 1 for the front of the rest, ...
void assign_ranks(std::vector<Candidate>& population) {
  std::vector<bool> placed(population.size(), false);
  size_t left = population.size();
  for (int rank = 0; left > 0; ++rank) {
    std::vector<size_t> front;
    for (size_t i = 0; i < population.size(); ++i) {
      if (placed[i]) continue;
      bool dominated = false;
      for (size_t j = 0; j < population.size() && !dominated; ++j) {
        dominated = !placed[j] && j != i && dominates(population[j], population[i]);
      }
      if (!dominated) front.push_back(i);
    }
    for (const size_t i : front) {
      population[i].rank = rank;
      placed[i] = true;
    }
    left -= front.size();
  }
}

NasCandidate to_result(const Candidate& c) {
  return {.id = c.id,
          .generation = c.generation,
          .genome = describe(c.genome),
          .parameters = c.parameters,
          .val_accuracy = c.val_accuracy,
          .seconds = c.seconds,
          .rank = c.rank};
}

// The next generation: the front survives (at most half the population); children fill the rest,
// each a tournament winner, crossed with another with some probability, then mutated, and drawn
// again (a few tries) when it is already in the generation.
template <class Score>
std::vector<Candidate> next_generation(const std::vector<Candidate>& population, size_t front, int generation,
                                       const NasOptions& o, Random& random, Score& score) {
  const size_t keep = std::min<size_t>(front, static_cast<size_t>(o.population) / 2);
  std::vector<Candidate> next(population.begin(), population.begin() + static_cast<int64_t>(keep));
  auto tournament = [&]() -> const Candidate& {
    const Candidate* pick = &population[static_cast<size_t>(random.below(o.population))];
    for (int i = 1; i < o.tournament; ++i) {
      const Candidate& other = population[static_cast<size_t>(random.below(o.population))];
      if (better(other, *pick)) pick = &other;
    }
    return *pick;
  };
  auto seen = [&](const std::vector<Genome>& children, const Genome& child) {
    bool found = std::find(children.begin(), children.end(), child) != children.end();
    for (const Candidate& c : next) found = found || c.genome == child;
    return found;
  };
  std::vector<Genome> children;
  while (next.size() + children.size() < static_cast<size_t>(o.population)) {
    Genome child = tournament().genome;
    if (random.uniform() < o.crossover) child = cross(child, tournament().genome, random);
    child = mutate(child, random);
    for (int attempt = 0; seen(children, child) && attempt < 8; ++attempt) child = mutate(child, random);
    children.push_back(child);
  }
  for (const Genome& g : children) next.push_back(score(g, generation));
  return next;
}

}  // namespace

NasSearch::NasSearch(NasOptions options)
    : options_(std::move(options)),
      train_set_(options_.data_dir, data::Split::kTrain),
      test_set_(options_.data_dir, data::Split::kTest) {
  const NasOptions& o = options_;
  EMBER_CHECK(o.population >= 2, "[nas] --population must be at least 2, got ", o.population);
  EMBER_CHECK(o.generations >= 1 && o.candidate_epochs >= 1 && o.final_epochs >= 1 && o.tournament >= 1,
              "[nas] --generations, --candidate-epochs, --final-epochs and --tournament must be at least 1");
  EMBER_CHECK(o.budget_minutes > 0 && std::isfinite(o.budget_minutes), "[nas] --budget-minutes must be positive, got ",
              o.budget_minutes);
  EMBER_CHECK(o.crossover >= 0 && o.crossover <= 1, "[nas] --crossover must be in [0, 1], got ", o.crossover);
  const int64_t n = train_set_.size();
  EMBER_CHECK(o.validation >= 10 && o.validation <= n / 2, "[nas] --validation must be in [10, ", n / 2, "] of the ", n,
              " training images, got ", o.validation);
  default_parameters_ = parameter_count(*models::mnist_cnn());
  limit_ = o.max_parameters > 0 ? o.max_parameters : default_parameters_;
}

NasResult NasSearch::run(const std::function<void(const NasGeneration&)>& on_generation) {
  const NasOptions& o = options_;
  const int64_t n = train_set_.size();
  // The validation images: a seeded draw from the training images.
  const std::vector<int64_t> order = data::random_permutation(n, o.seed ^ 0xC0FFEEULL, 0);
  const Tensor val_index = from_vector(std::vector<int64_t>(order.begin(), order.begin() + o.validation));
  const Tensor fit_index = from_vector(std::vector<int64_t>(order.begin() + o.validation, order.end()));
  const Tensor fit_images = train_set_.images().index_select(0, fit_index);
  const Tensor fit_labels = train_set_.labels().index_select(0, fit_index);
  const Tensor val_images = train_set_.images().index_select(0, val_index);
  const Tensor val_labels = train_set_.labels().index_select(0, val_index);

  Random random(o.seed);
  std::map<std::string, Candidate> scored;  // by genome: a candidate drawn again is not trained again
  int64_t next_id = 0;
  auto score = [&](const Genome& g, int generation) {
    const std::string key = describe(g);
    if (const auto it = scored.find(key); it != scored.end()) return it->second;
    const auto start = Clock::now();
    const uint64_t seed = genome_seed(g, o.seed);
    manual_seed(seed);
    const std::shared_ptr<nn::Sequential> model = build(g);
    train_model(*model, fit_images, fit_labels, o.candidate_epochs, seed);
    Candidate c{.id = next_id++,
                .generation = generation,
                .genome = g,
                .parameters = parameter_count(*model),
                .val_accuracy = classification_accuracy(*model, val_images, val_labels),
                .seconds = seconds_since(start)};
    scored.emplace(key, c);
    return c;
  };

  // The first population: the default CNN's architecture and random genomes.
  const Genome default_genome{.cnn = true, .convs = {{16, 5, false, true}, {32, 5, false, true}}, .dense = {}};
  std::vector<Candidate> population;
  std::vector<Genome> first{default_genome};
  while (static_cast<int>(first.size()) < o.population) {
    Genome g = random_genome(random);
    if (std::find(first.begin(), first.end(), g) == first.end()) first.push_back(g);
  }
  NasResult result;
  const auto search_start = Clock::now();
  for (const Genome& g : first) population.push_back(score(g, 0));
  int generation = 0;
  for (;;) {
    assign_ranks(population);
    std::sort(population.begin(), population.end(), better);
    NasGeneration record{.generation = generation, .seconds = seconds_since(search_start)};
    for (const Candidate& c : population) record.population.push_back(to_result(c));
    record.front = std::count_if(population.begin(), population.end(), [](const Candidate& c) { return c.rank == 0; });
    record.trained = scored.size();
    result.generations.push_back(record);
    if (on_generation) on_generation(record);
    if (generation + 1 >= o.generations || seconds_since(search_start) >= 60 * o.budget_minutes) break;
    ++generation;
    population = next_generation(population, static_cast<size_t>(record.front), generation, o, random, score);
  }
  result.generations_run = generation + 1;
  result.candidates_trained = scored.size();
  result.search_seconds = seconds_since(search_start);

  // The winner: the most accurate candidate of the whole search within the parameter limit.
  const Candidate* winner = nullptr;
  for (const auto& [key, c] : scored) {
    if (c.parameters > limit_) continue;
    if (winner == nullptr || c.val_accuracy > winner->val_accuracy ||
        (c.val_accuracy == winner->val_accuracy &&
         (c.parameters < winner->parameters || (c.parameters == winner->parameters && c.id < winner->id)))) {
      winner = &c;
    }
  }
  EMBER_CHECK(winner != nullptr, "[nas] no candidate has at most ", limit_, " parameters");
  result.best = to_result(*winner);
  // Both trained alike on all the training images, then measured on the test images.
  const uint64_t final_seed = o.seed + 17;
  manual_seed(final_seed);
  const std::shared_ptr<nn::Sequential> found = build(winner->genome);
  train_model(*found, train_set_.images(), train_set_.labels(), o.final_epochs, final_seed);
  result.best_test_accuracy = classification_accuracy(*found, test_set_.images(), test_set_.labels());
  manual_seed(final_seed);
  const std::shared_ptr<nn::Sequential> baseline = models::mnist_cnn();
  train_model(*baseline, train_set_.images(), train_set_.labels(), o.final_epochs, final_seed);
  result.default_parameters = parameter_count(*baseline);
  result.default_test_accuracy = classification_accuracy(*baseline, test_set_.images(), test_set_.labels());
  result.beats_default =
      result.best_test_accuracy > result.default_test_accuracy && winner->parameters <= result.default_parameters;
  return result;
}

}  // namespace ember::train
