// ZeroRedundancyOptimizer (ZeRO stage 1): each rank keeps and updates the optimizer state of its
// shard of the parameters; one all-gather then gives every rank every updated parameter.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "ember/autograd.h"
#include "ember/dist.h"
#include "ember/error.h"
#include "ember/ops.h"
#include "ember/optim/optimizer.h"

namespace ember::dist {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::ParamGroup> groups,
                                                 std::shared_ptr<ProcessGroup> group, const Factory& make)
    : num_groups_(groups.size()), group_(std::move(group)) {
  EMBER_CHECK(group_ != nullptr, "[zero] the process group is null");
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Tensor& p : groups[g].params) {
      params_.push_back(p);
      group_of_.push_back(g);
    }
  }
  EMBER_CHECK(!params_.empty(), "[zero] got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    EMBER_CHECK(p.defined() && p.device().is_cpu() && p.is_contiguous() && p.dtype() == params_[0].dtype() &&
                    (p.dtype() == kFloat32 || p.dtype() == kFloat64),
                "[zero] parameter ", i, " must be a contiguous float32 or float64 CPU tensor of the first one's dtype");
  }
  // Largest first, each to the rank with the fewest elements so far (the lowest such rank).
  std::vector<size_t> by_size(params_.size());
  std::iota(by_size.begin(), by_size.end(), size_t{0});
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(group_->world_size()), 0);
  owners_.assign(params_.size(), 0);
  for (size_t i : by_size) {
    const auto lightest = std::min_element(load.begin(), load.end());
    owners_[i] = static_cast<int>(lightest - load.begin());
    *lightest += params_[i].numel();
  }
  // This rank's groups: each group's own parameters, the empty ones left out.
  std::vector<optim::ParamGroup> local;
  for (size_t g = 0; g < groups.size(); ++g) {
    optim::ParamGroup mine{.params = {}, .options = groups[g].options};
    for (size_t i = 0; i < params_.size(); ++i) {
      if (group_of_[i] != g || owners_[i] != group_->rank()) continue;
      mine.params.push_back(params_[i]);
      local_to_global_.push_back(i);
    }
    if (mine.params.empty()) continue;
    local.push_back(std::move(mine));
    local_groups_.push_back(g);
  }
  if (!local.empty()) local_ = make(std::move(local));
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group,
                                                 const Factory& make)
    : ZeroRedundancyOptimizer(std::vector<optim::ParamGroup>{{.params = std::move(params), .options = {}}},
                              std::move(group), make) {}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

optim::Optimizer& ZeroRedundancyOptimizer::local_optimizer() {
  EMBER_CHECK(local_ != nullptr, "[zero] rank ", group_->rank(), " owns no parameters (", params_.size(),
              " parameters over ", group_->world_size(), " ranks)");
  return *local_;
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (Tensor grad = p.grad(); grad.defined()) {
      grad.zero_();
    }
  }
}

void ZeroRedundancyOptimizer::step() {
  if (local_) local_->step();
  // Each rank's shard, packed and padded to the largest shard: one all-gather.
  autograd::NoGradGuard no_grad;
  const int world = group_->world_size();
  std::vector<int64_t> shard_size(static_cast<size_t>(world), 0);
  for (size_t i = 0; i < params_.size(); ++i) shard_size[static_cast<size_t>(owners_[i])] += params_[i].numel();
  const int64_t largest = *std::max_element(shard_size.begin(), shard_size.end());
  const Tensor mine = zeros({largest}, params_[0].dtype());
  int64_t offset = 0;
  for (size_t i : local_to_global_) {
    mine.narrow(0, offset, params_[i].numel()).copy_(params_[i].reshape({-1}));
    offset += params_[i].numel();
  }
  const Tensor all = zeros({largest * world}, params_[0].dtype());
  group_->all_gather(all, mine)->wait();
  std::vector<int64_t> cursor(static_cast<size_t>(world), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const int owner = owners_[i];
    const int64_t begin = owner * largest + cursor[static_cast<size_t>(owner)];
    cursor[static_cast<size_t>(owner)] += params_[i].numel();
    if (owner == group_->rank()) continue;
    Tensor param = params_[i];
    param.copy_(all.narrow(0, begin, param.numel()).view(param.shape()));
  }
}

int64_t ZeroRedundancyOptimizer::local_state_bytes() const {
  if (!local_) return 0;
  int64_t bytes = 0;
  for (const auto& [name, t] : local_->state_dict()) {
    if (name.starts_with("state.")) bytes += t.numel() * dtype_size(t.dtype());
  }
  return bytes;
}

