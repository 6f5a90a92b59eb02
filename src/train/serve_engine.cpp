// The batched decoding engine of ember/train/serve.h (Note [batched serving]): slots, the queue and
// the loop on the engine's thread.
#include <algorithm>
#include <cmath>
#include <exception>

#include "clock.h"
#include "ember/autograd.h"
#include "ember/error.h"
#include "ember/ops.h"
#include "ember/train/serve.h"

namespace ember::serve {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size() + 1) {}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  ++counts[static_cast<size_t>(bucket)];
  sum += value;
  ++count;
}

double Histogram::quantile(double q) const {
  if (count == 0 || bounds.empty()) return 0;
  const auto wanted = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count)));
  uint64_t seen = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    seen += counts[i];
    if (seen >= wanted) return bounds[i];
  }
  return bounds.back();
}

namespace {

// Latency buckets, in seconds: from a fast decode step to a long queue wait.
std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
          0.15,  0.25,   0.5,   1,      2.5,  5,     10,   30,   60,   120};
}

}  // namespace

struct Engine::Waiting {
  std::shared_ptr<Generation> generation;
  train::Clock::time_point submitted;
};

struct Engine::Job {
  std::function<void()> fn;
  std::exception_ptr error;
  bool done = false;
};

// A sequence's place in the batch: its KV cache, kept between generations so that the next prompt
// sharing a prefix with the cached ids (a conversation's next turn) skips it.
struct Engine::Slot {
  models::LlamaCache cache;
  std::shared_ptr<Generation> generation;  // null: free
  std::optional<models::Sampler> sampler;
  std::vector<int64_t> history;  // the prompt and the drawn ids (the sampler's penalties)
  int64_t next = -1;             // the drawn id to decode next; -1 while the prompt is processed
  uint64_t order = 0;            // admission order
  train::Clock::time_point submitted, last_token;
  Outcome outcome;
};

Engine::Engine(std::shared_ptr<models::Llama> model, EngineOptions options)
    : model_(std::move(model)), options_(options) {
  EMBER_CHECK(model_ != nullptr, "[serve] the engine needs a model");
  EMBER_CHECK(options_.parallel >= 1 && options_.parallel <= 256, "[serve] parallel must be in [1, 256], got ",
              options_.parallel);
  EMBER_CHECK(options_.context >= 2 && options_.context <= model_->config.context_length,
              "[serve] the context must be in [2, ", model_->config.context_length,
              "] (the model's context length), got ", options_.context);
  EMBER_CHECK(options_.queue >= 0, "[serve] the queue length must be >= 0, got ", options_.queue);
  EMBER_CHECK(options_.prompt_chunk >= 1 && options_.prompt_chunk_alone >= 1,
              "[serve] the prompt chunks must be >= 1, got ", options_.prompt_chunk, " and ",
              options_.prompt_chunk_alone);
  for (int i = 0; i < options_.parallel; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->cache = model_->make_cache(options_.context);
    slots_.push_back(std::move(slot));
  }
  stats_.slots = options_.parallel;
  stats_.queue_seconds = Histogram(latency_bounds());
  stats_.first_token_seconds = Histogram(latency_bounds());
  stats_.token_seconds = Histogram(latency_bounds());
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool Engine::submit(std::shared_ptr<Generation> generation) {
  EMBER_CHECK(generation != nullptr, "[serve] submit: no generation");
  const Generation& g = *generation;
  models::check_generation(g.prompt, g.max_tokens, model_->config.vocab_size);
  EMBER_CHECK(g.max_tokens >= 1, "[serve] max_tokens must be >= 1, got ", g.max_tokens);
  const auto positions = static_cast<int64_t>(g.prompt.size()) + g.max_tokens - 1;
  EMBER_CHECK(positions <= options_.context, "[serve] the prompt (", g.prompt.size(), " tokens) and ", g.max_tokens,
              " new tokens do not fit the context of ", options_.context, " positions");
  models::Sampler check(g.sampling);  // bad sampling options throw here, not on the engine's thread
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (draining_.load() || stopping_ || static_cast<int64_t>(queue_.size()) >= options_.queue + free_slots()) {
      return false;
    }
    queue_.push_back({std::move(generation), train::Clock::now()});
    stats_.queued = static_cast<int64_t>(queue_.size());
  }
  wake_.notify_all();
  return true;
}

int64_t Engine::free_slots() const { return options_.parallel - stats_.active; }

