// MoeBlock's decode path: a few tokens without gradients, where the layer's cost is not the
// bytes of its experts but the parallel loops they would each start. Every chosen expert's
// gate_proj and up_proj and the shared expert's run in one parallel loop, then every down_proj in
// another (autograd/kernels/linear_batch.h); the numbers are those of MoeBlock::forward's graph
// path to the bit (same kernels, same order of sums).
#include <cstring>

#include "autograd/kernels/linear_batch.h"
#include "autograd/kernels/vec_math.h"
#include "autograd/node.h"
#include "model/forward_context.h"
#include "model/moe_block.h"

namespace glm4 {

namespace {
bool plain(const Linear& l) { return l.frozen_only() && l.bias.shape.empty(); }

bool plain(const SwigluMlp& m) {
  return plain(m.gate_proj) && plain(m.up_proj) && plain(m.down_proj);
}

// One SwiGLU's three products over `tokens` rows of `x`, and where they go.
struct ExpertRun {
  const SwigluMlp* mlp;
  const float* x;  // [tokens, hidden]
  int64_t tokens;
  std::vector<float> gate, up, out;  // [tokens, intermediate] x 2, [tokens, hidden]
};

// gate = silu(gate) * up, as ops::silu then ops::mul compute it.
void swiglu_in_place(std::vector<float>& gate, const std::vector<float>& up) {
  const int64_t n = int64_t(gate.size());
  std::vector<float> sig(gate.size());
  kernels::sigmoid(gate.data(), sig.data(), n);
  for (int64_t i = 0; i < n; ++i)
    gate[size_t(i)] = sig[size_t(i)] * gate[size_t(i)] * up[size_t(i)];
}

void run_experts(std::vector<ExpertRun>& runs, int64_t hidden, const ComputeChoice& compute) {
  std::vector<LinearProduct> products;
  for (ExpertRun& r : runs) {
    const int64_t inter = r.mlp->gate_proj.out_features;
    r.gate.resize(size_t(r.tokens * inter));
    r.up.resize(size_t(r.tokens * inter));
    products.push_back({r.x, r.tokens, &r.mlp->gate_proj.weight.frozen, r.gate.data()});
    products.push_back({r.x, r.tokens, &r.mlp->up_proj.weight.frozen, r.up.data()});
  }
  linear_forward_batch(products, compute);
  products.clear();
  for (ExpertRun& r : runs) {
    swiglu_in_place(r.gate, r.up);
    r.out.resize(size_t(r.tokens * hidden));
    products.push_back({r.gate.data(), r.tokens, &r.mlp->down_proj.weight.frozen, r.out.data()});
  }
  linear_forward_batch(products, compute);
}
}  // namespace

bool MoeBlock::decodes_batched(const ForwardContext& ctx, int64_t expert_tokens) const {
  if (GradMode::enabled() || ctx.training || expert_tokens > kDecodeBatchTokens) return false;
  if (!plain(shared_experts)) return false;
  for (const SwigluMlp& e : experts)
    if (!plain(e)) return false;
  return true;
}

Tensor MoeBlock::decode_forward(const Tensor& flat, const MoeRoute& route, const Tensor& weights,
                                const ForwardContext& ctx) const {
  const int64_t N = flat.dim(0), H = flat.dim(1);
  std::vector<ExpertRun> runs;
  std::vector<std::vector<float>> gathered;
  gathered.reserve(experts.size());
  for (size_t e = 0; e < experts.size(); ++e) {
    const std::vector<int64_t>& slots = route.slots[e];
    if (slots.empty()) continue;
    const float* x = flat.data();
    if (int64_t(slots.size()) != N) {  // not every token: gather its rows
      std::vector<float>& rows = gathered.emplace_back(slots.size() * size_t(H));
      for (size_t i = 0; i < slots.size(); ++i)
        std::memcpy(rows.data() + i * size_t(H), flat.data() + slots[i] / route.k * H,
                    size_t(H) * sizeof(float));
      x = rows.data();
    }
    runs.push_back({&experts[e], x, int64_t(slots.size()), {}, {}, {}});
  }
  runs.push_back({&shared_experts, flat.data(), N, {}, {}, {}});
  run_experts(runs, H, ctx.compute);

  // The routed sum in expert order, then the shared expert: scatter_add_rows and add's order.
  Tensor out = Tensor::zeros({N, H});
  float* po = out.data();
  const float* w = weights.data();
  size_t run = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const std::vector<int64_t>& slots = route.slots[e];
    if (slots.empty()) continue;
    const float* y = runs[run++].out.data();
    for (size_t i = 0; i < slots.size(); ++i) {
      float* o = po + slots[i] / route.k * H;
      const float wi = w[slots[i]];
      for (int64_t j = 0; j < H; ++j) o[j] += y[int64_t(i) * H + j] * wi;
    }
  }
  const float* shared = runs.back().out.data();
  for (int64_t i = 0; i < N * H; ++i) po[i] += shared[i];
  return out;
}

}  // namespace glm4
