// mlx-lm's glm4_moe_lite layout written from a transformers-layout tiny model, plus an oracle of
// the same weights in the transformers layout (see lite_mlx_convert.h).
#include "tests/support/lite_mlx_convert.h"

#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "autograd/kernels/affine_quant.h"
#include "base/check.h"
#include "io/model_files.h"
#include "io/quantized_tensors.h"
#include "model/config.h"
#include "model/save.h"

namespace glm4::testing {

namespace {

using Bytes = std::vector<std::byte>;

// Tensors to write and the bytes they point to (deques: the bytes never move).
struct Store {
  std::vector<TensorToWrite> list;
  std::deque<Bytes> owned;
  std::deque<QuantizedStorage> quantized;

  void own(const std::string& name, DType dtype, std::vector<int64_t> shape, Bytes b) {
    owned.push_back(std::move(b));
    list.push_back(
        {name, dtype_name(dtype), std::move(shape), owned.back().data(), owned.back().size()});
  }
};

// The matrix MODULE.weight of shape lead + [cols] (values in `dtype`), quantized along its last
// axis when `quant` is set and its group size divides cols, else as it is. Appends its tensors
// to `s` and returns them; `*q` is set to the quantized storage, or null.
std::vector<TensorToWrite> add_matrix(Store& s, const std::string& module, DType dtype,
                                      const std::vector<int64_t>& shape, const void* data,
                                      std::optional<QuantFormat> quant,
                                      const QuantizedStorage** q) {
  const int64_t cols = shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  *q = nullptr;
  std::vector<TensorToWrite> out;
  if (quant && cols % quant->group_size == 0) {
    s.quantized.push_back(quantize_affine(dtype, data, rows, cols, *quant, module));
    *q = &s.quantized.back();
    out = quantized_module_tensors(module, s.quantized.back());
    for (TensorToWrite& t : out) {  // [rows, last] back to lead + [last]
      const int64_t last = t.shape.back();
      t.shape = shape;
      t.shape.back() = last;
    }
  } else {
    const size_t n = size_t(rows * cols) * dtype_size(dtype);
    out.push_back({module + ".weight", dtype_name(dtype), shape, data, n});
  }
  s.list.insert(s.list.end(), out.begin(), out.end());
  return out;
}

// The values of a matrix add_matrix wrote: dequantized as mlx does, or its bytes.
Bytes values_of(const QuantizedStorage* q, const void* data, size_t nbytes) {
  Bytes b(nbytes);
  if (q != nullptr)
    dequantize_affine(q->view(), b.data());
  else
    std::memcpy(b.data(), data, nbytes);
  return b;
}

void write_config(const std::filesystem::path& from, const std::filesystem::path& dir,
                  std::optional<QuantFormat> quant) {
  std::filesystem::create_directories(dir);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(from / "config.json"));
  if (quant) {
    const nlohmann::json q = {
        {"group_size", quant->group_size}, {"bits", quant->bits}, {"mode", "affine"}};
    j["quantization"] = q;
    j["quantization_config"] = q;
  }
  std::ofstream(dir / "config.json") << j.dump(4);
  if (std::filesystem::exists(from / "generation_config.json"))
    std::filesystem::copy_file(from / "generation_config.json", dir / "generation_config.json",
                               std::filesystem::copy_options::overwrite_existing);
}

}  // namespace

