// ember::compile: trace a function over tensors once, optimize the graph, and replay it.
//
//   auto step = ember::compile([&](const Tensor& x, const Tensor& y) {
//     optimizer.zero_grad();
//     Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
//     loss.backward();
//     optimizer.step();
//     return loss;
//   });
//   for (auto [x, y] : loader) step(x, y);   // the first call traces; later calls replay
//
// The first call with a new signature (each tensor argument's dtype, device, shape and strides,
// which arguments share memory, and the values of non-tensor arguments) runs the function eagerly
// while a tracer records every kernel it dispatches, including autograd's backward kernels; host
// code that changes state outside tensors (optimizer and scheduler steps) is recorded as a call to
// repeat. The graph is then folded, simplified, deduplicated, fused (GEMM epilogues, elementwise
// groups run tile by tile in cache) and its temporaries packed into one arena; later calls bind
// the arguments and run the plan without tracing, hashing or allocating beyond the results.
//
// What a compiled function may not do: read a tensor's value on the host (item(), to_vector(): an
// error while tracing), branch on anything but its signature (the graph holds the traced branch),
// or replace the tensors it captured (a captured parameter must be updated in place, as the
// optimizers do). Its results carry no autograd history: compile a whole training step, not a
// forward whose output you differentiate later. A tensor the function stores outside itself (a
// .grad, an optimizer's state, a module's buffer) keeps its memory, and each call updates it in
// place. A parameter's .grad that was replaced since the trace, or a folded captured tensor written
// since, makes the next call trace again.
//
// Calls of one compiled function from several threads run one at a time (a plan has one arena).
// EMBER_COMPILE=0 runs every compiled function eagerly; EMBER_COMPILE=check runs each call both
// compiled and eagerly and throws if results differ (functions without optimizer steps).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ember/scalar.h"
#include "ember/tensor.h"

namespace ember {

struct CompileOptions {
  enum class Mode : uint8_t {
    kDefault,   // EMBER_COMPILE: unset or 1 compiled, 0 eager, "check" checked
    kCompiled,  // trace once per signature, replay
    kEager,     // call the function as it is
    kCheck,     // replay and also run eagerly on the same state; throw if they differ
  };
  Mode mode = Mode::kDefault;
  bool optimize = true;          // constant folding, simplification, CSE, dead-code elimination
  bool fuse = true;              // GEMM epilogues and elementwise groups
  bool plan_memory = true;       // one arena for the temporaries (else each keeps its traced block)
  bool fixed_signature = false;  // a call with a new signature (besides new sizes of `dynamic` dims) throws
  int warn_after = 8;            // compiles of one function after which a warning names the cause
  bool keep_pass_dumps = false;  // keep the graph's text after each pass (graph_stages())
  // Dims whose size may change from call to call without a trace per size: {argument, dim} pairs,
  // all of one size in a call (the batch dim of x and of y). Two traces at different sizes whose
  // graphs differ only by multiples of the size make a template; every other size is built from it
  // (passes and memory plan, no eager run). Sizes offset from a multiple (a KV cache of L positions
  // grown to L + 1) need a third trace to confirm the template. A function whose graph depends on
  // the size otherwise (a size squared, rounded, or used as a value) keeps tracing each size;
  // explain() says why.
  std::vector<std::pair<int, int>> dynamic = {};
  double check_rtol = 1e-4;
  double check_atol = 1e-5;
};

struct CompileStats {
  int compiles = 0;  // traces (a new signature, or a stale graph)
  int sized = 0;     // plans built for a new size of the dynamic dims from a template, without a trace
  int64_t calls = 0;
  int64_t replays = 0;
  int traced_kernels = 0;               // kernels recorded by the last trace
  int steps = 0;                        // steps of the last plan (kernels, fused groups, host calls, .grad sets)
  int interleaved = 0;                  // batched products the last plan runs head by head with the group reading them
  int masked_products = 0;              // of those, the ones whose masked blocks each call leaves uncomputed
  int chains = 0, chained_kernels = 0;  // fused members run as one pass in registers (Note [register chains])
  int folded = 0, simplified = 0, cse = 0, dead = 0, gelus = 0, silus = 0, attention = 0, epilogues = 0,
      fused_groups = 0, fused_kernels = 0, in_place = 0;
  int pooled_thresholds = 0;  // ReLU backwards moved before a max-pool's (graph/passes.h: threshold_pooled)
  int recomputed = 0;         // forward kernels run again for the backward (recompute_for_backward)
  int blocked = 0;            // convolution results kept in the blocked layout (block_activations)
  int64_t arena_bytes = 0;    // the last plan's arena
  int64_t temp_bytes = 0;     // what its temporaries take unplanned (the sum of their sizes)
  int64_t live_bytes = 0;     // the most of them alive at one step: no arena can be smaller
  int64_t state_bytes = 0;    // buffers that outlive a call (parameters, gradients, optimizer state, constants)
  // The last compile's time: tracing the call (the eager run included), and the passes with the
  // memory plan and the executable's construction. explain() gives every compile's.
  double trace_seconds = 0;
  double pass_seconds = 0;
};

// A compiled graph's text (one line per buffer, then per step) and Graphviz dot.
struct GraphText {
  std::string text;
  std::string graphviz;
  const std::string& dump() const { return text; }
  const std::string& dot() const { return graphviz; }
};

namespace detail {

using CompileArg = std::variant<Tensor, Scalar>;

// A non-owning callable reference (no allocation per call).
class BodyRef {
 public:
  template <class F>
  explicit BodyRef(F& f) : object_(&f), call_([](void* o) { return (*static_cast<F*>(o))(); }) {}
  std::vector<Tensor> operator()() const { return call_(object_); }

