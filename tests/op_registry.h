// The op test registry: one entry per op (or small family of ops) holding everything the tests check
// about it in one place: the OpKinds it exercises, its forward check (PyTorch's golden data, or a
// check that asserts values where the reference is not golden data), its float64 gradchecks on
// contiguous, transposed, broadcast and 0-dim inputs, and its gradients pinned against PyTorch where
// finite differences cannot judge.
//
// Each family file (tests/ops_<family>.cpp) registers its entries once, at static initialization;
// the files are linked into ember_tests directly, so no entry is dropped by the linker.
// tests/test_ops.cpp is the one GoogleTest driver over the registry, and the coverage test that
// reads the primitive table (ember/primitives.h) against it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "golden.h"
#include "ops/dispatch.h"

namespace op_registry {

// A tensor that is not a leaf, so that in-place ops on it are differentiable.
inline ember::Tensor non_leaf(const ember::Tensor& x) { return x * 1.0; }

// An integer attribute of a golden case.
inline int64_t attr_int(const golden::Case& c, const char* name) { return c.attrs.at(name).get<int64_t>(); }

using ember::OpKind;
using ember::Tensor;

// --- forward checks -----------------------------------------------------------------------------

// The cases of `op` in tests/golden/<area>.json (made by PyTorch, tests/golden/cases_<area>.py),
// computed by `fn` and compared within `tolerance` (the per-dtype default when empty). Where
// PyTorch raised, `fn` must throw an ember::Error.
struct GoldenForward {
  std::string name;  // the test's name; the entry's name when empty
  std::string area;
  std::string op;
  golden::OpFn fn;
  golden::ToleranceFn tolerance = nullptr;
};

// A forward check for an op whose reference is not golden data (random draws by their statistics,
// optimizer updates against optim.json's steps, views against index arithmetic): runs the op and
// asserts its values.
struct ForwardCheck {
  std::string name;
  std::function<void()> run;
};

// --- gradchecks ---------------------------------------------------------------------------------

// How the values of a gradcheck input are drawn (float64).
struct Values {
  enum Kind : uint8_t {
    kUniform,       // uniform in (low, high)
    kAwayFromZero,  // |x| uniform in (0.3, 2), random sign: abs, relu, sign, division
    kDistinct,      // a shuffled ramp over (-2, 2): no two values within 0.1 (max and min without ties)
    kZero,          // exactly 0, where one-sided formulas meet
  };
  Kind kind = kUniform;
  double low = -2.0;
  double high = 2.0;
};

constexpr Values uniform(double low, double high) { return {Values::kUniform, low, high}; }
inline constexpr Values kAny = uniform(-2.0, 2.0);
inline constexpr Values kUnit = uniform(-1.0, 1.0);
inline constexpr Values kPositive = uniform(0.5, 2.0);
inline constexpr Values kAwayFromZero{Values::kAwayFromZero};
inline constexpr Values kDistinct{Values::kDistinct};
inline constexpr Values kZero{Values::kZero};

enum class Layout : uint8_t {
  kContiguous,
  kTransposed,  // the last two dims of a contiguous base swapped: the same values, non-contiguous
};

// One input of a gradcheck: a float64 leaf that requires grad.
struct Input {
  ember::Shape shape;
  Values values = kAny;
  Layout layout = Layout::kContiguous;
};

inline Input in(ember::Shape shape, Values values = kAny) { return {std::move(shape), values, Layout::kContiguous}; }
inline Input in_t(ember::Shape shape, Values values = kAny) { return {std::move(shape), values, Layout::kTransposed}; }

// One set of inputs, named for its layout ("contiguous", "transposed", "broadcast_row", "0d", ...):
// the test is named <gradcheck>_<variant>.
struct Variant {
  std::string name;
  std::vector<Input> inputs;
};

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

// fn's gradients against central finite differences (autograd::gradcheck), once per variant.
struct Gradcheck {
  std::string name;
  GradFn fn;
  std::vector<Variant> variants;
};

// The common shapes of gradchecks:
// a unary op on a (3, 4) input, contiguous and transposed, and on a 0-dim one;
Gradcheck unary_gradcheck(std::string name, std::function<Tensor(const Tensor&)> op, Values values = kAny);
// a binary op on same-shaped inputs, transposed ones, and inputs broadcast both ways;
Gradcheck binary_gradcheck(std::string name, std::function<Tensor(const Tensor&, const Tensor&)> op, Values a = kAny,
                           Values b = kAny);
// a reduction-like op on (3, 4) inputs, contiguous and transposed, and a transposed (2, 3, 4) one;
Gradcheck reduction_gradcheck(std::string name, std::function<Tensor(const Tensor&)> op, Values values = kAny);
// an nn op: its first input contiguous, then transposed; the others as given.
Gradcheck both_layouts_gradcheck(std::string name, ember::Shape first, std::vector<Input> others, GradFn fn,
                                 Values first_values = kUnit);

// --- pinned gradients ---------------------------------------------------------------------------

// The op's gradients at points where finite differences cannot judge (ties, clamp bounds, zeros),
// against the cases of `op` in tests/golden/grad.json (cases_grad.py). A case's inputs are the op's
// inputs then the output gradient; attrs["wrt"] lists the inputs that require grad, and the expected
// values are their gradients. `fn` builds the output from the inputs and the case's attributes.
struct PinnedGradient {
  std::string op;
  std::function<Tensor(const std::vector<Tensor>&, const golden::json& attrs)> fn;
};

// --- entries ------------------------------------------------------------------------------------

struct Entry {
  std::string name;
  // The ops this entry exercises: its op, and the primitives that run inside it (a composite's
  // kernels, the backward's kernels). The coverage test reads the primitive table through these
  // lists, and checks that the entry's checks really run every op listed.
  std::vector<OpKind> ops = {};
  std::vector<GoldenForward> golden = {};
  std::vector<ForwardCheck> checks = {};
  std::vector<Gradcheck> gradchecks = {};
  std::vector<PinnedGradient> pinned = {};
};

inline void PrintTo(const Entry* entry, std::ostream* out) { *out << entry->name; }

// Adds a family's entries; returns true, for `const bool kRegistered = op_registry::add(...);`.
bool add(std::vector<Entry> family);

// Every registered entry.
const std::vector<Entry>& entries();

// --- running ------------------------------------------------------------------------------------

// One test of the driver: a check of an entry, named after it.
struct Check {
  std::string name;
  const Entry* entry = nullptr;
  std::function<void()> run;
};

inline void PrintTo(const Check& check, std::ostream* out) { *out << check.name; }

// The checks of every entry, one list per kind of test.
std::vector<Check> golden_checks();
std::vector<Check> forward_checks();
std::vector<Check> gradchecks();
std::vector<Check> pinned_checks();

// Every check of one entry.
std::vector<Check> checks_of(const Entry& entry);

// Records which ops run, while attached, inside the op under test: a golden case's function, a
// gradcheck's function, a pinned gradient's function, a forward check, and the backward of the
// graphs they build. The harness's own copies and views around them (decoding inputs, comparing
// results, finite-difference perturbations) do not count.
class OpRecorder : public ember::dispatch::Observer {
 public:
  OpRecorder();
  ~OpRecorder() override;
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;

  void begin(const ember::dispatch::OpCall& call) override;
  void end(const ember::dispatch::OpCall& call) override;

  bool ran(OpKind kind) const { return ran_[static_cast<size_t>(kind)].load(); }

 private:
  std::array<std::atomic<bool>, ember::kNumOps> ran_{};
};

}  // namespace op_registry
