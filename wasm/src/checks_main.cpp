// The native side of the cross-platform checks (checks.h):
//   ember_wasm_checks <inputs.safetensors> <checkpoint.safetensors> <output.safetensors>
#include <exception>
#include <iostream>

#include "checks.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " <inputs.safetensors> <checkpoint.safetensors> <output.safetensors>\n";
    return 2;
  }
  try {
    ember::wasm::write_checks(argv[1], argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
