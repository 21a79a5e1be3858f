"""YaRN RoPE scaling for the reference models, written from the semantics of transformers'
modeling_rope_utils `_compute_yarn_parameters` (transformers 5: the file's factor, else
max_position_embeddings / original_max_position_embeddings) and the DeepSeek-V3 / GLM-4.7-Flash
attention `scaling` with `mscale_all_dim`; frequencies in fp32 as upstream computes them."""

import math

import torch


def params(cfg: dict):
    """The rope_parameters / rope_scaling object of rope_type "yarn", or None (default RoPE)."""
    for key in ("rope_parameters", "rope_scaling"):
        p = cfg.get(key) or {}
        if p.get("rope_type", p.get("type", "default")) == "yarn":
            return p
    return None


def get_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def factor(p, max_pos):
    f = p.get("factor")
    return f if f is not None else max_pos / p["original_max_position_embeddings"]


def attention_factor(p, max_pos):
    """What cos and sin are multiplied by."""
    if p.get("attention_factor") is not None:
        return p["attention_factor"]
    f, m, m_all = factor(p, max_pos), p.get("mscale"), p.get("mscale_all_dim")
    if m and m_all:
        return float(get_mscale(f, m) / get_mscale(f, m_all))
    return get_mscale(f)


def inv_freq(p, dim, base, max_pos):
    """[dim/2] fp32: per pair a linear ramp between the correction dims of beta_fast and
    beta_slow mixes the interpolated (/ factor) and extrapolated frequencies."""
    f = factor(p, max_pos)
    original = p.get("original_max_position_embeddings") or max_pos
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, dim, 2).to(torch.float32) / dim)
    extrapolated, interpolated = 1.0 / pos_freqs, 1.0 / (f * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp  # the share of the extrapolated (unscaled) frequency
    return interpolated * (1 - keep) + extrapolated * keep


def latent_score_mscale(p, max_pos):
    """Latent attention's extra softmax scale: mscale(factor, mscale_all_dim)^2, else 1. Read
    with the file's factor, as upstream reads rope_parameters["factor"]."""
    if p is None or not p.get("mscale_all_dim"):
        return 1.0
    m = get_mscale(factor(p, max_pos), p["mscale_all_dim"])
    return m * m
