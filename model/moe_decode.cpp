// MoeBlock's decode path: a few tokens without gradients, where the layer's cost is not the
// bytes of its experts but the parallel loops they would each start. Every chosen expert's
// gate_proj and up_proj and the shared expert's run in one parallel loop, then every down_proj in
// another (autograd/kernels/linear_batch.h); the A products of their LoRA adapters (live and
// resident) join those loops, and the B products follow in one more loop each. The numbers are
// those of MoeBlock::forward's graph path to the bit (same kernels, same order of sums).
#include <cstring>
#include <optional>

#include "autograd/kernels/gemm.h"
#include "autograd/kernels/linear_batch.h"
#include "autograd/kernels/vec_math.h"
#include "autograd/node.h"
#include "base/parallel.h"
#include "model/forward_context.h"
#include "model/moe_block.h"

namespace glm4 {

namespace {
// Whether the decode path computes l's forward: a frozen weight without bias, its adapters (live
// or resident) plain LoRA. DoRA rescales the weight's rows and stays on the graph path.
bool batchable(const Linear& l) {
  if (l.weight.value.defined() || l.weight.frozen.empty() || !l.bias.shape.empty()) return false;
  if (l.lora && l.lora->dora()) return false;
  for (const std::unique_ptr<LoraWeights>& r : l.resident)
    if (r && r->dora()) return false;
  return true;
}

bool batchable(const SwigluMlp& m) {
  return batchable(m.gate_proj) && batchable(m.up_proj) && batchable(m.down_proj);
}

// One adapter's term of a product, y[rows] += scale * (x[rows] A^T) B^T, computed as
// Linear::forward does: h = x A^T by linear_forward on fp32 (ops::linear), then y += scale h B^T
// by sgemm (ops::add_low_rank); a resident adapter on its rows gathered (add_resident_deltas).
struct LowRank {
  const LoraWeights* w;
  std::vector<int64_t> rows;  // the product's rows it adds to; empty: all (the live adapter)
  std::vector<float> x;       // [rows, in], those rows of x
  Weight a;                   // A [r, in], viewed as ops::linear views it
  std::vector<float> h;       // [rows, r]
};

// One Linear's forward over M rows: the frozen product, then the live adapter's term and each
// resident slot's on its rows, in Linear::forward's order.
struct Product {
  const Linear* linear;
  const float* x;  // [M, in]
  int64_t M;
  float* y;  // [M, out]
  std::vector<LowRank> terms;
};

Product product_of(const Linear& l, const float* x, int64_t M, float* y, const AdapterRows* rows) {
  Product p{&l, x, M, y, {}};
  if (l.lora) p.terms.push_back({l.lora.get(), {}, {}, {}, {}});
  if (!rows) return p;
  const int64_t in = l.in_features;
  for (size_t s = 0; s < l.resident.size(); ++s) {
    if (!l.resident[s]) continue;
    std::vector<int64_t> tokens = resident_tokens(*rows, M, s);
    if (tokens.empty()) continue;
    LowRank t{l.resident[s].get(), std::move(tokens), {}, {}, {}};
    t.x.resize(t.rows.size() * size_t(in));
    for (size_t i = 0; i < t.rows.size(); ++i)
      std::memcpy(t.x.data() + i * size_t(in), x + t.rows[i] * in, size_t(in) * sizeof(float));
    p.terms.push_back(std::move(t));
  }
  return p;
}

// y += scale h B^T on the term's rows.
void add_term(const Product& p, const LowRank& t) {
  const int64_t n = p.linear->out_features, r = t.w->lora_B.dim(1);
  if (t.rows.empty()) {
    sgemm(false, true, p.M, n, r, t.w->scale, t.h.data(), r, t.w->lora_B.data(), r, 1.0f, p.y, n);
    return;
  }
  const int64_t m = int64_t(t.rows.size());
  std::vector<float> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(y.data() + i * n, p.y + t.rows[size_t(i)] * n, size_t(n) * sizeof(float));
  sgemm(false, true, m, n, r, t.w->scale, t.h.data(), r, t.w->lora_B.data(), r, 1.0f, y.data(), n);
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(p.y + t.rows[size_t(i)] * n, y.data() + i * n, size_t(n) * sizeof(float));
}

// Every frozen product and every adapter's A product in one parallel loop; then, when there are
// adapters, their B products in another, one task a product (its terms in order).
void run_products(std::vector<Product>& ps, const ComputeChoice& compute) {
  std::vector<LinearProduct> products;
  std::vector<const Product*> adapted;
  for (Product& p : ps) {
    products.push_back({p.x, p.M, &p.linear->weight.frozen, p.y});
    for (LowRank& t : p.terms) {
      const Tensor& A = t.w->lora_A;  // [r, in]
      t.a = Weight::view(DType::F32, A.data(), A.dim(0), A.dim(1), A.impl_ptr());
      const int64_t m = t.rows.empty() ? p.M : int64_t(t.rows.size());
      t.h.resize(size_t(m * A.dim(0)));
      products.push_back({t.rows.empty() ? p.x : t.x.data(), m, &t.a, t.h.data(), &kF32Compute});
    }
    if (!p.terms.empty()) adapted.push_back(&p);
  }
  linear_forward_batch(products, compute);
  parallel_for(int64_t(adapted.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (const LowRank& t : adapted[size_t(i)]->terms) add_term(*adapted[size_t(i)], t);
  });
}

// One SwiGLU's three products over `tokens` rows of `x`, and where they go.
struct ExpertRun {
  const SwigluMlp* mlp;
  const float* x;  // [tokens, hidden]
  int64_t tokens;
  std::vector<float> scale;          // a routed expert's routing weights, [tokens]; empty: none
  std::optional<AdapterRows> rows;   // the resident adapters' rows among these tokens
  std::vector<float> gate, up, out;  // [tokens, intermediate] x 2, [tokens, hidden]
};

// gate = silu(gate) * up, times each row's scale when there is one, as ops::swiglu computes it.
void swiglu_in_place(std::vector<float>& gate, const std::vector<float>& up,
                     const std::vector<float>& scale) {
  const int64_t n = int64_t(gate.size());
  std::vector<float> sig(gate.size());
  kernels::sigmoid(gate.data(), sig.data(), n);
  for (int64_t i = 0; i < n; ++i)
    gate[size_t(i)] = gate[size_t(i)] * sig[size_t(i)] * up[size_t(i)];
  if (scale.empty()) return;
  const size_t width = gate.size() / scale.size();
  for (size_t row = 0; row < scale.size(); ++row)  // not i / width: a division per element
    for (size_t i = row * width; i < (row + 1) * width; ++i) gate[i] *= scale[row];
}

void run_experts(std::vector<ExpertRun>& runs, int64_t hidden, const ComputeChoice& compute) {
  std::vector<Product> products;
  for (ExpertRun& r : runs) {
    const int64_t inter = r.mlp->gate_proj.out_features;
    const AdapterRows* rows = r.rows ? &*r.rows : nullptr;
    r.gate.resize(size_t(r.tokens * inter));
    r.up.resize(size_t(r.tokens * inter));
    products.push_back(product_of(r.mlp->gate_proj, r.x, r.tokens, r.gate.data(), rows));
    products.push_back(product_of(r.mlp->up_proj, r.x, r.tokens, r.up.data(), rows));
  }
  run_products(products, compute);
  products.clear();
  for (ExpertRun& r : runs) {
    swiglu_in_place(r.gate, r.up, r.scale);
    r.out.resize(size_t(r.tokens * hidden));
    products.push_back(product_of(r.mlp->down_proj, r.gate.data(), r.tokens, r.out.data(),
                                  r.rows ? &*r.rows : nullptr));
  }
  run_products(products, compute);
}
}  // namespace

bool MoeBlock::decodes_batched(const ForwardContext& ctx, int64_t expert_tokens) const {
  if (GradMode::enabled() || ctx.training || expert_tokens > kDecodeBatchTokens) return false;
  if (!batchable(shared_experts)) return false;
  for (const SwigluMlp& e : experts)
    if (!batchable(e)) return false;
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
    std::vector<int64_t> tokens(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) tokens[i] = slots[i] / route.k;
    if (int64_t(slots.size()) != N) {  // not every token: gather its rows
      std::vector<float>& rows = gathered.emplace_back(slots.size() * size_t(H));
      for (size_t i = 0; i < slots.size(); ++i)
        std::memcpy(rows.data() + i * size_t(H), flat.data() + tokens[i] * H,
                    size_t(H) * sizeof(float));
      x = rows.data();
    }
    ExpertRun& run =
        runs.emplace_back(ExpertRun{&experts[e], x, int64_t(slots.size()), {}, {}, {}, {}, {}});
    for (int64_t slot : slots) run.scale.push_back(weights.data()[slot]);
    if (ctx.adapter_rows) run.rows = rows_of(*ctx.adapter_rows, tokens);
  }
  ExpertRun& shared =
      runs.emplace_back(ExpertRun{&shared_experts, flat.data(), N, {}, {}, {}, {}, {}});
  if (ctx.adapter_rows) shared.rows = *ctx.adapter_rows;
  run_experts(runs, H, ctx.compute);

  // The routed sum in expert order, then the shared expert: scatter_add_rows and add's order.
  Tensor out = Tensor::zeros({N, H});
  float* po = out.data();
  size_t run = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const std::vector<int64_t>& slots = route.slots[e];
    if (slots.empty()) continue;
    const float* y = runs[run++].out.data();
    for (size_t i = 0; i < slots.size(); ++i) {
      float* o = po + slots[i] / route.k * H;
      for (int64_t j = 0; j < H; ++j) o[j] += y[int64_t(i) * H + j];
    }
  }
  const float* shared_out = runs.back().out.data();
  for (int64_t i = 0; i < N * H; ++i) po[i] += shared_out[i];
  return out;
}

}  // namespace glm4
