// CPU feature levels for the hand-written kernels (cpu_isa.h).
#include "kernels/cpu/cpu_isa.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ember::cpu {

namespace {

Isa parse_cap() {
  const char* value = std::getenv("EMBER_MAX_CPU_ISA");
  if (value == nullptr || *value == '\0') return Isa::kAmx;
  std::string name(value);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (Isa isa : {Isa::kScalar, Isa::kSse4, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16, Isa::kAmx}) {
    if (name == isa_name(isa)) return isa;
  }
  std::fprintf(stderr,
               "ember: EMBER_MAX_CPU_ISA=%s is not one of AMX, AVX512_BF16, AVX512_VNNI, AVX512, AVX2, SSE4, SCALAR; "
               "ignored\n",
               value);
  return Isa::kAmx;
}

// AMX: the tile, BF16 and INT8 units (CPUID leaf 7: EDX bits 24, 22, 25), tile state enabled by the
// OS (XCR0 bits 17 and 18), and this process allowed to use the tile data, which Linux grants on
// request (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA) for every thread of the process.
#if defined(__x86_64__) || defined(__i386__)
bool amx_usable() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned amx = (1u << 22) | (1u << 24) | (1u << 25);
  if ((edx & amx) != amx) return false;
  if (__get_cpuid_count(1, 0, &eax, &ebx, &ecx, &edx) == 0 || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const unsigned tiles = (1u << 17) | (1u << 18);
  if ((xcr0_lo & tiles) != tiles) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (avx512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16")) {
    // Only asked for when allowed: asking makes every thread's saved state 8 KiB larger.
    return supports(max_isa(), Isa::kAmx) && amx_usable() ? Isa::kAmx : Isa::kAvx512Bf16;
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
    case Isa::kAmx:
      return "AMX";
  }
  return "?";
}

}  // namespace ember::cpu
