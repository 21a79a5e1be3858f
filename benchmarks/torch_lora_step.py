"""The PyTorch peer of bench_lora_step: one LoRA training step (forward + backward + AdamW) of a
random GLM-4 (configs/mid.json, fp32 frozen weights, LoRA r=16 alpha=32 on q,k,v,o,gate_up,down) at batch 4 x
512 and 1 x 512, with and without gradient checkpointing; tokens/s and peak RSS. Each case runs
in a child process of its own. Also holds the minimal GLM-4 module torch_generate.py uses.

Run: /usr/bin/python3 benchmarks/torch_lora_step.py [--shapes 4x256,1x512] [--checkpoint 0,1]
     [--steps 3] [--threads 2] [--config configs/mid.json] [--dtype f32|bf16]
(Debian python3-torch with libopenblas0-pthread: scripts/install_deps.sh --dev.)"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
DEFAULT_CONFIG = os.path.join(HERE, "..", "configs", "mid.json")


# ---------------------------------------------------------------- a minimal GLM-4 (Glm4ForCausalLM)

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n), requires_grad=False)
        self.eps = eps

    def forward(self, x):  # transformers: statistics in fp32, cast back, then the weight
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class Linear(nn.Module):
    """Frozen x W^T (+ b), plus PEFT LoRA scale * B(A(x)) once add_lora() was called."""

    def __init__(self, n_in, n_out, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * 0.02, requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(n_out), requires_grad=False) if bias else None
        self.lora_a = self.lora_b = None

    def add_lora(self, r, alpha):
        n_out, n_in = self.weight.shape
        a = torch.empty(r, n_in)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5))
        self.lora_a = nn.Parameter(a)
        self.lora_b = nn.Parameter(torch.zeros(n_out, r))
        self.scale = alpha / r

    def forward(self, x):
        y = F.linear(x, self.weight, self.bias)
        if self.lora_a is not None:  # PEFT keeps adapters fp32 on a bf16 base and casts back
            xa = x.to(self.lora_a.dtype)
            y = (y + F.linear(F.linear(xa, self.lora_a), self.lora_b) * self.scale).to(y.dtype)
        return y


def rope(x, cos, sin):
    """HF glm4 RoPE: interleaved pairs (x[2i], x[2i+1]) over the first cos.shape[-1] dims."""
    rd = cos.shape[-1]
    xr, xp = x[..., :rd], x[..., rd:]
    rot = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.H, self.KV, self.D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        bias = c.get("attention_bias", True)
        self.q_proj = Linear(h, self.H * self.D, bias)
        self.k_proj = Linear(h, self.KV * self.D, bias)
        self.v_proj = Linear(h, self.KV * self.D, bias)
        self.o_proj = Linear(self.H * self.D, h, False)

    def forward(self, x, cos, sin, cache=None, pos0=0):
        B, T, _ = x.shape
        q = rope(self.q_proj(x).view(B, T, self.H, self.D).transpose(1, 2), cos, sin)
        k = rope(self.k_proj(x).view(B, T, self.KV, self.D).transpose(1, 2), cos, sin)
        v = self.v_proj(x).view(B, T, self.KV, self.D).transpose(1, 2)
        if cache is not None:  # preallocated [B, KV, Tmax, D] buffers
            cache[0][:, :, pos0:pos0 + T] = k
            cache[1][:, :, pos0:pos0 + T] = v
            k, v = cache[0][:, :, :pos0 + T], cache[1][:, :, :pos0 + T]
        S = k.shape[2]
        rep = self.H // self.KV  # query head h reads kv head h // rep
        q = q.reshape(B, self.KV, rep * T, self.D)  # heads of one kv group share one matmul
        scores = (q @ k.transpose(-1, -2)).view(B, self.KV, rep, T, S) * (self.D ** -0.5)
        if T > 1:
            allowed = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
            scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype).view(B, self.KV, rep * T, S)
        out = (probs @ v).view(B, self.H, T, self.D)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.H * self.D))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, eps, inter = c["hidden_size"], c.get("rms_norm_eps", 1e-5), c["intermediate_size"]
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(c)
        self.post_self_attn_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.gate_up_proj = Linear(h, 2 * inter, False)
        self.down_proj = Linear(inter, h, False)
        self.post_mlp_layernorm = RMSNorm(h, eps)

    def forward(self, x, cos, sin, cache=None, pos0=0):
        a = self.self_attn(self.input_layernorm(x), cos, sin, cache, pos0)
        x = x + self.post_self_attn_layernorm(a)
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.post_mlp_layernorm(self.down_proj(F.silu(gate) * up))


class Glm4(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        h = c["hidden_size"]
        self.embed_tokens = nn.Parameter(torch.randn(c["vocab_size"], h) * 0.02, requires_grad=False)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(h, c.get("rms_norm_eps", 1e-5))
        self.lm_head = Linear(h, c["vocab_size"], False)
        d = c["head_dim"]
        rd = int(d * c.get("partial_rotary_factor", 0.5))
        self.inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, rd, 2).float() / rd))

    def add_lora(self, r=16, alpha=32,
                 targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj")):
        for layer in self.layers:
            for t in targets:
                owner = layer.self_attn if hasattr(layer.self_attn, t) else layer
                getattr(owner, t).add_lora(r, alpha)
        return [p for p in self.parameters() if p.requires_grad]

    def rope_tables(self, pos0, T, dtype):
        angles = torch.outer(torch.arange(pos0, pos0 + T, dtype=torch.float32), self.inv_freq)
        return (angles.cos().repeat_interleave(2, -1).to(dtype),
                angles.sin().repeat_interleave(2, -1).to(dtype))

    def forward(self, ids, cache=None, pos0=0, checkpoint_layers=False, last_only=False):
        """ids [B, T] -> logits [B, T, vocab] (or [B, 1, vocab] with last_only)."""
        x = self.embed_tokens[ids]
        cos, sin = self.rope_tables(pos0, ids.shape[1], x.dtype)
        for i, layer in enumerate(self.layers):
            if checkpoint_layers:
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin, None if cache is None else cache[i], pos0)
        x = self.norm(x[:, -1:] if last_only else x)
        return self.lm_head(x)


def load_config(path):
    with open(path) as f:
        return json.load(f)


def matmul_params(c):
    h, d = c["hidden_size"], c["head_dim"]
    per_layer = h * d * c["num_attention_heads"] * 2 + h * d * c["num_key_value_heads"] * 2 + 3 * h * c["intermediate_size"]
    return per_layer * c["num_hidden_layers"] + h * c["vocab_size"]


def vm_hwm_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def reset_vm_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def blas_name():
    cfg = torch.__config__.show()
    for key in ("BLAS_INFO=", "LAPACK_INFO="):
        if key in cfg:
            return cfg.split(key)[1].split(",")[0]
    return "?"


def time_steps(step, steps):
    """One warm-up call of step(), then `steps` timed ones with VmHWM reset between: the sorted
    seconds and the first timed step's loss."""
    step()
    reset_vm_hwm()
    times, loss = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        value = step()
        times.append(time.perf_counter() - t0)
        loss = value if loss is None else loss
    return sorted(times), loss


