"""Plain-PyTorch forward of transformers' Glm4MoeForCausalLM (GLM-4.5 / 4.6 / 4.7, model_type
`glm4_moe`), the oracle for the MoE fixtures: config resolution, both checkpoint layouts (per-expert
Hugging Face, mlx-lm's stacked `switch_mlp`), PEFT LoRA per linear module (every routed expert its
own module), router choices and per-layer hidden states. Written from the upstream semantics
(transformers 4.x modeling_glm4_moe.py), not copied."""

import json
import math
import os
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import yarn
from st import read as st_read


@dataclass
class MoeSpec:
    """The numbers a glm4_moe forward needs, resolved from config.json as transformers does."""

    vocab: int
    hidden: int
    inter: int  # dense MLP of the first `first_dense` layers
    moe_inter: int  # one routed expert; the shared expert is moe_inter * n_shared
    layers: int  # num_hidden_layers (the MTP layers after them are not part of the forward)
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int  # int(head_dim * partial_rotary_factor), rotate-half form
    rope_base: float
    eps: float
    attention_bias: bool  # q/k/v bias; o_proj never has one
    qk_norm: bool  # per-head RMSNorm of q and k (size head_dim) before RoPE
    first_dense: int  # first_k_dense_replace
    n_experts: int  # n_routed_experts
    top_k: int  # num_experts_per_tok
    n_group: int
    topk_group: int
    n_shared: int
    norm_topk: bool
    scaling: float  # routed_scaling_factor
    tie: bool
    mtp_layers: int  # num_nextn_predict_layers (on disk, skipped)
    yarn: dict = None  # rope_scaling / rope_parameters of type "yarn", else None
    max_pos: int = 0  # max_position_embeddings, which YaRN reads

    @property
    def rope_scale(self):  # YaRN's cos/sin factor (no softmax mscale: that is latent attention's)
        return 1.0 if self.yarn is None else yarn.attention_factor(self.yarn, self.max_pos)


def _rope_fields(cfg):
    """(rope_theta, partial_rotary_factor): `rope_parameters` (transformers 5) wins over the
    top-level fields (transformers 4.x, the published checkpoints); Glm4MoeConfig's defaults are
    10000 and 0.5. The default RoPE or YaRN (yarn.params reads its fields)."""
    rp = cfg.get("rope_parameters") or {}
    rs = cfg.get("rope_scaling") or {}
    kind = rp.get("rope_type", rp.get("type", rs.get("rope_type", rs.get("type", "default"))))
    if kind not in ("default", "yarn"):
        raise ValueError(f"config.json: rope type {kind!r} is not supported by this reference")
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    factor = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.5))
    return float(theta), float(factor)


