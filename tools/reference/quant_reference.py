"""Reference fixtures for mlx's affine quantization (tests/data/quant/affine_{f32,bf16,f16}).

Written from the rules stated in autograd/kernels/affine_quant.h and quantized_matrix.h (what
mlx's CPU quantize does since PR #1925), not from mlx's code: every step in float32 numpy
(IEEE single, correctly rounded division, rint = round half to even), scales and biases rounded
to the weight's dtype only after the codes are computed. For every bits x group size x dtype it
stores a weight, its codes, packed words, scales, biases, the dequantized matrix as mlx returns
it, and products x @ deq(W)^T in fp64 (deq = scale * code + bias, exact in fp64).

    /usr/bin/python3 tools/reference/quant_reference.py --out tests/data/quant
"""

import argparse
import json
import os

import numpy as np
import torch

import st

BITS = [2, 3, 4, 5, 6, 8]
GROUPS = [32, 64, 128]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ROWS, COLS, XROWS = 4, 256, 3
PATTERNS = ["normal", "ties", "constant", "zeros", "negative", "positive", "tiny", "outlier",
            "symmetric"]
f32 = np.float32


def round_to(x, dtype):
    """float32 array -> the nearest values of `dtype` (round to nearest even), as float32."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=f32))
    return t.to(dtype).to(torch.float32).numpy()


def group_values(pattern, bits, group, rng):
    """One group of weights showing `pattern` (float32, before rounding to the dtype)."""
    if pattern == "normal":
        return rng.normal(0, 0.02, group)
    if pattern == "ties":
        # min -1 is the edge, scale d = 2^-(bits-1) exactly: (w + 1) / d = k + 1/2 are exact ties
        d = 2.0 ** -(bits - 1)
        n = 2**bits - 1
        k = rng.integers(0, n, group)
        v = -1 + (k + 0.5) * d
        v[: group // 4] = -1 + k[: group // 4] * d  # some exact codes too
        v[0], v[1] = -1.0, -1 + n * d
        return v
    if pattern == "constant":
        return np.full(group, 0.3)
    if pattern == "zeros":
        return np.zeros(group)
    if pattern == "negative":
        return -rng.uniform(0.1, 1.0, group)
    if pattern == "positive":
        return rng.uniform(0.1, 1.0, group)
    if pattern == "tiny":  # the range is below eps * n: q0 = 0, bias 0
        return rng.normal(0, 1e-9, group)
    if pattern == "outlier":
        v = rng.normal(0, 0.02, group)
        v[rng.integers(group)] = 0.5
        return v
    if pattern == "symmetric":  # |min| == |max|: the edge is max
        v = rng.uniform(-0.7, 0.7, group)
        v[0], v[1] = -0.7, 0.7
        return v
    raise ValueError(pattern)


def make_weight(bits, group, dtype, seed):
    rng = np.random.default_rng(seed)
    w = np.empty((ROWS, COLS), dtype=np.float64)
    groups = COLS // group
    for r in range(ROWS):
        for g in range(groups):
            pattern = PATTERNS[(r * groups + g) % len(PATTERNS)]
            w[r, g * group : (g + 1) * group] = group_values(pattern, bits, group, rng)
    return round_to(w.astype(f32), dtype)


def quantize(w, bits, group):
    """codes [rows, cols] uint8 and the fp32 scale, bias [rows, cols/group] they came from."""
    n_bins, eps = f32(2**bits - 1), f32(1e-7)
    g = w.reshape(w.shape[0], -1, group)
    w_max, w_min = g.max(axis=-1), g.min(axis=-1)
    min_is_edge = np.abs(w_min) > np.abs(w_max)
    scale = np.maximum((w_max - w_min) / n_bins, eps)
    scale = np.where(min_is_edge, scale, -scale).astype(f32)
    edge = np.where(min_is_edge, w_min, w_max).astype(f32)
    q0 = np.rint(edge / scale)
    nonzero = q0 != 0
    scale = np.where(nonzero, edge / np.where(nonzero, q0, f32(1)), scale).astype(f32)
    bias = np.where(nonzero, edge, f32(0)).astype(f32)
    q = np.rint((g - bias[..., None]) / scale[..., None])
    codes = np.clip(q, f32(0), n_bins).astype(np.uint8)
    assert scale.dtype == f32 and bias.dtype == f32 and q.dtype == f32
    return codes.reshape(w.shape), scale, bias


def pack(codes, bits):
    """Each row as one little-endian bit stream: code c at bits [c*bits, (c+1)*bits)."""
    rows, cols = codes.shape
    planes = (codes[..., None].astype(np.uint32) >> np.arange(bits, dtype=np.uint32)) & 1
    stream = planes.reshape(rows, cols * bits).astype(np.uint8)
    return np.packbits(stream, axis=1, bitorder="little")


def unpack(packed, bits, cols):
    stream = np.unpackbits(packed, axis=1, bitorder="little")[:, : cols * bits]
    planes = stream.reshape(packed.shape[0], cols, bits).astype(np.uint32)
    return (planes << np.arange(bits, dtype=np.uint32)).sum(axis=-1).astype(np.uint8)


def check_word_rule(codes, packed, bits):
    """Powers of two: code j of a row sits in uint32 word j*bits/32 from bit (j*bits) % 32."""
    if bits not in (2, 4, 8):
        return
    words = packed.view("<u4")
    for j in range(codes.shape[1]):
        got = (words[:, j * bits // 32] >> np.uint32((j * bits) % 32)) & np.uint32(2**bits - 1)
        assert np.array_equal(got, codes[:, j]), (bits, j)


def dequantize_like_mlx(codes, scales, biases, group, dtype):
    """T(T(scale * code) + bias): each op in fp32, rounded to the dtype."""
    s = np.repeat(scales, group, axis=1)
    b = np.repeat(biases, group, axis=1)
    product = round_to(codes.astype(f32) * s, dtype)
    return round_to(product + b, dtype)


def exact_dequantized(codes, scales, biases, group):
    s = np.repeat(scales.astype(np.float64), group, axis=1)
    b = np.repeat(biases.astype(np.float64), group, axis=1)
    product = codes.astype(np.float64) * s
    out = product + b
    # TwoSum: the fp64 sum must be exact for `out` to be the exact value of scale * code + bias
    bb = out - product
    err = (product - (out - bb)) + (b - bb)
    assert not err.any(), "scale * code + bias is not exact in fp64"
    return out


def ties_in(w, codes, scale, bias, group):
    """Elements whose fp32 quotient (w - bias) / scale is exactly k + 1/2 with k even."""
    g = w.reshape(w.shape[0], -1, group)
    quotient = (g - bias[..., None]) / scale[..., None]
    half = (quotient - np.floor(quotient)) == f32(0.5)
    return int((half & (np.floor(quotient) % 2 == 0)).sum())


def torch_of(a, dtype):
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)


def build(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    report = {}
    for dname, dtype in DTYPES.items():
        rng = np.random.default_rng(1000 + len(dname))
        x = rng.standard_normal((XROWS, COLS)).astype(f32)
        tensors = {"x": torch.from_numpy(x)}
        cases = []
        for bits in BITS:
            for group in GROUPS:
                key = f"b{bits}_g{group}"
                w = make_weight(bits, group, dtype, seed=bits * 1000 + group)
                codes, scale32, bias32 = quantize(w, bits, group)
                scales, biases = round_to(scale32, dtype), round_to(bias32, dtype)
                packed = pack(codes, bits)
                assert packed.shape == (ROWS, COLS * bits // 8)
                assert np.array_equal(unpack(packed, bits, COLS), codes)
                check_word_rule(codes, packed, bits)
                deq = dequantize_like_mlx(codes, scales, biases, group, dtype)
                exact = exact_dequantized(codes, scales, biases, group)
                y = x.astype(np.float64) @ exact.T
                # mlx's own bound (python/tests/test_quantized.py): |w - deq| <= |scale|
                err = np.abs(w.astype(np.float64) - exact).reshape(ROWS, -1, group)
                assert (err <= np.abs(scales.astype(np.float64))[..., None] + 1e-6).all(), key
                tensors[f"{key}.weight"] = torch_of(w, dtype)
                tensors[f"{key}.codes"] = torch.from_numpy(codes)
                tensors[f"{key}.packed"] = torch.from_numpy(packed.view("<i4").copy())
                tensors[f"{key}.scales"] = torch_of(scales, dtype)
                tensors[f"{key}.biases"] = torch_of(biases, dtype)
                tensors[f"{key}.dequantized"] = torch_of(deq, dtype)
                tensors[f"{key}.y"] = torch.from_numpy(y)
                cases.append(key)
                report[f"{dname}.{key}"] = {
                    "ties_to_even": ties_in(w, codes, scale32, bias32, group),
                    "negative_scales": int((scales < 0).sum()),
                    "scale_rounding_changed": int((scales != scale32).sum()),
                }
        meta = {"rows": ROWS, "cols": COLS, "dtype": dname, "cases": cases,
                "patterns": PATTERNS,
                "note": "packed holds the uint32 words as I32 (torch 1.13 has no uint32)"}
        path = os.path.join(out_dir, f"affine_{dname}.safetensors")
        st.write(path, tensors, metadata={"meta": json.dumps(meta)})
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/data/quant")
    args = parser.parse_args()
    report = build(args.out)
    ties = sum(v["ties_to_even"] for v in report.values())
    assert ties > 0, "no tie exercised round-half-to-even"
    print(json.dumps({"cases": len(report), "ties_to_even": ties,
                      "negative_scales": sum(v["negative_scales"] for v in report.values()),
                      "scales_changed_by_rounding":
                          sum(v["scale_rounding_changed"] for v in report.values())}, indent=1))


if __name__ == "__main__":
    main()
