// cpuid / xgetbv feature detection and the Linux AMX permission request.
#include "autograd/kernels/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#endif

namespace glm4::kernels {

namespace {

#if defined(__x86_64__)
constexpr int kArchReqXcompPerm = 0x1023;  // linux/arch/x86/include/uapi/asm/prctl.h
constexpr int kXfeatureXtileData = 18;

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return uint64_t(hi) << 32 | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  uint32_t a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[12];  // cpuid 0 spells it in ebx, edx, ecx
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.intel = std::memcmp(vendor, "GenuineIntel", 12) == 0;
  }
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return f;  // no OSXSAVE
  const uint64_t xcr0 = xgetbv0();
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;                // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_tiles = (xcr0 & (3u << 17)) == (3u << 17);  // XTILECFG, XTILEDATA
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31);
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  uint32_t a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  const bool avx512_bf16 = a1 & (1u << 5);
  f.avx512 = os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_bf16 = f.avx512 && avx512_bf16;
  f.amx_bf16 = f.avx512_bf16 && os_tiles && amx_tile && amx_bf16;
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool enable_amx() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool enabled = cpu_features().amx_bf16 &&
                              syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  return enabled;
#else
  return false;
#endif
}

}  // namespace glm4::kernels
