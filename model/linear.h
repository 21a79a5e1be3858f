// The linear layer, and the only place that knows LoRA:
// y = x W^T + b + scale * (dropout(x) A^T) B^T, or DoRA (model/dora.h) when the adapter has a
// magnitude.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "model/param.h"

namespace glm4 {

struct DoraNormCache;

struct LoraWeights {
  Tensor lora_A;     // [r, in]; q/k/v adapted as ChatGLM's query_key_value hold the same tensor
  Tensor lora_B;     // [out, r]
  Tensor magnitude;  // [out], DoRA's m; undefined for plain LoRA
  float scale = 1.0f;
  float dropout = 0.0f;
  // The seed slot of the dropout mask when it is not the layer's own: linears sharing one A draw
  // one mask, as PEFT's single fused layer does.
  int dropout_slot = -1;
  // ||W + scale B A|| per row, kept between no-grad forwards while A and B stay the same.
  mutable std::shared_ptr<DoraNormCache> norm_cache;

  bool dora() const { return magnitude.defined(); }
};

struct ForwardContext;
struct AdapterRows;
class Linear;

// Where a linear layer sits: its path ("model.layers.3.self_attn.q_proj", "lm_head"), its decoder
// layer (-1 for lm_head) and its own name ("q_proj").
struct LinearSite {
  std::string path;
  int64_t layer = -1;
  std::string name;
};
using LinearVisitor = std::function<void(const LinearSite& site, Linear& linear)>;

// Where a layer's input came from: x = source[rows] (ops::gather_rows), rows increasing.
struct GatheredRows {
  const Tensor& source;
  std::span<const int64_t> rows;
};

class Linear {
 public:
  // seed_slot tells this layer's dropout masks apart from the other linears of its layer.
  Linear(int64_t in_features, int64_t out_features, bool bias, int seed_slot);

  Tensor forward(const Tensor& x, const ForwardContext& ctx) const;  // x [..., in] -> [..., out]
  // The same for x = from.source[from.rows]: a plain LoRA adapter's first product keeps the
  // source and the rows (ops::linear_gathered), not x, for its gradient.
  Tensor forward(const Tensor& x, const GatheredRows& from, const ForwardContext& ctx) const;
  // The same graph where the output's values will not be read (a recompute rerun's last
  // product): a frozen weight's product is skipped; the adapter's terms still run.
  Tensor forward_unread(const Tensor& x, const ForwardContext& ctx) const;
  // Whether forward is the frozen weight's product (+ bias) alone: no trainable weight, adapter
  // or resident adapter.
  bool frozen_only() const;
  void visit(const std::string& prefix, const ParamVisitor& fn);

  // PEFT initialisation: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform, a = sqrt(5)), B = 0.
  void add_lora(int64_t rank, float scale, float dropout, std::mt19937_64& rng);
  // W + scale * B A (DoRA: m / ||W + scale B A|| times it, row by row), rounded once to `dtype`;
  // the adapter is dropped.
  void merge_lora(DType dtype);
  // An adapter of this layer's shape, PEFT-initialised as add_lora does; with `share_a` its A
  // is that adapter's tensor (no draw from rng) and B still starts at zero.
  std::unique_ptr<LoraWeights> make_lora(int64_t rank, float scale, float dropout,
                                         std::mt19937_64& rng,
                                         const LoraWeights* share_a = nullptr) const;

  int64_t in_features, out_features;
  int seed_slot;
  Param weight;  // [out, in]
  Param bias;    // [out], shape empty when the layer has none
  std::unique_ptr<LoraWeights> lora;
  // Adapters resident side by side for per-request routing at inference: slot i holds the i-th
  // adapter loaded with load_resident_adapter (null where it leaves this layer alone). A forward
  // applies slot s only to the tokens ForwardContext::adapter_rows assigns it; never trained,
  // saved or merged.
  std::vector<std::unique_ptr<LoraWeights>> resident;

 private:
  // forward, forward with GatheredRows (from not null) and forward_unread (values false).
  Tensor forward_values(const Tensor& x, const GatheredRows* from, const ForwardContext& ctx,
                        bool values) const;
  // y[t] += scale_s * (x[t] A_s^T) B_s^T for the tokens of each slot s (gathered per slot).
  void add_resident_deltas(const Tensor& x, Tensor& y, const AdapterRows& rows) const;
};

// The tokens (ascending) of a forward of n tokens that `rows` gives resident adapter `slot`.
std::vector<int64_t> resident_tokens(const AdapterRows& rows, int64_t n, size_t slot);

// Up to this many rows a forward without gradients may share one parallel loop among several
// frozen products (autograd/kernels/linear_batch.h): decode steps.
inline constexpr int64_t kBatchedLinearRows = 16;

// Each layer's forward(x, ctx), to the bit. Without gradients, at decode sizes and with every
// layer frozen_only, their products run in one parallel loop (q, k and v of a decode step).
std::vector<Tensor> forward_each(std::span<const Linear* const> layers, const Tensor& x,
                                 const ForwardContext& ctx);

}  // namespace glm4
