"""Plain-PyTorch GLM-4 family forward passes used as the test oracle: `glm4` (Glm4ForCausalLM),
`glm` (GlmForCausalLM) and `chatglm` (ChatGLM2/3, glm-4-9b-chat), each read from its own
checkpoint key names and config fields. Written from the upstream semantics, not copied."""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import yarn


@dataclass
class Spec:
    """The numbers a forward pass needs, resolved from a config.json the way upstream does."""

    family: str  # "glm4" | "glm" | "chatglm"
    vocab: int
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    rope_base: float
    eps: float
    qkv_bias: bool
    post_norms: bool  # glm4's post_self_attn_layernorm / post_mlp_layernorm
    tie: bool
    yarn: dict = None  # rope_scaling / rope_parameters of type "yarn" (glm4, glm), else None
    max_pos: int = 0  # max_position_embeddings, which YaRN reads


def spec_from_config(cfg: dict) -> Spec:
    family = cfg["model_type"]
    if family in ("glm4", "glm"):
        heads = cfg["num_attention_heads"]
        # Glm4Config/GlmConfig default head_dim is 128 (not hidden/heads); the classes set
        # partial_rotary_factor to 0.5 when the file has none.
        head_dim = cfg.get("head_dim", 128)
        factor = cfg.get("partial_rotary_factor", 0.5)
        return Spec(
            family=family,
            vocab=cfg["vocab_size"],
            hidden=cfg["hidden_size"],
            inter=cfg["intermediate_size"],
            layers=cfg["num_hidden_layers"],
            heads=heads,
            kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=head_dim,
            rotary_dim=int(head_dim * factor),
            rope_base=float(cfg.get("rope_theta", 10000.0)),
            eps=float(cfg.get("rms_norm_eps", 1.5625e-07)),
            qkv_bias=bool(cfg.get("attention_bias", True)),
            post_norms=(family == "glm4"),
            tie=bool(cfg.get("tie_word_embeddings", False)),
            yarn=yarn.params(cfg),
            max_pos=int(cfg.get("max_position_embeddings", 131072)),
        )
    if family == "chatglm":
        heads = cfg["num_attention_heads"]
        kv = cfg.get("kv_channels") or cfg["hidden_size"] // heads
        mqa = cfg.get("multi_query_attention", False)
        # RotaryEmbedding(kv_channels // 2): theta over arange(0, dim, 2) -> 2*ceil(dim/2) dims
        half = kv // 2
        return Spec(
            family=family,
            vocab=cfg["padded_vocab_size"],
            hidden=cfg["hidden_size"],
            inter=cfg["ffn_hidden_size"],
            layers=cfg["num_layers"],
            heads=heads,
            kv_heads=cfg.get("multi_query_group_num", 1) if mqa else heads,
            head_dim=kv,
            rotary_dim=2 * ((half + 1) // 2),
            rope_base=10000.0 * float(cfg.get("rope_ratio", 1)),
            eps=float(cfg.get("layernorm_epsilon", 1e-5)),
            qkv_bias=bool(cfg.get("add_bias_linear", False) or cfg.get("add_qkv_bias", False)),
            post_norms=False,
            tie=False,
        )
    raise ValueError(f"unknown model_type {family!r}")


# ---------------------------------------------------------------- shared pieces

def work_dtype(t):
    """The precision transformers computes norms and softmax in: fp32 for bf16/f16 tensors."""
    return torch.float32 if t.dtype in (torch.bfloat16, torch.float16) else t.dtype


def rms_norm(x, w, eps):
    # y = w * x / sqrt(mean(x^2) + eps), statistics in the working precision (>= fp32), cast
    # back to x's dtype before the weight multiplies (transformers' Glm4RMSNorm)
    xf = x.to(work_dtype(x))
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope_angles(spec: Spec, T: int):
    """[T, rotary_dim/2] angles p * inv_freq[i], computed in fp32 exactly as upstream does
    (inv_freq = 1 / base^(arange(0, rd, 2)/rd) in fp32, then an fp32 product)."""
    rd = spec.rotary_dim
    inv_freq = 1.0 / (spec.rope_base ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    if spec.yarn is not None:
        inv_freq = yarn.inv_freq(spec.yarn, rd, spec.rope_base, spec.max_pos)
    pos = torch.arange(T, dtype=torch.float32)
    return torch.outer(pos, inv_freq)  # [T, rd/2] fp32


def attention_mask(B, T, lengths):
    """[B, 1, T, T] bool, True where query i may attend key j: causal and j < length."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if lengths is None:
        return causal.expand(B, 1, T, T)
    key_ok = torch.arange(T)[None, :] < torch.as_tensor(lengths).reshape(B, 1)  # [B, T]
    return causal[None, None] & key_ok[:, None, None, :]


def core_attention(q, k, v, allowed, n_rep):
    """q [B,H,T,D], k/v [B,KV,T,D]; query head h reads kv head h // n_rep."""
    k = k.repeat_interleave(n_rep, dim=1)
    v = v.repeat_interleave(n_rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)  # [B,H,T,T]
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=work_dtype(scores)).to(q.dtype)
    B, H, T, D = q.shape
    return (probs @ v).transpose(1, 2).reshape(B, T, H * D)


def linear(x, W, name, lora=None):
    """x W^T (+ b) (+ scale * (x A^T) B^T) for the module `name` (PEFT LoRA, no dropout). A
    module given as (A, B, m) is DoRA as PEFT computes it: with g = m / ||W + scale B A||_row
    (detached), x W^T + b + (g - 1) (x W^T) + g scale (x A^T) B^T."""
    Wt = W[name + ".weight"]
    base = x @ Wt.t()
    y = base
    bias = W.get(name + ".bias")
    if bias is not None:
        y = y + bias
    if lora is not None and name in lora["modules"]:
        A, B = lora["modules"][name][:2]  # in their own dtype (fp32 on a bf16 base, as PEFT keeps them)
        delta = lora["scale"] * ((x.to(A.dtype) @ A.t()) @ B.t())
        if len(lora["modules"][name]) == 2:
            return y + delta.to(y.dtype)
        m = lora["modules"][name][2]
        norm = (Wt.to(A.dtype) + lora["scale"] * (B @ A)).norm(dim=1).detach()
        g = m / norm
        y = y + (g - 1) * base + g * delta
    return y


# ---------------------------------------------------------------- glm4 / glm (HF layout)

def rope_scale(spec: Spec):
    """YaRN's cos/sin factor (1 for the default RoPE)."""
    return 1.0 if spec.yarn is None else yarn.attention_factor(spec.yarn, spec.max_pos)


def rope_hf(x, angles, scale=1.0):
    """HF apply_rotary_pos_emb for glm/glm4: cos/sin of the first half of cat(freqs, freqs),
    repeat_interleave(2), in fp32 times `scale`; rotate_half pairs (x[2i], x[2i+1]); dims past
    rotary_dim pass."""
    rd = angles.shape[-1] * 2
    cos = (angles.cos() * scale).repeat_interleave(2, dim=-1).to(x.dtype)  # [T, rd]
    sin = (angles.sin() * scale).repeat_interleave(2, dim=-1).to(x.dtype)
    xr, xp = x[..., :rd], x[..., rd:]
    rot = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


def forward_hf(spec: Spec, W, ids, lengths=None, lora=None):
    """glm4/glm forward. ids [B,T] int64. Returns (logits [B,T,V], [hidden after each layer],
    hidden after the final norm)."""
    B, T = ids.shape
    H, KV, D = spec.heads, spec.kv_heads, spec.head_dim
    x = W["model.embed_tokens.weight"][ids]  # [B,T,h]
    angles = rope_angles(spec, T)
    allowed = attention_mask(B, T, lengths)
    hiddens = []
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], spec.eps)
        q = linear(h, W, p + "self_attn.q_proj", lora).view(B, T, H, D).transpose(1, 2)
        k = linear(h, W, p + "self_attn.k_proj", lora).view(B, T, KV, D).transpose(1, 2)
        v = linear(h, W, p + "self_attn.v_proj", lora).view(B, T, KV, D).transpose(1, 2)
        q, k = rope_hf(q, angles, rope_scale(spec)), rope_hf(k, angles, rope_scale(spec))
        a = linear(core_attention(q, k, v, allowed, H // KV), W, p + "self_attn.o_proj", lora)
        if spec.post_norms:
            a = rms_norm(a, W[p + "post_self_attn_layernorm.weight"], spec.eps)
        x = x + a
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], spec.eps)
        gate, up = linear(h, W, p + "mlp.gate_up_proj", lora).chunk(2, dim=-1)
        m = linear(F.silu(gate) * up, W, p + "mlp.down_proj", lora)
        if spec.post_norms:
            m = rms_norm(m, W[p + "post_mlp_layernorm.weight"], spec.eps)
        x = x + m
        hiddens.append(x)
    final = rms_norm(x, W["model.norm.weight"], spec.eps)
    head = W["model.embed_tokens.weight"] if spec.tie else W["lm_head.weight"]
    return final @ head.t(), hiddens, final


