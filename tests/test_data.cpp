// Data loading: DataLoader batching, drop_last, seeded per-epoch shuffling, the background worker
// (prefetching, exception propagation, early destruction), and the MNIST readers on the real
// offline subset and on small synthetic IDX and csv.gz files, corrupt ones included.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/mnist_format.h"
#include "ember/data.h"
#include "ember/ember.h"
#include "test_util.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Example i: input (2) = [i, 10 * i], target i.
TensorDataset numbered(int64_t n) {
  const Tensor index = arange(0, n, 1, kInt64);
  return TensorDataset(stack({index, index * int64_t{10}}, 1).to(kFloat32), index);
}

std::vector<int64_t> targets_of(DataLoader& loader, std::vector<int64_t>* batch_sizes = nullptr) {
  std::vector<int64_t> seen;
  for (const Batch& batch : loader) {
    if (batch_sizes != nullptr) batch_sizes->push_back(batch.targets.size(0));
    const std::vector<int64_t> t = batch.targets.to_vector<int64_t>();
    seen.insert(seen.end(), t.begin(), t.end());
  }
  return seen;
}

using test_util::expect_error;

TEST(DataLoader, BatchesInOrderWithoutShuffle) {
  DataLoader loader(numbered(10), /*batch_size=*/4);
  EXPECT_EQ(loader.size(), 3);
  std::vector<Batch> batches;
  for (const Batch& batch : loader) batches.push_back(batch);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].inputs.shape(), Shape({4, 2}));
  EXPECT_EQ(batches[0].inputs.dtype(), kFloat32);
  EXPECT_EQ(batches[0].targets.dtype(), kInt64);
  EXPECT_EQ(batches[2].inputs.shape(), Shape({2, 2}));
  EXPECT_EQ(batches[1].inputs.to_vector<float>(), (std::vector<float>{4, 40, 5, 50, 6, 60, 7, 70}));
  EXPECT_EQ(batches[2].targets.to_vector<int64_t>(), (std::vector<int64_t>{8, 9}));
  // A second pass (the next epoch) gives the same order without shuffle.
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(targets_of(loader), expected);
}

TEST(DataLoader, DropLastDropsTheShortBatch) {
  DataLoader loader(numbered(10), 4, /*shuffle=*/false, /*seed=*/0, /*drop_last=*/true);
  EXPECT_EQ(loader.size(), 2);
  std::vector<int64_t> sizes;
  EXPECT_EQ(targets_of(loader, &sizes), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4}));

  DataLoader exact(numbered(8), 4, false, 0, true);
  EXPECT_EQ(exact.size(), 2);
  DataLoader too_small(numbered(3), 4, true, 0, true);
  EXPECT_EQ(too_small.size(), 0);
  EXPECT_TRUE(targets_of(too_small).empty());
}

TEST(DataLoader, BatchesAreCopiesNotViewsOfTheDataset) {
  const TensorDataset dataset = numbered(6);
  DataLoader loader(dataset, 3);
  for (const Batch& batch : loader) {
    EXPECT_FALSE(batch.inputs.shares_storage(dataset.inputs()));
    Tensor inputs = batch.inputs;
    inputs.fill_(-1);
  }
  EXPECT_EQ(dataset.inputs().min().item<float>(), 0.0f);
}

TEST(DataLoader, ShuffleIsAPermutationThatDependsOnlyOnSeedAndEpoch) {
  const int64_t n = 1000;
  DataLoader loader(numbered(n), 64, /*shuffle=*/true, /*seed=*/42);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(loader.epoch(), static_cast<uint64_t>(e));
    std::vector<int64_t> sizes;
    epochs.push_back(targets_of(loader, &sizes));
    EXPECT_EQ(sizes.size(), 16u);
    EXPECT_EQ(sizes.back(), n - 15 * 64);
    // Every index exactly once per epoch.
    std::vector<int64_t> sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(sorted, expected);
    EXPECT_EQ(epochs.back(), loader.order(static_cast<uint64_t>(e)));
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);

  // A new loader with the same seed, resumed at epoch 1, sees what the first saw at epochs 1, 2.
  DataLoader resumed(numbered(n), 64, true, 42);
  resumed.set_epoch(1);
  EXPECT_EQ(targets_of(resumed), epochs[1]);
  EXPECT_EQ(targets_of(resumed), epochs[2]);
  // Another seed gives another order.
  DataLoader other(numbered(n), 64, true, 43);
  EXPECT_NE(targets_of(other), epochs[0]);
}

