"""The PyTorch peer of bench_lora_step on a glm4_moe config (configs/moe-mid.json): one LoRA step
(forward + backward + AdamW) of transformers' eager Glm4Moe semantics, each routed expert its own
linear as PEFT wraps it, over random frozen weights in --dtype; LoRA r=16 alpha=32 on q, k, v, o
and every gate/up/down (dense, shared and routed experts). The model is the reference's
(tools/reference/glm4_moe_model.py), without gradient checkpointing. Tokens/s and peak RSS, each
case in a child process of its own.

Run: /usr/bin/python3 benchmarks/torch_moe_lora_step.py [--shapes 4x256,1x512] [--steps 3]
     [--threads 2] [--config configs/moe-mid.json] [--dtype f32|bf16]"""

import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "reference"))
import glm4_moe_model as mm  # noqa: E402
from moe_reference import init_weights  # noqa: E402
from torch_lora_step import blas_name, time_steps, vm_hwm_mb  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
RANK, ALPHA = 16, 32


def active_matmul_params(spec):
    """Matrix parameters a token multiplies: attention, the dense or shared MLP, its routed
    experts and the lm_head (the router and embeddings aside)."""
    h, d = spec.hidden, spec.head_dim
    attn = h * d * (2 * spec.heads + 2 * spec.kv_heads)
    total = spec.vocab * h
    for i in range(spec.layers):
        total += attn
        if mm.is_moe_layer(spec, i):
            total += 3 * h * spec.moe_inter * (spec.top_k + spec.n_shared)
        else:
            total += 3 * h * spec.inter
    return total


def run_case(args, B, T):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.config) as f:
        spec = mm.spec_from_config(json.load(f))
    W = mm.cast_weights(init_weights(spec, 1), DTYPES[args.dtype])
    g = torch.Generator().manual_seed(2)
    params = {}
    for module in mm.lora_module_names(spec):
        rows, cols = W[module + ".weight"].shape
        params[mm.peft_key(module, "A")] = ((torch.rand(RANK, cols, generator=g) * 2 - 1) /
                                            cols ** 0.5).requires_grad_(True)
        params[mm.peft_key(module, "B")] = torch.zeros(rows, RANK).requires_grad_(True)
    lora = mm.lora_from_tensors(params, ALPHA / RANK)
    opt = torch.optim.AdamW(list(params.values()), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    ids = torch.randint(2, spec.vocab, (B, T))
    labels = torch.cat((ids[:, 1:], torch.full((B, 1), -100)), dim=1)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = mm.forward(spec, W, ids, None, lora).logits.float()
        loss = F.cross_entropy(logits.view(-1, spec.vocab), labels.view(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        return loss.item()

    times, loss = time_steps(step, args.steps)
    median = times[len(times) // 2]
    flops = 4 * active_matmul_params(spec) * B * T
    print(f"{f'{B}x{T}':>11} {'no':>4} {args.steps:5d} {median:8.3f} {times[0]:8.3f} "
          f"{B * T / median:9.1f} {flops / median / 1e9:9.1f} {vm_hwm_mb():9.0f} {loss:7.3f}",
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(HERE, "..", "configs", "moe-mid.json"))
    p.add_argument("--shapes", default="4x256,1x512")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    if args.child:
        run_case(args, *shapes[0])
        return
    print(f"# torch_moe_lora_step: torch {torch.__version__} (BLAS {blas_name()}), {args.config}, "
          f"{args.dtype} frozen weights, LoRA r={RANK} alpha={ALPHA} on attention and every "
          f"expert's gate/up/down, AdamW; {args.threads} threads;\n# s/step: median (best) of "
          f"{args.steps} timed steps after one warm-up; GF/s counts 4 FLOPs/token per active "
          f"matmul parameter; RSS MB: peak over the timed steps (VmHWM)")
    print(f"{'BxT':>11} {'ckpt':>4} {'steps':>5} {'s/step':>8} {'best':>8} {'tokens/s':>9} "
          f"{'GF/s':>9} {'RSS MB':>9} {'loss':>7}", flush=True)
    rc = 0
    for B, T in shapes:
        rc |= subprocess.call([sys.executable, os.path.abspath(__file__), "--child", "--config",
                               args.config, "--shapes", f"{B}x{T}", "--steps", str(args.steps),
                               "--threads", str(args.threads), "--dtype", args.dtype])
    sys.exit(rc)


if __name__ == "__main__":
    main()
