// The optimizer base: parameter groups and their options, per-parameter state, the step loop
// (no autograd recording, contiguous data, version bumps) and the state_dict round trip.
#include "ember/optim/optimizer.h"

#include <cmath>
#include <set>
#include <unordered_set>
#include <utility>

#include "ember/autograd.h"
#include "ember/ops.h"
#include "ember/phase.h"
#include "ops/dispatch.h"

namespace ember::optim {

double ParamGroup::option(const std::string& name) const {
  const auto it = options.find(name);
  EMBER_CHECK(it != options.end(), "[optim] param group has no option '", name, "'");
  return it->second;
}

Optimizer::Optimizer(std::string name, Options defaults, Validator validate, std::vector<ParamGroup> groups)
    : name_(std::move(name)), defaults_(std::move(defaults)), validate_(validate) {
  validate_(defaults_);
  EMBER_CHECK(!groups.empty(), "[", name_, "] got an empty parameter list");
  for (ParamGroup& group : groups) add_param_group(std::move(group));
}

ParamGroup Optimizer::complete(ParamGroup group, size_t index) const {
  for (const auto& [key, value] : group.options) {
    if (defaults_.count(key) != 0) continue;
    std::string known;
    for (const auto& [name, unused] : defaults_) known += (known.empty() ? "" : ", ") + name;
    EMBER_FAIL("[", name_, "] unknown option '", key, "' in param group ", index, "; ", name_, "'s options are ",
               known);
  }
  for (const auto& [key, value] : defaults_) group.options.emplace(key, value);  // keeps the group's overrides
  validate_(group.options);
  return group;
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t index = groups_.size();
  std::unordered_set<const TensorImpl*> seen;
  for (const ParamGroup& g : groups_) {
    for (const Tensor& p : g.params) seen.insert(p.impl_ptr().get());
  }
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    EMBER_CHECK(p.defined(), "[", name_, "] parameter ", i, " of param group ", index, " is an undefined tensor");
    EMBER_CHECK(p.is_leaf(), "[", name_, "] cannot optimize a non-leaf tensor: parameter ", i, " of param group ",
                index, " was computed by ", p.grad_fn()->name());
    EMBER_CHECK(p.dtype() == kFloat32 || p.dtype() == kFloat64, "[", name_, "] parameter ", i, " of param group ",
                index, " has dtype ", p.dtype(), "; optimizers update float32 or float64 parameters");
    EMBER_CHECK(seen.insert(p.impl_ptr().get()).second, "[", name_, "] parameter ", i, " of param group ", index,
                " appears more than once in the optimizer's param groups");
  }
  groups_.push_back(complete(std::move(group), index));
}

const ParamState* Optimizer::state(const Tensor& param) const {
  const auto it = state_.find(param.impl_ptr().get());
  return it == state_.end() ? nullptr : &it->second;
}

ParamState& Optimizer::state_for(const Tensor& param) { return state_[param.impl_ptr().get()]; }

bool Optimizer::step(const Tensor& skip_if) {
  autograd::NoGradGuard no_grad;
  const PhaseGuard phase(Phase::kOptimizer);
  bool stepped = false;
  {
    // The host part (Note [host attributes]): a compiled step replays it, then runs the updates.
    const Tensor* const reads[1] = {&skip_if};
    const dispatch::HostRegion host(
        name_.c_str(), [this, skip_if] { prepare(skip_if); },
        std::span<const Tensor* const>(reads, skip_if.defined() ? 1 : 0));
    stepped = prepare(skip_if);
  }
  for (const ParamGroup& group : groups_) {
    for (const Tensor& param : group.params) {
      const Tensor grad = param.grad();
      if (!grad.defined()) continue;
      const Tensor g = grad.contiguous();
      ParamState& state = state_for(param);
      const std::shared_ptr<dispatch::HostAttrs>& attrs = host_attrs_.at(param.impl_ptr().get());
      if (param.is_contiguous()) {
        run_update(group, param, g, state, attrs);
      } else {
        // The kernels need contiguous memory: update a contiguous copy and write it back.
        const Tensor work = param.contiguous();
        run_update(group, work, g, state, attrs);
        Tensor target = param;
        target.copy_(work);
      }
      param.bump_version();
    }
  }
  return stepped;
}

bool Optimizer::prepare(const Tensor& skip_if) {
  const bool skip = skip_if.defined() && skip_if.item<bool>();
  for (ParamGroup& group : groups_) {
    validate_(group.options);  // a scheduler or the user may have changed them since the last step
    prepare_group(group);
    for (const Tensor& param : group.params) {
      const Tensor grad = param.grad();
      if (!grad.defined()) continue;
      EMBER_CHECK(grad.dtype() == param.dtype() && grad.shape() == param.shape(), "[", name_, "] parameter of shape ",
                  param.shape(), " and dtype ", param.dtype(), " has a gradient of shape ", grad.shape(), " and dtype ",
                  grad.dtype());
      std::shared_ptr<dispatch::HostAttrs>& attrs = host_attrs_[param.impl_ptr().get()];
      if (!attrs) attrs = std::make_shared<dispatch::HostAttrs>();
      // The state is made even by a skipped step: a compiled step traced by one runs its updates later.
      attrs->attrs = prepare_update(group, param, state_for(param), skip);
      attrs->skip = skip;
    }
  }
  return !skip;
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard no_grad;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& param : group.params) {
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        if (dispatch::observed()) [[unlikely]]
          dispatch::notify_grad_slot(param, Tensor(), false);
        param.set_grad(Tensor());
      } else {
        if (dispatch::observed()) [[unlikely]]
          dispatch::notify_grad_slot(param, grad, true);
        if (!grad.is_leaf()) param.set_grad(grad = grad.detach());  // keep no history in .grad
        grad.zero_();
      }
    }
  }
}

