// ember::compile (ember/compile.h): signatures, the cache of plans, the passes in order, and the
// eager and checking modes.
#include "ember/compile.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>

#include "graph/dynamic.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "graph/trace.h"
#include "ops/factory.h"

namespace ember::detail {
namespace {

// One argument as a plan was traced with.
struct ArgKey {
  bool tensor = false;
  DType dtype = kFloat32;
  Device device;
  Shape shape;
  Strides strides;
  bool requires_grad = false;
  int alias = -1;            // the earlier argument sharing its storage
  int64_t alias_offset = 0;  // and where it starts from that one's first element (bytes)
  Scalar value;

  bool operator==(const ArgKey&) const = default;
};

ArgKey key_of(std::span<const CompileArg> args, size_t i) {
  ArgKey k;
  if (const Tensor* t = std::get_if<Tensor>(&args[i])) {
    EMBER_CHECK(t->defined(), "[compile] argument ", i, " is an undefined tensor");
    k.tensor = true;
    k.dtype = t->dtype();
    k.device = t->device();
    k.shape = t->shape();
    k.strides = t->strides();
    k.requires_grad = t->requires_grad();
    for (size_t j = 0; j < i; ++j) {
      const Tensor* u = std::get_if<Tensor>(&args[j]);
      if (u != nullptr && u->impl().storage == t->impl().storage) {
        k.alias = static_cast<int>(j);
        k.alias_offset = (t->offset() - u->offset()) * t->element_size();
        break;
      }
    }
  } else {
    k.value = std::get<Scalar>(args[i]);
  }
  return k;
}

// The argument's key with the sizes of its dynamic dims left out (-1), and a contiguous tensor's
// strides (which those sizes enter) with them: what the plans of one family of sizes share.
ArgKey family_key_of(std::span<const CompileArg> args, size_t i, const std::vector<std::pair<int, int>>& dynamic) {
  ArgKey k = key_of(args, i);
  bool marked = false;
  for (const auto& [arg, dim] : dynamic) {
    if (static_cast<size_t>(arg) != i) continue;
    k.shape[dim] = -1;
    marked = true;
  }
  if (marked && is_contiguous_layout(std::get<Tensor>(args[i]).shape(), k.strides)) k.strides = Strides();
  return k;
}

std::string describe(const ArgKey& k) {
  std::ostringstream out;
  if (k.tensor) {
    out << k.dtype << k.shape << " on " << k.device;
    if (!is_contiguous_layout(k.shape, k.strides)) out << " strides " << k.strides;
    if (k.alias >= 0) out << " sharing memory with argument " << k.alias << " (from byte " << k.alias_offset << ")";
  } else {
    if (k.value.is_floating()) {
      out << k.value.to_double();
    } else {
      out << k.value.to_int();
    }
  }
  return out.str();
}

// The passes in the order they run (graph/passes.h); `fusion` ones follow CompileOptions::fuse, the
// others CompileOptions::optimize. Memory planning comes last, on its own.
struct Pass {
  const char* name;
  void (*run)(graph::Graph&, graph::PassStats&);
  bool fusion;
};
constexpr Pass kPasses[] = {
    {"fold_constants", graph::fold_constants, false},
    {"simplify", graph::simplify, false},
    {"cse", graph::cse, false},
    {"dce", graph::dce, false},
    {"fuse_gelu", graph::fuse_gelu, true},
    {"fuse_silu", graph::fuse_silu, true},
    {"fuse_attention", graph::fuse_attention, true},
    {"fuse_epilogues", graph::fuse_epilogues, true},
    {"threshold_pooled", graph::threshold_pooled, false},
    {"recompute_for_backward", graph::recompute_for_backward, false},
    {"fuse_elementwise", graph::fuse_elementwise, true},
    {"block_activations", graph::block_activations, true},
};

CompileOptions::Mode mode_from_env() {
  const char* env = std::getenv("EMBER_COMPILE");
  if (env == nullptr || std::strcmp(env, "1") == 0 || *env == '\0') return CompileOptions::Mode::kCompiled;
  if (std::strcmp(env, "0") == 0) return CompileOptions::Mode::kEager;
  if (std::strcmp(env, "check") == 0) return CompileOptions::Mode::kCheck;
  EMBER_FAIL("[compile] EMBER_COMPILE must be 0, 1 or check, got '", env, "'");
}

std::string kib(int64_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / 1024.0 << " KiB";
  return out.str();
}

}  // namespace

struct CompiledCore::Impl {
  struct Entry {
    std::vector<ArgKey> signature;
    std::unique_ptr<graph::Executable> executable;
    std::string reason;
    int family = -1;        // built from that family's template (Note [dynamic dims])
    int64_t last_call = 0;  // the call that last ran it
  };
  // The signatures that differ only in the sizes of the dynamic dims (Note [dynamic dims]).
  struct Family {
    std::vector<ArgKey> key;
    std::optional<graph::Graph> last;  // the last raw trace, its temporaries released
    int64_t last_size = 0;
    std::optional<graph::SizeTemplate> sizes;
    std::string no_template;  // why the last two traces did not make one
  };
  // Plans built from one family's template that are kept; the least recently run one makes room.
  static constexpr int kMaxSizedPlans = 16;
  CompileOptions options;
  CompileOptions::Mode mode;
  std::mutex mutex;  // one call at a time: a plan's operands and arena are not shared between calls
  std::vector<Entry> entries;
  std::vector<Family> families;
  int last = -1;
  CompileStats stats;
  std::vector<std::pair<std::string, GraphText>> stages;
  std::vector<std::string> history;  // why each compile happened, and how long it took
  bool warned = false;