TEST(DataLoader, PermutationIsPinnedAcrossPlatforms) {
  // Philox-driven Fisher-Yates, not std::shuffle: this order must never change, or resumed
  // trainings would see different data than the run they continue.
  EXPECT_EQ(random_permutation(10, /*seed=*/0, /*epoch=*/0), (std::vector<int64_t>{5, 2, 0, 8, 7, 3, 1, 4, 6, 9}));
  EXPECT_EQ(random_permutation(10, 0, 1), (std::vector<int64_t>{4, 0, 7, 9, 5, 8, 2, 6, 1, 3}));
  EXPECT_TRUE(random_permutation(0, 5, 5).empty());
  EXPECT_EQ(random_permutation(1, 5, 5), (std::vector<int64_t>{0}));
  // Roughly uniform: over many epochs each element lands in each position about equally often.
  std::array<std::array<int, 4>, 4> counts{};
  for (uint64_t e = 0; e < 4000; ++e) {
    const std::vector<int64_t> p = random_permutation(4, 7, e);
    for (size_t pos = 0; pos < 4; ++pos) ++counts[pos][static_cast<size_t>(p[pos])];
  }
  for (const auto& row : counts) {
    for (int c : row) EXPECT_NEAR(c, 1000, 120);
  }
}

// Computes examples on the fly, counting get() calls; optionally slow, optionally failing.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, std::chrono::microseconds delay = 0us, int64_t fail_at = -1)
      : n_(n), delay_(delay), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    ++calls;
    if (delay_ > 0us) std::this_thread::sleep_for(delay_);
    EMBER_CHECK(index != fail_at_, "[CountingDataset] example ", index, " is broken");
    // input (2, 3) filled with the index; target a 0-dim int64
    return {full({2, 3}, static_cast<double>(index), kFloat32), scalar_tensor(index, kInt64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
  std::chrono::microseconds delay_;
  int64_t fail_at_;
};

TEST(DataLoader, GenericDatasetsAreStackedAlongDimZero) {
  auto dataset = std::make_shared<CountingDataset>(7);
  DataLoader loader(dataset, 3);
  std::vector<Batch> batches;
  for (const Batch& batch : loader) batches.push_back(batch);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].inputs.shape(), Shape({3, 2, 3}));
  EXPECT_EQ(batches[0].targets.shape(), Shape({3}));
  EXPECT_EQ(batches[2].inputs.shape(), Shape({1, 2, 3}));
  EXPECT_EQ(batches[1].inputs.select(0, 2).to_vector<float>(), std::vector<float>(6, 5.0f));
  EXPECT_EQ(batches[2].targets.to_vector<int64_t>(), std::vector<int64_t>{6});
  EXPECT_EQ(dataset->calls.load(), 7);
}

TEST(DataLoader, TensorDatasetFastPathMatchesStackingExamples) {
  manual_seed(3);
  const TensorDataset dataset(randn({20, 3, 4}), randint(0, 10, {20}));
  const std::vector<int64_t> indices{19, 0, 7, 7, 3};
  const Batch fast = dataset.get_batch(indices);
  const Batch generic = dataset.Dataset::get_batch(indices);
  EXPECT_EQ(fast.inputs.shape(), Shape({5, 3, 4}));
  EXPECT_EQ(fast.inputs.to_vector<float>(), generic.inputs.to_vector<float>());
  EXPECT_EQ(fast.targets.to_vector<int64_t>(), generic.targets.to_vector<int64_t>());
  expect_error([&] { dataset.get(20); }, {"[TensorDataset] index 20 is out of range for a dataset of 20"});
  expect_error([&] { dataset.get_batch(std::vector<int64_t>{1, -1}); }, {"index -1 is out of range"});
}

TEST(DataLoader, BadArgumentsAreRejected) {
  expect_error([] { DataLoader(numbered(4), 0); }, {"[DataLoader] batch_size must be positive, got 0"});
  expect_error([] { DataLoader(numbered(4), 2, false, 0, false, 0); }, {"prefetch must be positive"});
  expect_error([] { DataLoader(std::shared_ptr<const Dataset>(), 2); }, {"the dataset is null"});
  expect_error([] { TensorDataset(zeros({4, 2}), zeros({5})); }, {"[TensorDataset]", "[4, 2]", "[5]"});
  expect_error([] { TensorDataset(zeros({4}), scalar_tensor(1.0)); }, {"need a dim 0"});
}