def spec_from_config(cfg: dict) -> MoeSpec:
    if cfg.get("model_type") != "glm4_moe":
        raise ValueError(f"config.json: model_type {cfg.get('model_type')!r}, expected 'glm4_moe'")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"config.json: hidden_act {cfg['hidden_act']!r} is not silu")
    heads = cfg["num_attention_heads"]
    # Glm4MoeAttention: getattr(config, "head_dim", hidden_size // num_attention_heads)
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    theta, factor = _rope_fields(cfg)
    spec = MoeSpec(
        vocab=cfg["vocab_size"],
        hidden=cfg["hidden_size"],
        inter=cfg["intermediate_size"],
        moe_inter=cfg["moe_intermediate_size"],
        layers=cfg["num_hidden_layers"],
        heads=heads,
        kv_heads=cfg.get("num_key_value_heads", heads),
        head_dim=head_dim,
        rotary_dim=int(head_dim * factor),
        rope_base=theta,
        eps=float(cfg.get("rms_norm_eps", 1e-5)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        qk_norm=bool(cfg.get("use_qk_norm", False)),
        first_dense=int(cfg.get("first_k_dense_replace", 1)),
        n_experts=cfg["n_routed_experts"],
        top_k=cfg["num_experts_per_tok"],
        n_group=int(cfg.get("n_group", 1) or 1),
        topk_group=int(cfg.get("topk_group", 1) or 1),
        n_shared=int(cfg.get("n_shared_experts", 1)),
        norm_topk=bool(cfg.get("norm_topk_prob", True)),
        scaling=float(cfg.get("routed_scaling_factor", 1.0)),
        tie=bool(cfg.get("tie_word_embeddings", False)),
        mtp_layers=int(cfg.get("num_nextn_predict_layers", 0)),
        yarn=yarn.params(cfg),
        max_pos=int(cfg.get("max_position_embeddings", 131072)),
    )
    if spec.n_experts % spec.n_group or spec.n_experts // spec.n_group < 2:
        raise ValueError("config.json: n_routed_experts must split into n_group groups of >= 2 "
                         "(each group is scored by its top-2 choices)")
    if spec.rotary_dim % 2:
        raise ValueError(f"config.json: rotary dims {spec.rotary_dim} must be even")
    return spec


def is_moe_layer(spec: MoeSpec, i: int) -> bool:
    return i >= spec.first_dense


# ---------------------------------------------------------------- numerics

def work_dtype(t):
    """transformers computes norms, softmax and the router in fp32 for bf16/f16/f32 inputs; the
    fp64 mode keeps fp64 everywhere."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def rms_norm(x, w, eps):
    # Glm4MoeRMSNorm: statistics in fp32, cast back to x's dtype before the weight multiplies
    xf = x.to(work_dtype(x))
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope_angles(spec: MoeSpec, T: int, offset: int = 0):
    """[T, rotary_dim/2] fp32 angles p * inv_freq[i], inv_freq = 1 / base^(arange(0, rd, 2)/rd),
    or YaRN's over the rotary dims when the spec has a `yarn`."""
    rd = spec.rotary_dim
    inv_freq = 1.0 / (spec.rope_base ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    if spec.yarn is not None:
        inv_freq = yarn.inv_freq(spec.yarn, rd, spec.rope_base, spec.max_pos)
    pos = torch.arange(offset, offset + T, dtype=torch.float32)
    return torch.outer(pos, inv_freq)


def rope_half(x, angles, scale=1.0):
    """Rotate-half RoPE on the first rotary_dim dims: dim i pairs with i + rd/2 (not GLM-4-0414's
    interleaved (2i, 2i+1)); cos/sin of cat(freqs, freqs) in fp32 times `scale` (YaRN), cast to
    x's dtype."""
    rd = angles.shape[-1] * 2
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)
    xr, xp = x[..., :rd], x[..., rd:]
    rot = torch.cat((-xr[..., rd // 2:], xr[..., : rd // 2]), dim=-1)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


def attention_mask(B, T, lengths):
    """[B, 1, T, T] bool: causal and key j < length (right padding)."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if lengths is None:
        return causal.expand(B, 1, T, T)
    key_ok = torch.arange(T)[None, :] < torch.as_tensor(lengths).reshape(B, 1)
    return causal[None, None] & key_ok[:, None, None, :]


def linear(x, W, name, lora=None):
    """x W^T (+ b) (+ scale (x A^T) B^T), PEFT's LoRA Linear without dropout: the adapters keep
    their own dtype (fp32 on a bf16 base) and the sum is rounded once to the base's dtype."""
    y = x @ W[name + ".weight"].t()
    bias = W.get(name + ".bias")
    if bias is not None:
        y = y + bias
    if lora is not None and name in lora["modules"]:
        A, B = lora["modules"][name]
        delta = lora["scale"] * ((x.to(A.dtype) @ A.t()) @ B.t())
        y = (y.to(delta.dtype) + delta).to(y.dtype)
    return y


def swiglu(W, prefix, x, lora=None):
    """Glm4MoeMLP: down_proj(silu(gate_proj(x)) * up_proj(x)), separate gate and up matrices."""
    g = linear(x, W, prefix + ".gate_proj", lora)
    u = linear(x, W, prefix + ".up_proj", lora)
    return linear(F.silu(g) * u, W, prefix + ".down_proj", lora)


# ---------------------------------------------------------------- router

@dataclass
class Route:
    """One MoE layer's decision for N = B*T tokens (padding included, as transformers routes it)."""

    logits: torch.Tensor  # [N, E] router logits x @ gate.weight^T (fp32, fp64 in fp64 mode)
    indices: torch.Tensor  # [N, k] int64, in torch.topk's order
    weights: torch.Tensor  # [N, k] routing weights (scores without bias, normalised, scaled)
    margin: torch.Tensor  # [N] distance of the decision from a tie (see route())
    masked_pick: torch.Tensor  # [N] bool: an expert of a dropped group (choice 0.0) was picked
    changed_by_bias: torch.Tensor  # [N] bool: without the bias a different set would win


def _select(spec: MoeSpec, choice):
    """Group-limited top-k on `choice` [N, E] -> (indices, margin, masked_pick, kept mask)."""
    N, E = choice.shape
    G, per = spec.n_group, spec.n_experts // spec.n_group
    group_scores = choice.view(N, G, per).topk(2, dim=-1).values.sum(-1)  # [N, G]
    keep_groups = group_scores.topk(spec.topk_group, dim=-1).indices
    keep = torch.zeros(N, G, dtype=torch.bool).scatter(1, keep_groups, True)
    keep = keep[:, :, None].expand(N, G, per).reshape(N, E)
    # dropped groups score exactly 0.0 in glm4_moe; glm4_moe_lite's router masks them to -inf
    masked = choice.masked_fill(~keep, getattr(spec, "dropped_choice", 0.0))
    indices = masked.topk(spec.top_k, dim=-1).indices
    ordered = masked.sort(dim=-1, descending=True).values
    margin = ordered[:, spec.top_k - 1] - ordered[:, spec.top_k] if spec.top_k < E \
        else torch.full((N,), math.inf, dtype=choice.dtype)
    if spec.topk_group < G:
        gs = group_scores.sort(dim=-1, descending=True).values
        margin = torch.minimum(margin, gs[:, spec.topk_group - 1] - gs[:, spec.topk_group])
    masked_pick = ~keep.gather(1, indices).all(dim=-1)
    return indices, margin, masked_pick


def route(spec: MoeSpec, logits, bias):
    """Glm4MoeTopkRouter + route_tokens_to_experts: scores = sigmoid(logits); choice = scores +
    e_score_correction_bias; groups scored by the sum of their top-2 choices, the best topk_group
    kept, the rest masked to 0.0; top_k experts by choice; weights = scores (no bias) at those
    experts, / (sum + 1e-20) when norm_topk_prob, * routed_scaling_factor. The selection carries
    no gradient; the weights do (through the sigmoid scores, into the router input)."""
    scores = torch.sigmoid(logits)
    with torch.no_grad():
        indices, margin, masked_pick = _select(spec, scores + bias)
        plain, _, _ = _select(spec, scores)
        changed = (indices.sort(-1).values != plain.sort(-1).values).any(-1)
    weights = scores.gather(1, indices)
    if spec.norm_topk:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    weights = weights * spec.scaling
    return Route(logits.detach(), indices, weights, margin, masked_pick, changed)


def moe(spec: MoeSpec, W, prefix, h, lora=None, dense_check=False, detach_weights=False):
    """Glm4MoeMoE on h [B, T, hidden] -> (output, Route). Routed experts per transformers 4.x:
    each picked expert's SwiGLU output (in h's dtype) times its weight (fp32) is summed in the
    weights' dtype, cast back to h's dtype, then the shared experts' output is added.
    `dense_check` computes every expert for every token and masks instead (the self-check's
    second formulation); `detach_weights` cuts the gradient through the routing weights."""
    B, T, Hd = h.shape
    x = h.reshape(B * T, Hd)
    rdt = work_dtype(x)
    logits = x.to(rdt) @ W[prefix + ".gate.weight"].to(rdt).t()
    r = route(spec, logits, W[prefix + ".gate.e_score_correction_bias"].to(rdt))
    weights = r.weights.detach() if detach_weights else r.weights
    if dense_check:
        full = torch.zeros(B * T, spec.n_experts, dtype=weights.dtype).scatter(
            1, r.indices, weights)
        ys = torch.stack([swiglu(W, f"{prefix}.experts.{e}", x, lora)
                          for e in range(spec.n_experts)], dim=1)  # [N, E, hidden]
        routed = (ys * full[..., None]).sum(1)
    else:
        routed = torch.zeros(B * T, Hd, dtype=weights.dtype)
        for e in range(spec.n_experts):
            tok, slot = torch.where(r.indices == e)
            if tok.numel() == 0:
                continue
            y = swiglu(W, f"{prefix}.experts.{e}", x[tok], lora)
            routed = routed.index_add(0, tok, y * weights[tok, slot, None])
    out = routed.to(h.dtype).view(B, T, Hd) + swiglu(W, prefix + ".shared_experts", h, lora)
    return out, r


# ---------------------------------------------------------------- model

@dataclass
class Output:
    logits: torch.Tensor  # [B, T, V]
    hiddens: list  # hidden after each decoder layer, [B, T, hidden]
    final: torch.Tensor  # after model.norm
    routes: dict  # layer index -> Route, MoE layers only


def attention(spec: MoeSpec, W, p, h, angles, allowed, lora=None):
    B, T, _ = h.shape
    H, KV, D = spec.heads, spec.kv_heads, spec.head_dim
    q = linear(h, W, p + "self_attn.q_proj", lora).view(B, T, H, D)
    k = linear(h, W, p + "self_attn.k_proj", lora).view(B, T, KV, D)
    v = linear(h, W, p + "self_attn.v_proj", lora).view(B, T, KV, D)
    if spec.qk_norm:
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], spec.eps)
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], spec.eps)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k = rope_half(q, angles, spec.rope_scale), rope_half(k, angles, spec.rope_scale)
    k = k.repeat_interleave(H // KV, dim=1)  # query head h reads kv head h // (H / KV)
    v = v.repeat_interleave(H // KV, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (D ** -0.5)
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=work_dtype(scores)).to(q.dtype)
    out = (probs @ v).transpose(1, 2).reshape(B, T, H * D)
    return linear(out, W, p + "self_attn.o_proj", lora)


def forward(spec: MoeSpec, W, ids, lengths=None, lora=None, dense_check=False,
            detach_weights=False) -> Output:
    """ids [B, T] int64, right padded when `lengths` is given. W: canonical per-expert weights
    already in the compute dtype (see cast_weights)."""
    B, T = ids.shape
    x = W["model.embed_tokens.weight"][ids]
    angles = rope_angles(spec, T)
    allowed = attention_mask(B, T, lengths)
    hiddens, routes = [], {}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        x = x + attention(spec, W, p, rms_norm(x, W[p + "input_layernorm.weight"], spec.eps),
                          angles, allowed, lora)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], spec.eps)
        if is_moe_layer(spec, i):
            m, routes[i] = moe(spec, W, p + "mlp", h, lora, dense_check, detach_weights)
        else:
            m = swiglu(W, p + "mlp", h, lora)
        x = x + m
        hiddens.append(x)
    final = rms_norm(x, W["model.norm.weight"], spec.eps)
    head = W["model.embed_tokens.weight"] if spec.tie else W["lm_head.weight"]
    return Output(final @ head.t(), hiddens, final, routes)


