// Which kernels this process runs, chosen once from the CPU unless an environment variable
// overrides it: GLM4_GEMM (fp32 sgemm tiles), GLM4_BF16_KERNEL, GLM4_QUANT_KERNEL. The only
// place that reads them; a bad value fails the same way for all three.
#pragma once
#include <string_view>

namespace glm4::kernels {

enum class Fp32Backend { kOpenBlas, kEigen };        // what runs the fp32 sgemm tiles
enum class Bf16Kernel { kNone, kAvx512Bf16, kAmx };  // the bf16 units (bf16_gemm.h)
enum class QuantIsa { kScalar, kAvx2, kAvx512 };     // the quantized kernels (quant_linear.h)

// The spellings the environment variables take.
const char* fp32_backend_name(Fp32Backend backend);  // "openblas", "eigen"
const char* bf16_kernel_name(Bf16Kernel kernel);     // "none", "avx512bf16", "amx"
const char* quant_isa_name(QuantIsa isa);            // "scalar", "avx2", "avx512"
// "amx" / "avx512bf16" / "none" to the kernel; anything else throws.
Bf16Kernel parse_bf16_kernel(std::string_view name);

struct KernelSelection {
  Fp32Backend fp32 = Fp32Backend::kOpenBlas;
  Bf16Kernel bf16 = Bf16Kernel::kNone;  // kNone: the CPU has no bf16 units (products stay fp32)
  QuantIsa quant = QuantIsa::kScalar;
};

// The kernels of this process, read on first call: the fastest this CPU runs, each replaced by
// its environment variable when that is set and not empty. A value that is not one of the
// spellings above, or names a kernel this CPU cannot run, throws a glm4::Error naming the
// variable, the value and the values accepted here (and throws again on the next call).
const KernelSelection& kernel_selection();

// kernel_selection().bf16: the bf16 kernel that --compute bf16 / auto use.
Bf16Kernel bf16_kernel();

}  // namespace glm4::kernels
