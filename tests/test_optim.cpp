// Optimizers, schedulers and gradient clipping: schedulers and clipping against PyTorch
// (tests/golden/optim.json, made by cases_optim.py), and what the golden data cannot show:
// checkpoint round trips that must be bit-identical, parameter groups, thread-count independence,
// and error messages. Every optimizer's steps against PyTorch, with contiguous and non-contiguous
// parameters, are the forward checks of the update ops they run (tests/ops_optim.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ember/io.h"
#include "ember/optim.h"
#include "golden.h"
#include "optim_golden.h"
#include "test_util.h"

using ember::Tensor;
using ember::optim::Optimizer;
using ember::optim::ParamGroup;
using golden::json;
using optim_golden::cases_of_kind;
using optim_golden::get_or;
using optim_golden::make_optimizer;
using optim_golden::OptimizerRun;
using test_util::bitwise_equal;

namespace {

// Copies every tensor, as writing a checkpoint does (state_dict() aliases the optimizer's state).
ember::StateDict snapshot(const ember::StateDict& dict) {
  ember::StateDict out;
  for (const auto& [key, value] : dict) out[key] = value.clone();
  return out;
}

using test_util::error_of;

#define EXPECT_ERROR_CONTAINS(statement, text) EXPECT_THAT_ERROR(error_of([&] { statement; }), text)
#define EXPECT_THAT_ERROR(message, text) \
  EXPECT_NE((message).find(text), std::string::npos) << "message: " << (message) << "\nexpected to contain: " << (text)

}  // namespace

// --- optimizers ----------------------------------------------------------------------------------------
// Every step of every optimizer case of optim.json, against PyTorch, is the forward check of the
// update op the optimizer runs (sgd_step, adam_step, adagrad_step, rmsprop_step: tests/ops_optim.cpp).

TEST(OptimGolden, StepBumpsVersionAndRecordsNoHistory) {
  Tensor p = ember::ones({3}).requires_grad_(true);
  ember::optim::SGD sgd({p}, {.lr = 0.5});
  p.set_grad(ember::full({3}, 2.0f));
  const uint32_t before = p.version();
  sgd.step();
  EXPECT_GT(p.version(), before);
  EXPECT_TRUE(p.is_leaf());
  EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(p.to_vector<float>(), std::vector<float>({0.0f, 0.0f, 0.0f}));
  // A parameter without a gradient is skipped, as in PyTorch.
  p.set_grad(Tensor());
  const uint32_t unchanged = p.version();
  sgd.step();
  EXPECT_EQ(p.version(), unchanged);
}

TEST(OptimGolden, ZeroGrad) {
  Tensor p = ember::ones({2, 2}).requires_grad_(true);
  ember::optim::Adam adam({p});
  p.set_grad(ember::ones({2, 2}));
  adam.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(p.grad().to_vector<float>(), std::vector<float>(4, 0.0f));
  adam.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(OptimGolden, ParamGroupsCarryTheirOwnOptions) {
  Tensor a = ember::zeros({2}).requires_grad_(true);
  Tensor b = ember::zeros({2}).requires_grad_(true);
  ember::optim::SGD sgd(std::vector<ParamGroup>{{{a}, {}}, {{b}, {{"lr", 0.5}, {"momentum", 0.9}}}}, {.lr = 0.1});
  ASSERT_EQ(sgd.param_groups().size(), 2u);
  EXPECT_EQ(sgd.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(sgd.param_groups()[0].option("momentum"), 0.0);
  EXPECT_EQ(sgd.param_groups()[1].lr(), 0.5);
  EXPECT_EQ(sgd.param_groups()[1].option("momentum"), 0.9);
  sgd.param_groups()[0].set_lr(1.0);
  a.set_grad(ember::ones({2}));
  b.set_grad(ember::ones({2}));
  sgd.step();
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>({-1.0f, -1.0f}));
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>({-0.5f, -0.5f}));
  EXPECT_EQ(sgd.state(a)->buffers.size(), 0u);
  EXPECT_EQ(sgd.state(b)->buffers.count("momentum_buffer"), 1u);
}