def cast_weights(W, dtype):
    """All tensors to `dtype`, except e_score_correction_bias, which transformers keeps in fp32
    (_keep_in_fp32_modules_strict); it becomes fp64 in the fp64 mode."""
    keep = torch.float64 if dtype == torch.float64 else torch.float32
    return {k: v.to(keep if k.endswith("e_score_correction_bias") else dtype)
            for k, v in W.items()}


# ---------------------------------------------------------------- checkpoint layouts

def canonical_keys(spec: MoeSpec):
    """Every tensor the forward reads, under the per-expert Hugging Face names."""
    keys = ["model.embed_tokens.weight", "model.norm.weight"]
    if not spec.tie:
        keys.append("lm_head.weight")
    for i in range(spec.layers):
        keys += layer_keys(spec, i)
    return keys


def layer_keys(spec: MoeSpec, i: int):
    p = f"model.layers.{i}."
    keys = [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    for n in "qkvo":
        keys.append(p + f"self_attn.{n}_proj.weight")
        if spec.attention_bias and n != "o":
            keys.append(p + f"self_attn.{n}_proj.bias")
    if spec.qk_norm:
        keys += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    mlps = [p + "mlp"]
    if is_moe_layer(spec, i):
        keys += [p + "mlp.gate.weight", p + "mlp.gate.e_score_correction_bias"]
        mlps = [p + "mlp.shared_experts"] + [p + f"mlp.experts.{e}" for e in range(spec.n_experts)]
    for m in mlps:
        keys += [m + ".gate_proj.weight", m + ".up_proj.weight", m + ".down_proj.weight"]
    return keys


def mtp_keys(spec: MoeSpec, i: int):
    """Multi-token-prediction layer i (>= num_hidden_layers) as GLM-4.5 checkpoints carry it: a
    whole decoder layer plus embed_tokens, enorm, hnorm, eh_proj and shared_head.{norm,head}."""
    p = f"model.layers.{i}."
    extra = ["embed_tokens.weight", "enorm.weight", "hnorm.weight", "eh_proj.weight",
             "shared_head.norm.weight", "shared_head.head.weight"]
    return layer_keys(spec, i) + [p + k for k in extra]


_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def is_mtp_key(spec: MoeSpec, key: str) -> bool:
    m = _LAYER.match(key)
    return m is not None and int(m.group(1)) >= spec.layers


def to_mlx_layout(spec: MoeSpec, W):
    """mlx-lm's glm4_moe sanitize(): each MoE layer's experts.{e}.{gate,up,down}_proj.weight
    stacked into mlp.switch_mlp.{gate,up,down}_proj.weight [E, out, in]; MTP layers dropped."""
    out = {}
    for k, v in W.items():
        if is_mtp_key(spec, k) or ".mlp.experts." in k:
            continue
        out[k] = v
    for i in range(spec.first_dense, spec.layers):
        for m in ("gate_proj", "up_proj", "down_proj"):
            out[f"model.layers.{i}.mlp.switch_mlp.{m}.weight"] = torch.stack(
                [W[f"model.layers.{i}.mlp.experts.{e}.{m}.weight"] for e in range(spec.n_experts)])
    return out


def from_mlx_layout(spec: MoeSpec, W):
    """The inverse of to_mlx_layout for the forward's weights (MTP layers are gone)."""
    out = {}
    for k, v in W.items():
        m = re.match(r"^(model\.layers\.\d+\.mlp)\.switch_mlp\.(\w+)\.weight$", k)
        if m is None:
            out[k] = v
            continue
        if v.dim() != 3 or v.shape[0] != spec.n_experts:
            raise ValueError(f"{k}: stacked expert weight must be [E={spec.n_experts}, out, in], "
                             f"got {list(v.shape)}")
        for e in range(spec.n_experts):
            out[f"{m.group(1)}.experts.{e}.{m.group(2)}.weight"] = v[e]
    return out


def read_weights(path):
    """All tensors of a model directory: model.safetensors, or the shards an index names."""
    index = os.path.join(path, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    W = {}
    for name in files:
        part, _ = st_read(os.path.join(path, name))
        W.update(part)
    return W


def load_model_dir(path):
    """(spec, config dict, canonical weights in their stored dtypes, skipped MTP keys). Either
    layout; fails naming every missing and unexpected key, sorted."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    spec = spec_from_config(cfg)
    raw = read_weights(path)
    skipped = sorted(k for k in raw if is_mtp_key(spec, k))
    W = {k: v for k, v in raw.items() if not is_mtp_key(spec, k)}
    if any(".mlp.switch_mlp." in k for k in W):
        W = from_mlx_layout(spec, W)
    want = set(canonical_keys(spec))
    missing, unexpected = sorted(want - set(W)), sorted(set(W) - want)
    if missing or unexpected:
        raise ValueError(f"{path}: missing {missing}, unexpected {unexpected}")
    return spec, cfg, W, skipped


# ---------------------------------------------------------------- LoRA (PEFT)

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_module_names(spec: MoeSpec, targets=LORA_TARGETS):
    """Module paths PEFT wraps for `targets` on transformers 4.x's Glm4MoeForCausalLM: attention
    projections, the dense MLP's, the shared experts' and each routed expert's own nn.Linear
    (the router `mlp.gate` is not an nn.Linear; MTP layers are not instantiated)."""
    names = []
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        names += [p + f"self_attn.{t}" for t in LORA_TARGETS[:4] if t in targets]
        mlps = [p + "mlp"]
        if is_moe_layer(spec, i):
            mlps = [p + "mlp.shared_experts"] + [p + f"mlp.experts.{e}"
                                                 for e in range(spec.n_experts)]
        names += [m + "." + t for m in mlps for t in LORA_TARGETS[4:] if t in targets]
    return names


def peft_key(module, which):
    return f"base_model.model.{module}.lora_{which}.weight"


def lora_from_tensors(tensors, scale, dtype=None):
    """PEFT adapter tensors (name -> tensor) -> {"scale", "modules": {module: [A, B]}}."""
    modules = {}
    for k, t in tensors.items():
        m = re.match(r"^base_model\.model\.(.+)\.lora_([AB])\.weight$", k)
        if m is None:
            raise ValueError(f"adapter tensor {k}: not a PEFT lora_A / lora_B weight")
        modules.setdefault(m.group(1), [None, None])[0 if m.group(2) == "A" else 1] = \
            t if dtype is None else t.to(dtype)
    for name, (A, B) in modules.items():
        if A is None or B is None:
            raise ValueError(f"adapter module {name}: needs both lora_A and lora_B")
    return {"scale": scale, "modules": modules}


def load_peft_adapter(path, dtype=None):
    with open(os.path.join(path, "adapter_config.json")) as f:
        cfg = json.load(f)
    r, alpha = cfg["r"], cfg["lora_alpha"]
    scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    tensors, _ = st_read(os.path.join(path, "adapter_model.safetensors"))
    return cfg, lora_from_tensors(tensors, scale, dtype)


def ce_sum(spec, W, lora, ids, labels, lengths, **kw):
    """Summed next-token cross-entropy: logits[:, :-1] against labels[:, 1:], -100 ignored,
    taken in fp32 for bf16 logits as transformers does."""
    logits = forward(spec, W, ids, lengths, lora, **kw).logits
    logits = logits.to(work_dtype(logits))
    return F.cross_entropy(logits[:, :-1].reshape(-1, spec.vocab), labels[:, 1:].reshape(-1),
                           ignore_index=-100, reduction="sum")


def check_dense_formulation(spec, W, ids, lengths, lora=None):
    """Self-check: the per-expert loop equals computing every expert for every token, then
    masking and weighting: fp64 to 1e-12, fp32 to 1e-6 (logits and every hidden state)."""
    worst = {}
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-6)):
        Wd = cast_weights(W, dtype)
        a = forward(spec, Wd, ids, lengths, lora)
        b = forward(spec, Wd, ids, lengths, lora, dense_check=True)
        diff = max(float((x - y).abs().max()) for x, y in
                   zip([a.logits, a.final] + a.hiddens, [b.logits, b.final] + b.hiddens))
        assert diff <= tol, f"per-expert loop vs dense formulation ({dtype}): {diff}"
        worst[str(dtype)] = diff
    return worst
