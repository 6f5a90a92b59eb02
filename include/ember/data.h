// Data loading, as torch.utils.data: a Dataset gives examples by index, a DataLoader batches them
// (optionally in a seeded, per-epoch shuffled order) on a background thread, and MNIST reads the
// handwritten digits from the standard IDX files or from the small offline subset scripts/setup
// downloads.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ember/tensor.h"

namespace ember::data {

/// One example: an input and its target.
struct Example {
  Tensor input;
  Tensor target;
};

/// A batch: examples stacked along a new dim 0.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

/// A map-style dataset: size() examples, reachable by index. get() and get_batch() are called
/// from the DataLoader's background thread, so they must be safe to call concurrently with the
/// caller's own use of the dataset (reading is; modifying it while a loader runs is not).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// The example at `index` (0 <= index < size()).
  virtual Example get(int64_t index) const = 0;
  /// The examples at `indices`, stacked. The default gets each example and stacks them; datasets
  /// that can gather a batch faster override it.
  virtual Batch get_batch(std::span<const int64_t> indices) const;
};

/// A dataset over two tensors whose dim 0 indexes the examples: example i is
/// (inputs[i], targets[i]) (views). get_batch gathers rows with index_select, one copy per
/// tensor, instead of stacking examples one by one.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(std::span<const int64_t> indices) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

namespace detail {
class EpochRunner;  // one epoch's background worker and its queue of prepared batches
}

/// Batches a dataset, as torch.utils.data.DataLoader:
///
///   DataLoader loader(TensorDataset(x, y), /*batch_size=*/64, /*shuffle=*/true, /*seed=*/42);
///   for (int epoch = 0; epoch < 10; ++epoch)
///     for (const Batch& batch : loader) train_step(batch.inputs, batch.targets);
///
/// Each pass (each call to begin()) is one epoch. With shuffle, epoch e visits the examples in a
/// permutation that depends only on (seed, e) (Fisher-Yates driven by ember's Philox generator,
/// so it is the same on every machine and standard library). Passes run epochs 0, 1, 2, ... in
/// turn; set_epoch(e) makes the next pass epoch e, so a run resumed at epoch e sees the order
/// the original run saw (like PyTorch's DistributedSampler.set_epoch, except that the epoch also
/// advances by itself). Without shuffle every epoch is 0, 1, ..., size-1.
///
/// A background thread prepares up to `prefetch` batches ahead while the caller uses the current
/// one. An exception thrown while preparing a batch (by the dataset, or stacking examples of
/// different shapes) is rethrown to the caller when it reaches that batch. Starting a new pass,
/// or destroying the loader, stops the previous pass's thread and joins it, even mid-epoch; an
/// iterator of a pass is invalid once the next pass starts or the loader is destroyed.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, bool shuffle = false, uint64_t seed = 0,
             bool drop_last = false, int64_t prefetch = 2);
  /// Takes a copy of the dataset (a TensorDataset or MNIST copies only tensor handles).
  template <class D>
  requires std::derived_from<D, Dataset> DataLoader(D dataset, int64_t batch_size, bool shuffle = false,
                                                    uint64_t seed = 0, bool drop_last = false, int64_t prefetch = 2)
      : DataLoader(std::make_shared<const D>(std::move(dataset)), batch_size, shuffle, seed, drop_last, prefetch) {}
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;

    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    friend bool operator==(const Iterator& it, std::default_sentinel_t) { return it.done_; }

   private:
    friend class DataLoader;
    explicit Iterator(detail::EpochRunner* runner);
    detail::EpochRunner* runner_ = nullptr;
    Batch current_;
    bool done_ = false;
  };

  /// Starts the next epoch (stopping a pass still in progress) and returns its first batch.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  /// Batches per epoch: ceil(size / batch_size), or floor with drop_last.
  int64_t size() const;
  int64_t batch_size() const { return batch_size_; }
  const Dataset& dataset() const { return *dataset_; }
  /// The epoch the next pass runs.
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  /// The order in which epoch `epoch` visits the examples (all of them, before drop_last).
  std::vector<int64_t> order(uint64_t epoch) const;

  /// Replaces the order: epoch e visits sampler(e), which must give num_samples indices (e.g. one
  /// rank's share, dist::DistributedSampler::indices); shuffle and seed are then unused. An empty
  /// function restores the loader's own order.
  using Sampler = std::function<std::vector<int64_t>(uint64_t epoch)>;
  void set_sampler(Sampler sampler, int64_t num_samples);

 private:
  std::shared_ptr<const Dataset> dataset_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t prefetch_;
  uint64_t epoch_ = 0;
  Sampler sampler_;
  int64_t num_samples_ = 0;
  std::unique_ptr<detail::EpochRunner> runner_;
};