// Large parameters run on several threads; the result must not depend on the thread count, and
// every element (including a ragged tail) must get the update.
TEST(OptimGolden, ThreadCountDoesNotChangeResults) {
  const int64_t n = (1 << 18) + 13;
  ember::manual_seed(7);
  const Tensor initial = ember::randn({n});
  const Tensor grad = ember::randn({n});
  auto run = [&](int threads) {
    ember::set_num_threads(threads);
    Tensor p = initial.clone().requires_grad_(true);
    ember::optim::Adam adam({p}, {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
    for (int s = 0; s < 3; ++s) {
      p.set_grad(grad.mul(static_cast<double>(s + 1)));
      adam.step();
    }
    return p.detach();
  };
  const int original = ember::get_num_threads();
  const Tensor one = run(1);
  const Tensor two = run(2);
  const Tensor three = run(3);
  ember::set_num_threads(original);
  EXPECT_TRUE(bitwise_equal(one, two));
  EXPECT_TRUE(bitwise_equal(one, three));
  // The first step of Adam moves every element by about lr (m / sqrt(v) = sign(g)).
  const Tensor moved = ember::abs(one - initial);
  EXPECT_GT(ember::amin(moved).item<double>(), 0.0);
}

// --- checkpoints --------------------------------------------------------------------------------------

// 5 steps, state saved (copied), a fresh optimizer loads it, 5 more steps: bit-identical to 10
// uninterrupted steps, for every golden configuration in both dtypes.
TEST(OptimCheckpoint, ResumeIsBitIdentical) {
  for (const json* c : cases_of_kind("optimizer")) {
    SCOPED_TRACE(c->at("name").get<std::string>());
    OptimizerRun straight(*c, true);
    const size_t steps = c->at("grads").size();
    const size_t half = steps / 2;
    std::vector<Tensor> params_at_half;
    ember::StateDict saved;
    for (size_t s = 0; s < steps; ++s) {
      if (s == half) {
        saved = snapshot(straight.optimizer->state_dict());
        for (const Tensor& p : straight.params) params_at_half.push_back(p.detach().clone());
      }
      straight.set_grads(straight.params, s);
      straight.optimizer->step();
    }

    std::vector<Tensor> resumed_params;
    for (const Tensor& p : params_at_half) resumed_params.push_back(p.clone().requires_grad_(true));
    std::unique_ptr<Optimizer> resumed = straight.make(resumed_params);
    resumed->load_state_dict(saved);
    for (size_t s = half; s < steps; ++s) {
      straight.set_grads(resumed_params, s);
      resumed->step();
    }
    for (size_t i = 0; i < resumed_params.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(resumed_params[i], straight.params[i])) << "parameter " << i;
    }
  }
}

TEST(OptimCheckpoint, StateDictLayout) {
  Tensor a = ember::zeros({2, 3}, ember::kFloat64).requires_grad_(true);
  Tensor b = ember::zeros({4}, ember::kFloat64).requires_grad_(true);
  Tensor unused = ember::zeros({5}, ember::kFloat64).requires_grad_(true);
  ember::optim::Adam adam(std::vector<ParamGroup>{{{a, unused}, {}}, {{b}, {{"amsgrad", 1}}}}, {.lr = 0.01});
  a.set_grad(ember::ones({2, 3}, ember::kFloat64));
  b.set_grad(ember::ones({4}, ember::kFloat64));
  adam.step();
  adam.step();
  const ember::StateDict dict = adam.state_dict();
  std::vector<std::string> keys;
  for (const auto& [key, value] : dict) keys.push_back(key);
  const std::vector<std::string> expected = {"param_groups.0.amsgrad",
                                             "param_groups.0.beta1",
                                             "param_groups.0.beta2",
                                             "param_groups.0.eps",
                                             "param_groups.0.lr",
                                             "param_groups.0.params",
                                             "param_groups.0.weight_decay",
                                             "param_groups.1.amsgrad",
                                             "param_groups.1.beta1",
                                             "param_groups.1.beta2",
                                             "param_groups.1.eps",
                                             "param_groups.1.lr",
                                             "param_groups.1.params",
                                             "param_groups.1.weight_decay",
                                             "state.0.exp_avg",
                                             "state.0.exp_avg_sq",
                                             "state.0.step",
                                             "state.2.exp_avg",
                                             "state.2.exp_avg_sq",
                                             "state.2.max_exp_avg_sq",
                                             "state.2.step"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(dict.at("state.0.step").dtype(), ember::kFloat64);
  EXPECT_EQ(dict.at("state.0.step").dim(), 0);
  EXPECT_EQ(dict.at("state.0.step").item<double>(), 2.0);
  EXPECT_EQ(dict.at("param_groups.0.lr").dtype(), ember::kFloat64);
  EXPECT_EQ(dict.at("param_groups.0.lr").item<double>(), 0.01);
  EXPECT_EQ(dict.at("param_groups.1.amsgrad").item<double>(), 1.0);
  EXPECT_EQ(dict.at("param_groups.0.params").to_vector<int64_t>(), std::vector<int64_t>({0, 1}));
  EXPECT_EQ(dict.at("param_groups.1.params").to_vector<int64_t>(), std::vector<int64_t>({2}));
  EXPECT_EQ(dict.at("state.2.exp_avg").shape(), ember::Shape({4}));
}

// As in PyTorch, Adagrad's state exists from construction (the accumulator at its initial value).
TEST(OptimCheckpoint, AdagradStateFromConstruction) {
  Tensor p = ember::zeros({2, 2}).requires_grad_(true);
  ember::optim::Adagrad adagrad({p}, {.initial_accumulator_value = 0.25});
  const ember::StateDict dict = adagrad.state_dict();
  ASSERT_EQ(dict.count("state.0.sum"), 1u);
  EXPECT_EQ(dict.at("state.0.sum").to_vector<float>(), std::vector<float>(4, 0.25f));
  EXPECT_EQ(dict.at("state.0.step").item<double>(), 0.0);
}

// The full path: optimizer and scheduler state through a safetensors file, then training resumes.
TEST(OptimCheckpoint, ThroughSafetensors) {
  const auto path = (std::filesystem::temp_directory_path() / "ember_optim_checkpoint.safetensors").string();
  ember::manual_seed(3);
  const Tensor init = ember::randn({7, 5});
  std::vector<Tensor> grads;
  for (int s = 0; s < 8; ++s) grads.push_back(ember::randn({7, 5}));

  auto train = [&](Tensor& p, ember::optim::AdamW& opt, ember::optim::CosineAnnealingLR& sched, int from, int to) {
    for (int s = from; s < to; ++s) {
      p.set_grad(grads[s]);
      opt.step();
      sched.step();
    }
  };
  Tensor p = init.clone().requires_grad_(true);
  ember::optim::AdamW opt({p}, {.lr = 0.05, .amsgrad = true});
  ember::optim::CosineAnnealingLR sched(opt, 6, 0.001);
  train(p, opt, sched, 0, 4);
  ember::StateDict checkpoint;
  for (const auto& [k, v] : opt.state_dict()) checkpoint["optimizer." + k] = v;
  for (const auto& [k, v] : sched.state_dict()) checkpoint["scheduler." + k] = v;
  checkpoint["model.p"] = p.detach();
  ember::save(checkpoint, path);
  train(p, opt, sched, 4, 8);

  const ember::StateDict loaded = ember::load(path);
  std::remove(path.c_str());
  Tensor q = loaded.at("model.p").clone().requires_grad_(true);
  ember::optim::AdamW opt2({q}, {.lr = 0.05, .amsgrad = true});
  ember::optim::CosineAnnealingLR sched2(opt2, 6, 0.001);
  ember::StateDict opt_state;
  ember::StateDict sched_state;
  for (const auto& [k, v] : loaded) {
    if (k.rfind("optimizer.", 0) == 0) opt_state[k.substr(10)] = v;
    if (k.rfind("scheduler.", 0) == 0) sched_state[k.substr(10)] = v;
  }
  opt2.load_state_dict(opt_state);
  sched2.load_state_dict(sched_state);
  EXPECT_EQ(opt2.param_groups()[0].lr(), sched2.get_last_lr()[0]);
  train(q, opt2, sched2, 4, 8);
  EXPECT_TRUE(bitwise_equal(p, q));
  EXPECT_EQ(opt.param_groups()[0].lr(), opt2.param_groups()[0].lr());
}

TEST(OptimCheckpoint, LoadErrorsLeaveTheOptimizerUnchanged) {
  Tensor p = ember::zeros({3, 2}).requires_grad_(true);
  ember::optim::Adam adam({p}, {.lr = 0.1});
  p.set_grad(ember::ones({3, 2}));
  adam.step();
  const ember::StateDict good = snapshot(adam.state_dict());

  Tensor fresh_param = ember::zeros({3, 2}).requires_grad_(true);
  ember::optim::Adam fresh({fresh_param}, {.lr = 0.5});

  ember::StateDict missing = good;
  missing.erase("state.0.exp_avg_sq");
  EXPECT_ERROR_CONTAINS(fresh.load_state_dict(missing), "[Adam.load_state_dict] missing key 'state.0.exp_avg_sq'");

  ember::StateDict missing_option = good;
  missing_option.erase("param_groups.0.beta2");
  EXPECT_ERROR_CONTAINS(fresh.load_state_dict(missing_option), "missing key 'param_groups.0.beta2'");

  ember::StateDict wrong_shape = good;
  wrong_shape["state.0.exp_avg"] = ember::zeros({2, 3});
  EXPECT_ERROR_CONTAINS(fresh.load_state_dict(wrong_shape),
                        "'state.0.exp_avg' has shape [2, 3] but parameter 0 has shape [3, 2]");

  ember::StateDict extra = good;
  extra["state.1.exp_avg"] = ember::zeros({3, 2});
  EXPECT_ERROR_CONTAINS(fresh.load_state_dict(extra), "unexpected key 'state.1.exp_avg'");

  ember::StateDict bad_value = good;
  bad_value["param_groups.0.beta1"] = ember::scalar_tensor(1.5, ember::kFloat64);
  EXPECT_ERROR_CONTAINS(fresh.load_state_dict(bad_value), "[Adam] invalid beta1: 1.5");

  // Nothing was loaded by the failed attempts.
  EXPECT_EQ(fresh.param_groups()[0].lr(), 0.5);
  EXPECT_EQ(fresh.state(fresh_param), nullptr);

  // A state dict of another optimizer (different parameter count, or other state names).
  Tensor x = ember::zeros({3, 2}).requires_grad_(true);
  Tensor y = ember::zeros({3}).requires_grad_(true);
  ember::optim::Adam two({x, y});
  EXPECT_ERROR_CONTAINS(two.load_state_dict(good), "param group 0 has 2 parameters");
  ember::optim::SGD sgd({fresh_param}, {.momentum = 0.9});
  EXPECT_ERROR_CONTAINS(sgd.load_state_dict(good), "[SGD.load_state_dict] missing key 'param_groups.0.dampening'");

  // The good one loads, converting dtypes to the parameter's.
  fresh.load_state_dict(good);
  EXPECT_EQ(fresh.param_groups()[0].lr(), 0.1);
  ASSERT_NE(fresh.state(fresh_param), nullptr);
  EXPECT_EQ(fresh.state(fresh_param)->step, 1);
  Tensor p64 = ember::zeros({3, 2}, ember::kFloat64).requires_grad_(true);
  ember::optim::Adam adam64({p64});
  adam64.load_state_dict(good);
  EXPECT_EQ(adam64.state(p64)->buffers.at("exp_avg").dtype(), ember::kFloat64);
}

// --- schedulers against PyTorch ---------------------------------------------------------------------

namespace {

std::unique_ptr<ember::optim::LRScheduler> make_scheduler(const json& c, Optimizer& opt) {
  using namespace ember::optim;
  const std::string name = c.at("scheduler");
  const json& a = c.at("args");
  if (name == "StepLR") return std::make_unique<StepLR>(opt, a.at("step_size").get<int64_t>(), get_or(a, "gamma", 0.1));
  if (name == "CosineAnnealingLR") {
    return std::make_unique<CosineAnnealingLR>(opt, a.at("T_max").get<int64_t>(), get_or(a, "eta_min", 0.0));
  }
  if (name == "LinearLR") {
    return std::make_unique<LinearLR>(opt, get_or(a, "start_factor", 1.0 / 3), get_or(a, "end_factor", 1.0),
                                      a.contains("total_iters") ? a.at("total_iters").get<int64_t>() : 5);
  }
  if (name == "OneCycleLR") {
    OneCycleLROptions o;
    o.total_steps = a.at("total_steps").get<int64_t>();
    o.pct_start = get_or(a, "pct_start", o.pct_start);
    if (a.contains("anneal_strategy")) o.anneal_strategy = a.at("anneal_strategy").get<std::string>();
    o.cycle_momentum = a.contains("cycle_momentum") ? a.at("cycle_momentum").get<bool>() : true;
    o.base_momentum = get_or(a, "base_momentum", o.base_momentum);
    o.max_momentum = get_or(a, "max_momentum", o.max_momentum);
    o.div_factor = get_or(a, "div_factor", o.div_factor);
    o.final_div_factor = get_or(a, "final_div_factor", o.final_div_factor);
    o.three_phase = a.contains("three_phase") && a.at("three_phase").get<bool>();
    const json& max_lr = a.at("max_lr");
    if (max_lr.is_array()) return std::make_unique<OneCycleLR>(opt, max_lr.get<std::vector<double>>(), o);
    return std::make_unique<OneCycleLR>(opt, max_lr.get<double>(), o);
  }
  throw std::runtime_error("unknown scheduler " + name);
}

// Scheduler values are doubles computed by the same formulas in the same order as PyTorch's: with
// the libm that made the golden data they are bit-identical; the bound leaves room for another
// libm's cos.
void expect_close_doubles(double actual, double expected, const std::string& what) {
  EXPECT_NEAR(actual, expected, 1e-14 * std::abs(expected)) << what;
}

}  // namespace

TEST(OptimScheduler, MatchesTorch) {
  const auto cases = cases_of_kind("scheduler");
  ASSERT_GE(cases.size(), 10u);
  for (const json* c : cases) {
    SCOPED_TRACE(c->at("name").get<std::string>());
    std::vector<ParamGroup> groups;
    for (double lr : c->at("group_lrs").get<std::vector<double>>()) {
      groups.push_back(ParamGroup{{ember::zeros({2}).requires_grad_(true)}, {{"lr", lr}}});
    }
    auto opt = make_optimizer(c->at("optimizer"), c->at("options"), std::move(groups));
    auto sched = make_scheduler(*c, *opt);
    const std::string momentum_key = opt->defaults().count("beta1") ? "beta1" : "momentum";
    const auto steps = c->at("steps").get<int64_t>();
    for (int64_t s = 0; s <= steps; ++s) {
      if (s > 0) {
        opt->step();
        sched->step();
      }
      const auto expected = c->at("lrs").at(s).get<std::vector<double>>();
      ASSERT_EQ(sched->get_last_lr().size(), expected.size());
      for (size_t g = 0; g < expected.size(); ++g) {
        expect_close_doubles(sched->get_last_lr()[g], expected[g], "lr, step " + std::to_string(s));
        EXPECT_EQ(opt->param_groups()[g].lr(), sched->get_last_lr()[g]);
        if (c->contains("momenta") && opt->defaults().count(momentum_key)) {
          expect_close_doubles(opt->param_groups()[g].option(momentum_key), c->at("momenta").at(s).at(g).get<double>(),
                               "momentum, step " + std::to_string(s));
        }
      }
    }
    EXPECT_EQ(sched->last_epoch(), steps);
  }
}

TEST(OptimScheduler, StateDictRoundTrip) {
  Tensor p = ember::zeros({2}).requires_grad_(true);
  ember::optim::SGD sgd({p}, {.lr = 0.1});
  ember::optim::CosineAnnealingLR sched(sgd, 10, 0.01);
  for (int i = 0; i < 4; ++i) sched.step();
  const ember::StateDict opt_state = snapshot(sgd.state_dict());
  const ember::StateDict sched_state = snapshot(sched.state_dict());
  EXPECT_EQ(sched_state.at("last_epoch").item<int64_t>(), 4);
  for (int i = 0; i < 3; ++i) sched.step();

  Tensor q = ember::zeros({2}).requires_grad_(true);
  ember::optim::SGD sgd2({q}, {.lr = 0.1});
  ember::optim::CosineAnnealingLR sched2(sgd2, 10, 0.01);
  sgd2.load_state_dict(opt_state);
  sched2.load_state_dict(sched_state);
  for (int i = 0; i < 3; ++i) sched2.step();
  EXPECT_EQ(sched2.get_last_lr(), sched.get_last_lr());
  EXPECT_EQ(sched2.last_epoch(), 7);

  ember::StateDict bad = sched_state;
  bad.erase("base_lrs.0");
  EXPECT_ERROR_CONTAINS(sched2.load_state_dict(bad), "[CosineAnnealingLR.load_state_dict] missing key 'base_lrs.0'");
}

TEST(OptimScheduler, Errors) {
  Tensor p = ember::zeros({2}).requires_grad_(true);
  ember::optim::SGD sgd({p}, {.lr = 0.1});
  EXPECT_ERROR_CONTAINS(ember::optim::StepLR(sgd, 0), "[StepLR] step_size must be positive, got 0");
  EXPECT_ERROR_CONTAINS(ember::optim::CosineAnnealingLR(sgd, 0), "[CosineAnnealingLR] T_max must be positive, got 0");
  EXPECT_ERROR_CONTAINS(ember::optim::LinearLR(sgd, 0.0), "[LinearLR] start_factor must be in (0, 1], got 0");
  EXPECT_ERROR_CONTAINS(ember::optim::LinearLR(sgd, 0.5, 1.5), "[LinearLR] end_factor must be in [0, 1], got 1.5");
  EXPECT_ERROR_CONTAINS(ember::optim::OneCycleLR(sgd, 0.1, {.total_steps = 0}),
                        "[OneCycleLR] expected a positive total_steps, got 0");
  EXPECT_ERROR_CONTAINS(ember::optim::OneCycleLR(sgd, 0.1, {.total_steps = 5, .anneal_strategy = "exp"}),
                        "anneal_strategy must be 'cos' or 'linear', got 'exp'");
  EXPECT_ERROR_CONTAINS(ember::optim::OneCycleLR(sgd, std::vector<double>{0.1, 0.2}, {.total_steps = 5}),
                        "[OneCycleLR] expected 1 values for max_lr, got 2");
  ember::optim::Adagrad adagrad({p});
  EXPECT_ERROR_CONTAINS(ember::optim::OneCycleLR(adagrad, 0.1, {.total_steps = 5}),
                        "[OneCycleLR] Adagrad has no momentum or beta1 to cycle");
  ember::optim::OneCycleLR one_cycle(sgd, 0.1, {.total_steps = 2});
  one_cycle.step();
  one_cycle.step();
  EXPECT_ERROR_CONTAINS(one_cycle.step(), "[OneCycleLR] tried to step 3 times; total_steps is 2");
}

// --- gradient clipping against PyTorch --------------------------------------------------------------

TEST(OptimClipGradNorm, MatchesTorch) {
  const auto cases = cases_of_kind("clip");
  ASSERT_GE(cases.size(), 16u);
  for (const json* c : cases) {
    SCOPED_TRACE(c->at("name").get<std::string>());
    std::vector<Tensor> params;
    const auto has_grad = c->at("has_grad").get<std::vector<bool>>();
    for (size_t i = 0; i < has_grad.size(); ++i) {
      const Tensor g = golden::decode_tensor(c->at("grads").at(i));
      Tensor p = ember::zeros(g.shape(), g.dtype()).requires_grad_(true);
      if (has_grad[i]) p.set_grad(g.clone());
      params.push_back(p);
    }
    const json& p = c->at("norm_type");
    const double norm_type = p.is_string() ? std::numeric_limits<double>::infinity() : p.get<double>();
    const Tensor total = ember::optim::clip_grad_norm_(params, c->at("max_norm").get<double>(), norm_type);
    const Tensor expected_total = golden::decode_tensor(c->at("total_norm"));
    EXPECT_TRUE(golden::all_close(total, expected_total, golden::tolerance_for(expected_total.dtype())));
    for (size_t i = 0; i < params.size(); ++i) {
      if (!has_grad[i]) {
        EXPECT_FALSE(params[i].grad().defined());
        continue;
      }
      const Tensor expected = golden::decode_tensor(c->at("clipped").at(i));
      EXPECT_TRUE(golden::all_close(params[i].grad(), expected, golden::tolerance_for(expected.dtype())))
          << "gradient " << i;
    }
  }
}

TEST(OptimClipGradNorm, EdgeCases) {
  Tensor p = ember::zeros({3}).requires_grad_(true);
  const Tensor none = ember::optim::clip_grad_norm_({p}, 1.0);
  EXPECT_EQ(none.item<double>(), 0.0);
  p.set_grad(ember::tensor<float>({3.0f, 4.0f, 0.0f}));
  EXPECT_ERROR_CONTAINS(ember::optim::clip_grad_norm_({p}, 1.0, -1.0),
                        "[clip_grad_norm_] norm_type must be positive or infinity, got -1");
  p.set_grad(ember::tensor<float>({NAN, 1.0f, 0.0f}));
  EXPECT_ERROR_CONTAINS(ember::optim::clip_grad_norm_({p}, 1.0, 2.0, /*error_if_nonfinite=*/true),
                        "[clip_grad_norm_] the total norm of order 2 of the gradients is nan");
}

// --- errors ------------------------------------------------------------------------------------------

TEST(OptimErrors, InvalidHyperParameters) {
  using namespace ember::optim;
  Tensor p = ember::zeros({2}).requires_grad_(true);
  EXPECT_ERROR_CONTAINS(SGD({p}, {.lr = -0.1}), "[SGD] invalid lr: -0.1 (expected >= 0)");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.momentum = -0.5}), "[SGD] invalid momentum: -0.5");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.weight_decay = -1}), "[SGD] invalid weight_decay: -1");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.nesterov = true}),
                        "[SGD] Nesterov momentum requires momentum > 0 and dampening == 0, got momentum 0");
  EXPECT_ERROR_CONTAINS(SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}), "and dampening 0.1");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.lr = -1e-3}), "[Adam] invalid lr: -0.001");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.beta1 = 1.0}), "[Adam] invalid beta1: 1 (expected in [0, 1))");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.beta2 = -0.1}), "[Adam] invalid beta2: -0.1");
  EXPECT_ERROR_CONTAINS(Adam({p}, {.eps = -1e-8}), "[Adam] invalid eps: -1e-08");
  EXPECT_ERROR_CONTAINS(AdamW({p}, {.weight_decay = -0.01}), "[AdamW] invalid weight_decay: -0.01");
  EXPECT_ERROR_CONTAINS(Adagrad({p}, {.lr_decay = -1}), "[Adagrad] invalid lr_decay: -1");
  EXPECT_ERROR_CONTAINS(Adagrad({p}, {.initial_accumulator_value = -0.5}),
                        "[Adagrad] invalid initial_accumulator_value: -0.5");
  EXPECT_ERROR_CONTAINS(RMSprop({p}, {.alpha = -0.9}), "[RMSprop] invalid alpha: -0.9");
  EXPECT_ERROR_CONTAINS(RMSprop({p}, {.momentum = -0.9}), "[RMSprop] invalid momentum: -0.9");
  EXPECT_ERROR_CONTAINS(RMSprop({p}, {.lr = std::nan("")}), "[RMSprop] invalid lr: nan");

  // Per-group options are checked too, and so are options changed later (at the next step).
  EXPECT_ERROR_CONTAINS(Adam(std::vector<ParamGroup>{{{p}, {{"beta2", 1.0}}}}), "[Adam] invalid beta2: 1");
  EXPECT_ERROR_CONTAINS(Adam(std::vector<ParamGroup>{{{p}, {{"momentum", 0.9}}}}),
                        "[Adam] unknown option 'momentum' in param group 0; Adam's options are amsgrad, beta1, beta2, "
                        "eps, lr, weight_decay");
  SGD sgd({p});
  sgd.param_groups()[0].set_lr(-2.0);
  p.set_grad(ember::ones({2}));
  EXPECT_ERROR_CONTAINS(sgd.step(), "[SGD] invalid lr: -2");
}