  bool matches(const Entry& e, std::span<const CompileArg> args) const {
    if (e.signature.size() != args.size()) return false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!(e.signature[i] == key_of(args, i))) return false;
    }
    return true;
  }

  static std::vector<Tensor> tensors_of(std::span<const CompileArg> args) {
    std::vector<Tensor> tensors(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (const Tensor* t = std::get_if<Tensor>(&args[i])) tensors[i] = *t;
    }
    return tensors;
  }

  std::string new_signature_reason(std::span<const CompileArg> args) const {
    if (entries.empty()) return "first call";
    const std::vector<ArgKey>& old = entries[last >= 0 ? last : 0].signature;
    if (old.size() != args.size()) return "a different number of arguments";
    for (size_t i = 0; i < args.size(); ++i) {
      const ArgKey k = key_of(args, i);
      if (!(k == old[i])) return "argument " + std::to_string(i) + " is " + describe(k) + ", was " + describe(old[i]);
    }
    return "new signature";
  }

  // The one size of the dynamic dims in this call (Note [dynamic dims]).
  int64_t dynamic_size(std::span<const CompileArg> args) const {
    int64_t size = -1;
    for (const auto& [arg, dim] : options.dynamic) {
      EMBER_CHECK(arg >= 0 && static_cast<size_t>(arg) < args.size() && std::holds_alternative<Tensor>(args[arg]),
                  "[compile] CompileOptions::dynamic marks argument ", arg, ", which is not a tensor argument");
      const Tensor& t = std::get<Tensor>(args[arg]);
      EMBER_CHECK(dim >= 0 && dim < t.dim(), "[compile] CompileOptions::dynamic marks dim ", dim, " of argument ", arg,
                  ", which has ", t.dim(), " dims");
      EMBER_CHECK(size < 0 || t.size(dim) == size, "[compile] the dims CompileOptions::dynamic marks take one size ",
                  "per call: argument ", arg, " dim ", dim, " is ", t.size(dim), ", an earlier one ", size);
      size = t.size(dim);
    }
    return size;
  }

  Family& family_of(std::span<const CompileArg> args) {
    std::vector<ArgKey> key;
    for (size_t i = 0; i < args.size(); ++i) key.push_back(family_key_of(args, i, options.dynamic));
    for (Family& f : families) {
      if (f.key == key) return f;
    }
    families.emplace_back();
    families.back().key = std::move(key);
    return families.back();
  }

  // A trace of the family at `size` (raw, its temporaries released): with the one before it, at
  // another size, it may make the family's template.
  void remember(Family& f, graph::Graph raw, int64_t size) {
    if (f.sizes && f.sizes->confirmed()) return;
    if (f.sizes) {
      const std::string pair =
          "the template from sizes " + std::to_string(f.sizes->size_a()) + " and " + std::to_string(f.sizes->size_b());
      f.no_template = f.sizes->confirm(raw, size);
      if (f.no_template.empty()) {
        history.push_back("dynamic dims: the trace at size " + std::to_string(size) + " follows " + pair +
                          "; other sizes are built from it");
        return;
      }
      history.push_back("dynamic dims: " + pair + " does not hold at size " + std::to_string(size) + ": " +
                        f.no_template);
      f.sizes.reset();  // this trace is compared with the next
    } else if (f.last && f.last_size != size) {
      auto made = graph::SizeTemplate::generalize(*f.last, f.last_size, raw, size);
      if (auto* t = std::get_if<graph::SizeTemplate>(&made)) {
        history.push_back("dynamic dims: the traces at sizes " + std::to_string(f.last_size) + " and " +
                          std::to_string(size) +
                          (t->confirmed() ? " make a template; other sizes are built from it"
                                          : " make a template with sizes offset from a multiple of the dims; it is "
                                            "used once a trace at a third size follows it"));
        f.sizes = std::move(*t);
        f.last.reset();
        f.no_template.clear();
        return;
      }
      f.no_template = std::get<std::string>(made);
      history.push_back("dynamic dims: no template from the traces at sizes " + std::to_string(f.last_size) + " and " +
                        std::to_string(size) + ": " + f.no_template);
      // The earlier trace may be a first call's (gradients and optimizer state created): keep the
      // newer one to compare with the next.
    }
    f.last = std::move(raw);
    f.last_size = size;
  }

  // Traces a call and builds its plan; returns the eager results of the traced call. With `raw`,
  // also hands back the trace before any pass, its temporaries released (Note [dynamic dims]).
  std::vector<Tensor> compile(std::span<const CompileArg> args, BodyRef body, int slot, std::string reason,
                              graph::Graph* raw = nullptr) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    graph::Trace t = graph::trace(tensors_of(args), [&] { return body(); });
    if (raw != nullptr) {
      *raw = t.graph;
      graph::release_traced_temps(*raw);
    }
    const double trace_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    build(args, std::move(t.graph), slot, std::move(reason), trace_seconds, -1);
    ++stats.compiles;
    if (stats.compiles > options.warn_after && !warned) {
      warned = true;
      std::cerr << "ember: warning: a compiled function has been traced " << stats.compiles
                << " times; the last because " << history.back()
                << ". Keep argument shapes fixed (pad the last batch), mark the changing dims dynamic "
                   "(CompileOptions::dynamic), or pass fixed_signature to make it an error\n";
    }
    return std::move(t.results);
  }

  // Runs the passes on a graph (traced, or from a template when trace_seconds < 0), plans its memory
  // and makes it the plan for these arguments: at `slot`, or a new entry.
  void build(std::span<const CompileArg> args, graph::Graph graph, int slot, std::string reason, double trace_seconds,
             int family) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point started = Clock::now();
    graph::Graph& g = graph;
    stages.clear();
    auto stage = [&](const char* name) {
      if (options.keep_pass_dumps) stages.emplace_back(name, GraphText{g.dump(), g.dot()});
    };
    stats.traced_kernels = 0;
    for (const graph::Node& n : g.nodes) stats.traced_kernels += n.kind == graph::NodeKind::kKernel ? 1 : 0;
    stage("trace");
    graph::PassStats ps;
    for (const Pass& pass : kPasses) {
      if (!(pass.fusion ? options.fuse : options.optimize)) continue;
      pass.run(g, ps);
      stage(pass.name);
    }
    graph::MemoryPlan plan;
    if (options.plan_memory) {
      if (options.optimize) graph::reuse_in_place(g, ps);
      plan = graph::plan_memory(g);
    } else {
      // Each temporary keeps its own block: state, in effect.
      for (graph::Buffer& b : g.buffers) {
        if (b.kind == graph::BufferKind::kTemp) b.kind = graph::BufferKind::kState;
      }
    }
    stage("plan_memory");
    stats.folded = ps.folded;
    stats.simplified = ps.simplified;
    stats.cse = ps.cse;
    stats.dead = ps.dead;
    stats.epilogues = ps.epilogues;
    stats.attention = ps.attention;
    stats.gelus = ps.gelus;
    stats.silus = ps.silus;
    stats.pooled_thresholds = ps.pooled_thresholds;
    stats.recomputed = ps.recomputed;
    stats.fused_groups = ps.fused_groups;
    stats.fused_kernels = ps.fused_nodes;
    stats.in_place = ps.in_place;
    stats.blocked = ps.blocked;
    stats.state_bytes = 0;
    for (const graph::Buffer& b : g.buffers) {
      if (b.kind == graph::BufferKind::kState || b.kind == graph::BufferKind::kConstant) stats.state_bytes += b.nbytes;
    }
    Entry e;
    e.signature.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i) e.signature.push_back(key_of(args, i));
    e.executable = std::make_unique<graph::Executable>(std::move(g), plan);
    e.reason = reason;
    e.family = family;
    e.last_call = stats.calls;
    stats.steps = e.executable->num_steps();
    stats.interleaved = e.executable->interleaved();
    // The executable's plan (products it runs head by head take no arena).
    stats.arena_bytes = e.executable->memory().arena_bytes;
    stats.temp_bytes = e.executable->memory().temp_bytes;
    stats.live_bytes = e.executable->memory().live_bytes;
    stats.masked_products = e.executable->masked_products();
    std::tie(stats.chains, stats.chained_kernels) = e.executable->register_chains();
    stats.trace_seconds = std::max(trace_seconds, 0.0);
    stats.pass_seconds = std::chrono::duration<double>(Clock::now() - started).count();
    char timing[112];
    if (trace_seconds >= 0) {
      std::snprintf(timing, sizeof(timing), " (traced in %.2f ms, passes %.2f ms, %d kernels -> %d steps)",
                    stats.trace_seconds * 1e3, stats.pass_seconds * 1e3, stats.traced_kernels, stats.steps);
    } else {
      std::snprintf(timing, sizeof(timing), " (from the template, no trace: passes %.2f ms, %d kernels -> %d steps)",
                    stats.pass_seconds * 1e3, stats.traced_kernels, stats.steps);
    }
    history.push_back(reason + timing);
    if (slot >= 0) {
      entries[slot] = std::move(e);
      last = slot;
    } else {
      entries.push_back(std::move(e));
      last = static_cast<int>(entries.size()) - 1;
    }
  }

  // The plan for a new size of a family with a template, built without a trace; false (and nothing
  // built) when the template cannot give that size.
  bool build_sized(std::span<const CompileArg> args, Family& f, int64_t size, const std::string& reason) {
    auto made = f.sizes->at(size);
    if (!std::holds_alternative<graph::Graph>(made)) {
      history.push_back("dynamic dims: " + std::get<std::string>(made) + ", so it is traced");
      return false;
    }
    const int family = static_cast<int>(&f - families.data());
    // The least recently run plan of this family makes room when it has kMaxSizedPlans.
    int slot = -1, count = 0;
    for (size_t e = 0; e < entries.size(); ++e) {
      if (entries[e].family != family) continue;
      ++count;
      if (slot < 0 || entries[e].last_call < entries[static_cast<size_t>(slot)].last_call) slot = static_cast<int>(e);
    }
    if (count < kMaxSizedPlans) slot = -1;
    build(args, std::move(std::get<graph::Graph>(made)), slot, reason, -1.0, family);
    ++stats.sized;
    return true;
  }

  std::vector<Tensor> check(std::span<const CompileArg> args, BodyRef body, graph::Executable& exe);
};

