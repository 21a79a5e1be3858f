"""Plain-PyTorch forward of transformers' Glm4MoeLiteForCausalLM (GLM-4.7-Flash, model_type
`glm4_moe_lite`): DeepSeek-V2 latent attention (MLA) in front of glm4_moe's MLPs and router, whose
dropped groups score -inf instead of 0.0. The MLPs, router, LoRA and checkpoint helpers come from
glm4_moe_model.py. Written from the upstream semantics (transformers 5 modeling_glm4_moe_lite.py),
not copied."""

import json
import os
from dataclasses import dataclass

import torch

import glm4_moe_model as mm
import yarn

LATENT_NORM_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm: Glm4MoeLiteRMSNorm's default, not rms_norm_eps


@dataclass
class LiteSpec:
    """The numbers a glm4_moe_lite forward needs; the MoE fields keep glm4_moe_model's names so
    its moe() and route() run unchanged."""

    vocab: int
    hidden: int
    inter: int
    moe_inter: int
    layers: int
    heads: int
    q_lora_rank: int  # 0: one q_proj (the file's null)
    kv_lora_rank: int
    qk_nope: int
    qk_rope: int  # the rotary tail of each q/k head; also the shared rotary key
    v_head: int
    interleave: bool  # rope_interleave: pairs (2i, 2i+1), else rotate-half
    rope_base: float
    eps: float
    attention_bias: bool  # q_a_proj, kv_a_proj_with_mqa and o_proj
    first_dense: int
    n_experts: int
    top_k: int
    n_group: int
    topk_group: int
    n_shared: int
    norm_topk: bool
    scaling: float
    tie: bool
    mtp_layers: int
    dropped_choice: float = float("-inf")
    yarn: dict = None  # rope_scaling / rope_parameters of type "yarn", else None
    max_pos: int = 0  # max_position_embeddings, which YaRN reads

    @property
    def rope_scale(self):  # YaRN's cos/sin factor
        return 1.0 if self.yarn is None else yarn.attention_factor(self.yarn, self.max_pos)

    @property
    def score_mscale(self):  # YaRN's mscale(factor, mscale_all_dim)^2 on the softmax scale
        return yarn.latent_score_mscale(self.yarn, self.max_pos)

    @property
    def rotary_dim(self):  # glm4_moe_model.rope_angles reads it
        return self.qk_rope


def spec_from_config(cfg: dict) -> LiteSpec:
    if cfg.get("model_type") != "glm4_moe_lite":
        raise ValueError(f"config.json: model_type {cfg.get('model_type')!r}")
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if rp.get("rope_type", rp.get("type", "default")) not in ("default", "yarn"):
        raise ValueError("config.json: only the default RoPE and YaRN are supported here")
    theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    if float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))) != 1.0:
        raise ValueError("config.json: partial_rotary_factor must be 1")
    layers = cfg["num_hidden_layers"]
    types = cfg.get("mlp_layer_types")
    first_dense = types.count("dense") if types else int(cfg.get("first_k_dense_replace", 1))
    if types:
        assert types == ["dense"] * first_dense + ["sparse"] * (layers - first_dense), types
    return LiteSpec(
        vocab=cfg["vocab_size"], hidden=cfg["hidden_size"], inter=cfg["intermediate_size"],
        moe_inter=cfg["moe_intermediate_size"], layers=layers,
        heads=cfg["num_attention_heads"], q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        kv_lora_rank=cfg["kv_lora_rank"], qk_nope=cfg["qk_nope_head_dim"],
        qk_rope=cfg["qk_rope_head_dim"], v_head=cfg["v_head_dim"],
        interleave=bool(cfg.get("rope_interleave", True)), rope_base=theta,
        eps=float(cfg.get("rms_norm_eps", 1e-5)),
        attention_bias=bool(cfg.get("attention_bias", False)), first_dense=first_dense,
        n_experts=cfg["n_routed_experts"], top_k=cfg["num_experts_per_tok"],
        n_group=int(cfg.get("n_group") or 1), topk_group=int(cfg.get("topk_group") or 1),
        n_shared=int(cfg.get("n_shared_experts", 1)),
        norm_topk=bool(cfg.get("norm_topk_prob", True)),
        scaling=float(cfg.get("routed_scaling_factor", 1.0)),
        tie=bool(cfg.get("tie_word_embeddings", False)),
        mtp_layers=int(cfg.get("num_nextn_predict_layers", 0)), yarn=yarn.params(cfg),
        max_pos=int(cfg.get("max_position_embeddings", 202752)))