# ---------------------------------------------------------------- chatglm (THUDM layout)

def rope_chatglm(x, angles):
    """ChatGLM apply_rotary_pos_emb: view the first rot_dim dims as (rot_dim/2, 2) pairs and
    rotate each pair like a complex number by the cached (cos, sin)."""
    rd = angles.shape[-1] * 2
    cache = torch.stack((angles.cos(), angles.sin()), dim=-1).to(x.dtype)  # [T, rd/2, 2]
    xr, xp = x[..., :rd], x[..., rd:]
    pairs = xr.reshape(*xr.shape[:-1], rd // 2, 2)
    c, s = cache[..., 0], cache[..., 1]
    out = torch.stack((pairs[..., 0] * c - pairs[..., 1] * s,
                       pairs[..., 1] * c + pairs[..., 0] * s), dim=-1).flatten(-2)
    return torch.cat((out, xp), dim=-1)


def forward_chatglm(spec: Spec, W, ids, lengths=None, lora=None):
    B, T = ids.shape
    H, KV, D = spec.heads, spec.kv_heads, spec.head_dim
    x = W["transformer.embedding.word_embeddings.weight"][ids]
    angles = rope_angles(spec, T)
    allowed = attention_mask(B, T, lengths)
    hiddens = []
    for i in range(spec.layers):
        p = f"transformer.encoder.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], spec.eps)
        qkv = linear(h, W, p + "self_attention.query_key_value", lora)
        q, k, v = qkv.split([H * D, KV * D, KV * D], dim=-1)  # rows q | k | v
        q = q.reshape(B, T, H, D).transpose(1, 2)
        k = k.reshape(B, T, KV, D).transpose(1, 2)
        v = v.reshape(B, T, KV, D).transpose(1, 2)
        q, k = rope_chatglm(q, angles), rope_chatglm(k, angles)
        x = x + linear(core_attention(q, k, v, allowed, H // KV), W, p + "self_attention.dense", lora)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], spec.eps)
        a, b = linear(h, W, p + "mlp.dense_h_to_4h", lora).chunk(2, dim=-1)
        x = x + linear(F.silu(a) * b, W, p + "mlp.dense_4h_to_h", lora)
        hiddens.append(x)
    final = rms_norm(x, W["transformer.encoder.final_layernorm.weight"], spec.eps)
    return final @ W["transformer.output_layer.weight"].t(), hiddens, final


def forward(spec: Spec, W, ids, lengths=None, lora=None):
    if spec.family == "chatglm":
        return forward_chatglm(spec, W, ids, lengths, lora)
    return forward_hf(spec, W, ids, lengths, lora)


# ---------------------------------------------------------------- weights

def init_canonical(spec: Spec, seed: int):
    """Random weights under glm4 key names (fp32): matrices N(0, 0.02), norms 1 + 0.1 N(0,1),
    biases 0.02 N(0,1). The generation order is fixed, so a seed gives the same bytes."""
    g = torch.Generator().manual_seed(seed)
    H, KV, D, h = spec.heads, spec.kv_heads, spec.head_dim, spec.hidden

    def mat(rows, cols):
        return torch.randn(rows, cols, generator=g, dtype=torch.float32) * 0.02

    def norm():
        return 1.0 + 0.1 * torch.randn(h, generator=g, dtype=torch.float32)

    def bias(n):
        return 0.02 * torch.randn(n, generator=g, dtype=torch.float32)

    W = {"model.embed_tokens.weight": mat(spec.vocab, h)}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = norm()
        for name, rows in (("q_proj", H * D), ("k_proj", KV * D), ("v_proj", KV * D)):
            W[p + f"self_attn.{name}.weight"] = mat(rows, h)
            if spec.qkv_bias:
                W[p + f"self_attn.{name}.bias"] = bias(rows)
        W[p + "self_attn.o_proj.weight"] = mat(h, H * D)
        if spec.post_norms:
            W[p + "post_self_attn_layernorm.weight"] = norm()
        W[p + "post_attention_layernorm.weight"] = norm()
        W[p + "mlp.gate_up_proj.weight"] = mat(2 * spec.inter, h)
        W[p + "mlp.down_proj.weight"] = mat(h, spec.inter)
        if spec.post_norms:
            W[p + "post_mlp_layernorm.weight"] = norm()
    W["model.norm.weight"] = norm()
    if not spec.tie:
        W["lm_head.weight"] = mat(spec.vocab, h)
    return W


def canonical_to_chatglm(spec: Spec, W):
    """Rename glm-layout weights to ChatGLM's: q|k|v rows fused into query_key_value, plus the
    (unused by the forward) `transformer.rotary_pos_emb.inv_freq` buffer real checkpoints carry,
    which holds base-10000 frequencies regardless of rope_ratio."""
    out = {"transformer.embedding.word_embeddings.weight": W["model.embed_tokens.weight"]}
    for i in range(spec.layers):
        p, c = f"model.layers.{i}.", f"transformer.encoder.layers.{i}."
        out[c + "input_layernorm.weight"] = W[p + "input_layernorm.weight"]
        out[c + "self_attention.query_key_value.weight"] = torch.cat(
            [W[p + f"self_attn.{n}_proj.weight"] for n in "qkv"], dim=0)
        if spec.qkv_bias:
            out[c + "self_attention.query_key_value.bias"] = torch.cat(
                [W[p + f"self_attn.{n}_proj.bias"] for n in "qkv"], dim=0)
        out[c + "self_attention.dense.weight"] = W[p + "self_attn.o_proj.weight"]
        out[c + "post_attention_layernorm.weight"] = W[p + "post_attention_layernorm.weight"]
        out[c + "mlp.dense_h_to_4h.weight"] = W[p + "mlp.gate_up_proj.weight"]
        out[c + "mlp.dense_4h_to_h.weight"] = W[p + "mlp.down_proj.weight"]
    out["transformer.encoder.final_layernorm.weight"] = W["model.norm.weight"]
    out["transformer.output_layer.weight"] = W["lm_head.weight"]
    dim = spec.head_dim // 2
    out["transformer.rotary_pos_emb.inv_freq"] = 1.0 / (
        10000 ** (torch.arange(0, dim, 2).to(torch.float32) / dim))
    return out


def kaiming_uniform_bound(fan_in):
    # nn.init.kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in)
    return math.sqrt(2.0 / 6.0) * math.sqrt(3.0 / fan_in)