 private:
  void* object_;
  std::vector<Tensor> (*call_)(void*);
};

class CompiledCore {
 public:
  explicit CompiledCore(CompileOptions options);
  ~CompiledCore();
  CompiledCore(const CompiledCore&) = delete;
  CompiledCore& operator=(const CompiledCore&) = delete;

  std::vector<Tensor> call(std::span<const CompileArg> args, BodyRef body);
  std::string explain() const;
  GraphText graph() const;
  std::vector<std::pair<std::string, GraphText>> stages() const;
  const CompileStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <class T>
CompileArg to_compile_arg(const T& value) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    return value;
  } else {
    static_assert(std::is_arithmetic_v<std::decay_t<T>> || std::is_same_v<std::decay_t<T>, Scalar>,
                  "ember::compile: arguments must be tensors or numbers");
    return Scalar(value);
  }
}

template <class R>
std::vector<Tensor> to_results(R&& r) {
  using T = std::decay_t<R>;
  if constexpr (std::is_same_v<T, Tensor>) {
    return {std::forward<R>(r)};
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    return std::forward<R>(r);
  } else {
    return std::apply([](auto&&... t) { return std::vector<Tensor>{Tensor(t)...}; }, std::forward<R>(r));
  }
}

template <class R>
R from_results(std::vector<Tensor>&& out) {
  if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_same_v<R, Tensor>) {
    return std::move(out.at(0));
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    return std::move(out);
  } else {
    return [&]<size_t... I>(std::index_sequence<I...>) { return R{std::move(out.at(I))...}; }
    (std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

}  // namespace detail

// A compiled function (see the top of this file). Copies share the compiled plans.
template <class Fn>
class Compiled {
 public:
  Compiled(Fn fn, CompileOptions options)
      : fn_(std::move(fn)), core_(std::make_shared<detail::CompiledCore>(options)) {}

  template <class... Args>
  auto operator()(const Args&... args) {
    using R = std::invoke_result_t<Fn&, const Args&...>;
    const std::array<detail::CompileArg, sizeof...(Args)> packed{detail::to_compile_arg(args)...};
    auto body = [&]() -> std::vector<Tensor> {
      if constexpr (std::is_void_v<R>) {
        std::invoke(fn_, args...);
        return {};
      } else {
        return detail::to_results(std::invoke(fn_, args...));
      }
    };
    return detail::from_results<R>(core_->call(packed, detail::BodyRef(body)));
  }

  // Why each compile happened, the passes' effect, the plan's size and memory.
  std::string explain() const { return core_->explain(); }
  // The last compiled graph: graph().dump() (text), graph().dot() (Graphviz).
  GraphText graph() const { return core_->graph(); }
  // With CompileOptions::keep_pass_dumps: (pass, the graph after it: text and dot), from the trace on.
  std::vector<std::pair<std::string, GraphText>> graph_stages() const { return core_->stages(); }
  const CompileStats& stats() const { return core_->stats(); }

 private:
  Fn fn_;
  std::shared_ptr<detail::CompiledCore> core_;
};

template <class Fn>
Compiled<std::decay_t<Fn>> compile(Fn&& fn, CompileOptions options = {}) {
  return Compiled<std::decay_t<Fn>>(std::forward<Fn>(fn), options);
}

}  // namespace ember
