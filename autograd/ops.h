// Every differentiable op, one line each: shape contract, and what its backward saves.
// Ops record a Node only when grad mode is on and an input requires grad.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "autograd/attention_mask.h"
#include "autograd/compute_dtype.h"
#include "autograd/rope_style.h"
#include "autograd/tensor.h"

namespace glm4 {
class Weight;

// A label that carries no loss (Hugging Face's ignore_index): padding, prompts, position 0.
inline constexpr int32_t kIgnoreLabel = -100;

namespace ops {

// --- elementwise (ops/elementwise.cpp); numpy broadcasting, backward reduces with sum_to ---
Tensor add(const Tensor& a, const Tensor& b);  // saves nothing
Tensor sub(const Tensor& a, const Tensor& b);  // saves nothing
Tensor mul(const Tensor& a, const Tensor& b);  // saves a, b
Tensor div(const Tensor& a, const Tensor& b);  // a / b; saves b and the result
Tensor scale(const Tensor& a, float s);        // saves nothing
// Sums `g` over broadcast dimensions down to `shape` (the one broadcast-reduction helper).
Tensor sum_to(const Tensor& g, const Shape& shape);
// y = x * mask / (1 - p) with a mask drawn from `seed`; identity when p == 0. saves the mask.
Tensor dropout(const Tensor& x, float p, uint64_t seed);

// --- unary math (ops/unary.cpp); primitives that the fused ops' reference compositions use ---
Tensor exp(const Tensor& x);      // saves y
Tensor log(const Tensor& x);      // saves x
Tensor rsqrt(const Tensor& x);    // 1/sqrt(x); saves y
Tensor sigmoid(const Tensor& x);  // saves y

// --- activations (ops/activation.cpp) ---
Tensor silu(const Tensor& x);          // saves x
Tensor swiglu(const Tensor& gate_up);  // [..., 2I] -> silu(gate) * up [..., I]; saves input
// silu(gate) * up of two [..., I] tensors; saves both (not silu(gate): the backward recomputes it)
Tensor swiglu(const Tensor& gate, const Tensor& up);
// scale[i] * silu(gate[i]) * up[i] for gate, up [M, I] and scale [M, 1]: a routed expert's
// hidden state times its routing weight, so the expert's down_proj output is never kept for the
// weight's gradient (sum_j g[i, j] * h[i, j], with h recomputed). Saves gate, up and scale.
Tensor swiglu(const Tensor& gate, const Tensor& up, const Tensor& scale);
Tensor softmax(const Tensor& x);  // over the last dim; saves y

// --- reductions (ops/reduce.cpp) ---
Tensor sum(const Tensor& x);       // -> scalar; saves nothing
Tensor mean(const Tensor& x);      // -> scalar; saves nothing
Tensor sum_last(const Tensor& x);  // [..., N] -> [..., 1]; saves nothing

// --- shape (ops/shape.cpp); results are contiguous copies except reshape (a view) ---
Tensor reshape(const Tensor& x, const Shape& shape);                 // saves nothing
Tensor transpose(const Tensor& x, int d0, int d1);                   // saves nothing
Tensor slice(const Tensor& x, int dim, int64_t begin, int64_t end);  // saves nothing
Tensor concat(const std::vector<Tensor>& xs, int dim);               // saves nothing
std::vector<Tensor> split(const Tensor& x, int dim, const std::vector<int64_t>& sizes);

// --- matmul (ops/matmul.cpp) ---
// a [..., M, K] @ b [..., K, N] (b may be 2-D and shared by the batch); saves a, b.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., K] W^T + bias: W [N, K] trainable fp32, bias [N] or undefined; saves x, W.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
// Same with a frozen weight in its stored dtype, multiplied as `compute` says (forward and
// input gradient): only x (and bias) get gradients; saves nothing but the weight handle. With
// `values` false the product is not run and the output is zero, for a recompute rerun's last
// product, whose output only carries gradients back.
Tensor linear(const Tensor& x, const Weight& w, const Tensor& bias, const ComputeChoice& compute,
              bool values = true);

// linear(x, w, {}) for x [n, K] that is rows `rows` of source [N, K] (x = source[rows], rows
// increasing: a Mixture-of-Experts expert's tokens): saves source and w, not x, and sends x's
// gradient to those rows of source. The LoRA A product of an expert, whose input the graph need
// not keep once per expert. Repeated rows fall back to linear(x, w, {}).
Tensor linear_gathered(const Tensor& x, const Tensor& source, std::span<const int64_t> rows,
                       const Tensor& w);

// y + scale * h B^T (LoRA's second product and its sum with the frozen output): y [..., out],
// h [..., r], B [out, r] fp32. Consumes y: the result is written into y's storage, so y must be
// referenced by nothing else (the fresh output of the frozen product). Saves h, B.
Tensor add_low_rank(Tensor y, const Tensor& h, const Tensor& B, float scale);

// --- indexing (ops/index.cpp); the Mixture-of-Experts dispatch and combine ---
// x [N, H] -> rows `rows` of x [n, H] (repeats allowed); backward scatter-adds. saves nothing.
Tensor gather_rows(const Tensor& x, std::span<const int64_t> rows);
// A zero [n, H] with row i of parts[p] [n_p, H] added into row rows[p][i], in part order;
// backward gathers each part's rows. saves nothing.
Tensor scatter_add_rows(const std::vector<Tensor>& parts,
                        const std::vector<std::vector<int64_t>>& rows, int64_t n);
// x [..., E], index [M * k] (M = rows of x) -> x[m, index[m * k + j]] as [..., k]; backward
// scatter-adds into a zero [..., E]. saves nothing.
Tensor gather_last(const Tensor& x, std::span<const int32_t> index, int64_t k);

// --- embedding (ops/embedding.cpp) ---
// ids [N] -> rows of table [V, H] as [N, H]; the backward scatter-adds into the table.
Tensor embedding(std::span<const int32_t> ids, const Tensor& table);
Tensor embedding(std::span<const int32_t> ids, const Weight& table);  // frozen: no graph

// --- norms (ops/norm.cpp) ---
// y = w * x / sqrt(mean(x^2) + eps) over the last dim (fp32 accumulation); saves x, w, rstd.
Tensor rms_norm(const Tensor& x, const Tensor& w, float eps);

// --- rotary embedding (ops/rope.cpp) ---
// x [B, T, H, D]: pairs (2i, 2i+1) (interleaved) or (i, i + rotary_dim/2) (rotate-half),
// i < rotary_dim/2 = f.inv_freq.size(), at position positions[b*T + t] become
// f.scale * rotate(pos * f.inv_freq[i]); dims rotary_dim..D pass through. Backward: the inverse
// rotation times f.scale. Saves nothing but the positions and frequencies.
Tensor rope(const Tensor& x, std::span<const int32_t> positions, const RopeFrequencies& f,
            RopeStyle style = RopeStyle::Interleaved);
// The default RoPE: inv_freq[i] = theta^(-2i/rotary_dim) (rounded to fp32), scale 1.
RopeFrequencies default_rope_frequencies(int64_t rotary_dim, double theta);
Tensor rope(const Tensor& x, std::span<const int32_t> positions, int64_t rotary_dim, double theta,
            RopeStyle style = RopeStyle::Interleaved);

// --- attention (ops/attention.cpp) ---
// Causal scaled-dot-product attention with GQA, flash-style (online softmax over key tiles).
// q [B, T, Hq, D], k, v [B, S, Hkv, D] -> [B, T, Hq, D]; scale 1/sqrt(D); query head h reads kv
// head h / (Hq / Hkv). Saves q, k, v, out and the per-row log-sum-exp [B, Hq, T].
// Without a tape, under BF16 `compute` prefill-sized queries (16 rows and more, within its
// bf16_max_rows) run QK^T and PV on its bf16 kernel; otherwise fp32.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                 const ComputeChoice& compute);
// The same over a bf16 KV cache, for inference (no tape): k, v the bf16 values of [1, S, Hkv, D]
// (q's D), widened to fp32 as they are read.
Tensor attention_bf16_kv(const Tensor& q, const uint16_t* k, const uint16_t* v, int64_t S,
                         int64_t Hkv, const AttentionMask& mask, const ComputeChoice& compute);

// --- loss (ops/loss.cpp) ---
// logits [N, V], labels [N] (-100 = ignored) -> mean cross-entropy over non-ignored rows (0 if
// none); `divide_by` > 0 replaces the count of non-ignored rows as the divisor (gradient
// accumulation). Saves logits and the per-row log-sum-exp.
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> labels, double divide_by = 0);

// Fused lm_head + cross_entropy: hidden [N, H], weight [V, H] (frozen, or trainable fp32 when
// `trainable_w` is defined), labels [N]. Processes rows in chunks so [N, V] logits never exist
// whole; the gradients are formed in the forward pass (the loss is the last op) and saved:
// d_hidden [N, H] (and d_weight [V, H] when trainable); backward only scales them.
// A frozen weight is multiplied as `compute` says.
Tensor linear_cross_entropy(const Tensor& hidden, const Weight& w, const Tensor& trainable_w,
                            std::span<const int32_t> labels, double divide_by,
                            const ComputeChoice& compute);

}  // namespace ops
}  // namespace glm4
