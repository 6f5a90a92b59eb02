// `ember info`: the build, this machine's SIMD target, threads and GPUs; `ember info --ops`: every op of
// the primitive table with its kernels per backend, dtypes, backward and cost rule.
#include "ember/info.h"

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "ember/cuda.h"

namespace ember::cli {
namespace {

int run_info(bool as_json) {
  const BuildInfo info = build_info();
  std::vector<std::string> devices = {"cpu"};
  nlohmann::json gpus = nlohmann::json::array();
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceProperties p = cuda::get_device_properties(i);
    devices.push_back("cuda:" + std::to_string(i));
    gpus.push_back({{"index", i},
                    {"name", p.name},
                    {"compute_capability", std::to_string(p.compute_major) + "." + std::to_string(p.compute_minor)},
                    {"memory_bytes", p.total_memory},
                    {"multiprocessors", p.multiprocessors}});
  }
  if (as_json) {
    nlohmann::json j = {
        {"version", info.version},
        {"compiler", info.compiler},
        {"simd_target", info.simd_target},
        {"simd_compiled", info.simd_compiled},
        {"gemm_kernel", info.gemm_kernel},
        {"dot_isa", info.dot_isa},
        {"num_threads", info.num_threads},
        {"num_threads_source", info.num_threads_source},
        {"build_type", info.build_type},
        {"options", {{"cuda", info.cuda}, {"blas", info.blas}}},
        {"devices", devices},
        {"cuda",
         {{"built", cuda::is_built()},
          {"runtime", cuda::runtime_version()},
          {"driver", cuda::driver_version()},
          {"architectures", cuda::compiled_architectures()},
          {"status", cuda::status()},
          {"gpus", gpus}}},
    };
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "ember " << info.version << "\n"
            << "  compiler      " << info.compiler << "\n"
            << "  build type    " << info.build_type << "\n"
            << "  SIMD target   " << info.simd_target << " (compiled: " << info.simd_compiled << ")\n"
            << "  GEMM tile     " << info.gemm_kernel << "\n"
            << "  int8/bf16 dot " << info.dot_isa << " (EMBER_MAX_CPU_ISA caps it)\n"
            << "  threads       " << info.num_threads << " (from " << info.num_threads_source << ")\n"
            << "  CUDA          "
            << (info.cuda ? "on (runtime " + cuda::runtime_version() + ", driver " +
                                (cuda::driver_version().empty() ? "none" : cuda::driver_version()) + ", " +
                                cuda::compiled_architectures() + "): " + cuda::status()
                          : std::string("off"))
            << "\n"
            << "  BLAS          " << info.blas << "\n"
            << "  devices       cpu";
  for (const nlohmann::json& gpu : gpus) {
    std::cout << ", cuda:" << gpu["index"].get<int>() << " (" << gpu["name"].get<std::string>() << ", compute "
              << gpu["compute_capability"].get<std::string>() << ", " << std::fixed << std::setprecision(1)
              << static_cast<double>(gpu["memory_bytes"].get<int64_t>()) / (1 << 30) << " GiB, "
              << gpu["multiprocessors"].get<int>() << " SMs)";
  }
  std::cout << "\n";
  return 0;
}

// The dtypes of a kernel, shortened ("all" for every dtype, "floats" for the four float dtypes).
std::string dtype_summary(const std::vector<std::string>& dtypes) {
  if (dtypes.size() == static_cast<size_t>(kNumElementDTypes)) return "all";
  std::string out;
  for (const std::string& d : dtypes) out += (out.empty() ? "" : ",") + d;
  const std::string floats = "float32,float64,float16,bfloat16";
  if (out == floats) return "floats";
  if (out.starts_with(floats + ",")) return "floats," + out.substr(floats.size() + 1);
  return out;
}

// `ember info --ops`: every op of the primitive table with its backends, dtypes, backward and cost.
int run_ops(bool as_json) {
  const std::vector<OpTableRow> rows = op_table();
  const bool cuda_built = build_info().cuda;
  // A backend's column: its kernel's dtypes, or why there is none.
  auto backend = [&](const OpTableRow& row, const std::vector<std::string>& dtypes, bool built) -> std::string {
    if (row.sort == "view") return "view";
    if (row.sort == "composite") return "composite";
    if (!built) return "not built";
    return dtypes.empty() ? "not implemented" : dtype_summary(dtypes);
  };
  if (as_json) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTableRow& row : rows) {
      ops.push_back({{"name", row.name},
                     {"sort", row.sort},
                     {"cpu", row.cpu_dtypes},
                     {"cuda", row.cuda_dtypes},
                     {"cuda_built", cuda_built},
                     {"backward", row.differentiable},
                     {"cost_rule", row.has_cost_rule}});
    }
    std::cout << nlohmann::json{{"ops", ops}}.dump(2) << "\n";
    return 0;
  }
  int primitives = 0, cpu = 0, cuda = 0;
  std::printf("%-34s %-10s %-34s %-16s %-9s %s\n", "op", "sort", "cpu", "cuda", "backward", "cost");
  for (const OpTableRow& row : rows) {
    std::printf("%-34s %-10s %-34s %-16s %-9s %s\n", row.name.c_str(), row.sort.c_str(),
                backend(row, row.cpu_dtypes, true).c_str(), backend(row, row.cuda_dtypes, cuda_built).c_str(),
                row.differentiable ? "yes" : "-", row.has_cost_rule ? "yes" : "-");
    if (row.sort != "primitive") continue;
    ++primitives;
    cpu += row.cpu_dtypes.empty() ? 0 : 1;
    cuda += row.cuda_dtypes.empty() ? 0 : 1;
  }
  std::printf("%zu ops: %d primitives (CPU kernels for %d, CUDA kernels for %d), the rest views and composites\n",
              rows.size(), primitives, cpu, cuda);
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, Commands& commands) {
  struct Flags {
    bool json = false, ops = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* info = app.add_subcommand("info", "Version, compiler, SIMD target, threads and build options");
  info->add_flag("--json", flags->json, "Print one JSON object");
  info->add_flag("--ops", flags->ops, "List every op: its kernels per backend, dtypes, backward and cost rule");
  commands.add(info, [flags] { return flags->ops ? run_ops(flags->json) : run_info(flags->json); });
}

}  // namespace ember::cli