namespace {

// Copies of the state a graph writes, to restore it.
struct Snapshot {
  std::vector<std::pair<std::shared_ptr<StorageImpl>, std::vector<char>>> blocks;
  RandomDraw generator;
};

Snapshot snapshot(const graph::Graph& g) {
  Snapshot s;
  std::vector<bool> written(g.buffers.size(), false);
  for (const graph::Node& n : g.nodes)
    graph::for_each_write(n, [&](const graph::View& v) { written[v.buffer] = true; });
  for (size_t b = 0; b < g.buffers.size(); ++b) {
    const graph::Buffer& buf = g.buffers[b];
    if (!written[b] || buf.kind != graph::BufferKind::kState) continue;
    const char* data = static_cast<const char*>(buf.storage->data());
    s.blocks.emplace_back(buf.storage, std::vector<char>(data, data + buf.nbytes));
  }
  s.generator = generator_state();
  return s;
}

double max_difference(const Tensor& a, const Tensor& b, double rtol, double atol) {
  const Tensor x = a.to(kFloat64).contiguous(), y = b.to(kFloat64).contiguous();
  const double* p = static_cast<const double*>(x.data_ptr());
  const double* q = static_cast<const double*>(y.data_ptr());
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double excess = std::abs(p[i] - q[i]) - (atol + rtol * std::abs(q[i]));
    if (std::isnan(p[i]) != std::isnan(q[i])) return INFINITY;
    worst = std::max(worst, excess);
  }
  return worst;
}

}  // namespace

