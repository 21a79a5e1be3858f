// Latent attention for glm4_moe_lite: the training form expands per-head keys and values from
// the latents; a cached forward stores only latents and rotated shared keys and attends in the
// latent space (expanding only through an unmerged kv_b_proj adapter, live or a row's resident
// one).
#include "model/mla_attention.h"

#include <cmath>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "base/check.h"
#include "model/forward_context.h"
#include "model/kv_cache.h"
#include "model/mla_latent_decode.h"
#include "model/rope_scaling.h"

namespace glm4 {

namespace {
constexpr double kLatentNormEps = 1e-6;  // Glm4MoeLiteRMSNorm's default: not rms_norm_eps
}  // namespace

MlaAttention::MlaAttention(const ModelConfig& c)
    : heads(c.num_attention_heads),
      q_lora_rank(c.q_lora_rank),
      kv_lora_rank(c.kv_lora_rank),
      nope_dim(c.qk_nope_head_dim),
      rope_dim(c.qk_rope_head_dim),
      v_dim(c.v_head_dim),
      rope(rope_frequencies(c)),
      score_mscale(latent_score_mscale(c)),
      rope_style(c.rope_style),
      kv_a_proj_with_mqa(c.hidden_size, c.kv_lora_rank + c.qk_rope_head_dim, c.attention_bias, 1),
      kv_a_layernorm(c.kv_lora_rank, kLatentNormEps),
      kv_b_proj(c.kv_lora_rank, heads * (nope_dim + v_dim), false, 2),
      o_proj(heads * v_dim, c.hidden_size, c.attention_bias, 3) {
  GLM4_CHECK(has_latent_attention(c), "[mla] a ", family_name(c.family),
             " config has no latent attention");
  const int64_t q_rows = heads * (nope_dim + rope_dim);
  if (q_lora_rank > 0) {
    q_a_proj.emplace(c.hidden_size, q_lora_rank, c.attention_bias, 0);
    q_a_layernorm.emplace(q_lora_rank, kLatentNormEps);
    q_b_proj.emplace(q_lora_rank, q_rows, false, 10);
  } else {
    q_proj.emplace(c.hidden_size, q_rows, false, 0);
  }
}

Tensor MlaAttention::forward(const Tensor& x, const ForwardContext& ctx, CachedRows* rows) const {
  const int64_t B = ctx.batch, T = ctx.seq, qk = nope_dim + rope_dim;
  // The two products of x share one parallel loop in decode steps (forward_each).
  const Linear* const of_x[] = {q_proj ? &*q_proj : &*q_a_proj, &kv_a_proj_with_mqa};
  std::vector<Tensor> from_x = forward_each(of_x, x, ctx);
  Tensor q = q_proj ? from_x[0] : q_b_proj->forward(q_a_layernorm->forward(from_x[0]), ctx);
  q = ops::reshape(q, {B, T, heads, qk});
  Tensor q_rot = ops::rope(ops::slice(q, 3, nope_dim, qk), ctx.positions, rope, rope_style);
  q = ops::concat({ops::slice(q, 3, 0, nope_dim), q_rot}, 3);  // [B, T, H, nope + rope]
  const Tensor& compressed = from_x[1];                        // [B, T, kv_lora + rope]
  Tensor latent = kv_a_layernorm.forward(ops::slice(compressed, 2, 0, kv_lora_rank));
  Tensor k_rot = ops::rope(
      ops::reshape(ops::slice(compressed, 2, kv_lora_rank, cache_width()), {B, T, 1, rope_dim}),
      ctx.positions, rope, rope_style);
  Tensor out;
  if (rows) {
    out = attend_cached(q, latent, k_rot, ctx, *rows);
  } else {
    auto [k, v] = expand(latent, k_rot, ctx);
    out = attend(q, k, v, ctx, ctx.mask);
  }
  return o_proj.forward(ops::reshape(out, {B, T, heads * v_dim}), ctx);
}

std::pair<Tensor, Tensor> MlaAttention::expand(const Tensor& latent, const Tensor& k_rot,
                                               const ForwardContext& ctx) const {
  const int64_t B = latent.dim(0), S = latent.dim(1);
  Tensor kv = ops::reshape(kv_b_proj.forward(latent, ctx), {B, S, heads, nope_dim + v_dim});
  // the shared rotary key broadcast to every head (add's backward sums it back)
  Tensor k_rot_heads = ops::add(Tensor::zeros({B, S, heads, rope_dim}), k_rot);
  Tensor k = ops::concat({ops::slice(kv, 3, 0, nope_dim), k_rot_heads}, 3);
  return {k, ops::slice(kv, 3, nope_dim, nope_dim + v_dim)};
}

Tensor MlaAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                            const ForwardContext& ctx, const AttentionMask& mask) const {
  // ops::attention takes one head width for q, k and v and scales by its -1/2 power: zeros pad
  // the narrower side (and q is scaled so that the wider width's scale stays qk's).
  const int64_t qk = nope_dim + rope_dim;
  const Tensor& q_scaled = score_mscale == 1.0 ? q : ops::scale(q, float(score_mscale));
  auto pad = [](const Tensor& t, int64_t width) {
    Shape s = t.shape();
    s[3] = width - s[3];
    return ops::concat({t, Tensor::zeros(s)}, 3);
  };
  if (v_dim == qk) return ops::attention(q_scaled, k, v, mask, ctx.compute);
  if (v_dim < qk)
    return ops::slice(ops::attention(q_scaled, k, pad(v, qk), mask, ctx.compute), 3, 0, v_dim);
  const float widen = float(std::sqrt(double(v_dim) / double(qk)));
  return ops::attention(pad(ops::scale(q_scaled, widen), v_dim), pad(k, v_dim), v, mask,
                        ctx.compute);
}

