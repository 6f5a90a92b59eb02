// DataLoader: per-epoch seeded shuffling and a background thread that prepares batches ahead of
// the consumer through a small bounded queue.
#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "data/philox_stream.h"
#include "ember/autograd.h"
#include "ember/data.h"

namespace ember::data {

// --- the permutation ------------------------------------------------------------------------------

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t epoch) {
  EMBER_CHECK(n >= 0, "[random_permutation] n must be non-negative, got ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  detail::PhiloxStream stream(seed, epoch);
  // Fisher-Yates, written out rather than std::shuffle, whose algorithm differs between standard
  // libraries: the order must be the same everywhere for a resumed run to see it again.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(stream.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

// --- one epoch on a background thread -------------------------------------------------------------

namespace detail {

class EpochRunner {
 public:
  EpochRunner(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> order, int64_t batch_size,
              int64_t num_batches, int64_t prefetch)
      : dataset_(std::move(dataset)),
        order_(std::move(order)),
        batch_size_(batch_size),
        num_batches_(num_batches),
        prefetch_(prefetch),
        worker_([this] { run(); }) {}

  // Stops the worker at its next check (after the batch it may be preparing) and joins it.
  ~EpochRunner() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_.notify_all();
    worker_.join();
  }
  EpochRunner(const EpochRunner&) = delete;
  EpochRunner& operator=(const EpochRunner&) = delete;

  // The next batch, or nullopt after the last; rethrows what the worker threw, in batch order.
  std::optional<Batch> next() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return !queue_.empty() || finished_; });
    if (!queue_.empty()) {
      Batch batch = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      space_.notify_one();
      return batch;
    }
    if (error_) {
      std::exception_ptr error = std::exchange(error_, nullptr);  // raised once; the epoch then ends
      std::rethrow_exception(error);
    }
    return std::nullopt;
  }

 private:
  void run() {
    // Batches are data, not part of any graph; grad mode is per thread, so set it here.
    const autograd::NoGradGuard no_grad;
    for (int64_t b = 0; b < num_batches_; ++b) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        space_.wait(lock, [this] { return stop_ || static_cast<int64_t>(queue_.size()) < prefetch_; });
        if (stop_) break;
      }
      const size_t begin = static_cast<size_t>(b * batch_size_);
      const size_t end = std::min(order_.size(), begin + static_cast<size_t>(batch_size_));
      try {
        Batch batch = dataset_->get_batch(std::span<const int64_t>(order_.data() + begin, end - begin));
        const std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(batch));
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
        break;
      }
      ready_.notify_one();
    }
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
    }
    ready_.notify_one();
  }

  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> order_;
  int64_t batch_size_;
  int64_t num_batches_;
  int64_t prefetch_;

  std::mutex mutex_;
  std::condition_variable ready_;  // a batch was queued or the worker finished
  std::condition_variable space_;  // the queue has room, or stop was asked
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool finished_ = false;
  bool stop_ = false;
  std::thread worker_;  // last: it starts in the constructor and uses every member above
};

}  // namespace detail

// --- DataLoader -----------------------------------------------------------------------------------

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, bool shuffle, uint64_t seed,
                       bool drop_last, int64_t prefetch)
    : dataset_(std::move(dataset)),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last),
      prefetch_(prefetch) {
  EMBER_CHECK(dataset_ != nullptr, "[DataLoader] the dataset is null");
  EMBER_CHECK(batch_size_ > 0, "[DataLoader] batch_size must be positive, got ", batch_size_);
  EMBER_CHECK(prefetch_ > 0, "[DataLoader] prefetch must be positive, got ", prefetch_);
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

void DataLoader::set_sampler(Sampler sampler, int64_t num_samples) {
  EMBER_CHECK(!sampler || num_samples >= 0, "[DataLoader] the sampler's num_samples must be non-negative, got ",
              num_samples);
  sampler_ = std::move(sampler);
  num_samples_ = num_samples;
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_ ? num_samples_ : dataset_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<int64_t> DataLoader::order(uint64_t epoch) const {
  if (sampler_) {
    std::vector<int64_t> indices = sampler_(epoch);
    EMBER_CHECK(static_cast<int64_t>(indices.size()) == num_samples_, "[DataLoader] the sampler gave ", indices.size(),
                " indices for epoch ", epoch, ", not the ", num_samples_, " it announced");
    return indices;
  }
  const int64_t n = dataset_->size();
  if (shuffle_) return random_permutation(n, seed_, epoch);
  std::vector<int64_t> identity(static_cast<size_t>(n));
  std::iota(identity.begin(), identity.end(), int64_t{0});
  return identity;
}

DataLoader::Iterator DataLoader::begin() {
  runner_.reset();  // joins the previous pass's worker before the new one starts
  runner_ = std::make_unique<detail::EpochRunner>(dataset_, order(epoch_), batch_size_, size(), prefetch_);
  ++epoch_;
  return Iterator(runner_.get());
}

DataLoader::Iterator::Iterator(detail::EpochRunner* runner) : runner_(runner) { ++*this; }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  std::optional<Batch> batch = runner_->next();
  if (batch) {
    current_ = std::move(*batch);
  } else {
    current_ = {};
    done_ = true;
  }
  return *this;
}

}  // namespace ember::data