def rope_interleaved_upstream(x, angles, scale=1.0):
    """transformers' apply_rotary_pos_emb_interleave: pairs (x[2i], x[2i+1]) rotated, written
    back de-interleaved (all first members, then all second members). The permutation is the
    same for q and k, so q.k and the attention output equal those of rotating in place. cos/sin
    in fp32 times `scale` (YaRN)."""
    cos, sin = (angles.cos() * scale).to(x.dtype), (angles.sin() * scale).to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rope_interleaved_in_place(x, angles, scale=1.0):
    """The same rotation, each pair left where it was (what the C++ rope op does)."""
    cos, sin = (angles.cos() * scale).to(x.dtype), (angles.sin() * scale).to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


def attention(spec: LiteSpec, W, p, h, angles, allowed, lora=None, rope_in_place=False):
    """Glm4MoeLiteAttention on h [B, T, hidden] (no cache: keys and values expanded)."""
    B, T, _ = h.shape
    H, N, R, V = spec.heads, spec.qk_nope, spec.qk_rope, spec.v_head
    a = p + "self_attn."
    if spec.q_lora_rank:
        qa = mm.rms_norm(mm.linear(h, W, a + "q_a_proj", lora), W[a + "q_a_layernorm.weight"],
                         LATENT_NORM_EPS)
        q = mm.linear(qa, W, a + "q_b_proj", lora)
    else:
        q = mm.linear(h, W, a + "q_proj", lora)
    q_pass, q_rot = q.view(B, T, H, N + R).transpose(1, 2).split([N, R], dim=-1)
    latent, k_rot = mm.linear(h, W, a + "kv_a_proj_with_mqa", lora).split(
        [spec.kv_lora_rank, R], dim=-1)
    latent = mm.rms_norm(latent, W[a + "kv_a_layernorm.weight"], LATENT_NORM_EPS)
    k_rot = k_rot.view(B, 1, T, R)
    if spec.interleave:
        rope = rope_interleaved_in_place if rope_in_place else rope_interleaved_upstream
    else:
        rope = mm.rope_half
    q_rot, k_rot = rope(q_rot, angles, spec.rope_scale), rope(k_rot, angles, spec.rope_scale)
    kv = mm.linear(latent, W, a + "kv_b_proj", lora).view(B, T, H, N + V).transpose(1, 2)
    k_nope, v = kv.split([N, V], dim=-1)
    q = torch.cat([q_pass, q_rot], dim=-1)
    k = torch.cat([k_nope, k_rot.expand(B, H, T, R)], dim=-1)
    scores = (q @ k.transpose(-1, -2)) * ((N + R) ** -0.5 * spec.score_mscale)
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=mm.work_dtype(scores)).to(q.dtype)
    out = (probs @ v).transpose(1, 2).reshape(B, T, H * V)
    return mm.linear(out, W, a + "o_proj", lora)


def forward(spec: LiteSpec, W, ids, lengths=None, lora=None, rope_in_place=False) -> mm.Output:
    B, T = ids.shape
    x = W["model.embed_tokens.weight"][ids]
    angles = mm.rope_angles(spec, T)
    allowed = mm.attention_mask(B, T, lengths)
    hiddens, routes = [], {}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        x = x + attention(spec, W, p, mm.rms_norm(x, W[p + "input_layernorm.weight"], spec.eps),
                          angles, allowed, lora, rope_in_place)
        h = mm.rms_norm(x, W[p + "post_attention_layernorm.weight"], spec.eps)
        if i >= spec.first_dense:
            m, routes[i] = mm.moe(spec, W, p + "mlp", h, lora)
        else:
            m = mm.swiglu(W, p + "mlp", h, lora)
        x = x + m
        hiddens.append(x)
    final = mm.rms_norm(x, W["model.norm.weight"], spec.eps)
    head = W["model.embed_tokens.weight"] if spec.tie else W["lm_head.weight"]
    return mm.Output(final @ head.t(), hiddens, final, routes)