TEST(DataLoader, WorkerExceptionsAreRethrownInTheConsumerInOrder) {
  DataLoader loader(std::make_shared<CountingDataset>(10, 0us, /*fail_at=*/5), 2);
  std::vector<int64_t> seen;
  try {
    for (const Batch& batch : loader) {
      for (int64_t t : batch.targets.to_vector<int64_t>()) seen.push_back(t);
    }
    ADD_FAILURE() << "the broken example should have thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[CountingDataset] example 5 is broken"), std::string::npos) << e.what();
  }
  // The batches before the broken one arrived, in order.
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3}));
  // The loader is still usable: the next pass fails at the same place, and a first-batch
  // failure surfaces from begin().
  DataLoader first_fails(std::make_shared<CountingDataset>(4, 0us, 0), 2);
  EXPECT_THROW(first_fails.begin(), Error);
}

TEST(DataLoader, MismatchedExampleShapesSurfaceAsAStackError) {
  class Ragged : public Dataset {
   public:
    int64_t size() const override { return 4; }
    Example get(int64_t index) const override { return {zeros({index + 1}), scalar_tensor(index, kInt64)}; }
  };
  DataLoader loader(Ragged(), 2);
  expect_error(
      [&] {
        for (const Batch& batch : loader) (void)batch;
      },
      {"[stack]"});
}

TEST(DataLoader, WorkerPrefetchesWhileTheConsumerWorks) {
  auto dataset = std::make_shared<CountingDataset>(100);
  DataLoader loader(dataset, 5, false, 0, false, /*prefetch=*/3);
  auto it = loader.begin();
  EXPECT_EQ(it->targets.size(0), 5);
  // While we hold batch 0, the worker prepares up to 3 more without being asked.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (dataset->calls.load() < 20 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(dataset->calls.load(), 20);  // batch 0 plus 3 prefetched, and not more
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dataset->calls.load(), 20);
  ++it;
  EXPECT_EQ(it->targets.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 8, 9}));
}

TEST(DataLoader, DestructionMidEpochJoinsTheWorkerPromptly) {
  auto slow = std::make_shared<CountingDataset>(100000, 200us);
  const auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(slow, 10, true, 1);
    auto it = loader.begin();
    EXPECT_EQ(it->inputs.shape(), Shape({10, 2, 3}));
  }  // the worker is mid-epoch (and may be blocked on a full queue): it must stop and be joined
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_LT(slow->calls.load(), 100);

  // Starting a new pass mid-epoch stops the old worker too.
  DataLoader loader(slow, 10, true, 1);
  auto first = loader.begin();
  auto second = loader.begin();
  EXPECT_EQ(loader.epoch(), 2u);
  const std::vector<int64_t> order = loader.order(1);
  EXPECT_EQ(second->targets.to_vector<int64_t>(), std::vector<int64_t>(order.begin(), order.begin() + 10));

  // A loader that was never iterated, or moved from, is destroyed without trouble.
  DataLoader unused(slow, 10);
  DataLoader moved = std::move(unused);
  EXPECT_EQ(moved.size(), 10000);
}

// --- MNIST ----------------------------------------------------------------------------------------

const std::string kRepoData = std::string(EMBER_GOLDEN_DIR) + "/../../data/mnist";