std::vector<Tensor> CompiledCore::Impl::check(std::span<const CompileArg> args, BodyRef body, graph::Executable& exe) {
  const graph::Graph& g = exe.graph();
  for (const graph::Node& n : g.nodes) {
    EMBER_CHECK(n.kind != graph::NodeKind::kHost, "[compile] check mode cannot compare a function that runs ", n.label,
                "'s step: its host-side state (step counts, learning rates) cannot be rolled back; check ",
                "the function without the step, or compare losses over steps with EMBER_COMPILE=0");
  }
  const Snapshot before = snapshot(g);
  std::vector<Tensor> compiled = exe.run(tensors_of(args));
  std::vector<std::vector<char>> compiled_state;
  for (const auto& [storage, bytes] : before.blocks) {
    const char* data = static_cast<const char*>(storage->data());
    compiled_state.emplace_back(data, data + bytes.size());
    std::memcpy(storage->data(), bytes.data(), bytes.size());
  }
  set_generator_state(before.generator);
  std::vector<Tensor> eager = body();
  EMBER_CHECK(eager.size() == compiled.size(), "[compile] check: eager returned ", eager.size(), " results, compiled ",
              compiled.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EMBER_CHECK(eager[i].shape() == compiled[i].shape() && eager[i].dtype() == compiled[i].dtype(),
                "[compile] check: result ", i, " is ", compiled[i].dtype(), compiled[i].shape(), " compiled and ",
                eager[i].dtype(), eager[i].shape(), " eager");
    const double d = max_difference(compiled[i], eager[i], options.check_rtol, options.check_atol);
    EMBER_CHECK(d <= 0, "[compile] check: result ", i, " differs from eager beyond rtol ", options.check_rtol,
                " and atol ", options.check_atol, " (by ", d, ")");
  }
  return eager;
}

