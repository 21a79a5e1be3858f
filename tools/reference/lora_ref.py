"""Reference LoRA fine-tuning run on a tiny glm4 model: PEFT LoRA (A kaiming-uniform, B normal
so every gradient is non-trivial), token-weighted gradient accumulation, torch clip_grad_norm_
and torch.optim.AdamW. Produces the tensors of tests/data/lora_train_glm4/fixture.safetensors."""

import torch
import torch.nn.functional as F

import glm_model as gm

HP = {
    "r": 4,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "use_rslora": False,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj"],
    "lora_B_init_std": 0.01,
    "steps": 20,
    "grad_accum": 2,
    "batch_size": 2,
    "seq_len": 48,
    "learning_rate": 1e-3,
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "clip_eps": 1e-6,
    "lr_schedule": "constant",
    "ignore_index": -100,
    "seed": 1234,
}
_SUBMODULE = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
              "o_proj": "self_attn", "gate_up_proj": "mlp", "down_proj": "mlp"}


def peft_key(module, which):
    return f"base_model.model.{module}.lora_{which}.weight"


def init_adapter(spec, W, g):
    """name -> fp32 tensor under PEFT keys; A [r, in] ~ U(-1/sqrt(in), 1/sqrt(in)),
    B [out, r] ~ N(0, 0.01^2)."""
    r = HP["r"]
    out = {}
    for i in range(spec.layers):
        for t in HP["target_modules"]:
            module = f"model.layers.{i}.{_SUBMODULE[t]}.{t}"
            rows, cols = W[module + ".weight"].shape
            bound = gm.kaiming_uniform_bound(cols)
            out[peft_key(module, "A")] = (torch.rand(r, cols, generator=g) * 2 - 1) * bound
            out[peft_key(module, "B")] = torch.randn(rows, r, generator=g) * HP["lora_B_init_std"]
    return out


def make_data(g):
    """Per step and micro-batch: input_ids [B,T] (right-padded with 0), labels [B,T] (-100 on
    padding and on a masked prompt prefix in some rows), lengths [B]. Every third step repeats
    one of two short motifs (aligned per-token gradients, so the norm exceeds max_grad_norm and
    clipping fires); the other steps are arithmetic progressions (norm below it)."""
    B, T = HP["batch_size"], HP["seq_len"]
    motifs = [torch.randint(1, 501, (n,), generator=g) for n in (2, 3)]
    data = []
    for s in range(HP["steps"]):
        micro = []
        for m in range(HP["grad_accum"]):
            ids = torch.zeros(B, T, dtype=torch.int64)
            labels = torch.full((B, T), HP["ignore_index"], dtype=torch.int64)
            lengths = []
            for b in range(B):
                n = T if torch.rand(1, generator=g).item() < 0.5 else \
                    int(torch.randint(20, T, (1,), generator=g))
                if s % 3 == 0:
                    motif = motifs[(s // 3) % 2]
                    shift = int(torch.randint(0, len(motif), (1,), generator=g))
                    row = motif.roll(shift).repeat(T)[:n]
                else:
                    start = int(torch.randint(1, 500, (1,), generator=g))
                    step = int(torch.randint(1, 6, (1,), generator=g))
                    row = (start + step * torch.arange(n)) % 500 + 1  # tokens in 1..500
                ids[b, :n] = row
                labels[b, :n] = row
                if torch.rand(1, generator=g).item() < 0.5:
                    labels[b, : int(torch.randint(2, 9, (1,), generator=g))] = HP["ignore_index"]
                lengths.append(n)
            micro.append((ids, labels, torch.tensor(lengths)))
        data.append(micro)
    return data


def ce_sum(spec, W, lora, ids, labels, lengths):
    """Summed next-token CE: logits[:, :-1] against labels[:, 1:], -100 ignored."""
    logits, _, _ = gm.forward(spec, W, ids, lengths, lora)
    logits = logits.to(gm.work_dtype(logits))  # transformers takes the loss of bf16 logits in fp32
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1),
                           ignore_index=HP["ignore_index"], reduction="sum")


def n_targets(labels):
    return int((labels[:, 1:] != HP["ignore_index"]).sum())