// --- state_dict -----------------------------------------------------------------------------------

namespace {

std::string group_key(size_t g, const std::string& name) { return "param_groups." + std::to_string(g) + "." + name; }
std::string state_key(int64_t i, const std::string& name) { return "state." + std::to_string(i) + "." + name; }

bool has_prefix(const StateDict& dict, const std::string& prefix) {
  const auto it = dict.lower_bound(prefix);
  return it != dict.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict dict;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    for (const auto& [name, value] : group.options) dict[group_key(g, name)] = scalar_tensor(value, kFloat64);
    std::vector<int64_t> indices;
    for (const Tensor& param : group.params) {
      indices.push_back(index);
      const ParamState* st = state(param);
      if (st != nullptr && !st->buffers.empty()) {
        if (counts_steps()) dict[state_key(index, "step")] = scalar_tensor(static_cast<double>(st->step), kFloat64);
        // Only the buffers the current options use: exactly what load_state_dict expects back.
        for (const std::string& name : state_names(group.options)) {
          const auto it = st->buffers.find(name);
          if (it != st->buffers.end()) dict[state_key(index, name)] = it->second;
        }
      }
      ++index;
    }
    dict[group_key(g, "params")] = from_vector(indices);
  }
  return dict;
}

void Optimizer::load_state_dict(const StateDict& dict) {
  const std::string op = "[" + name_ + ".load_state_dict]";
  std::set<std::string> used;
  auto get = [&](const std::string& key) -> const Tensor& {
    const auto it = dict.find(key);
    EMBER_CHECK(it != dict.end(), op, " missing key '", key, "'");
    EMBER_CHECK(it->second.defined(), op, " key '", key, "' holds an undefined tensor");
    used.insert(key);
    return it->second;
  };
  auto number = [&](const std::string& key) -> double {
    const Tensor& t = get(key);
    EMBER_CHECK(t.numel() == 1, op, " '", key, "' must hold one number, got shape ", t.shape());
    return t.item<double>();
  };

  // Check everything first, so that a failure leaves the optimizer as it was.
  std::vector<Options> options(groups_.size());
  std::unordered_map<const TensorImpl*, ParamState> state;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    for (const auto& [name, unused] : group.options) options[g][name] = number(group_key(g, name));
    validate_(options[g]);

    const std::string params_key = group_key(g, "params");
    const Tensor& indices = get(params_key);
    const auto size = static_cast<int64_t>(group.params.size());
    EMBER_CHECK(indices.dim() == 1 && indices.numel() == size, op, " param group ", g, " has ", size,
                " parameters but '", params_key, "' has shape ", indices.shape());
    const std::vector<int64_t> saved = indices.to_vector<int64_t>();
    for (int64_t k = 0; k < size; ++k) {
      EMBER_CHECK(saved[k] == index + k, op, " '", params_key, "' lists parameter ", saved[k], " at position ", k,
                  ", expected ", index + k, " (the groups must hold the same parameters in the same order)");
    }

    for (const Tensor& param : group.params) {
      if (has_prefix(dict, "state." + std::to_string(index) + ".")) {
        ParamState st;
        if (counts_steps()) {
          const std::string key = state_key(index, "step");
          const double step = number(key);
          EMBER_CHECK(step >= 0 && step == std::floor(step) && step < 9.0e15, op, " '", key,
                      "' must be a non-negative whole number, got ", step);
          st.step = static_cast<int64_t>(step);
        }
        for (const std::string& name : state_names(options[g])) {
          const std::string key = state_key(index, name);
          const Tensor& saved_buffer = get(key);
          EMBER_CHECK(saved_buffer.shape() == param.shape(), op, " '", key, "' has shape ", saved_buffer.shape(),
                      " but parameter ", index, " has shape ", param.shape());
          EMBER_CHECK(saved_buffer.is_floating_point() && saved_buffer.device().is_cpu(), op, " '", key,
                      "' must be a floating-point CPU tensor, got dtype ", saved_buffer.dtype(), " on ",
                      saved_buffer.device());
          Tensor buffer = empty_like(param);
          buffer.copy_(saved_buffer);
          st.buffers.emplace(name, std::move(buffer));
        }
        // An optimizer that saves no step count (SGD) still counts its updates: loaded buffers have seen one.
        if (!counts_steps()) st.step = st.buffers.empty() ? 0 : 1;
        state.emplace(param.impl_ptr().get(), std::move(st));
      }
      ++index;
    }
  }
  for (const auto& [key, value] : dict) {
    EMBER_CHECK(used.count(key) != 0, op, " unexpected key '", key, "' (", name_, " has ", groups_.size(),
                " param groups and ", index, " parameters)");
  }

  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(options[g]);
  state_ = std::move(state);
}

}  // namespace ember::optim
