// What the CPU (and the OS) lets the bf16 kernels use, read once with cpuid / xgetbv.
#pragma once

namespace glm4::kernels {

struct CpuFeatures {
  bool avx512 = false;       // AVX-512 F, BW, VL, DQ with the OS saving zmm state
  bool avx512_bf16 = false;  // vdpbf16ps / vcvtne2ps2bf16 (and avx512)
  bool amx_bf16 = false;     // AMX-TILE + AMX-BF16, the OS saving tile state (and avx512_bf16)
  bool intel = false;        // vendor "GenuineIntel"
};

// The features of this CPU, detected on first call.
const CpuFeatures& cpu_features();

// Asks Linux for permission to use the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM) once per
// process; false if the CPU lacks AMX or the kernel refuses. Call before any tile instruction.
bool enable_amx();

}  // namespace glm4::kernels
