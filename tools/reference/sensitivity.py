"""Shows that a fixture can catch the classic GLM mistakes: each mutation of the reference
forward (wrong RoPE pairing, rotary width, base, GQA mapping, gate/up order, eps, ...) must move
the logits by far more than fp32 rounding does. Returns the smallest change seen."""

import contextlib
import dataclasses

import torch

import glm_model as gm


@contextlib.contextmanager
def patched(name, fn):
    old = getattr(gm, name)
    setattr(gm, name, fn)
    try:
        yield
    finally:
        setattr(gm, name, old)


def _rope_half_split(x, angles, scale=1.0):
    # GPT-NeoX style: pairs (x[i], x[i + rd/2]) instead of (x[2i], x[2i+1])
    rd = angles.shape[-1] * 2
    cos = torch.cat([angles.cos() * scale] * 2, -1).to(x.dtype)
    sin = torch.cat([angles.sin() * scale] * 2, -1).to(x.dtype)
    xr, xp = x[..., :rd], x[..., rd:]
    rot = torch.cat((-xr[..., rd // 2:], xr[..., : rd // 2]), -1)
    return torch.cat((xr * cos + rot * sin, xp), -1)


def _gqa_modulo(q, k, v, allowed, n_rep):
    # query head h reads kv head h % n_kv instead of h // n_rep
    return _core(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1), allowed, 1)


_core = gm.core_attention


def _swap_halves(W, suffix):
    out = dict(W)
    for k, t in W.items():
        if k.endswith(suffix):
            a, b = t.chunk(2)
            out[k] = torch.cat([b, a])
    return out


def check(spec, W, ids, threshold):
    """W fp64 checkpoint tensors, ids [1, T]. Asserts every mutation moves some logit by more
    than `threshold`; returns {mutation: max |change|}."""
    base = gm.forward(spec, W, ids)[0]
    chat = spec.family == "chatglm"
    rope_fn = "rope_chatglm" if chat else "rope_hf"
    gate_up = "mlp.dense_h_to_4h.weight" if chat else "mlp.gate_up_proj.weight"
    cases = {
        "rope_half_split_pairs": (rope_fn, _rope_half_split, spec, W),
        "rope_none": (rope_fn, lambda x, a, scale=1.0: x, spec, W),
        "rotary_dim_full": (None, None, dataclasses.replace(spec, rotary_dim=spec.head_dim), W),
        "rotary_dim_half_again": (None, None,
                                  dataclasses.replace(spec, rotary_dim=spec.rotary_dim // 2), W),
        "rope_base_wrong": (None, None, dataclasses.replace(spec, rope_base=spec.rope_base * 500)
                           if not chat else dataclasses.replace(spec, rope_base=10000.0), W),
        "gqa_modulo": ("core_attention", _gqa_modulo, spec, W),
        "gate_up_swapped": (None, None, spec, _swap_halves(W, gate_up)),
        "eps_x10": (None, None, dataclasses.replace(spec, eps=spec.eps * 10), W),
    }
    if spec.family == "glm4":
        cases["post_norms_dropped"] = (None, None, dataclasses.replace(spec, post_norms=False), W)
    out = {}
    for name, (attr, fn, s, w) in cases.items():
        with patched(attr, fn) if attr else contextlib.nullcontext():
            got = gm.forward(s, w, ids)[0]
        out[name] = float((got - base).abs().max())
        assert out[name] > threshold, f"{spec.family}: mutation {name} only moves logits " \
                                      f"by {out[name]:.2e}"
    return out