namespace {
// The resident adapter slot of token `index` of a cached forward, -1 when it has none.
int32_t resident_slot_at(const ForwardContext& ctx, int64_t index) {
  if (!ctx.adapter_rows) return -1;
  const AdapterRows& a = *ctx.adapter_rows;
  for (size_t r = 0; r + 1 < a.offsets.size(); ++r)
    if (index >= a.offsets[r] && index < a.offsets[r + 1]) return a.slots[r];
  return -1;
}
}  // namespace

Tensor MlaAttention::attend_cached(const Tensor& q, const Tensor& latent, const Tensor& k_rot,
                                   const ForwardContext& ctx, CachedRows& rows) const {
  GLM4_CHECK(!GradMode::enabled() || !q.requires_grad(),
             "[mla] KV caches are for inference; run it under NoGradGuard");
  const size_t R = rows.caches.size();
  const int64_t N = q.dim(1), W = cache_width();
  GLM4_CHECK(q.dim(0) == 1 && rows.offsets.size() == R + 1 && rows.offsets.front() == 0 &&
                 rows.offsets.back() == N,
             "[mla] ", R, " cached rows with offsets ending at ", rows.offsets.back(), " for q ",
             shape_str(q.shape()));
  // [N, 1, kv_lora + rope]: what each token leaves in its row's cache
  Tensor packed = ops::concat(
      {ops::reshape(latent, {N, 1, kv_lora_rank}), ops::reshape(k_rot, {N, 1, rope_dim})}, 2);
  ForwardContext expand_ctx = ctx;  // the cached latents carry no per-row adapter assignment
  expand_ctx.adapter_rows = nullptr;
  std::vector<Tensor> outs;
  for (size_t r = 0; r < R; ++r) {
    const int64_t begin = rows.offsets[r], end = rows.offsets[r + 1];
    GLM4_CHECK(rows.caches[r]->keys_only(), "[mla] row ", r, " has a cache of keys and values");
    const CachedTokens cached =
        rows.caches[r]->append_keys(ctx.layer_index, ops::slice(packed, 0, begin, end));
    const int64_t S = cached.tokens;
    const int32_t slot = resident_slot_at(ctx, begin);
    const bool resident =
        slot >= 0 && size_t(slot) < kv_b_proj.resident.size() && kv_b_proj.resident[size_t(slot)];
    if (!kv_b_proj.lora && !resident) {  // decode in the latent space: nothing expanded
      outs.push_back(latent_attention(
          ops::slice(q, 1, begin, end), cached, kv_b_proj.weight,
          {heads, kv_lora_rank, nope_dim, rope_dim, v_dim, score_mscale}, ctx.compute));
      continue;
    }
    // an unmerged adapter on kv_b_proj (live, or this row's resident one): expand the cached
    // latents through it
    const Tensor seen = cached.to_f32();  // [1, S, 1, W]
    AdapterRows row_adapter{{0, S}, {slot}};
    expand_ctx.adapter_rows = resident ? &row_adapter : nullptr;
    auto [k, v] = expand(ops::reshape(ops::slice(seen, 3, 0, kv_lora_rank), {1, S, kv_lora_rank}),
                         ops::slice(seen, 3, kv_lora_rank, W), expand_ctx);
    expand_ctx.adapter_rows = nullptr;
    AttentionMask mask;
    mask.q_offset = S - (end - begin);  // the row's new tokens follow what it cached
    outs.push_back(attend(ops::slice(q, 1, begin, end), k, v, ctx, mask));
  }
  return R == 1 ? outs[0] : ops::concat(outs, 1);
}

void MlaAttention::visit(const std::string& prefix, const ParamVisitor& fn) {
  if (q_proj) {
    q_proj->visit(prefix + ".q_proj", fn);
  } else {
    q_a_proj->visit(prefix + ".q_a_proj", fn);
    q_a_layernorm->visit(prefix + ".q_a_layernorm", fn);
    q_b_proj->visit(prefix + ".q_b_proj", fn);
  }
  kv_a_proj_with_mqa.visit(prefix + ".kv_a_proj_with_mqa", fn);
  kv_a_layernorm.visit(prefix + ".kv_a_layernorm", fn);
  kv_b_proj.visit(prefix + ".kv_b_proj", fn);
  o_proj.visit(prefix + ".o_proj", fn);
}

void MlaAttention::visit_linears(const std::string& prefix, int64_t layer,
                                 const LinearVisitor& fn) {
  auto visit_one = [&](const char* name, Linear& linear) {
    fn({prefix + "." + name, layer, name}, linear);
  };
  if (q_proj) {
    visit_one("q_proj", *q_proj);
  } else {
    visit_one("q_a_proj", *q_a_proj);
    visit_one("q_b_proj", *q_b_proj);
  }
  visit_one("kv_a_proj_with_mqa", kv_a_proj_with_mqa);
  visit_one("kv_b_proj", kv_b_proj);
  visit_one("o_proj", o_proj);
}

}  // namespace glm4
