// Measured re-quantization of merged LoRA modules: the delta's surviving share at each width.
#include "infer/merge_quantized.h"

#include <cmath>
#include <cstdio>

#include "autograd/kernels/gemm.h"
#include "autograd/weight_quantize.h"
#include "base/check.h"
#include "base/parallel.h"
#include "model/dora.h"

namespace glm4 {

namespace {

// <a, b> and |a|^2 in double, fixed order.
double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

struct Trial {
  Weight weight;
  double kept = 0, error = 0;
};

// kept = <written - reference, delta> / |delta|^2 and error = |written - w0 - delta| / |delta|,
// where `reference` is what the same quantizer makes of w0 alone (so its own rounding of the
// base is not counted as delta kept or lost).
void measure(Trial& t, const std::vector<float>& reference, const std::vector<float>& w0,
             const std::vector<float>& delta) {
  std::vector<float> eff(w0.size());
  t.weight.to_f32(eff.data());
  std::vector<float> moved(eff.size());
  for (size_t i = 0; i < eff.size(); ++i) moved[i] = eff[i] - reference[i];
  const double dd = dot(delta.data(), delta.data(), int64_t(delta.size()));
  t.kept = dd > 0 ? dot(moved.data(), delta.data(), int64_t(moved.size())) / dd : 1.0;
  for (size_t i = 0; i < eff.size(); ++i) eff[i] -= w0[i] + delta[i];
  t.error = dd > 0 ? std::sqrt(dot(eff.data(), eff.data(), int64_t(eff.size())) / dd) : 0.0;
}

// At the base's own format: its scales and biases kept, codes re-rounded, so the base comes
// back exactly and only the delta's rounding is measured.
Trial on_base_grid(const QuantizedMatrix& base, const std::vector<float>& merged,
                   const std::vector<float>& w0, const std::vector<float>& delta) {
  Trial t;
  t.weight = requantize_on_grid(base, merged.data());
  measure(t, w0, w0, delta);
  return t;
}

// At another width: quantized afresh (mlx's rules), against the same quantizer's w0.
Trial afresh(const std::vector<float>& merged, const std::vector<float>& w0,
             const std::vector<float>& delta, int64_t rows, int64_t cols, QuantFormat format,
             DType dtype, const std::string& path) {
  Trial t;
  t.weight = quantize_weight(Weight::view(DType::F32, merged.data(), rows, cols, nullptr), format,
                             dtype, path);
  const Weight base = quantize_weight(Weight::view(DType::F32, w0.data(), rows, cols, nullptr),
                                      format, dtype, path);
  std::vector<float> reference(w0.size());
  base.to_f32(reference.data());
  measure(t, reference, w0, delta);
  return t;
}

}  // namespace

bool ModuleMerge::lossy() const { return kept < min_kept; }

std::vector<ModuleMerge> merge_requantized(Glm4Model& model, const RequantizeOptions& o) {
  std::vector<ModuleMerge> out;
  model.visit_linears([&](const LinearSite& site, Linear& linear) {
    if (!linear.lora) return;
    if (!linear.weight.frozen.is_quantized()) {
      linear.merge_lora(o.dtype);
      return;
    }
    const int64_t rows = linear.out_features, cols = linear.in_features;
    ModuleMerge m;
    m.path = site.path;
    m.base = linear.weight.frozen.quant().format();
    m.min_kept = o.min_kept;
    std::vector<float> w0(size_t(rows * cols)), delta(w0.size(), 0.0f);
    linear.weight.frozen.to_f32(w0.data());
    const int64_t r = linear.lora->lora_A.dim(0);
    sgemm(false, false, rows, cols, r, linear.lora->scale, linear.lora->lora_B.data(), r,
          linear.lora->lora_A.data(), cols, 0.0f, delta.data(), cols);
    std::vector<float> merged(w0.size());
    for (size_t i = 0; i < merged.size(); ++i) merged[i] = w0[i] + delta[i];
    if (linear.lora->dora()) {  // DoRA rescales every row: its delta is the whole change
      Tensor adapted = adapted_weight(linear.weight, *linear.lora);
      std::copy(adapted.data(), adapted.data() + adapted.numel(), merged.begin());
      for (size_t i = 0; i < merged.size(); ++i) delta[i] = merged[i] - w0[i];
    }
    m.delta_ratio = std::sqrt(dot(delta.data(), delta.data(), int64_t(delta.size())) /
                              std::max(1e-300, dot(w0.data(), w0.data(), int64_t(w0.size()))));

    std::optional<Trial> chosen;
    std::vector<int> widths = {m.base.bits};
    if (!o.keep_bits)
      for (int bits : o.raise_bits)
        if (bits > m.base.bits) widths.push_back(bits);
    for (int bits : widths) {
      const QuantFormat f{bits, m.base.group_size};
      Trial t = bits == m.base.bits ? on_base_grid(linear.weight.frozen.quant(), merged, w0, delta)
                                    : afresh(merged, w0, delta, rows, cols, f, o.dtype, site.path);
      if (bits == m.base.bits) m.kept_at_base = t.kept;
      if (t.kept >= o.min_kept || o.keep_bits) {
        m.written = f;
        m.kept = t.kept;
        m.error = t.error;
        chosen = std::move(t);
        break;
      }
    }
    if (chosen) {
      linear.weight.assign(chosen->weight);
    } else {  // even 8 bits rounds the delta away: keep the exact merge, dense
      linear.weight.assign(Weight::from_f32(merged.data(), rows, cols, o.dtype));
      m.kept = 1.0;
      m.error = 0.0;
    }
    linear.lora.reset();
    out.push_back(m);
  });
  return out;
}

std::string describe_merge(const std::vector<ModuleMerge>& merges) {
  std::string text;
  int raised = 0, dense = 0, lossy = 0;
  char line[320];
  for (const ModuleMerge& m : merges) {
    const char* what;
    if (!m.written) {
      what = "kept dense (the delta vanishes even at 8 bits)";
      ++dense;
    } else if (m.written->bits != m.base.bits) {
      what = "raised";
      ++raised;
    } else if (m.lossy()) {
      what = "LOSSY (kept the base's bits on request)";
      ++lossy;
    } else {
      what = "ok";
    }
    char fmt[32] = "dense";
    if (m.written)
      std::snprintf(fmt, sizeof fmt, "%d-bit/g%d", m.written->bits, m.written->group_size);
    std::snprintf(
        line, sizeof line,
        "  %-40s |dW|/|W| %.2e  kept at %d bits %5.1f%%  -> %-11s kept %5.1f%% error %.2f  %s\n",
        m.path.c_str(), m.delta_ratio, m.base.bits, 100 * m.kept_at_base, fmt, 100 * m.kept,
        m.error, what);
    text += line;
  }
  std::snprintf(
      line, sizeof line,
      "merged %zu modules onto the quantized base: %d raised to more bits, %d kept dense, "
      "%d lossy\n",
      merges.size(), raised, dense, lossy);
  return text + line;
}

}  // namespace glm4
