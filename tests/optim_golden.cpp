#include "optim_golden.h"

#include <stdexcept>
#include <utility>

namespace optim_golden {

using ember::Tensor;
using ember::optim::Optimizer;
using ember::optim::Options;
using ember::optim::ParamGroup;

double get_or(const json& options, const char* key, double fallback) {
  return options.contains(key) ? options.at(key).get<double>() : fallback;
}

Options to_options(const json& options) {
  Options out;
  for (const auto& [key, value] : options.items()) out[key] = value.get<double>();
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const json& o, std::vector<ParamGroup> groups) {
  using namespace ember::optim;
  if (name == "SGD") {
    SGDOptions d;
    d.lr = get_or(o, "lr", d.lr);
    d.momentum = get_or(o, "momentum", d.momentum);
    d.dampening = get_or(o, "dampening", d.dampening);
    d.weight_decay = get_or(o, "weight_decay", d.weight_decay);
    d.nesterov = get_or(o, "nesterov", 0) != 0;
    return std::make_unique<SGD>(std::move(groups), d);
  }
  if (name == "Adam" || name == "AdamW") {
    auto fill = [&](auto d) {
      d.lr = get_or(o, "lr", d.lr);
      d.beta1 = get_or(o, "beta1", d.beta1);
      d.beta2 = get_or(o, "beta2", d.beta2);
      d.eps = get_or(o, "eps", d.eps);
      d.weight_decay = get_or(o, "weight_decay", d.weight_decay);
      d.amsgrad = get_or(o, "amsgrad", 0) != 0;
      return d;
    };
    if (name == "Adam") return std::make_unique<Adam>(std::move(groups), fill(AdamOptions{}));
    return std::make_unique<AdamW>(std::move(groups), fill(AdamWOptions{}));
  }
  if (name == "Adagrad") {
    AdagradOptions d;
    d.lr = get_or(o, "lr", d.lr);
    d.lr_decay = get_or(o, "lr_decay", d.lr_decay);
    d.weight_decay = get_or(o, "weight_decay", d.weight_decay);
    d.initial_accumulator_value = get_or(o, "initial_accumulator_value", d.initial_accumulator_value);
    d.eps = get_or(o, "eps", d.eps);
    return std::make_unique<Adagrad>(std::move(groups), d);
  }
  if (name == "RMSprop") {
    RMSpropOptions d;
    d.lr = get_or(o, "lr", d.lr);
    d.alpha = get_or(o, "alpha", d.alpha);
    d.eps = get_or(o, "eps", d.eps);
    d.weight_decay = get_or(o, "weight_decay", d.weight_decay);
    d.momentum = get_or(o, "momentum", d.momentum);
    d.centered = get_or(o, "centered", 0) != 0;
    return std::make_unique<RMSprop>(std::move(groups), d);
  }
  throw std::runtime_error("unknown optimizer " + name);
}

std::vector<const json*> cases_of_kind(const std::string& kind) {
  std::vector<const json*> out;
  for (const json& c : golden::load("optim").at("cases")) {
    if (c.at("kind") == kind) out.push_back(&c);
  }
  return out;
}

Tensor non_contiguous_copy(const Tensor& t) {
  Tensor view;
  if (t.dim() >= 2) {
    ember::Shape shape = t.shape();
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    view = ember::zeros(shape, t.dtype()).transpose(-1, -2);
  } else {
    view = ember::zeros({t.numel() * 2}, t.dtype()).slice(0, std::nullopt, std::nullopt, 2);
  }
  view.copy_(t);
  EXPECT_FALSE(view.is_contiguous());
  return view;
}

OptimizerRun::OptimizerRun(const json& case_json, bool contiguous) : c(case_json) {
  for (const json& p : c.at("params")) {
    Tensor t = golden::decode_tensor(p);
    params.push_back((contiguous ? t : non_contiguous_copy(t)).requires_grad_(true));
  }
  optimizer = make(params);
}

std::unique_ptr<Optimizer> OptimizerRun::make(const std::vector<Tensor>& ps) const {
  std::vector<ParamGroup> groups;
  for (const json& overrides : c.at("groups")) groups.push_back(ParamGroup{{}, to_options(overrides)});
  const auto param_group = c.at("param_group").get<std::vector<size_t>>();
  for (size_t i = 0; i < ps.size(); ++i) groups[param_group[i]].params.push_back(ps[i]);
  return make_optimizer(c.at("optimizer").get<std::string>(), c.at("options"), std::move(groups));
}

void OptimizerRun::set_grads(const std::vector<Tensor>& ps, size_t s, bool contiguous) const {
  const json& row = c.at("grads").at(s);
  for (size_t i = 0; i < ps.size(); ++i) {
    if (row.at(i).is_null()) {
      ps[i].set_grad(Tensor());
    } else {
      const Tensor g = golden::decode_tensor(row.at(i));
      ps[i].set_grad(contiguous ? g : non_contiguous_copy(g));
    }
  }
}

golden::Tolerance optimizer_tolerance(ember::DType dtype) {
  return dtype == ember::kFloat64 ? golden::Tolerance{1e-6, 1e-9} : golden::Tolerance{1e-5, 1e-6};
}

}  // namespace optim_golden