CompiledCore::CompiledCore(CompileOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->mode = options.mode == CompileOptions::Mode::kDefault ? mode_from_env() : options.mode;
}

CompiledCore::~CompiledCore() = default;

std::vector<Tensor> CompiledCore::call(std::span<const CompileArg> args, BodyRef body) {
  Impl& m = *impl_;
  const std::lock_guard<std::mutex> lock(m.mutex);
  ++m.stats.calls;
  if (m.mode == CompileOptions::Mode::kEager) return body();
  int found = -1;
  for (size_t e = 0; e < m.entries.size() && found < 0; ++e) {
    if (m.matches(m.entries[e], args)) found = static_cast<int>(e);
  }
  if (found < 0) {
    std::string reason = m.new_signature_reason(args);
    if (m.options.dynamic.empty()) {
      EMBER_CHECK(!m.options.fixed_signature || m.entries.empty(), "[compile] the function was compiled with a ",
                  "fixed signature and is called with a new one: ", reason);
      return m.compile(args, body, -1, std::move(reason));
    }
    // Note [dynamic dims]: a new size of a family with a template needs no trace. A fixed signature
    // admits the sizes of the first family only.
    const int64_t size = m.dynamic_size(args);
    const size_t family = static_cast<size_t>(&m.family_of(args) - m.families.data());
    EMBER_CHECK(!m.options.fixed_signature || family == 0, "[compile] the function was compiled with a fixed ",
                "signature and is called with a new one (besides the sizes of its dynamic dims): ", reason);
    int slot = -1;
    const std::optional<graph::SizeTemplate>& sizes = m.families[family].sizes;
    if (sizes && sizes->confirmed() && m.build_sized(args, m.families[family], size, reason)) {
      graph::Executable& sized = *m.entries[m.last].executable;
      if (sized.stale().empty()) {
        ++m.stats.replays;
        if (m.mode == CompileOptions::Mode::kCheck) return m.check(args, body, sized);
        return sized.run(Impl::tensors_of(args));
      }
      // The template's gradients were replaced since its traces: it goes, and this size is traced
      // into the plan just built.
      m.families[family].sizes.reset();
      slot = m.last;
      m.entries[static_cast<size_t>(slot)].family = -1;
    }
    graph::Graph raw;
    std::vector<Tensor> results = m.compile(args, body, slot, std::move(reason), &raw);
    m.remember(m.families[family], std::move(raw), size);
    return results;
  }
  graph::Executable& exe = *m.entries[found].executable;
  if (std::string why = exe.stale(); !why.empty()) {
    // A stale plan from a template: the template is stale as well (Note [dynamic dims]).
    if (m.entries[found].family >= 0) m.families[static_cast<size_t>(m.entries[found].family)].sizes.reset();
    m.entries[found].family = -1;
    return m.compile(args, body, found, std::move(why));
  }
  m.entries[found].last_call = m.stats.calls;
  m.last = found;
  ++m.stats.replays;
  if (m.mode == CompileOptions::Mode::kCheck) return m.check(args, body, exe);
  return exe.run(Impl::tensors_of(args));
}

