// The op test registry (op_registry.h): its storage, the gradcheck inputs, and how each kind of
// check runs. The family files hold the entries; tests/test_ops.cpp turns the checks into tests.
#include "op_registry.h"

#include <algorithm>
#include <utility>

namespace op_registry {
namespace {

using ember::Shape;

std::vector<Entry>& registry() {
  static std::vector<Entry> all;
  return all;
}

// --- recording the op under test ----------------------------------------------------------------

// How deep this thread is inside the op under test, and inside the backward of a node (the
// engine's kBackward scope).
thread_local int t_under_test = 0;
thread_local int t_in_backward = 0;

// Marks the op under test on this thread while alive.
class UnderTest {
 public:
  UnderTest() { ++t_under_test; }
  ~UnderTest() { --t_under_test; }
  UnderTest(const UnderTest&) = delete;
  UnderTest& operator=(const UnderTest&) = delete;
};

// --- gradcheck inputs ---------------------------------------------------------------------------

Tensor make_values(const Shape& shape, Values values) {
  ember::autograd::NoGradGuard no_grad;
  switch (values.kind) {
    case Values::kUniform:
      return ember::rand(shape, ember::kFloat64) * (values.high - values.low) + values.low;
    case Values::kAwayFromZero: {
      const Tensor magnitude = ember::rand(shape, ember::kFloat64) * 1.7 + 0.3;
      return ember::where(ember::rand(shape, ember::kFloat64) < 0.5, ember::neg(magnitude), magnitude);
    }
    case Values::kZero:
      return ember::zeros(shape, ember::kFloat64);
    case Values::kDistinct: {
      const int64_t n = shape.numel();
      const Tensor ramp =
          ember::arange(n, ember::kFloat64) * (4.0 / static_cast<double>(std::max<int64_t>(n, 1))) - 2.0;
      // A random permutation of the ramp: the rank of each of n random keys (distinct almost surely).
      const Tensor keys = ember::rand({n}, ember::kFloat64);
      const Tensor rank = ember::sum(ember::gt(keys.unsqueeze(0), keys.unsqueeze(1)), {1});
      return ember::index_select(ramp, 0, rank).reshape(shape) + ember::rand(shape, ember::kFloat64) * 0.01;
    }
  }
  return {};
}

// A float64 leaf requiring grad, laid out as asked.
Tensor make_input(const Input& spec) {
  Tensor x;
  if (spec.layout == Layout::kTransposed && spec.shape.size() >= 2) {
    Shape base = spec.shape;
    std::swap(base[base.size() - 1], base[base.size() - 2]);
    x = make_values(base, spec.values).transpose(-1, -2);
    if (base[base.size() - 1] > 1 && base[base.size() - 2] > 1) {
      EXPECT_FALSE(x.is_contiguous());
    }
  } else {
    x = make_values(spec.shape, spec.values);
  }
  x.requires_grad_();
  return x;
}

// --- running checks -----------------------------------------------------------------------------

void run_golden(const GoldenForward& golden) {
  const golden::OpFn& fn = golden.fn;
  golden::run_cases(
      golden.area, golden.op,
      [&fn](const golden::Case& c) {
        const UnderTest under_test;
        return fn(c);
      },
      golden.tolerance);
}

void run_forward_check(const ForwardCheck& check) {
  const UnderTest under_test;
  check.run();
}

void run_gradcheck(const Gradcheck& gradcheck, const Variant& variant) {
  ember::manual_seed(1234);
  std::vector<Tensor> inputs;
  for (const Input& spec : variant.inputs) inputs.push_back(make_input(spec));
  const GradFn& fn = gradcheck.fn;
  try {
    EXPECT_TRUE(ember::autograd::gradcheck(
        [&fn](const std::vector<Tensor>& x) {
          const UnderTest under_test;
          return fn(x);
        },
        inputs))
        << gradcheck.name << " (" << variant.name << ")";
  } catch (const ember::Error& e) {
    ADD_FAILURE() << gradcheck.name << " (" << variant.name << "): " << e.what();
  }
}

// The gradients of the case's "wrt" inputs, given the output gradient (its last input).
std::vector<Tensor> pinned_gradients(const PinnedGradient& pinned, const golden::Case& c) {
  const UnderTest under_test;
  const std::vector<int64_t> wrt = c.attrs.at("wrt").get<std::vector<int64_t>>();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i + 1 < c.inputs.size(); ++i) {
    Tensor x = c.tensor(i).clone();
    if (std::find(wrt.begin(), wrt.end(), static_cast<int64_t>(i)) != wrt.end()) x.requires_grad_();
    inputs.push_back(x);
  }
  const Tensor out = pinned.fn(inputs, c.attrs);
  std::vector<Tensor> leaves;
  for (const int64_t i : wrt) leaves.push_back(inputs[static_cast<size_t>(i)]);
  return ember::autograd::grad({out}, leaves, {c.tensor(c.inputs.size() - 1)});
}

void run_pinned(const PinnedGradient& pinned) {
  golden::run_cases("grad", pinned.op, [&pinned](const golden::Case& c) { return pinned_gradients(pinned, c); });
}

}  // namespace