TEST(OptimErrors, InvalidParameters) {
  using namespace ember::optim;
  EXPECT_ERROR_CONTAINS(Adam(std::vector<Tensor>{}), "[Adam] got an empty parameter list");
  Tensor leaf = ember::ones({2}).requires_grad_(true);
  const Tensor computed = leaf * 2.0;
  EXPECT_ERROR_CONTAINS(SGD({computed}),
                        "[SGD] cannot optimize a non-leaf tensor: parameter 0 of param group 0 was computed by mul");
  EXPECT_ERROR_CONTAINS(SGD({ember::ones({2}, ember::kInt64)}),
                        "[SGD] parameter 0 of param group 0 has dtype int64; optimizers update float32 or float64");
  EXPECT_ERROR_CONTAINS(SGD({leaf, leaf}), "[SGD] parameter 1 of param group 0 appears more than once");
  EXPECT_ERROR_CONTAINS(SGD({Tensor()}), "[SGD] parameter 0 of param group 0 is an undefined tensor");
  EXPECT_ERROR_CONTAINS(ParamGroup{}.option("lr"), "[optim] param group has no option 'lr'");
}

// --- benchmark (run with --gtest_also_run_disabled_tests --gtest_filter='*AdamStep10M*') ------------

// One Adam step on 10M float32 parameters on 2 threads: median of 15 steps, and the memory traffic it
// achieves (param, grad, exp_avg, exp_avg_sq read; param, exp_avg, exp_avg_sq written: 28 bytes each).
TEST(OptimBench, DISABLED_AdamStep10M) {
  const int64_t n = 10'000'000;
  const int original = ember::get_num_threads();
  ember::set_num_threads(2);
  Tensor p = ember::randn({n}).requires_grad_(true);
  p.set_grad(ember::randn({n}));
  ember::optim::Adam adam({p}, {.lr = 1e-3});
  for (int i = 0; i < 3; ++i) adam.step();  // state allocated, pages touched
  std::vector<double> ms;
  for (int i = 0; i < 15; ++i) {
    const auto start = std::chrono::steady_clock::now();
    adam.step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  ember::set_num_threads(original);
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double bytes = 28.0 * static_cast<double>(n);
  std::printf("ember Adam step, 10M float32, 2 threads: median %.2f ms (min %.2f), %.1f GB/s\n", median, ms.front(),
              bytes / (median * 1e-3) / 1e9);
}
