// Merging LoRA adapters onto a quantized base without silent loss (mlx-lm#1172, PEFT#2321:
// re-quantizing W + dW at the base's 4 bits rounds most of a fine-tune's dW away, so the fused
// model behaves like the base). Each merge is measured; modules whose delta would vanish get
// more bits, or stay dense, unless the caller keeps the base's bits on purpose.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "model/glm4_model.h"

namespace glm4 {

struct RequantizeOptions {
  DType dtype = DType::BF16;  // of the scales and biases (and of modules written dense)
  double min_kept = 0.5;      // a module keeps less of its delta than this: the delta vanishes
  bool keep_bits = false;     // write at the base's format anyway (measured and reported)
  // The wider widths tried in turn where the base's loses the delta. {8} keeps every module on
  // the int8 kernels of CPUs without AVX512-VBMI (4- and 8-bit codes only there), where a 5- or
  // 6-bit module decodes about 6x slower a byte; the smaller widths make smaller files.
  std::vector<int> raise_bits = {5, 6, 8};
};

// What happened to one adapted module: W0 = dequantize(q(W)) its base, D = scale * B A its
// delta, W1 what was written. kept = <W1 - R, D> / |D|^2, the share of the delta that survived
// (0 when rounding erased it), where R is what the same quantizer writes for W0 alone (W0
// itself at the base format); error = |W1 - W0 - D| / |D|, everything the written module
// differs by from the exact merge, relative to the delta.
struct ModuleMerge {
  std::string path;
  QuantFormat base;
  std::optional<QuantFormat> written;  // nullopt: written dense in RequantizeOptions::dtype
  double delta_ratio = 0;              // |D| / |W0|
  double kept = 0;                     // at the written format
  double kept_at_base = 0;             // what naive re-quantization at the base format keeps
  double error = 0;
  bool lossy() const;  // kept below the threshold it was merged with
  double min_kept = 0.5;
};

// Merges every adapter of `model` whose base weight is quantized: re-rounds W0 + D on the
// base's own grid (its scales and biases, so W0 stays exact; what naive re-quantization at the
// same bits can keep at best), then (unless keep_bits) quantizes afresh at each width of
// o.raise_bits wider than the base's (same group) until kept >= min_kept, else keeps the module
// dense. Adapters on
// dense weights merge as merge_adapters does (rounded to o.dtype). The adapters are dropped.
std::vector<ModuleMerge> merge_requantized(Glm4Model& model, const RequantizeOptions& o);

// The report, one line a module plus a summary: what was raised, kept dense or lost.
std::string describe_merge(const std::vector<ModuleMerge>& merges);

}  // namespace glm4
