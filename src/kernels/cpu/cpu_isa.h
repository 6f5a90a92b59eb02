// The instruction sets hand-written kernels may use: what the CPU has, capped by
// EMBER_MAX_CPU_ISA. Highway's kernels pick their target by the same cap (elementwise_simd.cpp);
// the kernels written with intrinsics for instructions Highway 1.0 has no op for (the int8 and
// bfloat16 dot products of quant.cpp) ask here.
#pragma once

namespace ember::cpu {

// Ordered: each level implies the ones below it (AVX512 means F, BW, DQ and VL).
enum class Isa : int {
  kScalar,
  kSse4,
  kAvx2,        // with FMA and F16C
  kAvx512,      // F, BW, DQ, VL
  kAvx512Vnni,  // + VNNI (vpdpbusd)
  kAvx512Bf16,  // + VNNI and BF16 (vdpbf16ps)
  kAmx,         // + AMX tiles with BF16 and INT8 products, which the OS lets this process use
};

// Does a CPU at level `have` run code for level `want`?
constexpr bool supports(Isa have, Isa want) { return static_cast<int>(have) >= static_cast<int>(want); }

// EMBER_MAX_CPU_ISA=AMX|AVX512_BF16|AVX512_VNNI|AVX512|AVX2|SSE4|SCALAR, or kAmx when unset (no
// cap). An unknown name is reported once on stderr and ignored.
Isa max_isa();

// The best level this CPU supports, capped by max_isa().
Isa cpu_isa();

const char* isa_name(Isa isa);

}  // namespace ember::cpu