TEST(Mnist, OfflineSubsetHasTheFixedSplit) {
  if (!fs::exists(kRepoData + "/mnist_5k.csv.gz")) {
    GTEST_SKIP() << kRepoData << "/mnist_5k.csv.gz is absent: run scripts/setup to download it";
  }
  const MNIST train(kRepoData, Split::kTrain);
  const MNIST test(kRepoData, Split::kTest);
  EXPECT_EQ(train.size(), 4000);
  EXPECT_EQ(test.size(), 1000);
  EXPECT_EQ(train.images().shape(), Shape({4000, 1, 28, 28}));
  EXPECT_EQ(test.images().shape(), Shape({1000, 1, 28, 28}));
  EXPECT_EQ(train.images().dtype(), kFloat32);
  EXPECT_EQ(train.labels().dtype(), kInt64);
  EXPECT_EQ(train.labels().shape(), Shape({4000}));
  for (int64_t digit = 0; digit < 10; ++digit) {
    EXPECT_EQ(train.labels().eq(digit).sum().item<int64_t>(), 400) << digit;
    EXPECT_EQ(test.labels().eq(digit).sum().item<int64_t>(), 100) << digit;
  }
  // The file is sorted by label, and the split keeps file order.
  EXPECT_EQ(train.labels().slice(0, 0, 400).max().item<int64_t>(), 0);
  EXPECT_EQ(test.labels().slice(0, 900, 1000).min().item<int64_t>(), 9);

  // Normalized: (pixel / 255 - 0.1307) / 0.3081, so the extremes are the images of 0 and 255.
  const float low = (0.0f - MNIST::kMean) / MNIST::kStd;
  const float high = (1.0f - MNIST::kMean) / MNIST::kStd;
  EXPECT_FLOAT_EQ(train.images().min().item<float>(), low);
  EXPECT_FLOAT_EQ(train.images().max().item<float>(), high);
  EXPECT_NEAR(train.images().mean().item<float>(), 0.0, 0.1);
  EXPECT_NEAR(train.images().std().item<float>(), 1.0, 0.1);

  // Without normalization the pixels are k / 255 for integers k in 0..255.
  const MNIST raw = MNIST::from_csv(kRepoData + "/mnist_5k.csv.gz", Split::kTest, /*normalize=*/false);
  EXPECT_EQ(raw.size(), 1000);
  EXPECT_EQ(raw.images().min().item<float>(), 0.0f);
  EXPECT_EQ(raw.images().max().item<float>(), 1.0f);
  EXPECT_NEAR(raw.images().mean().item<float>(), 0.13, 0.03);
  const Tensor scaled = raw.images() * 255.0f;
  EXPECT_EQ((scaled - scaled.to(kInt64).to(kFloat32)).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(raw.labels().to_vector<int64_t>(), test.labels().to_vector<int64_t>());

  // And it feeds a DataLoader through the TensorDataset fast path.
  DataLoader loader(train, 256, true, 0);
  int64_t count = 0;
  for (const Batch& batch : loader) {
    EXPECT_EQ(batch.inputs.shape().vec().size(), 4u);
    count += batch.targets.size(0);
  }
  EXPECT_EQ(count, 4000);
}

// A gzip file holding `data` in stored (uncompressed) deflate blocks: enough to exercise the
// reader's gunzip path without the test linking zlib itself.
std::string gzip_stored(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (const unsigned char byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  crc ^= 0xffffffffu;
  std::string out = std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10);
  size_t position = 0;
  do {
    const size_t length = std::min<size_t>(65535, data.size() - position);
    const bool last = position + length == data.size();
    out.push_back(last ? '\x01' : '\x00');
    out.push_back(static_cast<char>(length & 0xff));
    out.push_back(static_cast<char>(length >> 8));
    out.push_back(static_cast<char>(~length & 0xff));
    out.push_back(static_cast<char>((~length >> 8) & 0xff));
    out.append(data, position, length);
    position += length;
  } while (position < data.size());
  for (const uint32_t word : {crc, static_cast<uint32_t>(data.size())}) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((word >> (8 * i)) & 0xff));
  }
  return out;
}

class MnistFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("ember_mnist_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  fs::path dir_;
};

// Row r of the synthetic CSV: label r % 10, pixels (r + i) % 256.
std::string synthetic_csv(int rows) {
  std::string text;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < 784; ++i) text += std::to_string((r + i) % 256) + ",";
    text += std::to_string(r % 10) + (r % 7 == 3 ? "\r\n" : "\n");  // some CRLF line ends
  }
  return text;
}

