// Next-token sampling: repetition penalty, temperature, top-k, top-p and min-p
// (include/ember/models/language_model.h).
#include "ember/models/language_model.h"

#include <algorithm>
#include <cmath>

#include "ember/error.h"
#include "ember/ops.h"

namespace ember::models {

int64_t LanguageModel::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void check_generation(const std::vector<int64_t>& prompt, int64_t tokens, int64_t vocab_size) {
  EMBER_CHECK(!prompt.empty(), "[generate] the prompt must hold at least one token");
  EMBER_CHECK(tokens >= 0, "[generate] the number of tokens must be >= 0, got ", tokens);
  for (const int64_t id : prompt) {
    EMBER_CHECK(id >= 0 && id < vocab_size, "[generate] token id ", id, " is outside the vocabulary of ", vocab_size);
  }
}

Sampler::Sampler(const SamplingOptions& options) : options_(options), state_(options.seed ^ 0x9E3779B97F4A7C15ULL) {
  EMBER_CHECK(options.temperature >= 0.0 && std::isfinite(options.temperature),
              "[generate] temperature must be a finite number >= 0, got ", options.temperature);
  EMBER_CHECK(options.top_k >= 0, "[generate] top_k must be >= 0, got ", options.top_k);
  EMBER_CHECK(options.top_p > 0.0 && options.top_p <= 1.0, "[generate] top_p must be in (0, 1], got ", options.top_p);
  EMBER_CHECK(options.min_p >= 0.0 && options.min_p <= 1.0, "[generate] min_p must be in [0, 1], got ", options.min_p);
  EMBER_CHECK(options.repetition_penalty > 0.0 && std::isfinite(options.repetition_penalty),
              "[generate] repetition_penalty must be a finite number > 0, got ", options.repetition_penalty);
  EMBER_CHECK(std::isfinite(options.frequency_penalty) && std::isfinite(options.presence_penalty),
              "[generate] frequency_penalty and presence_penalty must be finite, got ", options.frequency_penalty,
              " and ", options.presence_penalty);
  EMBER_CHECK(options.penalty_last_n >= 0, "[generate] penalty_last_n must be >= 0, got ", options.penalty_last_n);
}

double next_uniform(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

int64_t Sampler::sample(const Tensor& logits, const std::vector<int64_t>& history) {
  // Sampling reads and edits the row on the host: a device row is copied over first.
  Tensor row = logits.to(kCPU).to(kFloat32).contiguous();
  const int64_t n = row.numel();
  EMBER_CHECK(n > 0, "[generate] no logits to sample from");
  const bool penalized =
      options_.repetition_penalty != 1.0 || options_.frequency_penalty != 0.0 || options_.presence_penalty != 0.0;
  if (penalized && !history.empty() && options_.penalty_last_n > 0) {
    row = row.is_same(logits) ? row.clone() : row;  // never the caller's logits
    float* values = row.data_ptr<float>();
    const size_t first = history.size() - std::min(history.size(), static_cast<size_t>(options_.penalty_last_n));
    std::vector<int64_t> seen(history.begin() + static_cast<std::ptrdiff_t>(first), history.end());
    std::sort(seen.begin(), seen.end());
    const auto penalty = static_cast<float>(options_.repetition_penalty);
    for (auto it = seen.begin(); it != seen.end();) {
      const int64_t id = *it;
      const auto times = std::upper_bound(it, seen.end(), id) - it;
      it += times;
      if (id < 0 || id >= n) continue;
      float& v = values[id];
      v = v > 0 ? v / penalty : v * penalty;
      v -= static_cast<float>(static_cast<double>(times) * options_.frequency_penalty + options_.presence_penalty);
    }
  }
  const float* x = row.data_ptr<float>();
  if (options_.temperature == 0.0) return static_cast<int64_t>(std::max_element(x, x + n) - x);
  // Softmax at the temperature: each token's weight relative to the most likely, exp((x - top) / T),
  // in float32 by ember's vectorized exp (a 49,152-token vocabulary's in microseconds).
  const float top = *std::max_element(x, x + n);
  const Tensor weights = exp(div(sub(row, Scalar(top)), Scalar(options_.temperature)));
  const float* w = weights.data_ptr<float>();
  // The candidates: all of them, or the top_k (in any order).
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, n) : n;
  auto better = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  double total = 0;
  if (k < n) {
    candidates_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) candidates_[static_cast<size_t>(i)] = {x[i], i};
    std::nth_element(candidates_.begin(), candidates_.begin() + k - 1, candidates_.end(), better);
    candidates_.resize(static_cast<size_t>(k));
    for (const auto& c : candidates_) total += w[c.second];
  } else {
    for (int64_t i = 0; i < n; ++i) total += w[i];
  }
  // Note [sampling without sorting the vocabulary]: the draw is defined on the candidates sorted
  // most likely first (the nucleus is the fewest of them reaching top_p, min-p keeps those at least
  // min_p of the best, the uniform draw walks them in that order), but only a few of a 49,152-token
  // vocabulary ever matter. A token whose weight is below (1 - top_p) / k of the total can never be
  // in the nucleus (the tokens from it on would weigh less than 1 - top_p together), nor one below
  // min_p of the best: those are dropped before sorting. What is left is sorted a piece at a time
  // (the top 64, then 8 times more) and only as far as the walk goes: to the nucleus's end, or when
  // nothing is cut, to the drawn token.
  double floor = 0;
  if (options_.top_p < 1.0) floor = 0.5 * (1.0 - options_.top_p) * total / static_cast<double>(k);
  floor = std::max(floor, options_.min_p);  // the best weighs exp(0) = 1
  if (k < n) {
    std::erase_if(candidates_, [&](const auto& c) { return w[c.second] < floor; });
  } else {
    candidates_.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (w[i] >= floor) candidates_.emplace_back(x[i], i);
    }
  }
  const auto m = static_cast<int64_t>(candidates_.size());
  const auto begin = candidates_.begin(), end = candidates_.end();
  int64_t sorted = 0;  // candidates_[0, sorted) are in order, and better than the rest
  const auto sort_to = [&](int64_t at_least) {
    const int64_t next = std::min(m, std::max<int64_t>({64, 8 * sorted, at_least}));
    if (next < m) std::nth_element(begin + sorted, begin + next - 1, end, better);
    std::sort(begin + sorted, begin + next, better);
    sorted = next;
  };
  const auto weight = [&](int64_t i) { return static_cast<double>(w[candidates_[static_cast<size_t>(i)].second]); };
  int64_t kept = m;
  double kept_total = total;
  if (options_.top_p < 1.0 || options_.min_p > 0.0) {
    double mass = 0;  // of the sorted candidates, as a share of the total
    kept_total = 0;
    for (int64_t i = 0; i < m; ++i) {
      if (i == sorted) sort_to(i + 1);
      const double wi = weight(i);
      if (wi < options_.min_p) {  // min-p: the rest are less likely still
        kept = i;
        break;
      }
      kept_total += wi;
      mass += wi / total;
      if (options_.top_p < 1.0 && mass >= options_.top_p) {
        kept = i + 1;
        break;
      }
    }
  }
  const double u = next_uniform(state_) * kept_total;
  double cumulative = 0;
  for (int64_t i = 0; i < kept; ++i) {
    if (i == sorted) sort_to(i + 1);
    cumulative += weight(i);
    if (u < cumulative) return candidates_[static_cast<size_t>(i)].second;
  }
  return candidates_[static_cast<size_t>(kept - 1)].second;
}

}  // namespace ember::models
