"""Self-checks of the glm4_moe oracle that the fixture script runs before it writes anything:
the router and RoPE against scalar loops, and a list of plausible implementation mistakes, each of
which must move the fixture logits by more than rounding could."""

import dataclasses
import math

import torch

import glm4_moe_model as mm


def route_scalar(spec, logits_row, bias_row):
    """One token's routing in plain Python floats: (sorted expert ids, their weights)."""
    E, G = spec.n_experts, spec.n_group
    per = E // G
    scores = [1.0 / (1.0 + math.exp(-v)) for v in logits_row]
    choice = [s + b for s, b in zip(scores, bias_row)]
    group_score = [sum(sorted(choice[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(G)]
    kept = sorted(range(G), key=lambda g: -group_score[g])[: spec.topk_group]
    masked = [choice[e] if e // per in kept else 0.0 for e in range(E)]
    picked = sorted(sorted(range(E), key=lambda e: -masked[e])[: spec.top_k])
    w = [scores[e] for e in picked]
    if spec.norm_topk:
        total = sum(w) + 1e-20
        w = [x / total for x in w]
    return picked, [x * spec.scaling for x in w]


def check_route_scalar(spec, route):
    """mm.route's indices and weights (fp64) equal the scalar loop's for every token."""
    for prefix_layer, (logits, bias) in route.items():
        r = mm.route(spec, logits, bias)
        for n in range(logits.shape[0]):
            ids, w = route_scalar(spec, logits[n].tolist(), bias.tolist())
            order = r.indices[n].argsort()
            assert r.indices[n][order].tolist() == ids, (prefix_layer, n)
            got = r.weights[n][order].tolist()
            assert max(abs(a - b) for a, b in zip(got, w)) < 1e-12, (prefix_layer, n)


def check_rope_scalar(spec):
    """rope_half equals a loop pairing dim i with i + rotary_dim/2; later dims pass through."""
    T, D, half = 7, spec.head_dim, spec.rotary_dim // 2
    x = torch.randn(1, 1, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    angles = mm.rope_angles(spec, T)
    ref = x.clone()
    for p in range(T):
        for i in range(half):
            c, s = float(angles[p, i].cos()), float(angles[p, i].sin())
            a, b = float(x[0, 0, p, i]), float(x[0, 0, p, i + half])
            ref[0, 0, p, i], ref[0, 0, p, i + half] = a * c - b * s, b * c + a * s
    assert torch.allclose(mm.rope_half(x, angles), ref, rtol=0, atol=1e-14)


def _rope_interleaved(x, angles, scale=1.0):
    rd = angles.shape[-1] * 2
    cos = (angles.cos() * scale).repeat_interleave(2, dim=-1).to(x.dtype)
    sin = (angles.sin() * scale).repeat_interleave(2, dim=-1).to(x.dtype)
    xr, xp = x[..., :rd], x[..., rd:]
    rot = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


def _weights_from_choice(original):
    def route(spec, logits, bias):
        r = original(spec, logits, bias)
        w = (torch.sigmoid(logits) + bias).gather(1, r.indices)
        if spec.norm_topk:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        r.weights = w * spec.scaling
        return r
    return route


def mutations(spec, W):
    """name -> (spec, W, {module attribute: replacement}) for each mistake that applies."""
    rep = dataclasses.replace
    out = {
        "interleaved RoPE pairs (GLM-4-0414's form)": (spec, W, {"rope_half": _rope_interleaved}),
        "rotary over the whole head": (rep(spec, rotary_dim=spec.head_dim), W, {}),
        "e_score_correction_bias ignored": (spec, {k: (v * 0 if k.endswith("correction_bias")
                                                       else v) for k, v in W.items()}, {}),
        "bias added to the routing weights": (spec, W, {"route": _weights_from_choice(mm.route)}),
        "routed_scaling_factor ignored": (rep(spec, scaling=1.0), W, {}),
        "norm_topk_prob inverted": (rep(spec, norm_topk=not spec.norm_topk), W, {}),
        "shared experts dropped": (spec, {k: (v * 0 if ".shared_experts.down_proj" in k else v)
                                          for k, v in W.items()}, {}),
    }
    if spec.n_group > 1:
        out["no group limit"] = (rep(spec, n_group=1, topk_group=1), W, {})
    if spec.qk_norm:
        out["q/k norm skipped"] = (rep(spec, qk_norm=False), W, {})
    if spec.rotary_dim != spec.head_dim // 2:
        out["partial_rotary_factor 0.5 (rope_parameters ignored)"] = (
            rep(spec, rotary_dim=spec.head_dim // 2), W, {})
    if spec.rope_base != 10000.0:
        out["rope_theta 10000 (the field ignored)"] = (rep(spec, rope_base=10000.0), W, {})
    if spec.yarn is not None:
        out["YaRN ignored (the default RoPE)"] = (rep(spec, yarn=None), W, {})
        half = mm.rope_half
        out["YaRN's cos/sin attention factor ignored"] = (
            spec, W, {"rope_half": lambda x, angles, scale=1.0: half(x, angles)})
    return out


def sensitivity(spec, W64, ids, lengths, threshold):
    """Each mutation moves some valid logit by more than `threshold`; returns the moves."""
    base = mm.forward(spec, W64, ids, lengths).logits
    valid = torch.arange(ids.shape[1])[None, :] < torch.as_tensor(lengths)[:, None]
    moved = {}
    for name, (s, W, patch) in mutations(spec, W64).items():
        saved = {k: getattr(mm, k) for k in patch}
        try:
            for k, v in patch.items():
                setattr(mm, k, v)
            logits = mm.forward(s, W, ids, lengths).logits
        finally:
            for k, v in saved.items():
                setattr(mm, k, v)
        moved[name] = float((logits - base)[valid].abs().max())
        assert moved[name] > threshold, f"mutation '{name}' moves the logits only {moved[name]}"
    return moved
