// Dataset's default batch (get each example, stack) and TensorDataset, whose batches are one
// index_select per tensor.
#include "ember/data.h"
#include "ember/ops.h"

namespace ember::data {

Batch Dataset::get_batch(std::span<const int64_t> indices) const {
  EMBER_CHECK(!indices.empty(), "[Dataset] get_batch needs at least one index");
  std::vector<Tensor> inputs;
  std::vector<Tensor> targets;
  inputs.reserve(indices.size());
  targets.reserve(indices.size());
  for (const int64_t index : indices) {
    Example example = get(index);
    inputs.push_back(std::move(example.input));
    targets.push_back(std::move(example.target));
  }
  return {stack(inputs), stack(targets)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  EMBER_CHECK(inputs_.defined() && targets_.defined(), "[TensorDataset] inputs and targets must be defined tensors");
  EMBER_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1,
              "[TensorDataset] inputs and targets need a dim 0 indexing the examples, got shapes ", inputs_.shape(),
              " and ", targets_.shape());
  EMBER_CHECK(inputs_.size(0) == targets_.size(0), "[TensorDataset] inputs of shape ", inputs_.shape(),
              " and targets of shape ", targets_.shape(), " hold different numbers of examples");
  EMBER_CHECK(inputs_.device() == targets_.device(), "[TensorDataset] inputs are on ", inputs_.device(),
              " but targets are on ", targets_.device());
}

Example TensorDataset::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), "[TensorDataset] index ", index, " is out of range for a dataset of ",
              size(), " examples");
  return {inputs_.select(0, index), targets_.select(0, index)};
}

Batch TensorDataset::get_batch(std::span<const int64_t> indices) const {
  for (const int64_t index : indices) {
    EMBER_CHECK(index >= 0 && index < size(), "[TensorDataset] index ", index, " is out of range for a dataset of ",
                size(), " examples");
  }
  const Tensor rows = from_vector(std::vector<int64_t>(indices.begin(), indices.end()));
  return {index_select(inputs_, 0, rows), index_select(targets_, 0, rows)};
}

}  // namespace ember::data