std::string CompiledCore::explain() const {
  const Impl& m = *impl_;
  std::ostringstream out;
  const CompileStats& s = m.stats;
  out << "compiled function: " << s.calls << " calls, " << s.compiles << " traces, " << s.replays << " replays";
  if (!m.options.dynamic.empty()) out << ", " << s.sized << " plans built from a size template";
  out << "\n";
  for (size_t i = 0; i < m.history.size(); ++i) out << "  " << i + 1 << ". " << m.history[i] << "\n";
  if (m.last < 0) return out.str();
  const graph::Graph& g = m.entries[m.last].executable->graph();
  int hosts = 0, slots = 0;
  for (const graph::Node& n : g.nodes) {
    hosts += n.kind == graph::NodeKind::kHost ? 1 : 0;
    slots += n.kind == graph::NodeKind::kGradSlot ? 1 : 0;
  }
  out << "last trace: " << s.traced_kernels << " kernels -> " << s.steps << " steps\n"
      << "  constant folding: " << s.folded << " kernels\n"
      << "  simplification: " << s.simplified << " kernels\n"
      << "  common subexpressions: " << s.cse << " kernels\n"
      << "  dead code: " << s.dead << " kernels\n"
      << "  GELU patterns: " << s.gelus << " -> gelu\n"
      << "  SiLU patterns: " << s.silus << " -> silu\n"
      << "  attention patterns: " << s.attention << " -> scaled_dot_product_attention\n"
      << "  GEMM epilogues: " << s.epilogues << " kernels folded into matmuls and convolutions\n"
      << "  ReLU backwards moved before a max-pool's (Note [thresholds before unpooling]): " << s.pooled_thresholds
      << "\n"
      << "  forward kernels run again for the backward (Note [recomputed activations]): " << s.recomputed << "\n"
      << "  elementwise fusion: " << s.fused_kernels << " kernels in " << s.fused_groups << " groups, of which "
      << s.chained_kernels << " in " << s.chains << " register chains (Note [register chains])\n"
      << "  activations kept blocked between convolutions (Note [blocked activations]): " << s.blocked << "\n"
      << "  in-place reuse: " << s.in_place << " results\n"
      << "  batched products run head by head with the group reading them: " << s.interleaved
      << ", skipping the blocks a mask discards (Note [masked products]): " << s.masked_products;
  if (s.masked_products > 0) {
    out << " (the last call computed " << std::lround(100 * m.entries[m.last].executable->masked_share())
        << "% of their elements)";
  }
  out << "\n"
      << "  host calls replayed (optimizer/scheduler steps): " << hosts << ", .grad assignments: " << slots << "\n"
      << "memory: arena " << kib(s.arena_bytes) << " for " << kib(s.temp_bytes) << " of temporaries (at most "
      << kib(s.live_bytes) << " alive at one step); state " << kib(s.state_bytes) << "\n";
  return out.str();
}

GraphText CompiledCore::graph() const {
  const Impl& m = *impl_;
  if (m.last < 0) return {};
  const graph::Graph& g = m.entries[m.last].executable->graph();
  return {g.dump(), g.dot()};
}

std::vector<std::pair<std::string, GraphText>> CompiledCore::stages() const { return impl_->stages; }

const CompileStats& CompiledCore::stats() const { return impl_->stats; }

}  // namespace ember::detail