namespace {

// "<prefix><index>.<rest>" -> (index, rest); nullopt for keys without the prefix.
std::optional<std::pair<size_t, std::string>> split_key(const std::string& key, const std::string& prefix) {
  if (!key.starts_with(prefix)) return std::nullopt;
  const size_t dot = key.find('.', prefix.size());
  const std::string number =
      key.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
  EMBER_CHECK(dot != std::string::npos && !number.empty() && number.size() < 10 &&
                  number.find_first_not_of("0123456789") == std::string::npos,
              "[zero] malformed optimizer state key '", key, "'");
  return std::make_pair(static_cast<size_t>(std::stoull(number)), key.substr(dot + 1));
}

// A string through a broadcast (as int64 words) from `root`.
std::string broadcast_string(ProcessGroup& group, const std::string& text, int root) {
  const Tensor length = from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())});
  group.broadcast(length, root)->wait();
  const int64_t size = static_cast<const int64_t*>(length.data_ptr())[0];
  const Tensor words = zeros({std::max<int64_t>((size + 7) / 8, 1)}, kInt64);
  if (group.rank() == root) std::copy(text.begin(), text.end(), static_cast<char*>(words.data_ptr()));
  group.broadcast(words, root)->wait();
  return std::string(static_cast<const char*>(words.data_ptr()), static_cast<size_t>(size));
}

}  // namespace

StateDict ZeroRedundancyOptimizer::consolidated_state_dict() {
  StateDict out;
  for (int r = 0; r < group_->world_size(); ++r) {
    // Rank r's entries, renumbered globally: their names, dtypes and shapes first, then the values.
    std::vector<std::pair<std::string, Tensor>> entries;
    if (r == group_->rank() && local_) {
      for (const auto& [key, value] : local_->state_dict()) {
        if (const auto state = split_key(key, "state.")) {
          entries.emplace_back("state." + std::to_string(local_to_global_[state->first]) + "." + state->second,
                               value.contiguous());
        } else if (const auto option = split_key(key, "param_groups."); option && option->second != "params") {
          entries.emplace_back("param_groups." + std::to_string(local_groups_[option->first]) + "." + option->second,
                               value.contiguous());
        }
      }
    }
    std::ostringstream header;
    for (const auto& [key, value] : entries) {
      header << key << '\t' << static_cast<int>(value.dtype()) << '\t' << value.dim();
      for (int64_t size : value.shape()) header << '\t' << size;
      header << '\n';
    }
    std::istringstream lines(broadcast_string(*group_, header.str(), r));
    std::string line;
    size_t index = 0;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string key;
      int dtype = 0;
      int64_t dim = 0;
      std::getline(fields, key, '\t');
      fields >> dtype >> dim;
      std::vector<int64_t> shape(static_cast<size_t>(dim));
      for (int64_t& size : shape) fields >> size;
      Tensor value = r == group_->rank() ? entries[index].second : zeros(Shape(shape), static_cast<DType>(dtype));
      // Broadcasts carry float32, float64 and int64: other dtypes (none in the optimizers) go as float64.
      const bool direct = value.dtype() == kFloat32 || value.dtype() == kFloat64 || value.dtype() == kInt64;
      Tensor wire = direct ? value : value.to(kFloat64);
      if (wire.numel() > 0) group_->broadcast(wire.reshape({-1}), r)->wait();
      out.emplace(key, direct ? wire : wire.to(value.dtype()));  // a group's options: the first rank's
      ++index;
    }
  }
  // Each group of the unsharded optimizer holds its parameters, numbered across groups.
  for (size_t g = 0; g < num_groups_; ++g) {
    std::vector<int64_t> members;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (group_of_[i] == g) members.push_back(static_cast<int64_t>(i));
    }
    out["param_groups." + std::to_string(g) + ".params"] = from_vector(members);
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& state_dict) {
  std::vector<int64_t> local_of(params_.size(), -1);
  for (size_t j = 0; j < local_to_global_.size(); ++j) local_of[local_to_global_[j]] = static_cast<int64_t>(j);
  std::vector<int64_t> local_group_of(num_groups_, -1);
  for (size_t lg = 0; lg < local_groups_.size(); ++lg) local_group_of[local_groups_[lg]] = static_cast<int64_t>(lg);
  StateDict local;
  for (const auto& [key, value] : state_dict) {
    if (const auto state = split_key(key, "state.")) {
      EMBER_CHECK(state->first < params_.size(), "[zero] the state dict has state for parameter ", state->first, " of ",
                  params_.size());
      const int64_t j = local_of[state->first];
      if (j >= 0) local["state." + std::to_string(j) + "." + state->second] = value;
    } else if (const auto option = split_key(key, "param_groups.")) {
      EMBER_CHECK(option->first < num_groups_, "[zero] the state dict has options for group ", option->first, " of ",
                  num_groups_);
      const int64_t lg = local_group_of[option->first];
      if (lg >= 0 && option->second != "params")
        local["param_groups." + std::to_string(lg) + "." + option->second] = value;
    } else {
      EMBER_FAIL("[zero] unexpected key '", key, "' in the optimizer's state dict");
    }
  }
  if (!local_) return;
  int64_t next = 0;
  for (size_t lg = 0; lg < local_groups_.size(); ++lg) {
    const size_t size = local_->param_groups()[lg].params.size();
    std::vector<int64_t> indices(size);
    std::iota(indices.begin(), indices.end(), next);
    next += static_cast<int64_t>(size);
    local["param_groups." + std::to_string(lg) + ".params"] = from_vector(indices);
  }
  local_->load_state_dict(local);
}

}  // namespace ember::dist
