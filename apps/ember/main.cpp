// The ember command-line tool. `ember info` reports the build and this machine's SIMD target.
#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ember/ember.h"

namespace {

int run_info(bool as_json) {
  const ember::BuildInfo info = ember::build_info();
  if (as_json) {
    nlohmann::json j = {
        {"version", info.version},
        {"compiler", info.compiler},
        {"simd_target", info.simd_target},
        {"simd_compiled", info.simd_compiled},
        {"num_threads", info.num_threads},
        {"openmp", info.openmp},
        {"build_type", info.build_type},
        {"options", {{"cuda", info.cuda}, {"blas", info.blas}}},
        {"devices", nlohmann::json::array({"cpu"})},
    };
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "ember " << info.version << "\n"
            << "  compiler      " << info.compiler << "\n"
            << "  build type    " << info.build_type << "\n"
            << "  SIMD target   " << info.simd_target << " (compiled: " << info.simd_compiled << ")\n"
            << "  threads       " << info.num_threads << (info.openmp ? " (OpenMP)" : " (no OpenMP)") << "\n"
            << "  CUDA          " << (info.cuda ? "on" : "off") << "\n"
            << "  BLAS          " << info.blas << "\n"
            << "  devices       cpu\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember: a C++ tensor library with autograd, a fast CPU backend and a graph compiler"};
  app.require_subcommand(1);
  bool as_json = false;
  CLI::App* info = app.add_subcommand("info", "Version, compiler, SIMD target, threads and build options");
  info->add_flag("--json", as_json, "Print one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (info->parsed()) return run_info(as_json);
  } catch (const ember::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