/// A seeded permutation of 0..n-1 that depends only on (seed, epoch).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t epoch);

/// Augmentation: moves each image of a batch (N, C, H, W) by its own random offset, uniform in
/// [-max_shift, max_shift] pixels along each of H and W, filling the uncovered pixels with `fill`.
/// The offsets depend only on (seed, stream), so a run can replay them (e.g. stream = the batch's
/// global step). The result is a new tensor that does not require grad.
Tensor random_shift(const Tensor& images, int64_t max_shift, double fill, uint64_t seed, uint64_t stream);

enum class Split { kTrain, kTest };

/// The MNIST handwritten digits: images float32 (N, 1, 28, 28), labels int64 (N) in 0..9.
///
/// Pixels are scaled from 0..255 to [0, 1] and then, when `normalize` is true (the default),
/// standardized with the training set's mean 0.1307 and standard deviation 0.3081:
/// x = (pixel / 255 - 0.1307) / 0.3081, as the usual PyTorch MNIST examples do.
///
/// Two sources:
/// - the standard IDX files in a folder: train-images-idx3-ubyte, train-labels-idx1-ubyte,
///   t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each also accepted gzip'ed (".gz");
///   60000 training and 10000 test images;
/// - the offline subset mnist_5k.csv.gz that scripts/setup puts in data/mnist/: 5000 rows of 784
///   pixel values then the label, 500 rows per digit. The split is fixed: of each digit's rows
///   (in file order) the first four fifths are training and the last fifth test, so 400 + 100
///   per digit, 4000 training and 1000 test images.
/// Malformed files (wrong magic numbers, counts or sizes, bad values) throw an ember::Error
/// starting with "[mnist]" that names the file and the problem.
class MNIST : public TensorDataset {
 public:
  static constexpr float kMean = 0.1307f;
  static constexpr float kStd = 0.3081f;
  static constexpr const char* kDefaultRoot = "data/mnist";
  static constexpr const char* kCsvName = "mnist_5k.csv.gz";

  /// Reads `split` from `root` (the default is relative to the working directory, as in the
  /// repository root): the IDX files when root holds them, else root/mnist_5k.csv.gz,
  /// which must then be the full 5000-row subset (500 per digit). When neither is there the error
  /// says to run scripts/setup.
  explicit MNIST(const std::string& root = kDefaultRoot, Split split = Split::kTrain, bool normalize = true);
  /// Reads `split` from the IDX files in `root`.
  static MNIST from_idx(const std::string& root, Split split, bool normalize = true);
  /// Reads `split` from a gzip'ed CSV of rows "p0,...,p783,label" (any number of rows), split
  /// per digit as described above.
  static MNIST from_csv(const std::string& path, Split split, bool normalize = true);

  const Tensor& images() const { return inputs(); }
  const Tensor& labels() const { return targets(); }
  /// The file(s) the examples were read from.
  const std::string& source() const { return source_; }

 private:
  MNIST(Tensor images, Tensor labels, std::string source);
  // from_csv, optionally also checking that the file is the whole 5000-row subset.
  static MNIST read_csv(const std::string& path, Split split, bool normalize, bool require_full_subset);
  std::string source_;
};

}  // namespace ember::data
