// The one reader of the kernel overrides: each variable's value is one of a fixed list of
// spellings, and one the CPU runs, or the process stops at first use with the same error.
#include "autograd/kernels/kernel_selection.h"

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "autograd/kernels/bf16_gemm.h"
#include "autograd/kernels/gemm_internal.h"
#include "autograd/kernels/quant_kernels.h"
#include "base/check.h"

namespace glm4::kernels {

namespace {

// "a, b or c"
std::string one_of(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out.empty() ? "nothing on this CPU" : out;
}

// The value of environment variable `var` among `choices` (each spelled by name()), or
// `fallback` when it is unset or empty. Throws for a value not among them, or one `runs` rejects.
template <typename T, typename Name, typename Runs>
T from_env(const char* var, std::initializer_list<T> choices, Name&& name, Runs&& runs,
           T fallback) {
  const char* env = std::getenv(var);
  if (env == nullptr || *env == '\0') return fallback;
  std::vector<std::string> spelled, runnable;
  for (T c : choices) {
    spelled.push_back(name(c));
    if (runs(c)) runnable.push_back(name(c));
  }
  for (T c : choices) {
    if (env != std::string_view(name(c))) continue;
    GLM4_CHECK(runs(c), "environment variable ", var, "=", env,
               ": this CPU cannot run that kernel; expected ", one_of(runnable));
    return c;
  }
  fail("environment variable ", var, "=", env, ": unknown value; expected ", one_of(spelled));
}

KernelSelection select() {
  KernelSelection s;
  s.fp32 = from_env(
      "GLM4_GEMM", {Fp32Backend::kOpenBlas, Fp32Backend::kEigen}, fp32_backend_name,
      [](Fp32Backend) { return true; }, gemm_detail::default_tile_backend());
  Bf16Kernel best_bf16 = Bf16Kernel::kNone;
  for (Bf16Kernel k : {Bf16Kernel::kAvx512Bf16, Bf16Kernel::kAmx})
    if (bf16_kernel_available(k)) best_bf16 = k;
  s.bf16 =
      from_env("GLM4_BF16_KERNEL", {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kNone},
               bf16_kernel_name, bf16_kernel_available, best_bf16);
  auto quant_runs = [](QuantIsa isa) { return quant_detail::cpu_supports(quant_isa_name(isa)); };
  QuantIsa best_quant = QuantIsa::kScalar;
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512})
    if (quant_runs(isa)) best_quant = isa;
  s.quant = from_env("GLM4_QUANT_KERNEL", {QuantIsa::kAvx512, QuantIsa::kAvx2, QuantIsa::kScalar},
                     quant_isa_name, quant_runs, best_quant);
  return s;
}

}  // namespace

const char* fp32_backend_name(Fp32Backend backend) {
  return backend == Fp32Backend::kEigen ? "eigen" : "openblas";
}

const char* bf16_kernel_name(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::kNone:
      return "none";
    case Bf16Kernel::kAvx512Bf16:
      return "avx512bf16";
    case Bf16Kernel::kAmx:
      return "amx";
  }
  return "?";
}

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return "scalar";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

Bf16Kernel parse_bf16_kernel(std::string_view name) {
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kNone})
    if (name == bf16_kernel_name(k)) return k;
  fail("[bf16 kernel] unknown kernel '", name, "': expected amx, avx512bf16 or none");
}

const KernelSelection& kernel_selection() {
  static const KernelSelection selection = select();  // a throw leaves it for the next call
  return selection;
}

Bf16Kernel bf16_kernel() { return kernel_selection().bf16; }

}  // namespace glm4::kernels