void write_lite_mlx(const std::filesystem::path& hf_dir, const std::filesystem::path& mlx_dir,
                    std::optional<QuantFormat> quant, const std::filesystem::path& oracle_dir) {
  const ModelConfig c = load_model_config(hf_dir);
  const ModelFiles files = ModelFiles::open(hf_dir);
  static const std::regex layer_key(R"(model\.layers\.(\d+)\..*)");
  static const std::regex expert_key(
      R"((model\.layers\.\d+\.mlp)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight)");
  Store mlx, oracle;
  std::map<std::string, std::vector<const TensorInfo*>> stacks;  // switch_mlp module -> experts
  for (const std::string& key : files.keys()) {
    const TensorInfo& t = files.at(key);
    std::smatch m;
    if (std::regex_match(key, m, layer_key) && std::stoll(m[1].str()) >= c.num_hidden_layers)
      continue;  // a multi-token-prediction layer: sanitize drops it
    if (std::regex_match(key, m, expert_key)) {
      auto& experts = stacks[m[1].str() + ".switch_mlp." + m[3].str()];
      experts.resize(size_t(c.n_routed_experts));
      experts[size_t(std::stoll(m[2].str()))] = &t;
      continue;
    }
    const DType dtype =
        t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16" ? t.float_dtype() : DType::F32;
    const QuantizedStorage* q = nullptr;
    if (key.ends_with(".self_attn.kv_b_proj.weight")) {
      const std::string attn = key.substr(0, key.size() - 17);
      const int64_t H = c.num_attention_heads, kv = c.kv_lora_rank;
      const int64_t nope = c.qk_nope_head_dim, v = c.v_head_dim, es = dtype_size(dtype);
      Bytes eq(size_t(H * kv * nope * es)), uo(size_t(H * v * kv * es));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t r = 0; r < nope + v; ++r)
          for (int64_t col = 0; col < kv; ++col) {
            const std::byte* src = t.data + ((h * (nope + v) + r) * kv + col) * es;
            std::byte* dst = r < nope ? &eq[size_t(((h * kv + col) * nope + r) * es)]
                                      : &uo[size_t(((h * v + r - nope) * kv + col) * es)];
            std::memcpy(dst, src, size_t(es));
          }
      mlx.owned.push_back(std::move(eq));
      const Bytes& eq_b = mlx.owned.back();
      mlx.owned.push_back(std::move(uo));
      const Bytes& uo_b = mlx.owned.back();
      const QuantizedStorage *qk = nullptr, *qv = nullptr;
      add_matrix(mlx, attn + ".embed_q", dtype, {H, kv, nope}, eq_b.data(), quant, &qk);
      add_matrix(mlx, attn + ".unembed_out", dtype, {H, v, kv}, uo_b.data(), quant, &qv);
      // The oracle: kv_b_proj from the values the halves give back.
      const Bytes ek = values_of(qk, eq_b.data(), eq_b.size());
      const Bytes ev = values_of(qv, uo_b.data(), uo_b.size());
      Bytes kvb(t.nbytes);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t r = 0; r < nope + v; ++r)
          for (int64_t col = 0; col < kv; ++col)
            std::memcpy(&kvb[size_t(((h * (nope + v) + r) * kv + col) * es)],
                        r < nope ? &ek[size_t(((h * kv + col) * nope + r) * es)]
                                 : &ev[size_t(((h * v + r - nope) * kv + col) * es)],
                        size_t(es));
      oracle.own(key, dtype, t.shape, std::move(kvb));
      continue;
    }
    std::vector<TensorToWrite> written;
    if (t.shape.size() == 2 && key.ends_with(".weight") && !key.ends_with(".mlp.gate.weight"))
      written = add_matrix(mlx, key.substr(0, key.size() - 7), dtype, t.shape, t.data, quant, &q);
    else
      mlx.list.push_back(written.emplace_back(key, t.dtype, t.shape, t.data, t.nbytes));
    oracle.list.insert(oracle.list.end(), written.begin(), written.end());
  }
  for (const auto& [module, experts] : stacks) {
    const TensorInfo& first = *experts.front();
    Bytes stacked;
    for (const TensorInfo* e : experts) {
      GLM4_CHECK(e != nullptr && e->shape == first.shape && e->dtype == first.dtype, "[lite_mlx] ",
                 module, ": an expert is missing or differs");
      stacked.insert(stacked.end(), e->data, e->data + e->nbytes);
    }
    mlx.owned.push_back(std::move(stacked));
    const QuantizedStorage* q = nullptr;
    const int64_t E = c.n_routed_experts;
    const std::vector<TensorToWrite> written =
        add_matrix(mlx, module, first.float_dtype(), {E, first.shape[0], first.shape[1]},
                   mlx.owned.back().data(), quant, &q);
    // The oracle keeps transformers' per-expert keys over the same bytes.
    const std::string layer_mlp = module.substr(0, module.find(".switch_mlp."));
    const std::string proj = module.substr(module.rfind('.') + 1);
    for (const TensorToWrite& w : written) {
      const std::string suffix = w.name.substr(w.name.rfind('.'));
      for (int64_t e = 0; e < E; ++e)
        oracle.list.push_back({layer_mlp + ".experts." + std::to_string(e) + "." + proj + suffix,
                               w.dtype,
                               {w.shape[1], w.shape[2]},
                               static_cast<const std::byte*>(w.data) + size_t(e) * (w.nbytes / E),
                               w.nbytes / size_t(E)});
    }
  }
  write_config(hf_dir, mlx_dir, quant);
  write_model_files(mlx_dir, mlx.list, 0, {{"format", "mlx"}});
  if (!oracle_dir.empty()) {
    write_config(hf_dir, oracle_dir, quant);
    write_model_files(oracle_dir, oracle.list, 0, {{"format", "pt"}});
  }
}

void write_wide_lite(const std::filesystem::path& like, const std::filesystem::path& dir,
                     DType dtype, uint64_t seed) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(like / "config.json"));
  j["kv_lora_rank"] = 64;
  j["qk_nope_head_dim"] = 32;
  j["v_head_dim"] = 32;
  j["attention_bias"] = false;  // as GLM-4.7-Flash (llama.cpp's deepseek2 has no such biases)
  Glm4Model model(parse_model_config(j, "wide lite"));
  init_random(model, seed, dtype);
  save_model(model, dir, dtype);
}

}  // namespace glm4::testing