def attention_shapes(spec: LiteSpec):
    """self_attn key suffix -> shape."""
    h, H, R = spec.hidden, spec.heads, spec.qk_rope
    qk = spec.qk_nope + R
    s = {"kv_a_proj_with_mqa.weight": (spec.kv_lora_rank + R, h),
         "kv_a_layernorm.weight": (spec.kv_lora_rank,),
         "kv_b_proj.weight": (H * (spec.qk_nope + spec.v_head), spec.kv_lora_rank),
         "o_proj.weight": (h, H * spec.v_head)}
    if spec.q_lora_rank:
        s.update({"q_a_proj.weight": (spec.q_lora_rank, h),
                  "q_a_layernorm.weight": (spec.q_lora_rank,),
                  "q_b_proj.weight": (H * qk, spec.q_lora_rank)})
    else:
        s["q_proj.weight"] = (H * qk, h)
    if spec.attention_bias:
        for m in ["kv_a_proj_with_mqa", "o_proj"] + (["q_a_proj"] if spec.q_lora_rank else []):
            s[m + ".bias"] = (s[m + ".weight"][0],)
    return s


def layer_shapes(spec: LiteSpec, i: int):
    p = f"model.layers.{i}."
    h = spec.hidden
    out = {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
    out.update({p + "self_attn." + k: v for k, v in attention_shapes(spec).items()})
    mlps = [(p + "mlp", spec.inter)]
    if i >= spec.first_dense:
        out[p + "mlp.gate.weight"] = (spec.n_experts, h)
        out[p + "mlp.gate.e_score_correction_bias"] = (spec.n_experts,)
        mlps = [(p + "mlp.shared_experts", spec.moe_inter * spec.n_shared)] + [
            (p + f"mlp.experts.{e}", spec.moe_inter) for e in range(spec.n_experts)]
    for m, inter in mlps:
        out.update({m + ".gate_proj.weight": (inter, h), m + ".up_proj.weight": (inter, h),
                    m + ".down_proj.weight": (h, inter)})
    return out


def shapes(spec: LiteSpec, with_mtp=False):
    """Every tensor the forward reads (and with_mtp, the MTP layers the files carry)."""
    out = {"model.embed_tokens.weight": (spec.vocab, spec.hidden),
           "model.norm.weight": (spec.hidden,)}
    if not spec.tie:
        out["lm_head.weight"] = (spec.vocab, spec.hidden)
    for i in range(spec.layers):
        out.update(layer_shapes(spec, i))
    if with_mtp:
        h = spec.hidden
        for i in range(spec.layers, spec.layers + spec.mtp_layers):
            p = f"model.layers.{i}."
            out.update(layer_shapes(spec, i))  # a whole MoE decoder layer
            out.update({p + "embed_tokens.weight": (spec.vocab, h), p + "enorm.weight": (h,),
                        p + "hnorm.weight": (h,), p + "eh_proj.weight": (h, 2 * h),
                        p + "shared_head.norm.weight": (h,),
                        p + "shared_head.head.weight": (spec.vocab, h)})
    return out


LORA_TARGETS = ["q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
                "gate_proj", "up_proj", "down_proj"]


def lora_module_names(spec: LiteSpec):
    """The nn.Linear modules PEFT wraps for LORA_TARGETS: the attention projections that exist,
    the dense MLP's, the shared experts' and each routed expert's (the router is no nn.Linear)."""
    names = []
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        names += [p + "self_attn." + k[:-len(".weight")] for k in attention_shapes(spec)
                  if k.endswith("_proj.weight") or k.endswith("_mqa.weight")]
        mlps = [p + "mlp"]
        if i >= spec.first_dense:
            mlps = [p + "mlp.shared_experts"] + [p + f"mlp.experts.{e}"
                                                 for e in range(spec.n_experts)]
        names += [m + "." + t for m in mlps for t in ("gate_proj", "up_proj", "down_proj")]
    return sorted(names)


def load_model_dir(path):
    """(spec, config, weights, skipped MTP keys); fails naming missing and unexpected keys."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    spec = spec_from_config(cfg)
    raw = mm.read_weights(path)
    skipped = sorted(k for k in raw if mm.is_mtp_key(spec, k))
    W = {k: v for k, v in raw.items() if k not in skipped}
    want = set(shapes(spec))
    missing, unexpected = sorted(want - set(W)), sorted(set(W) - want)
    if missing or unexpected:
        raise ValueError(f"{path}: missing {missing}, unexpected {unexpected}")
    return spec, cfg, W, skipped
