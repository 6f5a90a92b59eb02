// Everything around the tensors: save/load (safetensors), seeds, threads, the caching allocator's
// statistics, autocast, the profiler, ember.compile, and the data pipeline (MNIST, TensorDataset,
// DataLoader with its background worker).
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "ember/amp.h"
#include "ember/compile.h"
#include "ember/data.h"
#include "ember/io.h"
#include "ember/memory.h"
#include "ember/ops.h"
#include "ember/profiler.h"
#include "ember/threads.h"

namespace ember::python {
namespace {

// --- ember.compile ------------------------------------------------------------------------------
// A Python function traced once per signature and replayed (Note [the GIL]: the trace calls back
// into Python; a replay runs no Python at all). Its arguments are tensors and numbers; it returns
// None, a tensor, or a tuple or list of tensors. The shape of the result is remembered from the
// trace, since replays do not call the function.
class PyCompiled {
 public:
  PyCompiled(nb::callable fn, CompileOptions options)
      : fn_(fn), core_(std::make_shared<detail::CompiledCore>(options)) {}

  nb::object call(const nb::args& args) {
    std::vector<detail::CompileArg> packed;
    for (nb::handle a : args) {
      Tensor t;
      Scalar s;
      if (nb::try_cast<Tensor>(a, t)) {
        packed.emplace_back(t);
      } else if (scalar_from_python(a, true, s)) {
        packed.emplace_back(s);
      } else {
        throw nb::type_error(
            ("[compile] arguments must be tensors or numbers, got " + std::string(nb::type_name(a.type()).c_str()))
                .c_str());
      }
    }
    auto body = [&]() -> std::vector<Tensor> {
      const nb::gil_scoped_acquire gil;
      nb::object result = nb::handle(fn_.get())(*args);
      if (result.is_none()) {
        result_ = Result::kNone;
        return {};
      }
      Tensor t;
      if (nb::try_cast<Tensor>(result, t)) {
        result_ = Result::kTensor;
        return {t};
      }
      std::vector<Tensor> many;
      if ((nb::isinstance<nb::tuple>(result) || nb::isinstance<nb::list>(result)) &&
          nb::try_cast<std::vector<Tensor>>(result, many)) {
        result_ = nb::isinstance<nb::tuple>(result) ? Result::kTuple : Result::kList;
        return many;
      }
      throw nb::type_error("[compile] the function must return None, a tensor, or a tuple or list of tensors");
    };
    std::vector<Tensor> out;
    {
      const Release release;
      out = core_->call(packed, detail::BodyRef(body));
    }
    switch (result_) {
      case Result::kNone:
        return nb::none();
      case Result::kTensor:
        return nb::cast(out.at(0));
      case Result::kTuple:
        return nb::tuple(nb::cast(out));
      case Result::kList:
        return nb::cast(out);
    }
    return nb::none();
  }

  const detail::CompiledCore& core() const { return *core_; }

