"""The PyTorch peer of bench_generate: prefill a 512-token prompt and decode 128 tokens greedily
with a KV cache on a random GLM-4 of configs/mid.json, for f32 and bf16 weights (the whole model
in that dtype, as torch runs it); prefill and decode tokens/s next to the decode floor, weight
bytes per token / 30 GB/s. The model is torch_lora_step.py's.

Run: /usr/bin/python3 benchmarks/torch_generate.py [--dtypes f32,bf16] [--prompt 512] [--tokens 128]
     [--reps 2] [--threads 2] [--config configs/mid.json]"""

import argparse
import time

import torch

from torch_lora_step import DEFAULT_CONFIG, Glm4, blas_name, load_config, matmul_params

BANDWIDTH = 30e9  # bytes/s, docs/DESIGN.md section 5
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


@torch.inference_mode()
def generate(model, prompt, tokens, dtype):
    """Returns (prefill seconds, decode seconds for tokens - 1 forward passes)."""
    c = model.c
    B, T = prompt.shape
    kv = c["num_key_value_heads"]
    cache = [(torch.empty(B, kv, T + tokens, c["head_dim"], dtype=dtype),
              torch.empty(B, kv, T + tokens, c["head_dim"], dtype=dtype)) for _ in model.layers]
    t0 = time.perf_counter()
    token = model(prompt, cache, 0, last_only=True)[:, -1].argmax(-1, keepdim=True)
    t1 = time.perf_counter()
    for i in range(tokens - 1):
        token = model(token, cache, T + i, last_only=True)[:, -1].argmax(-1, keepdim=True)
    return t1 - t0, time.perf_counter() - t1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=DEFAULT_CONFIG)
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    c = load_config(args.config)
    print(f"# torch_generate: torch {torch.__version__} (BLAS {blas_name()}), {args.config}, random weights, "
          f"prompt {args.prompt} tokens, {args.tokens} greedy tokens, {args.threads} threads, best of {args.reps} "
          f"runs\n# decode tok/s = forward passes / s; floor = {BANDWIDTH / 1e9:.0f} GB/s / weight bytes per token")
    print(f"{'dtype':<5} {'prefill t/s':>11} {'decode t/s':>11} {'ms/token':>9} {'floor t/s':>11} {'%floor':>8}",
          flush=True)
    prompt = torch.randint(2, c["vocab_size"], (1, args.prompt), generator=torch.Generator().manual_seed(1))
    for name in args.dtypes.split(","):
        dtype = DTYPES[name]
        torch.manual_seed(0)
        model = Glm4(c).to(dtype).eval()
        best_prefill, best_decode = 1e30, 1e30
        for _ in range(args.reps):
            pre, dec = generate(model, prompt, args.tokens, dtype)
            best_prefill, best_decode = min(best_prefill, pre), min(best_decode, dec)
        decode = (args.tokens - 1) / best_decode
        floor = BANDWIDTH / (matmul_params(c) * torch.finfo(dtype).bits / 8)
        print(f"{name:<5} {args.prompt / best_prefill:11.1f} {decode:11.1f} {1e3 / decode:9.2f} {floor:11.1f} "
              f"{100 * decode / floor:7.0f}%", flush=True)
        del model


if __name__ == "__main__":
    main()