void Engine::run(const std::function<void()>& fn) {
  auto job = std::make_shared<Job>();
  job->fn = fn;
  std::unique_lock<std::mutex> lock(mutex_);
  EMBER_CHECK(!stopping_, "[serve] the engine has stopped");
  jobs_.push_back(job);
  wake_.notify_all();
  idle_.wait(lock, [&] { return job->done; });
  if (job->error) std::rethrow_exception(job->error);
}

void Engine::drain() {
  draining_.store(true);
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return stopping_ || (queue_.empty() && stats_.active == 0); });
}

EngineStats Engine::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// --- the engine's thread --------------------------------------------------------------------------

void Engine::loop() {
  const autograd::NoGradGuard no_grad;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty() || stats_.active > 0 || !queue_.empty(); });
    if (stopping_) break;
    while (!jobs_.empty()) {
      const std::shared_ptr<Job> job = jobs_.front();
      jobs_.pop_front();
      lock.unlock();
      try {
        job->fn();
      } catch (...) {
        job->error = std::current_exception();
      }
      lock.lock();
      job->done = true;
      idle_.notify_all();
    }
    const bool any = admit(lock);
    if (!any) {
      idle_.notify_all();
      continue;
    }
    lock.unlock();
    step();
    lock.lock();
    if (queue_.empty() && stats_.active == 0) idle_.notify_all();
  }
  // Stopping: what is left ends as cancelled.
  std::deque<Waiting> waiting = std::move(queue_);
  std::deque<std::shared_ptr<Job>> jobs = std::move(jobs_);
  lock.unlock();
  for (auto& slot : slots_) {
    if (slot->generation != nullptr) finish(*slot, Finish::kCancelled);
  }
  for (Waiting& w : waiting) {
    Outcome outcome{.finish = Finish::kCancelled, .prompt_tokens = static_cast<int64_t>(w.generation->prompt.size())};
    if (w.generation->on_done) w.generation->on_done(outcome);
  }
  lock.lock();
  for (const auto& job : jobs) {
    job->error = std::make_exception_ptr(Error("[serve] the engine has stopped"));
    job->done = true;
  }
  stats_.queued = 0;
  idle_.notify_all();
}

// Moves waiting generations into free slots (the lock held); whether any slot is busy after.
bool Engine::admit(std::unique_lock<std::mutex>& lock) {
  std::vector<Waiting> cancelled;
  while (!queue_.empty()) {
    Waiting& w = queue_.front();
    if (w.generation->cancelled.load(std::memory_order_relaxed)) {
      cancelled.push_back(std::move(w));
      queue_.pop_front();
      continue;
    }
    // The free slot whose cached ids share the longest prefix with the prompt. At least its last
    // two ids are processed again (the last for its logits): a prompt's rows always go through
    // prompt processing, never through a one-token step (Note [batched serving]).
    const std::vector<int64_t>& prompt = w.generation->prompt;
    Slot* best = nullptr;
    size_t best_common = 0;
    for (auto& slot : slots_) {
      if (slot->generation != nullptr) continue;
      const std::vector<int64_t>& cached = slot->cache.tokens;
      const size_t limit = std::min(cached.size(), models::reusable_prefix(prompt.size()));
      size_t common = 0;
      while (common < limit && cached[common] == prompt[common]) ++common;
      if (best == nullptr || common > best_common) {
        best = slot.get();
        best_common = common;
      }
    }
    if (best == nullptr) break;
    Slot& slot = *best;
    slot.generation = std::move(w.generation);
    slot.submitted = w.submitted;
    queue_.pop_front();
    slot.cache.length = static_cast<int64_t>(best_common);
    slot.cache.tokens.resize(best_common);
    slot.sampler.emplace(slot.generation->sampling);
    slot.history = slot.generation->prompt;
    slot.next = -1;
    slot.order = admitted_++;
    slot.outcome = Outcome{.prompt_tokens = static_cast<int64_t>(prompt.size()),
                           .cached_tokens = static_cast<int64_t>(best_common)};
    ++stats_.active;
    stats_.queue_seconds.observe(train::seconds_since(slot.submitted));
  }
  stats_.queued = static_cast<int64_t>(queue_.size());
  if (!cancelled.empty()) {
    lock.unlock();
    for (Waiting& w : cancelled) {
      Outcome outcome{.finish = Finish::kCancelled, .prompt_tokens = static_cast<int64_t>(w.generation->prompt.size())};
      if (w.generation->on_done) w.generation->on_done(outcome);
    }
    lock.lock();
  }
  return stats_.active > 0;
}