# ---------------------------------------------------------------- the benchmark

def run_case(args, B, T, ckpt):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    c = load_config(args.config)
    model = Glm4(c).to(DTYPES[args.dtype])  # frozen weights in --dtype; adapters stay fp32
    params = model.add_lora()
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    ids = torch.randint(2, c["vocab_size"], (B, T))
    labels = torch.cat((ids[:, 1:], torch.full((B, 1), -100)), dim=1)  # next-token targets

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(ids, checkpoint_layers=ckpt).float()  # the loss in fp32, as transformers takes it
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        return loss.item()

    times, loss = time_steps(step, args.steps)
    median = times[len(times) // 2]
    flops = (6 if ckpt else 4) * matmul_params(c) * B * T
    print(f"{f'{B}x{T}':>11} {'yes' if ckpt else 'no':>4} {args.steps:5d} {median:8.3f} {times[0]:8.3f} "
          f"{B * T / median:9.1f} {flops / median / 1e9:9.1f} {vm_hwm_mb():9.0f} {loss:7.3f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=DEFAULT_CONFIG)
    p.add_argument("--shapes", default="4x256,1x512")
    p.add_argument("--checkpoint", default="0,1")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="f32", choices=sorted(DTYPES), help="frozen weights and activations")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    ckpts = [v == "1" for v in args.checkpoint.split(",") if v]
    if args.child:
        run_case(args, shapes[0][0], shapes[0][1], ckpts[0])
        return
    print(f"# torch_lora_step: torch {torch.__version__} (BLAS {blas_name()}), {args.config}, {args.dtype} frozen "
          f"weights, LoRA r=16 alpha=32 on q,k,v,o,gate_up,down, AdamW; {args.threads} threads;\n"
          f"# s/step: median (best) of {args.steps} timed steps after one warm-up; GF/s counts 4 (6 with "
          f"checkpointing) FLOPs/token per matmul parameter; RSS MB: peak over the timed steps (VmHWM)")
    print(f"{'BxT':>11} {'ckpt':>4} {'steps':>5} {'s/step':>8} {'best':>8} {'tokens/s':>9} {'GF/s':>9} "
          f"{'RSS MB':>9} {'loss':>7}", flush=True)
    rc = 0
    for B, T in shapes:
        for ck in ckpts:
            rc |= subprocess.call([sys.executable, os.path.abspath(__file__), "--child", "--config", args.config,
                                   "--shapes", f"{B}x{T}", "--checkpoint", "1" if ck else "0",
                                   "--steps", str(args.steps), "--threads", str(args.threads),
                                   "--dtype", args.dtype])
    sys.exit(rc)


if __name__ == "__main__":
    main()
