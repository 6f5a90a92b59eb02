// CPU feature levels for the hand-written kernels (cpu_isa.h).
#include "kernels/cpu/cpu_isa.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ember::cpu {

namespace {

Isa parse_cap() {
  const char* value = std::getenv("EMBER_MAX_CPU_ISA");
  if (value == nullptr || *value == '\0') return Isa::kAvx512Bf16;
  std::string name(value);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (Isa isa : {Isa::kScalar, Isa::kSse4, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16}) {
    if (name == isa_name(isa)) return isa;
  }
  std::fprintf(stderr,
               "ember: EMBER_MAX_CPU_ISA=%s is not one of AVX512_BF16, AVX512_VNNI, AVX512, AVX2, SSE4, SCALAR; "
               "ignored\n",
               value);
  return Isa::kAvx512Bf16;
}

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (avx512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16")) {
    return Isa::kAvx512Bf16;
  }
  if (avx512 && __builtin_cpu_supports("avx512vnni")) return Isa::kAvx512Vnni;
  if (avx512) return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    return Isa::kAvx2;
  }
  if (__builtin_cpu_supports("sse4.2")) return Isa::kSse4;
#endif
  return Isa::kScalar;
}

}  // namespace

Isa max_isa() {
  static const Isa cap = parse_cap();
  return cap;
}

Isa cpu_isa() {
  static const Isa isa = [] {
    const Isa cpu = detect();
    return supports(max_isa(), cpu) ? cpu : max_isa();
  }();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "SCALAR";
    case Isa::kSse4:
      return "SSE4";
    case Isa::kAvx2:
      return "AVX2";
    case Isa::kAvx512:
      return "AVX512";
    case Isa::kAvx512Vnni:
      return "AVX512_VNNI";
    case Isa::kAvx512Bf16:
      return "AVX512_BF16";
  }
  return "?";
}

}  // namespace ember::cpu