// One step: every generating sequence's next token in one Llama::decode, then one chunk of the
// oldest prompt still being processed.
void Engine::step() {
  std::vector<Slot*> decoding;
  Slot* prefilling = nullptr;
  for (auto& slot : slots_) {
    if (slot->generation == nullptr) continue;
    if (slot->generation->cancelled.load(std::memory_order_relaxed)) {
      finish(*slot, Finish::kCancelled);
    } else if (slot->next >= 0) {
      decoding.push_back(slot.get());
    } else if (prefilling == nullptr || slot->order < prefilling->order) {
      prefilling = slot.get();
    }
  }
  if (!decoding.empty()) {
    std::vector<int64_t> ids;
    std::vector<models::LlamaCache*> caches;
    for (Slot* slot : decoding) {
      ids.push_back(slot->next);
      caches.push_back(&slot->cache);
    }
    Tensor logits;
    try {
      logits = model_->decode(ids, caches);
    } catch (const std::exception& e) {
      for (Slot* slot : decoding) finish(*slot, Finish::kError, e.what());
      decoding.clear();
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.steps;
      stats_.batched_sequences += decoding.size();
    }
    for (size_t b = 0; b < decoding.size(); ++b) {
      decoding[b]->cache.tokens.push_back(ids[b]);
      deliver(*decoding[b], logits.select(0, static_cast<int64_t>(b)));
    }
  }
  if (prefilling != nullptr)
    prefill(*prefilling, decoding.empty() ? options_.prompt_chunk_alone : options_.prompt_chunk);
}

void Engine::prefill(Slot& slot, int64_t chunk) {
  const std::vector<int64_t>& prompt = slot.generation->prompt;
  const auto begin = static_cast<size_t>(slot.cache.length);
  size_t end = std::min(prompt.size(), begin + static_cast<size_t>(chunk));
  if (prompt.size() - end == 1) ++end;  // no one-token chunk last
  const std::vector<int64_t> ids(prompt.begin() + static_cast<std::ptrdiff_t>(begin),
                                 prompt.begin() + static_cast<std::ptrdiff_t>(end));
  Tensor logits;
  try {
    logits = model_->forward_cached(from_vector(ids).view({1, -1}), slot.cache, /*last_only=*/true);
  } catch (const std::exception& e) {
    finish(slot, Finish::kError, e.what());
    return;
  }
  slot.cache.tokens.insert(slot.cache.tokens.end(), ids.begin(), ids.end());
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stats_.prompt_tokens += ids.size();
  }
  if (end == prompt.size()) deliver(slot, logits.select(0, 0).select(0, 0));
}

// Draws the slot's next id from its logits and hands it to the generation.
void Engine::deliver(Slot& slot, const Tensor& logits) {
  Generation& g = *slot.generation;
  int64_t id = 0;
  try {
    id = slot.sampler->sample(logits, slot.history);
  } catch (const std::exception& e) {
    finish(slot, Finish::kError, e.what());
    return;
  }
  slot.history.push_back(id);
  ++slot.outcome.generated_tokens;
  const auto now = train::Clock::now();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.generated_tokens;
    if (slot.outcome.generated_tokens == 1) {
      stats_.first_token_seconds.observe(std::chrono::duration<double>(now - slot.submitted).count());
    } else {
      stats_.token_seconds.observe(std::chrono::duration<double>(now - slot.last_token).count());
    }
  }
  slot.last_token = now;
  bool go_on = true;
  try {
    if (g.on_token) go_on = g.on_token(id);
  } catch (...) {
    go_on = false;
  }
  if (!go_on || std::find(g.stop_ids.begin(), g.stop_ids.end(), id) != g.stop_ids.end()) {
    finish(slot, Finish::kStop);
  } else if (slot.outcome.generated_tokens >= g.max_tokens) {
    finish(slot, Finish::kLength);
  } else {
    slot.next = id;
  }
}

void Engine::finish(Slot& slot, Finish finish, const std::string& error) {
  const std::shared_ptr<Generation> generation = std::move(slot.generation);
  slot.generation = nullptr;
  slot.sampler.reset();
  slot.next = -1;
  if (finish == Finish::kError) {  // what the cache holds is unknown: start it afresh
    slot.cache.length = 0;
    slot.cache.tokens.clear();
  }
  slot.outcome.finish = finish;
  slot.outcome.error = error;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    --stats_.active;
  }
  try {
    if (generation->on_done) generation->on_done(slot.outcome);
  } catch (...) {  // on_done must not throw; the engine carries on regardless
  }
}

}  // namespace ember::serve
