// ember.optim: the fused optimizers and the learning-rate schedulers, with PyTorch's constructor
// arguments. Parameters come as an iterable of tensors or as a list of param-group dicts
// ({"params": [...], "lr": ...}); "betas" is (beta1, beta2) as in PyTorch.
#include "ember/optim.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>

#include "bindings.h"

namespace ember::python {
namespace {

using optim::Optimizer;
using optim::Options;
using optim::ParamGroup;

void set_option(Options& options, const std::string& key, nb::handle value, const char* op) {
  if (key == "betas") {
    const auto betas = nb::cast<std::pair<double, double>>(value);
    options["beta1"] = betas.first;
    options["beta2"] = betas.second;
  } else if (PyBool_Check(value.ptr())) {
    options[key] = value.ptr() == Py_True ? 1.0 : 0.0;
  } else {
    double v = 0;
    if (!nb::try_cast<double>(value, v)) {
      throw nb::type_error(("[" + std::string(op) + "] option \"" + key + "\" must be a number").c_str());
    }
    options[key] = v;
  }
}

std::vector<Tensor> tensors_of(nb::handle params, const char* op) {
  std::vector<Tensor> out;
  for (nb::handle p : nb::iter(params)) {
    Tensor t;
    if (!nb::try_cast<Tensor>(p, t))
      throw nb::type_error((std::string("[") + op + "] parameters must be tensors").c_str());
    out.push_back(t);
  }
  return out;
}

// Tensors, or dicts with "params" and per-group options.
std::vector<ParamGroup> groups_of(nb::handle params, const char* op) {
  nb::list items = nb::list(params);
  const bool dicts = nb::len(items) > 0 && nb::isinstance<nb::dict>(items[0]);
  if (!dicts) return {ParamGroup{tensors_of(items, op), {}}};
  std::vector<ParamGroup> groups;
  for (nb::handle item : items) {
    if (!nb::isinstance<nb::dict>(item))
      throw nb::type_error((std::string("[") + op + "] param groups must all be dicts").c_str());
    ParamGroup group;
    for (auto [key, value] : nb::borrow<nb::dict>(item)) {
      const std::string name = nb::cast<std::string>(key);
      if (name == "params") {
        group.params = tensors_of(value, op);
      } else {
        set_option(group.options, name, value, op);
      }
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

// Keyword arguments over a C++ options struct's defaults, as a map the optimizer validates.
Options options_of(Options defaults, const nb::kwargs& kwargs, const char* op) {
  for (auto [key, value] : kwargs) {
    const std::string name = nb::cast<std::string>(key);
    if (name != "betas" && defaults.find(name) == defaults.end()) {
      throw nb::type_error(("[" + std::string(op) + "] unexpected argument \"" + name + "\"").c_str());
    }
    set_option(defaults, name, value, op);
  }
  return defaults;
}

// Each group gets the constructor's options where it does not set its own.
std::vector<ParamGroup> with_defaults(std::vector<ParamGroup> groups, const Options& defaults) {
  for (ParamGroup& g : groups) {
    for (const auto& [key, value] : defaults) g.options.emplace(key, value);
  }
  return groups;
}

// The constructor's Python signature, for help() and the stubs: PyTorch's keyword arguments with
// ember's defaults (the binding itself takes **kwargs and checks the names).
const char* signature(const Options& defaults) {
  std::string text =
      "def __init__(self, params: collections.abc.Iterable[ember._ember.Tensor] | "
      "collections.abc.Iterable[dict], *";
  char number[32];
  for (const auto& [key, value] : defaults) {
    if (key == "beta2") continue;
    std::snprintf(number, sizeof number, "%g", value);
    if (key == "beta1") {
      char beta2[32];
      std::snprintf(beta2, sizeof beta2, "%g", defaults.at("beta2"));
      text += std::string(", betas: tuple[float, float] = (") + number + ", " + beta2 + ")";
    } else if (key == "nesterov" || key == "amsgrad" || key == "centered") {
      text += ", " + key + ": bool = " + (value != 0 ? "True" : "False");
    } else {
      text += ", " + key + ": float = " + number;
    }
  }
  text += ") -> None";
  return (new std::string(text))->c_str();  // nb::sig keeps the pointer: one per class, for good
}

template <class O, class Opts>
void bind_optimizer(nb::module_& m, const char* name, Options defaults, Opts (*make_defaults)(const Options&)) {
  nb::class_<O, Optimizer>(m, name).def(
      "__init__",
      [defaults, make_defaults, name](O* self, nb::handle params, nb::kwargs kwargs) {
        const Options options = options_of(defaults, kwargs, name);
        new (self) O(with_defaults(groups_of(params, name), options), make_defaults(options));
      },
      nb::sig(signature(defaults)), "params"_a, "kwargs"_a);
}

double get(const Options& o, const char* key) { return o.at(key); }

}  // namespace

void bind_optim(nb::module_& top) {
  nb::module_ m = top.def_submodule("optim", "Optimizers and learning-rate schedulers (torch.optim)");

  nb::class_<ParamGroup>(m, "ParamGroup", "One param group: group[\"lr\"] reads and sets its options.")
      .def("__getitem__",
           [](const ParamGroup& g, const std::string& key) -> nb::object {
             if (key == "params") return nb::cast(g.params);
             if (key == "betas") return nb::make_tuple(g.option("beta1"), g.option("beta2"));
             return nb::float_(g.option(key));
           })
      .def("__setitem__",
           [](ParamGroup& g, const std::string& key, nb::handle value) {
             if (key == "params") {
               g.params = tensors_of(value, "ParamGroup");
             } else {
               set_option(g.options, key, value, "ParamGroup");
             }
           })
      .def("keys",
           [](const ParamGroup& g) {
             nb::list keys;
             keys.append("params");
             for (const auto& [key, value] : g.options) keys.append(key);
             return keys;
           })
      .def("__repr__", [](const ParamGroup& g) {
        return "ParamGroup(" + std::to_string(g.params.size()) + " params, " +
               std::string(nb::str(nb::cast(g.options)).c_str()) + ")";
      });

  nb::class_<Optimizer>(m, "Optimizer")
      .def(
          "step", [](Optimizer& o) { o.step(); }, nb::call_guard<Release>())
      .def("zero_grad", &Optimizer::zero_grad, "set_to_none"_a = true, nb::call_guard<Release>())
      .def_prop_ro(
          "param_groups", [](Optimizer& o) -> std::vector<ParamGroup>& { return o.param_groups(); },
          nb::rv_policy::reference_internal)
      .def_prop_ro("defaults", &Optimizer::defaults)
      .def(
          "add_param_group",
          [](Optimizer& o, nb::dict group) {
            o.add_param_group(groups_of(nb::make_tuple(group), o.name().c_str()).at(0));
          },
          "param_group"_a)
      .def("state_dict", &Optimizer::state_dict, nb::call_guard<Release>())
      .def("load_state_dict", &Optimizer::load_state_dict, "state_dict"_a, nb::call_guard<Release>())
      .def("__repr__",
           [](const Optimizer& o) { return o.name() + "(" + std::to_string(o.param_groups().size()) + " groups)"; });

  bind_optimizer<optim::SGD>(
      m, "SGD", {{"lr", 1e-3}, {"momentum", 0}, {"dampening", 0}, {"weight_decay", 0}, {"nesterov", 0}},
      +[](const Options& o) {
        return optim::SGDOptions{.lr = get(o, "lr"),
                                 .momentum = get(o, "momentum"),
                                 .dampening = get(o, "dampening"),
                                 .weight_decay = get(o, "weight_decay"),
                                 .nesterov = get(o, "nesterov") != 0};
      });
  bind_optimizer<optim::Adam>(
      m, "Adam", {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0}, {"amsgrad", 0}},
      +[](const Options& o) {
        return optim::AdamOptions{.lr = get(o, "lr"),
                                  .beta1 = get(o, "beta1"),
                                  .beta2 = get(o, "beta2"),
                                  .eps = get(o, "eps"),
                                  .weight_decay = get(o, "weight_decay"),
                                  .amsgrad = get(o, "amsgrad") != 0};
      });
  bind_optimizer<optim::AdamW>(
      m, "AdamW",
      {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 1e-2}, {"amsgrad", 0}},
      +[](const Options& o) {
        return optim::AdamWOptions{.lr = get(o, "lr"),
                                   .beta1 = get(o, "beta1"),
                                   .beta2 = get(o, "beta2"),
                                   .eps = get(o, "eps"),
                                   .weight_decay = get(o, "weight_decay"),
                                   .amsgrad = get(o, "amsgrad") != 0};
      });
  bind_optimizer<optim::Adagrad>(
      m, "Adagrad",
      {{"lr", 1e-2}, {"lr_decay", 0}, {"weight_decay", 0}, {"initial_accumulator_value", 0}, {"eps", 1e-10}},
      +[](const Options& o) {
        return optim::AdagradOptions{.lr = get(o, "lr"),
                                     .lr_decay = get(o, "lr_decay"),
                                     .weight_decay = get(o, "weight_decay"),
                                     .initial_accumulator_value = get(o, "initial_accumulator_value"),
                                     .eps = get(o, "eps")};
      });
  bind_optimizer<optim::RMSprop>(
      m, "RMSprop",
      {{"lr", 1e-2}, {"alpha", 0.99}, {"eps", 1e-8}, {"weight_decay", 0}, {"momentum", 0}, {"centered", 0}},
      +[](const Options& o) {
        return optim::RMSpropOptions{.lr = get(o, "lr"),
                                     .alpha = get(o, "alpha"),
                                     .eps = get(o, "eps"),
                                     .weight_decay = get(o, "weight_decay"),
                                     .momentum = get(o, "momentum"),
                                     .centered = get(o, "centered") != 0};
      });

  // --- schedulers: each keeps its optimizer alive -------------------------------------------------
  nb::module_ s = m.def_submodule("lr_scheduler", "Learning-rate schedules (torch.optim.lr_scheduler)");
  nb::class_<optim::LRScheduler>(s, "LRScheduler")
      .def("step", &optim::LRScheduler::step)
      .def("get_last_lr", &optim::LRScheduler::get_last_lr)
      .def_prop_ro("last_epoch", &optim::LRScheduler::last_epoch)
      .def_prop_ro("base_lrs", &optim::LRScheduler::base_lrs)
      .def("state_dict", &optim::LRScheduler::state_dict)
      .def("load_state_dict", &optim::LRScheduler::load_state_dict, "state_dict"_a);
  nb::class_<optim::StepLR, optim::LRScheduler>(s, "StepLR")
      .def(nb::init<Optimizer&, int64_t, double>(), "optimizer"_a, "step_size"_a, "gamma"_a = 0.1,
           nb::keep_alive<1, 2>());
  nb::class_<optim::CosineAnnealingLR, optim::LRScheduler>(s, "CosineAnnealingLR")
      .def(nb::init<Optimizer&, int64_t, double>(), "optimizer"_a, "T_max"_a, "eta_min"_a = 0.0,
           nb::keep_alive<1, 2>());
  nb::class_<optim::LinearLR, optim::LRScheduler>(s, "LinearLR")
      .def(nb::init<Optimizer&, double, double, int64_t>(), "optimizer"_a, "start_factor"_a = 1.0 / 3,
           "end_factor"_a = 1.0, "total_iters"_a = 5, nb::keep_alive<1, 2>());
  nb::class_<optim::OneCycleLR, optim::LRScheduler>(s, "OneCycleLR")
      .def(
          "__init__",
          [](optim::OneCycleLR* self, Optimizer& optimizer, double max_lr, int64_t total_steps, double pct_start,
             std::string anneal_strategy, bool cycle_momentum, double base_momentum, double max_momentum,
             double div_factor, double final_div_factor, bool three_phase) {
            new (self) optim::OneCycleLR(optimizer, max_lr,
                                         optim::OneCycleLROptions{.total_steps = total_steps,
                                                                  .pct_start = pct_start,
                                                                  .anneal_strategy = std::move(anneal_strategy),
                                                                  .cycle_momentum = cycle_momentum,
                                                                  .base_momentum = base_momentum,
                                                                  .max_momentum = max_momentum,
                                                                  .div_factor = div_factor,
                                                                  .final_div_factor = final_div_factor,
                                                                  .three_phase = three_phase});
          },
          "optimizer"_a, "max_lr"_a, "total_steps"_a, "pct_start"_a = 0.3, "anneal_strategy"_a = "cos",
          "cycle_momentum"_a = true, "base_momentum"_a = 0.85, "max_momentum"_a = 0.95, "div_factor"_a = 25.0,
          "final_div_factor"_a = 1e4, "three_phase"_a = false, nb::keep_alive<1, 2>());

  m.def(
      "clip_grad_norm_",
      [](nb::handle params, double max_norm, double norm_type, bool error_if_nonfinite) {
        const std::vector<Tensor> tensors = tensors_of(params, "clip_grad_norm_");
        const Release release;
        return optim::clip_grad_norm_(tensors, max_norm, norm_type, error_if_nonfinite);
      },
      "parameters"_a, "max_norm"_a, "norm_type"_a = 2.0, "error_if_nonfinite"_a = false);
}

}  // namespace ember::python