// --- registration -------------------------------------------------------------------------------

bool add(std::vector<Entry> family) {
  for (Entry& entry : family) registry().push_back(std::move(entry));
  return true;
}

const std::vector<Entry>& entries() { return registry(); }

// --- the common shapes of gradchecks ------------------------------------------------------------

Gradcheck unary_gradcheck(std::string name, std::function<Tensor(const Tensor&)> op, Values values) {
  return {std::move(name),
          [op](const std::vector<Tensor>& x) { return op(x[0]); },
          {{"contiguous", {in({3, 4}, values)}}, {"transposed", {in_t({3, 4}, values)}}, {"0d", {in({}, values)}}}};
}

Gradcheck binary_gradcheck(std::string name, std::function<Tensor(const Tensor&, const Tensor&)> op, Values a,
                           Values b) {
  return {std::move(name),
          [op](const std::vector<Tensor>& x) { return op(x[0], x[1]); },
          {{"contiguous", {in({3, 4}, a), in({3, 4}, b)}},
           {"transposed", {in_t({3, 4}, a), in_t({3, 4}, b)}},
           {"broadcast_row", {in({3, 4}, a), in({4}, b)}},
           {"broadcast_outer", {in({3, 1}, a), in_t({1, 4}, b)}}}};
}

Gradcheck reduction_gradcheck(std::string name, std::function<Tensor(const Tensor&)> op, Values values) {
  return {std::move(name),
          [op](const std::vector<Tensor>& x) { return op(x[0]); },
          {{"contiguous", {in({3, 4}, values)}},
           {"transposed", {in_t({3, 4}, values)}},
           {"3d", {in_t({2, 3, 4}, values)}}}};
}

Gradcheck both_layouts_gradcheck(std::string name, Shape first, std::vector<Input> others, GradFn fn,
                                 Values first_values) {
  std::vector<Input> contiguous{in(first, first_values)};
  std::vector<Input> transposed{in_t(first, first_values)};
  contiguous.insert(contiguous.end(), others.begin(), others.end());
  transposed.insert(transposed.end(), others.begin(), others.end());
  return {std::move(name), std::move(fn), {{"contiguous", contiguous}, {"transposed", transposed}}};
}

// --- checks -------------------------------------------------------------------------------------

std::vector<Check> golden_checks() {
  std::vector<Check> checks;
  for (const Entry& entry : entries()) {
    for (const GoldenForward& golden : entry.golden) {
      checks.push_back({golden.name.empty() ? entry.name : golden.name, &entry, [&golden] { run_golden(golden); }});
    }
  }
  return checks;
}

std::vector<Check> forward_checks() {
  std::vector<Check> checks;
  for (const Entry& entry : entries()) {
    for (const ForwardCheck& check : entry.checks) {
      checks.push_back({check.name, &entry, [&check] { run_forward_check(check); }});
    }
  }
  return checks;
}

std::vector<Check> gradchecks() {
  std::vector<Check> checks;
  for (const Entry& entry : entries()) {
    for (const Gradcheck& gradcheck : entry.gradchecks) {
      for (const Variant& variant : gradcheck.variants) {
        checks.push_back({gradcheck.name + "_" + variant.name, &entry,
                          [&gradcheck, &variant] { run_gradcheck(gradcheck, variant); }});
      }
    }
  }
  return checks;
}

std::vector<Check> pinned_checks() {
  std::vector<Check> checks;
  for (const Entry& entry : entries()) {
    for (const PinnedGradient& pinned : entry.pinned) {
      checks.push_back({pinned.op, &entry, [&pinned] { run_pinned(pinned); }});
    }
  }
  return checks;
}

std::vector<Check> checks_of(const Entry& entry) {
  std::vector<Check> checks;
  for (const std::vector<Check>& kind : {golden_checks(), forward_checks(), gradchecks(), pinned_checks()}) {
    for (const Check& check : kind) {
      if (check.entry == &entry) checks.push_back(check);
    }
  }
  return checks;
}

// --- OpRecorder ---------------------------------------------------------------------------------

OpRecorder::OpRecorder() { ember::dispatch::add_observer(this); }

OpRecorder::~OpRecorder() { ember::dispatch::remove_observer(this); }

void OpRecorder::begin(const ember::dispatch::OpCall& call) {
  if (call.call_kind == ember::dispatch::CallKind::kBackward) {
    ++t_in_backward;  // the vjp's own ops follow; the node's op ran in the forward
    return;
  }
  if (t_under_test > 0 || t_in_backward > 0) ran_[static_cast<size_t>(call.kind)] = true;
}

void OpRecorder::end(const ember::dispatch::OpCall& call) {
  if (call.call_kind == ember::dispatch::CallKind::kBackward) --t_in_backward;
}

}  // namespace op_registry