 private:
  enum class Result { kNone, kTensor, kTuple, kList };
  PyRef fn_;
  std::shared_ptr<detail::CompiledCore> core_;
  Result result_ = Result::kNone;
};

CompileOptions::Mode compile_mode(const std::string& mode) {
  if (mode == "default") return CompileOptions::Mode::kDefault;
  if (mode == "compiled") return CompileOptions::Mode::kCompiled;
  if (mode == "eager") return CompileOptions::Mode::kEager;
  if (mode == "check") return CompileOptions::Mode::kCheck;
  EMBER_FAIL("[compile] mode must be \"default\", \"compiled\", \"eager\" or \"check\", got \"", mode, "\"");
}

nb::dict stats_dict(const CompileStats& s) {
  nb::dict d;
  d["compiles"] = s.compiles;
  d["sized"] = s.sized;
  d["calls"] = s.calls;
  d["replays"] = s.replays;
  d["traced_kernels"] = s.traced_kernels;
  d["steps"] = s.steps;
  d["fused_groups"] = s.fused_groups;
  d["fused_kernels"] = s.fused_kernels;
  d["chains"] = s.chains;
  d["chained_kernels"] = s.chained_kernels;
  d["epilogues"] = s.epilogues;
  d["arena_bytes"] = s.arena_bytes;
  d["temp_bytes"] = s.temp_bytes;
  d["live_bytes"] = s.live_bytes;
  d["state_bytes"] = s.state_bytes;
  d["trace_seconds"] = s.trace_seconds;
  d["pass_seconds"] = s.pass_seconds;
  return d;
}

profiler::SortBy sort_by(const std::string& name) {
  if (name == "total") return profiler::SortBy::kTotalTime;
  if (name == "self") return profiler::SortBy::kSelfTime;
  if (name == "calls") return profiler::SortBy::kCalls;
  if (name == "flops") return profiler::SortBy::kFlops;
  if (name == "name") return profiler::SortBy::kName;
  EMBER_FAIL("[profiler] sort_by must be \"total\", \"self\", \"calls\", \"flops\" or \"name\", got \"", name, "\"");
}

// A DataLoader's iteration: one epoch, batches from the background worker.
struct BatchIterator {
  std::shared_ptr<data::DataLoader> loader;  // keeps the loader (and its worker) alive
  std::optional<data::DataLoader::Iterator> it;
};

}  // namespace

void bind_runtime(nb::module_& m) {
  // --- files, seeds, threads, memory ------------------------------------------------------------
  m.def("save", &ember::save, "tensors"_a, "path"_a, "metadata"_a = std::map<std::string, std::string>{},
        nb::call_guard<Release>(),
        "Writes a dict of tensors to a safetensors file (atomically: a crash leaves the old file).");
  m.def("load", &ember::load, "path"_a, nb::call_guard<Release>(), "Reads a safetensors file into a dict of tensors.");
  m.def("load_metadata", &ember::load_metadata, "path"_a, nb::call_guard<Release>());
  m.def("manual_seed", &manual_seed, "seed"_a);
  m.def("get_num_threads", &get_num_threads);
  m.def("set_num_threads", &set_num_threads, "num_threads"_a);
  m.def(
      "memory_stats",
      [] {
        const MemoryStats s = memory_stats();
        nb::dict d;
        d["bytes_in_use"] = s.bytes_in_use;
        d["peak_bytes_in_use"] = s.peak_bytes_in_use;
        d["bytes_reserved"] = s.bytes_reserved;
        d["system_allocations"] = s.system_allocations;
        d["cache_hits"] = s.cache_hits;
        d["system_frees"] = s.system_frees;
        return d;
      },
      "The caching allocator's counters (CPU).");
  m.def("reset_peak_memory_stats", [] { reset_peak_memory_stats(); });
  m.def(
      "empty_cache", [] { empty_cache(); }, nb::call_guard<Release>(), "Returns cached blocks to the system.");

  // Autocast as an object the package's context manager holds between __enter__ and __exit__.
  nb::class_<amp::Autocast>(m, "_Autocast").def(nb::init<DType, bool>(), "dtype"_a, "enabled"_a);

  // --- profiler ---------------------------------------------------------------------------------
  nb::module_ p = m.def_submodule("profiler", "Op-level profiling with FLOP and byte counts (ember/profiler.h)");
  nb::class_<profiler::Profiler>(p, "Profiler")
      .def(nb::init<bool>(), "start"_a = true)
      .def("start", &profiler::Profiler::start)
      .def("stop", &profiler::Profiler::stop)
      .def_prop_ro("running", &profiler::Profiler::running)
      .def(
          "table",
          [](const profiler::Profiler& prof, const std::string& sort, int rows) {
            return prof.table(sort_by(sort), rows);
          },
          "sort_by"_a = "total", "row_limit"_a = 0)
      .def("summary", [](const profiler::Profiler& prof) { return prof.summary().to_string(); })
      .def("export_chrome_trace", &profiler::Profiler::export_chrome_trace, "path"_a)
      .def(
          "op_stats",
          [](const profiler::Profiler& prof, const std::string& sort) {
            nb::list out;
            for (const profiler::OpStats& s : prof.op_stats(sort_by(sort))) {
              nb::dict d;
              d["name"] = s.name;
              d["calls"] = s.calls;
              d["total_ns"] = s.total_ns;
              d["self_ns"] = s.self_ns;
              d["flops"] = s.flops;
              d["bytes"] = s.bytes;
              out.append(d);
            }
            return out;
          },
          "sort_by"_a = "total");
  nb::class_<profiler::Range>(p, "_Range").def(nb::init<std::string_view>(), "name"_a);

  // --- compile ----------------------------------------------------------------------------------
  nb::class_<PyCompiled>(m, "Compiled", "A function compiled by ember.compile: call it like the function.")
      .def("__call__", &PyCompiled::call)
      .def("explain", [](const PyCompiled& c) { return c.core().explain(); })
      .def("graph", [](const PyCompiled& c) { return c.core().graph().text; })
      .def_prop_ro("stats", [](const PyCompiled& c) { return stats_dict(c.core().stats()); });
  m.def(
      "compile",
      [](nb::callable fn, const std::string& mode, bool optimize, bool fuse, bool plan_memory, bool fixed_signature,
         std::vector<std::pair<int, int>> dynamic) {
        CompileOptions options;
        options.dynamic = std::move(dynamic);
        options.mode = compile_mode(mode);
        options.optimize = optimize;
        options.fuse = fuse;
        options.plan_memory = plan_memory;
        options.fixed_signature = fixed_signature;
        return PyCompiled(fn, options);
      },
      "fn"_a, "mode"_a = "default", "optimize"_a = true, "fuse"_a = true, "plan_memory"_a = true,
      "fixed_signature"_a = false, "dynamic"_a = std::vector<std::pair<int, int>>{},
      "Traces fn once per signature (shapes, dtypes, numbers) and replays the optimized, fused, memory-planned "
      "graph. mode: \"default\" (EMBER_COMPILE decides), \"compiled\", \"eager\" or \"check\". dynamic: "
      "(argument, dim) pairs whose size may change between calls (all of one size in a call): after two traces "
      "at different sizes (three when a size is offset from a multiple of them, as a KV cache grown by one), other "
      "sizes are built from a template without calling fn.");

  // --- data -------------------------------------------------------------------------------------
  nb::module_ d = m.def_submodule("data", "Datasets and the DataLoader (ember/data.h)");
  nb::class_<data::Dataset>(d, "Dataset")
      .def("__len__", &data::Dataset::size)
      .def("__getitem__", [](const data::Dataset& ds, int64_t i) {
        const data::Example e = ds.get(i);
        return nb::make_tuple(e.input, e.target);
      });
  nb::class_<data::TensorDataset, data::Dataset>(d, "TensorDataset")
      .def(nb::new_([](Tensor inputs, Tensor targets) {
             return std::make_shared<data::TensorDataset>(std::move(inputs), std::move(targets));
           }),
           "inputs"_a, "targets"_a);
  nb::class_<data::MNIST, data::TensorDataset>(d, "MNIST")
      .def(nb::new_([](const std::string& root, bool train, bool normalize) {
             const Release release;
             return std::make_shared<data::MNIST>(root, train ? data::Split::kTrain : data::Split::kTest, normalize);
           }),
           "root"_a = data::MNIST::kDefaultRoot, "train"_a = true, "normalize"_a = true)
      .def_prop_ro("images", &data::MNIST::images)
      .def_prop_ro("labels", &data::MNIST::labels)
      .def_prop_ro_static("mean", [](nb::handle) { return data::MNIST::kMean; })
      .def_prop_ro_static("std", [](nb::handle) { return data::MNIST::kStd; });

  nb::class_<BatchIterator>(d, "_BatchIterator")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", [](BatchIterator& b) {
        {
          const Release release;
          if (!b.it) {
            b.it.emplace(b.loader->begin());
          } else {
            ++*b.it;
          }
        }
        if (*b.it == std::default_sentinel) throw nb::stop_iteration();
        return nb::make_tuple((*b.it)->inputs, (*b.it)->targets);
      });
  nb::class_<data::DataLoader>(d, "DataLoader")
      .def(nb::new_([](std::shared_ptr<data::Dataset> dataset, int64_t batch_size, bool shuffle, uint64_t seed,
                       bool drop_last, int64_t prefetch) {
             return std::make_shared<data::DataLoader>(std::shared_ptr<const data::Dataset>(std::move(dataset)),
                                                       batch_size, shuffle, seed, drop_last, prefetch);
           }),
           "dataset"_a, "batch_size"_a = 1, "shuffle"_a = false, "seed"_a = 0, "drop_last"_a = false, "prefetch"_a = 2)
      .def("__len__", &data::DataLoader::size)
      .def("__iter__",
           [](std::shared_ptr<data::DataLoader> loader) {
             return BatchIterator{std::move(loader), std::nullopt};
           })
      .def("set_epoch", &data::DataLoader::set_epoch, "epoch"_a)
      .def_prop_ro("batch_size", &data::DataLoader::batch_size);
  d.def("random_shift", &data::random_shift, "images"_a, "max_shift"_a, "fill"_a, "seed"_a, "stream"_a,
        nb::call_guard<Release>());
  d.def("random_permutation", &data::random_permutation, "n"_a, "seed"_a, "epoch"_a = 0);
}

}  // namespace ember::python
