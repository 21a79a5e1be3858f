// What one forward pass needs besides the hidden states: positions, the attention mask and the
// training switches; and, for inference, the rows that continue their own KV caches.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/attention_mask.h"
#include "autograd/compute_dtype.h"
#include "autograd/tensor.h"

namespace glm4 {

class KvCache;
struct AdapterRows;
struct RouterTrace;

struct ForwardContext {
  int64_t batch = 1, seq = 1;      // B, T of this call
  std::vector<int32_t> positions;  // [B * T] RoPE positions
  AttentionMask mask;
  bool training = false;          // enables LoRA dropout
  uint64_t dropout_seed = 0;      // with the layer and module, seeds each dropout mask
  bool recompute_layers = false;  // recompute each decoder layer in the backward pass
  std::vector<Tensor>* layer_outputs = nullptr;       // when set, receives each layer's output
  std::vector<RouterTrace>* router_traces = nullptr;  // when set, each MoE layer's routing

  // Distinct, reproducible seeds for the dropout of each module call.
  uint64_t seed_for(int64_t layer, int64_t module) const {
    return dropout_seed * 1000003ull + uint64_t(layer) * 131ull + uint64_t(module);
  }
  int64_t layer_index = 0;  // set by the model for the layer being run
  // How the frozen products run: set by the model to its own choice (Glm4Model::compute); a
  // caller running a layer alone sets it.
  ComputeChoice compute = kF32Compute;
  const AdapterRows* adapter_rows = nullptr;  // per-row resident adapters (inference)
  // Set by a decoder layer when its MLP output's values will not be read (a recompute rerun only
  // sends gradients back through it): every SwiGLU MLP (dense, shared and routed experts) then
  // skips its down_proj's frozen product.
  bool mlp_output_unread = false;
};

// One Mixture-of-Experts layer's routing of the N tokens of a forward (tests, inspection).
struct RouterTrace {
  int64_t layer = 0;
  Tensor logits;                 // [N, experts], before the sigmoid
  std::vector<int32_t> experts;  // [N * k], each token's experts, best choice first
  Tensor weights;                // [N, k], the routing weights in the same order
};

// Per-row adapters in one inference forward (batch 1, seq N): tokens [offsets[r], offsets[r + 1])
// get the delta of resident adapter slots[r] (Linear::resident) on top of the base; -1 = none.
struct AdapterRows {
  std::vector<int64_t> offsets;  // [R + 1], offsets[0] = 0, offsets[R] = N
  std::vector<int32_t> slots;    // [R]
};

// Rows that continue their own KV caches, laid end to end in one forward (batch 1, seq N): row r
// holds tokens [offsets[r], offsets[r + 1]) and its cache has begun a step of that many tokens.
// Each row attends to its cache (ops::attention, the op training uses) and nothing else.
struct CachedRows {
  std::vector<int64_t> offsets;  // [R + 1], offsets[0] = 0, offsets[R] = N
  std::vector<KvCache*> caches;  // [R]
};

}  // namespace glm4
