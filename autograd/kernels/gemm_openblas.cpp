// OpenBLAS set-up: one thread per call (TBB owns the threads) and, where Debian's OpenBLAS
// 0.3.21 does not recognise an AVX-512 CPU and falls back to older kernels (Haswell on AMD family
// 1Ah, say; Prescott, SSE3 only, on an Emerald Rapids guest), a switch to its SkylakeX kernels:
// measured 1.8x faster sgemm on the first, 4.7x on the second.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/gemm_internal.h"

// Exported by OpenBLAS builds with DYNAMIC_ARCH (Debian's): they pick the kernel family from
// OPENBLAS_CORETYPE or the CPU id. Weak, so a build without them still links and keeps its own.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace glm4 {

namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// Whether OpenBLAS's kernel family `core` is one of its AVX-512 ones.
bool avx512_core(const char* core) {
  return core != nullptr &&
         (std::strcmp(core, "SkylakeX") == 0 || std::strcmp(core, "Cooperlake") == 0 ||
          std::strcmp(core, "SapphireRapids") == 0);
}

// Re-runs OpenBLAS's kernel selection with OPENBLAS_CORETYPE=SkylakeX, the way the variable
// works when set before start-up, when it chose a family without AVX-512 kernels on a CPU that
// has them. Must run before any other BLAS call is in flight.
void upgrade_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user chose
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;
  const char* core = openblas_get_corename();
  if (core == nullptr || avx512_core(core) || !cpu_has_avx512()) return;
  gotoblas_dynamic_quit();
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");  // child processes choose for themselves
}

}  // namespace

void init_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
    upgrade_blas_core();
    openblas_set_num_threads(1);
  });
}

namespace gemm_detail {
// OpenBLAS unless it runs pre-AVX-512 kernels (e.g. OPENBLAS_CORETYPE=Haswell set by the
// environment) while this build targets AVX-512: then Eigen's AVX-512 kernels are the faster,
// 1.3-1.4x on the linear shapes of bench_gemm. Independent of timing, so results never change
// from run to run.
Fp32Backend default_tile_backend() {
  init_blas();
#if defined(__AVX512F__)
  return avx512_core(openblas_get_corename()) ? Fp32Backend::kOpenBlas : Fp32Backend::kEigen;
#else
  return Fp32Backend::kOpenBlas;
#endif
}

Fp32Backend tile_backend() {
  static const Fp32Backend backend = [] {
    init_blas();
    return kernels::kernel_selection().fp32;
  }();
  return backend;
}
}  // namespace gemm_detail

const char* blas_core_name() {
  init_blas();
  return openblas_get_corename();
}

}  // namespace glm4
