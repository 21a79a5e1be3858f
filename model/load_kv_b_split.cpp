// Rebuilding kv_b_proj from mlx-lm's embed_q / unembed_out (glm4_moe_lite's sanitize splits it
// per head and, when quantized, re-quantizes each half along its own last axis).
#include "model/load_kv_b_split.h"

#include <cstring>

#include "autograd/kernels/affine_quant.h"
#include "autograd/tensor.h"
#include "base/check.h"
#include "io/quantized_tensors.h"
#include "model/load_file_tensors.h"

namespace glm4 {

namespace {

// One half as dense elements [heads, rows, cols] in `dtype`: the file's bytes, or its
// dequantized values in `owned`.
struct Half {
  const std::byte* data = nullptr;
  DType dtype = DType::F32;
  std::vector<std::byte> owned;
};

// MODULE [heads, rows, cols] affine-quantized, dequantized bit for bit as mlx's dequantize does
// (scale * code + bias in the scales' dtype). False when a part is missing (recorded in
// `missing`).
bool quantized_half(const ModelFiles& files, const std::string& module, const Shape& expected,
                    QuantFormat format, const std::string& dir, std::set<std::string>& used,
                    std::vector<std::string>& missing, Half& half) {
  const std::optional<QuantizedMatrix> q =
      stacked_quantized_view(files, module, expected[0], expected[1], format, dir, used, missing);
  if (!q) return false;
  GLM4_CHECK(q->cols == expected[2], dir, ": ", module, " holds rows of ", q->cols, " values at ",
             format.bits, " bits, expected ", shape_str(expected), " from config.json");
  half.dtype = q->scale_dtype;
  half.owned.resize(size_t(q->rows * q->cols) * dtype_size(q->scale_dtype));
  dequantize_affine(*q, half.owned.data());
  half.data = half.owned.data();
  return true;
}

// Reads MODULE [expected] dense or quantized; false when keys are missing.
bool read_half(const ModelFiles& files, const std::string& module, const Shape& expected,
               std::optional<QuantFormat> format, const std::string& dir,
               std::set<std::string>& used, std::vector<std::string>& missing, Half& half) {
  if (format) return quantized_half(files, module, expected, *format, dir, used, missing, half);
  const std::string key = module + ".weight";
  used.insert(key);
  const TensorInfo& t = files.at(key);
  half = {t.data, dense_tensor_dtype(t, expected, dir), {}};
  return true;
}

}  // namespace

Weight load_kv_b_split(const ModelConfig& c, const ModelFiles& files, const std::string& attn,
                       KvBSplitFormats formats, const std::string& dir, std::set<std::string>& used,
                       std::vector<std::string>& missing, size_t& extra_bytes) {
  const std::string eq = attn + ".embed_q", uo = attn + ".unembed_out";
  const bool has_eq = files.find(eq + ".weight") != nullptr;
  const bool has_uo = files.find(uo + ".weight") != nullptr;
  const bool has_kv_b = files.find(attn + ".kv_b_proj.weight") != nullptr;
  GLM4_CHECK(!has_kv_b || has_eq || has_uo, dir, ": ", attn,
             ".kv_b_proj.weight is stored whole while other layers hold mlx-lm's split of it "
             "(self_attn.embed_q / unembed_out): a checkpoint holds one layout or the other");
  GLM4_CHECK(!has_kv_b, dir, ": ", attn, ".kv_b_proj.weight and mlx-lm's split of it (", eq,
             ".weight, ", uo, ".weight) are both present: a checkpoint holds one or the other");
  if (!has_eq && !has_uo) {
    missing.push_back(attn + ".kv_b_proj.weight (or " + eq + ".weight and " + uo + ".weight)");
    return {};
  }
  GLM4_CHECK(has_eq && has_uo, dir, ": ", has_eq ? eq : uo, ".weight is present but ",
             has_eq ? uo : eq,
             ".weight is not: mlx-lm splits kv_b_proj into both halves (embed_q: keys, "
             "unembed_out: values)");
  const int64_t heads = c.num_attention_heads, kv = c.kv_lora_rank;
  const int64_t nope = c.qk_nope_head_dim, v = c.v_head_dim;
  Half key_half, value_half;
  const bool complete_k =
      read_half(files, eq, {heads, kv, nope}, formats.embed_q, dir, used, missing, key_half);
  const bool complete_v =
      read_half(files, uo, {heads, v, kv}, formats.unembed_out, dir, used, missing, value_half);
  if (!complete_k || !complete_v) return {};
  GLM4_CHECK(key_half.dtype == value_half.dtype, dir, ": ", eq, " holds ",
             dtype_name(key_half.dtype), " values but ", uo, " holds ",
             dtype_name(value_half.dtype), ": kv_b_proj is rebuilt as one matrix of one dtype");
  const size_t es = dtype_size(key_half.dtype);
  const int64_t rows = heads * (nope + v);
  std::vector<std::byte> out(size_t(rows * kv) * es);
  for (int64_t h = 0; h < heads; ++h) {
    // [kv, nope] transposed to rows h * (nope + v) + i, i < nope: one element at a time.
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t col = 0; col < kv; ++col)
        std::memcpy(&out[size_t((h * (nope + v) + i) * kv + col) * es],
                    key_half.data + size_t((h * kv + col) * nope + i) * es, es);
    // [v, kv] copied as it is to the rows after.
    std::memcpy(&out[size_t((h * (nope + v) + nope) * kv) * es],
                value_half.data + size_t(h * v * kv) * es, size_t(v * kv) * es);
  }
  extra_bytes += out.size();
  return Weight::copy_of(key_half.dtype, out.data(), rows, kv);
}

void discard_kv_b_split(ModelFiles& files, const std::string& attn) {
  for (const char* half : {".embed_q", ".unembed_out"})
    for (const char* part : {".weight", ".scales", ".biases"}) {
      const std::string key = attn + half + part;
      if (files.find(key)) files.discard(key);
    }
}

}  // namespace glm4