TEST_F(MnistFiles, CsvSplitsEachDigitIntoFourFifthsTrainAndOneFifthTest) {
  write("digits.csv.gz", gzip_stored(synthetic_csv(50)));  // 5 rows per digit: 4 train, 1 test
  const MNIST train = MNIST::from_csv(path("digits.csv.gz"), Split::kTrain, /*normalize=*/false);
  const MNIST test = MNIST::from_csv(path("digits.csv.gz"), Split::kTest, false);
  EXPECT_EQ(train.size(), 40);
  EXPECT_EQ(test.size(), 10);
  // Digit d appears in rows d, d + 10, ..., d + 40: the last of them (d + 40) is its test row.
  std::vector<int64_t> expected_labels(10);
  std::iota(expected_labels.begin(), expected_labels.end(), 0);
  EXPECT_EQ(test.labels().to_vector<int64_t>(), expected_labels);
  EXPECT_EQ(test.images().at({3, 0, 0, 5}).to<float>(), static_cast<float>((43 + 5) % 256) / 255.0f);
  EXPECT_EQ(train.labels().to_vector<int64_t>()[39], 9);
  EXPECT_EQ(train.images().at({39, 0, 27, 27}).to<float>(), static_cast<float>((39 + 783) % 256) / 255.0f);

  const MNIST normalized = MNIST::from_csv(path("digits.csv.gz"), Split::kTest);
  EXPECT_FLOAT_EQ(normalized.images().at({3, 0, 0, 5}).to<float>(),
                  (static_cast<float>(48) / 255.0f - MNIST::kMean) / MNIST::kStd);

  // A plain (not gzip'ed) CSV reads the same.
  write("plain.csv", synthetic_csv(50));
  EXPECT_EQ(MNIST::from_csv(path("plain.csv"), Split::kTrain, false).images().to_vector<float>(),
            train.images().to_vector<float>());
}

TEST_F(MnistFiles, CorruptCsvFilesGiveClearErrors) {
  const auto expect_csv_error = [&](const std::string& text, const std::vector<std::string>& parts) {
    write("bad.csv.gz", gzip_stored(text));
    expect_error([&] { MNIST::from_csv(path("bad.csv.gz"), Split::kTrain); }, parts);
  };
  const std::string good_row = synthetic_csv(1);
  std::string short_row = good_row;
  short_row.erase(0, 2);  // drops the first pixel
  expect_csv_error(good_row + short_row, {"[mnist]", "line 2", "expected 785 comma-separated values", "got 784"});
  expect_csv_error(good_row.substr(0, good_row.size() - 1) + ",3\n", {"line 1", "got more"});
  expect_csv_error("256," + good_row.substr(2), {"line 1, column 1: pixel value 256 is outside 0..255"});
  expect_csv_error(good_row.substr(0, good_row.size() - 2) + "10\n", {"label 10 is not a digit"});
  expect_csv_error("x," + good_row.substr(2), {"line 1, column 1: expected an integer, got 'x'"});
  expect_csv_error("", {"holds no rows"});

  // Damaged gzip data.
  const std::string packed = gzip_stored(synthetic_csv(20));
  write("truncated.csv.gz", packed.substr(0, packed.size() / 2));
  expect_error([&] { MNIST::from_csv(path("truncated.csv.gz"), Split::kTrain); },
               {"[mnist] cannot read '" + path("truncated.csv.gz") + "'", "corrupt or truncated"});
  std::string flipped = packed;
  flipped[flipped.size() - 6] ^= 0x5a;  // the CRC no longer matches
  write("crc.csv.gz", flipped);
  expect_error([&] { MNIST::from_csv(path("crc.csv.gz"), Split::kTrain); }, {"corrupt or truncated"});

  expect_error([&] { MNIST::from_csv(path("missing.csv.gz"), Split::kTrain); }, {"not found", "run scripts/setup"});
}

TEST_F(MnistFiles, GzipMembersAreReadOneAfterAnother) {
  // Two members, as `cat a.gz b.gz` makes them, then bytes that do not start a member (ignored, as
  // gzip and zlib's gzread ignore them): 20 + 30 rows, 5 of each digit.
  const std::string second = gzip_stored(synthetic_csv(30));
  write("two.csv.gz", gzip_stored(synthetic_csv(20)) + second + std::string("\0\0", 2));
  EXPECT_EQ(MNIST::from_csv(path("two.csv.gz"), Split::kTrain, /*normalize=*/false).size(), 40);
  EXPECT_EQ(MNIST::from_csv(path("two.csv.gz"), Split::kTest, false).size(), 10);
  // A second member cut short, or damaged, is an error like a first one.
  write("cut.csv.gz", gzip_stored(synthetic_csv(20)) + second.substr(0, second.size() - 4));
  expect_error([&] { MNIST::from_csv(path("cut.csv.gz"), Split::kTrain); },
               {"[mnist] cannot read '" + path("cut.csv.gz") + "'", "ends early"});
  std::string damaged = gzip_stored(synthetic_csv(20)) + second;
  damaged[damaged.size() - 6] ^= 0x5a;  // the second member's CRC
  write("damaged.csv.gz", damaged);
  expect_error([&] { MNIST::from_csv(path("damaged.csv.gz"), Split::kTrain); }, {"corrupt or truncated"});
}

