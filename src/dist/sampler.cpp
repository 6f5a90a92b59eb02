// DistributedSampler: each rank's share of an epoch, as torch.utils.data.DistributedSampler.
#include <numeric>

#include "ember/data.h"
#include "ember/dist.h"
#include "ember/error.h"

namespace ember::dist {

DistributedSampler::DistributedSampler(int64_t size, int world_size, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(size), world_size_(world_size), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  EMBER_CHECK(size >= 0, "[DistributedSampler] the dataset size must be non-negative, got ", size);
  EMBER_CHECK(world_size >= 1, "[DistributedSampler] world_size must be at least 1, got ", world_size);
  EMBER_CHECK(rank >= 0 && rank < world_size, "[DistributedSampler] rank ", rank, " is not in [0, ", world_size, ")");
}

int64_t DistributedSampler::num_samples() const {
  return drop_last_ ? size_ / world_size_ : (size_ + world_size_ - 1) / world_size_;
}

std::vector<int64_t> DistributedSampler::indices(uint64_t epoch) const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = data::random_permutation(size_, seed_, epoch);
  } else {
    order.resize(static_cast<size_t>(size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const size_t total = static_cast<size_t>(num_samples() * world_size_);
  if (order.size() > total) {
    order.resize(total);  // drop_last: the tail that would not divide evenly
  } else if (!order.empty()) {
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);  // repeat the start
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples()));
  for (size_t i = static_cast<size_t>(rank_); i < order.size(); i += static_cast<size_t>(world_size_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

}  // namespace ember::dist
