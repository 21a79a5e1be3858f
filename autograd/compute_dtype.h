// How the products with frozen weights run, as a value each op that multiplies by a Weight takes
// (linear_forward, ops::linear, ops::linear_cross_entropy, ops::attention): F32 (the default)
// widens bf16 / f16 weights and multiplies in fp32; BF16 sends bf16 weights to a bf16 kernel
// (autograd/kernels/bf16_gemm.h), rounding activations to bf16. A model holds its own choice.
#pragma once
#include <cstdint>
#include <string>

#include "autograd/kernels/kernel_selection.h"

namespace glm4 {

enum class ComputeDType { F32, BF16 };
const char* compute_dtype_name(ComputeDType dtype);  // "f32", "bf16"

constexpr int64_t kBf16AllRows = INT64_MAX;

struct ComputeChoice {
  ComputeDType dtype = ComputeDType::F32;
  // The kernel of the bf16 products; kNone (or F32 compute) keeps every product on fp32.
  kernels::Bf16Kernel kernel = kernels::Bf16Kernel::kNone;
  // Under BF16 compute, the most rows a product may have and still go to the bf16 kernel; larger
  // ones take the fp32 path on the same weight (bf16, f16 or quantized). `--compute auto` lowers
  // it where the bf16 units only pay at decode sizes.
  int64_t bf16_max_rows = kBf16AllRows;

  // Whether products go to the bf16 units at all, and one of `rows` rows.
  bool bf16_units_on() const {
    return dtype == ComputeDType::BF16 && kernel != kernels::Bf16Kernel::kNone;
  }
  bool bf16_units_take(int64_t rows) const { return bf16_units_on() && rows <= bf16_max_rows; }
  bool limits_rows() const { return bf16_units_on() && bf16_max_rows != kBf16AllRows; }
  // Whether values may be rounded to about bf16 precision: BF16 compute, with or without bf16
  // units. Products may round their input (the quantized ones the units do not take run on the
  // int8 dot products), and training keeps the activations a backward reads in bf16.
  bool reduced_precision() const { return dtype == ComputeDType::BF16; }
  // What runs the frozen products: "amx", "avx512bf16", or "fp32".
  const char* kernel_name() const;
  std::string describe()
      const;  // "bf16 (amx)", "f32 (fp32)", "bf16 (avx512bf16, fp32 over 4 rows)"
};

// The exact fp32 path: what a model holds until it is given another choice.
inline constexpr ComputeChoice kF32Compute{};
// BF16 compute on `kernel` for products of up to max_rows rows.
constexpr ComputeChoice bf16_compute(kernels::Bf16Kernel kernel, int64_t max_rows = kBf16AllRows) {
  return {ComputeDType::BF16, kernel, max_rows};
}

}  // namespace glm4
