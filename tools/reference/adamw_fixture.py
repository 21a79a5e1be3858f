#!/usr/bin/python3
"""Writes tests/data/adamw_fixture.json: five steps of torch's clip_grad_norm_ followed by
torch.optim.AdamW (single-tensor path) on small random tensors, for test_adamw.cpp.
Usage: /usr/bin/python3 tools/reference/adamw_fixture.py --out tests/data/adamw_fixture.json

Per step the file holds the learning rate, the raw gradients (null where a parameter gets no
gradient that step: torch then skips it and its own step count stays behind), the pre-clip norm
(torch's fp32 value and an fp64 recomputation), the clipped gradients and the parameters after
the step; at the end, every parameter's exp_avg, exp_avg_sq and step count. Floats are fp32
values written as exact decimal doubles."""

import argparse
import json
import os

import torch

SHAPES = {"a": [4, 3], "b": [5], "c": [2, 2, 3], "d": [37]}
LRS = [1e-2, 3e-2, 2.5e-2, 1.7e-2, 1e-3]    # varies per step, like a schedule
GRAD_SCALES = [0.1, 2.0, 0.5, 5.0, 0.05]     # some steps clip at MAX_NORM, some do not
NO_GRAD = {2: "c"}                           # step index -> parameter left without a gradient
BETAS, EPS, WEIGHT_DECAY, MAX_NORM = (0.9, 0.95), 1e-8, 0.1, 1.0


def values(t):
    return t.detach().reshape(-1).tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    params = {n: torch.randn(s).requires_grad_(True) for n, s in SHAPES.items()}
    out = {
        "torch_version": torch.__version__,
        "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY, "max_norm": MAX_NORM,
        "params": [{"name": n, "shape": s, "init": values(params[n])} for n, s in SHAPES.items()],
        "steps": [],
    }
    opt = torch.optim.AdamW(list(params.values()), lr=LRS[0], betas=BETAS, eps=EPS,
                            weight_decay=WEIGHT_DECAY, foreach=False)
    for i, (lr, scale) in enumerate(zip(LRS, GRAD_SCALES)):
        grads = {}
        for n, p in params.items():
            if NO_GRAD.get(i) == n:
                p.grad = None
                grads[n] = None
            else:
                p.grad = torch.randn(p.shape) * scale
                grads[n] = values(p.grad)
        live = [p.grad for p in params.values() if p.grad is not None]
        norm64 = sum(float((g.double() ** 2).sum()) for g in live) ** 0.5
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), MAX_NORM)
        clipped = {n: (values(p.grad) if p.grad is not None else None) for n, p in params.items()}
        opt.param_groups[0]["lr"] = lr
        opt.step()
        out["steps"].append({
            "lr": lr, "grads": grads, "grad_norm": float(norm), "grad_norm_f64": norm64,
            "clipped": clipped, "params_after": {n: values(p) for n, p in params.items()},
        })
    out["final_state"] = {
        n: {"exp_avg": values(opt.state[p]["exp_avg"]),
            "exp_avg_sq": values(opt.state[p]["exp_avg_sq"]),
            "step": int(opt.state[p]["step"].item())}
        for n, p in params.items()
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(LRS)} steps, norms "
          f"{[round(s['grad_norm'], 4) for s in out['steps']]}")


if __name__ == "__main__":
    main()