// A gzip stream cut right after its compressed data (the 8-byte trailer gone) is an error too. The
// reader through zlib's gzread took this one as 1 MiB of '0' without a word: zlib's compression of
// 1 MiB + 5 '0' characters, cut so. gzread's 1 MiB reads filled just as the input ran out, and the
// next read found no input, so the last 5 bytes and the cut went unreported (the fuzzer's inputs
// fuzz/corpus/mnist/crash-cut-gzip-* are smaller cases of it).
TEST_F(MnistFiles, GzipStreamCutAfterItsDataIsAnError) {
  const std::string cut = std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03", 10) +
                          std::string("\xed\xc1\x31\x01\x00\x00\x00\xc2\xa0\x4a\xeb\x9f\xce\x12\x9e\x40\x01", 17) +
                          std::string(1015, '\0') + std::string("\x1c\x0c", 2);
  write("cut.csv.gz", cut);
  expect_error([&] { MNIST::from_csv(path("cut.csv.gz"), Split::kTrain); },
               {"[mnist] cannot read '" + path("cut.csv.gz") + "': the gzip data ends early"});
}

TEST(MnistFormat, UnpackRefusesMoreBytesThanItsLimit) {
  const auto bytes = [](const std::string& s) {
    return std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  const std::string text(5000, 'a');
  const std::string packed = gzip_stored(text);
  EXPECT_EQ(mnist_format::unpack(bytes(packed), "x.gz", 5000), std::vector<uint8_t>(text.begin(), text.end()));
  EXPECT_EQ(mnist_format::unpack(bytes(text), "x", 5000).size(), 5000u);
  // A gzip bomb: more unpacked than the limit (1 GiB for MNIST's files).
  expect_error([&] { mnist_format::unpack(bytes(packed), "bomb.gz", 4999); },
               {"[mnist] 'bomb.gz' is larger than 4999 bytes unpacked: not an MNIST file"});
  expect_error([&] { mnist_format::unpack(bytes(text), "big", 4999); }, {"'big' is larger than 4999 bytes unpacked"});
}

TEST_F(MnistFiles, DefaultRootExplainsHowToGetTheDataAndChecksTheSubset) {
  expect_error([&] { MNIST(dir_.string(), Split::kTrain); },
               {"[mnist] no MNIST data in '" + dir_.string() + "'", "run scripts/setup", "mnist_5k.csv.gz"});
  // A mnist_5k.csv.gz that is not the whole subset is refused with the per-digit counts.
  write("mnist_5k.csv.gz", gzip_stored(synthetic_csv(50)));
  expect_error([&] { MNIST(dir_.string(), Split::kTrain); },
               {"has 50 rows (per digit 0: 5, 1: 5", "expected 5000 with 500 per digit", "scripts/setup"});
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string idx_images(uint32_t count, uint32_t rows = 28, uint32_t columns = 28, int64_t drop_bytes = 0) {
  std::string bytes = be32(0x803) + be32(count) + be32(rows) + be32(columns);
  for (uint32_t i = 0; i < count * rows * columns; ++i) bytes.push_back(static_cast<char>((i * 7) % 256));
  bytes.resize(bytes.size() - static_cast<size_t>(drop_bytes));
  return bytes;
}
std::string idx_labels(uint32_t count, uint8_t bad_label = 0) {
  std::string bytes = be32(0x801) + be32(count);
  for (uint32_t i = 0; i < count; ++i) bytes.push_back(static_cast<char>((i * 3) % 10));
  if (bad_label != 0) bytes.back() = static_cast<char>(bad_label);
  return bytes;
}

TEST_F(MnistFiles, IdxFilesPlainAndGzipped) {
  write("train-images-idx3-ubyte", idx_images(6));
  write("train-labels-idx1-ubyte.gz", gzip_stored(idx_labels(6)));
  write("t10k-images-idx3-ubyte.gz", gzip_stored(idx_images(2)));
  write("t10k-labels-idx1-ubyte", idx_labels(2));
  const MNIST train(dir_.string(), Split::kTrain, /*normalize=*/false);  // the IDX files win over the CSV
  EXPECT_EQ(train.images().shape(), Shape({6, 1, 28, 28}));
  EXPECT_EQ(train.labels().to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6, 9, 2, 5}));
  EXPECT_EQ(train.images().at({1, 0, 0, 3}).to<float>(), static_cast<float>(((784 + 3) * 7) % 256) / 255.0f);
  EXPECT_NE(train.source().find("train-labels-idx1-ubyte.gz"), std::string::npos);
  const MNIST test = MNIST::from_idx(dir_.string(), Split::kTest);
  EXPECT_EQ(test.size(), 2);
  EXPECT_FLOAT_EQ(test.images().at({0, 0, 0, 1}).to<float>(), (7.0f / 255.0f - MNIST::kMean) / MNIST::kStd);
}

