// The quantized kernel tables by instruction set: what the CPU runs (GCC's __builtin_cpu_supports,
// which also checks that the OS saves the wide registers), the process's choice
// (kernel_selection.h), and the override tests and benchmarks use to compare them.
#include <atomic>
#include <string>
#include <string_view>

#include "autograd/kernels/kernel_selection.h"
#include "autograd/kernels/quant_kernels.h"
#include "autograd/kernels/quant_linear.h"
#include "base/check.h"

namespace glm4 {
namespace quant_detail {

namespace {

const QuantKernels* named(std::string_view name) {
  if (name == "avx512") return &avx512_kernels();
  if (name == "avx2") return &avx2_kernels();
  if (name == "scalar") return &scalar_kernels();
  return nullptr;
}

// Checks the CPU before touching a table: the AVX-512 file may not even be entered elsewhere.
const QuantKernels* checked(std::string_view name, const char* source) {
  GLM4_CHECK(name == "avx512" || name == "avx2" || name == "scalar", "[quantized] ", source,
             ": unknown kernel '", name, "' (avx512, avx2 or scalar)");
  GLM4_CHECK(cpu_supports(std::string(name).c_str()), "[quantized] ", source,
             ": this CPU cannot run the ", name, " kernels");
  return named(name);
}

const QuantKernels* initial() {
  return named(kernels::quant_isa_name(kernels::kernel_selection().quant));
}

std::atomic<const QuantKernels*>& current() {
  static std::atomic<const QuantKernels*> kernels{initial()};
  return kernels;
}

}  // namespace

bool cpu_supports(const char* name) {
  const std::string_view n = name;
  if (n == "scalar") return true;
  __builtin_cpu_init();
  if (n == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (n == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
  return false;
}

const QuantKernels& active() { return *current().load(std::memory_order_relaxed); }

}  // namespace quant_detail

const char* quant_kernel_name() { return quant_detail::active().name; }

void set_quant_kernel(std::string_view name) {
  quant_detail::current().store(quant_detail::checked(name, "set_quant_kernel"));
}

std::vector<std::string> quant_kernels_supported() {
  std::vector<std::string> out;
  for (const char* name : {"avx512", "avx2", "scalar"})
    if (quant_detail::cpu_supports(name)) out.push_back(name);
  return out;
}

}  // namespace glm4
