#include "autograd/compute_dtype.h"

#include <atomic>

namespace glm4 {

namespace {
std::atomic<ComputeDType> g_compute{ComputeDType::F32};
std::atomic<int64_t> g_bf16_max_rows{kBf16AllRows};
}  // namespace

void set_compute_dtype(ComputeDType dtype, int64_t bf16_max_rows) {
  g_compute.store(dtype, std::memory_order_relaxed);
  g_bf16_max_rows.store(bf16_max_rows, std::memory_order_relaxed);
}
ComputeDType compute_dtype() { return g_compute.load(std::memory_order_relaxed); }
int64_t bf16_max_rows() { return g_bf16_max_rows.load(std::memory_order_relaxed); }
const char* compute_dtype_name(ComputeDType dtype) {
  return dtype == ComputeDType::BF16 ? "bf16" : "f32";
}

}  // namespace glm4