TEST_F(MnistFiles, CorruptIdxFilesGiveClearErrors) {
  const auto expect_idx_error = [&](const std::string& images, const std::string& labels,
                                    const std::vector<std::string>& parts) {
    write("train-images-idx3-ubyte", images);
    write("train-labels-idx1-ubyte", labels);
    expect_error([&] { MNIST::from_idx(dir_.string(), Split::kTrain); }, parts);
  };
  expect_idx_error(idx_labels(3), idx_labels(3), {"magic number 0x00000801, expected 0x00000803", "images"});
  expect_idx_error(idx_images(3), idx_images(3), {"magic number 0x00000803, expected 0x00000801", "labels"});
  expect_idx_error(idx_images(3, 28, 28, 10), idx_labels(3),
                   {"holds 2342 bytes of data but its header says 3 x 28 x 28 = 2352", "truncated"});
  expect_idx_error(idx_images(3), idx_labels(4), {"holds 3 images but", "holds 4 labels"});
  expect_idx_error(idx_images(2, 27, 28), idx_labels(2), {"27 x 28 pixels, expected 28 x 28"});
  expect_idx_error(idx_images(3), idx_labels(3, 12), {"label 12 of example 2 is not a digit"});
  expect_idx_error(be32(0x803) + be32(1), idx_labels(1), {"too few for its 16-byte IDX header"});
  expect_idx_error("", idx_labels(1), {"0 bytes, too few for an IDX header"});
  expect_idx_error(be32(0x803) + be32(0xffffffffu) + be32(0xffffffffu) + be32(28), idx_labels(1),
                   {"claiming more than"});
  fs::remove(path("train-labels-idx1-ubyte"));
  expect_error([&] { MNIST::from_idx(dir_.string(), Split::kTrain); },
               {"train-labels-idx1-ubyte' not found (nor 'train-labels-idx1-ubyte.gz')"});
}

}  // namespace
}  // namespace ember::data

namespace ember::data {
namespace {

TEST(RandomShift, MovesEachImageByItsOwnReplayableOffset) {
  // Each image holds one bright pixel at (2, 2) of a 5x5 plane; after the shift it sits at
  // (2 + dy, 2 + dx) with |dy|, |dx| <= 1, and everything else is the fill value.
  Tensor images = zeros({16, 1, 5, 5});
  for (int64_t i = 0; i < 16; ++i) images.select(0, i).select(0, 0).select(0, 2).select(0, 2).fill_(1.0);
  const Tensor a = random_shift(images, 1, -0.5, /*seed=*/3, /*stream=*/11);
  const Tensor b = random_shift(images, 1, -0.5, 3, 11);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), random_shift(images, 1, -0.5, 3, 12).to_vector<float>());
  int moved = 0;
  for (int64_t i = 0; i < 16; ++i) {
    const std::vector<float> plane = a.select(0, i).to_vector<float>();
    int ones = 0;
    for (int64_t p = 0; p < 25; ++p) {
      if (plane[p] == 1.0f) {
        ++ones;
        EXPECT_LE(std::abs(p / 5 - 2), 1);
        EXPECT_LE(std::abs(p % 5 - 2), 1);
        moved += p != 12;
      } else {
        EXPECT_TRUE(plane[p] == 0.0f || plane[p] == -0.5f) << plane[p];
      }
    }
    EXPECT_EQ(ones, 1);
  }
  EXPECT_GT(moved, 0);
  EXPECT_EQ(random_shift(images, 0, 9.0, 3, 11).to_vector<float>(), images.to_vector<float>());
  EXPECT_THROW(random_shift(zeros({5, 5}), 1, 0.0, 0, 0), Error);
  EXPECT_THROW(random_shift(images, -1, 0.0, 0, 0), Error);
}

}  // namespace
}  // namespace ember::data