def train(spec, W32, init, data, dtype, base_dtype=None):
    """Runs the whole fine-tune in `dtype` (the base model in `base_dtype` when given: bf16 with
    fp32 adapters is PEFT on a bf16 checkpoint). Returns dict with losses, grad_norms, grad0,
    final. Alongside torch's optimizer it applies docs/DESIGN.md's AdamW formula by hand and
    asserts both agree, and checks clip_grad_norm_ against the plain L2 norm."""
    W = {k: v.to(base_dtype or dtype) for k, v in W32.items()}
    keys = sorted(init)
    params = {k: init[k].to(dtype).clone().requires_grad_(True) for k in keys}
    scale = HP["lora_alpha"] / HP["r"]
    modules = {}
    for k in keys:
        module = k[len("base_model.model."):].rsplit(".lora_", 1)[0]
        modules.setdefault(module, [None, None])
        modules[module][0 if ".lora_A." in k else 1] = params[k]
    lora = {"scale": scale, "modules": modules}
    opt = torch.optim.AdamW([params[k] for k in keys], lr=HP["learning_rate"],
                            betas=tuple(HP["betas"]), eps=HP["eps"],
                            weight_decay=HP["weight_decay"])
    lr, (b1, b2), eps, wd = HP["learning_rate"], HP["betas"], HP["eps"], HP["weight_decay"]
    manual = {k: init[k].to(dtype).clone() for k in keys}
    mom = {k: torch.zeros_like(manual[k]) for k in keys}
    vel = {k: torch.zeros_like(manual[k]) for k in keys}
    losses, norms, grad0 = [], [], None
    for s, micro in enumerate(data):
        opt.zero_grad(set_to_none=True)
        total = sum(n_targets(lab) for _, lab, _ in micro)
        loss_sum = 0.0
        for ids, labels, lengths in micro:
            ce = ce_sum(spec, W, lora, ids, labels, lengths)
            (ce / total).backward()
            loss_sum += float(ce.detach())
        losses.append(loss_sum / total)
        if s == 0:
            grad0 = {k: params[k].grad.detach().clone() for k in keys}
        plain = torch.sqrt(sum((params[k].grad.double() ** 2).sum() for k in keys))
        norm = float(torch.nn.utils.clip_grad_norm_([params[k] for k in keys],
                                                    HP["max_grad_norm"]))
        assert abs(norm - float(plain)) <= 1e-5 * float(plain), (norm, float(plain))
        norms.append(norm)
        opt.step()
        t = s + 1
        with torch.no_grad():
            for k in keys:
                g = params[k].grad  # already clipped in place
                manual[k] -= lr * wd * manual[k]
                mom[k] = b1 * mom[k] + (1 - b1) * g
                vel[k] = b2 * vel[k] + (1 - b2) * g * g
                manual[k] -= lr * (mom[k] / (1 - b1 ** t)) / (
                    torch.sqrt(vel[k] / (1 - b2 ** t)) + eps)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for k in keys:
        diff = float((manual[k] - params[k].detach()).abs().max())
        assert diff <= tol, f"manual AdamW differs from torch on {k}: {diff}"
    return {"losses": losses, "grad_norms": norms, "grad0": grad0,
            "final": {k: params[k].detach().clone() for k in keys}, "lora": lora}


def check_accumulation(spec, W32, init, micro):
    """The accumulated gradient equals the gradient of the token-weighted mean over the
    concatenated batch, computed in one pass (fp64)."""
    W = {k: v.double() for k, v in W32.items()}
    keys = sorted(init)
    grads = []
    for split in (True, False):
        params = {k: init[k].double().clone().requires_grad_(True) for k in keys}
        modules = {}
        for k in keys:
            module = k[len("base_model.model."):].rsplit(".lora_", 1)[0]
            modules.setdefault(module, [None, None])
            modules[module][0 if ".lora_A." in k else 1] = params[k]
        lora = {"scale": HP["lora_alpha"] / HP["r"], "modules": modules}
        total = sum(n_targets(lab) for _, lab, _ in micro)
        if split:
            for ids, labels, lengths in micro:
                (ce_sum(spec, W, lora, ids, labels, lengths) / total).backward()
        else:
            ids = torch.cat([m[0] for m in micro])
            labels = torch.cat([m[1] for m in micro])
            lengths = torch.cat([m[2] for m in micro])
            (ce_sum(spec, W, lora, ids, labels, lengths) / total).backward()
        grads.append({k: params[k].grad for k in keys})
    for k in keys:
        assert torch.allclose(grads[0][k], grads[1][k], rtol=1e-10, atol=1e-14), k
