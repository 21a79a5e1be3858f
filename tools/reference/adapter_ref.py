#!/usr/bin/python3
"""Fixtures for adapters beyond plain LoRA on the HF layout, from the committed tiny models:
  chatglm_peft/, chatglm_peft_dora/: PEFT adapters of tiny_chatglm in PEFT's ChatGLM key names
    (one A and one B over the fused query_key_value, dense, mlp.dense_h_to_4h, mlp.dense_4h_to_h;
    the DoRA one with lora_magnitude_vector), and fixture.safetensors with the logits of the
    adapted model on tiny_chatglm's fixture inputs and the gradients of the mean loss.
  dora_train_glm4/fixture.safetensors: a 20-step DoRA run on tiny_glm4 (PEFT semantics: the row
    norm of W + scale B A is a constant in backward) with lora_ref's data, clipping and AdamW.
Usage: /usr/bin/python3 tools/reference/adapter_ref.py --data tests/data"""

import argparse
import json
import os
import sys

import torch

import glm_model as gm
import lora_ref
import st

R, ALPHA, SEED = 4, 8, 4321
PREFIX = "base_model.model."
CHATGLM_MODULES = ["self_attention.query_key_value", "self_attention.dense", "mlp.dense_h_to_4h",
                   "mlp.dense_4h_to_h"]


def load(data, name):
    with open(os.path.join(data, name, "config.json")) as f:
        spec = gm.spec_from_config(json.load(f))
    W, _ = st.read(os.path.join(data, name, "model.safetensors"))
    return spec, W


def magnitude_near_norm(Wm, A, B, scale, g):
    """PEFT starts m at ||W + scale B A||_row; 10% noise makes g = m / norm differ from 1."""
    norm = (Wm + scale * (B @ A)).norm(dim=1)
    return norm * (1 + 0.1 * (torch.rand(norm.shape, generator=g, dtype=torch.float64) * 2 - 1))


def peft_config(base, targets, dora):
    return {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base, "bias": "none",
            "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
            "layer_replication": None, "layers_pattern": None, "layers_to_transform": None,
            "loftq_config": {}, "lora_alpha": ALPHA, "lora_dropout": 0.0, "megatron_config": None,
            "megatron_core": "megatron.core", "modules_to_save": None, "peft_type": "LORA", "r": R,
            "rank_pattern": {}, "revision": None, "target_modules": targets, "task_type": "CAUSAL_LM",
            "use_dora": dora, "use_rslora": False}


def mean_loss(spec, W, lora, ids, lengths):
    labels = ids.clone()
    for b, n in enumerate(lengths.tolist()):
        labels[b, n:] = -100
    return lora_ref.ce_sum(spec, W, lora, ids, labels, lengths) / lora_ref.n_targets(labels)


def chatglm_adapter(data, dora):
    spec, W32 = load(data, "tiny_chatglm")
    W = {k: v.double() for k, v in W32.items()}
    g = torch.Generator().manual_seed(SEED + dora)
    scale = ALPHA / R
    files, modules = {}, {}
    for i in range(spec.layers):
        for sub in CHATGLM_MODULES:
            module = f"transformer.encoder.layers.{i}.{sub}"
            rows, cols = W[module + ".weight"].shape
            bound = gm.kaiming_uniform_bound(cols)
            A = ((torch.rand(R, cols, generator=g, dtype=torch.float64) * 2 - 1) * bound).float()
            B = (torch.randn(rows, R, generator=g, dtype=torch.float64) * 0.05).float()
            files[PREFIX + module + ".lora_A.weight"] = A
            files[PREFIX + module + ".lora_B.weight"] = B
            params = [A.double().requires_grad_(True), B.double().requires_grad_(True)]
            if dora:
                m = magnitude_near_norm(W[module + ".weight"], params[0].detach(), params[1].detach(), scale, g).float()
                files[PREFIX + module + ".lora_magnitude_vector"] = m
                params.append(m.double().requires_grad_(True))
            modules[module] = params
    name = "chatglm_peft_dora" if dora else "chatglm_peft"
    d = os.path.join(data, name)
    os.makedirs(d, exist_ok=True)
    st.write(os.path.join(d, "adapter_model.safetensors"), files, metadata={"format": "pt"})
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(peft_config("tiny_chatglm", ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
                              dora), f, indent=2, sort_keys=True)
        f.write("\n")
    fixture, _ = st.read(os.path.join(data, "tiny_chatglm", "fixture.safetensors"))
    ids, lengths = fixture["input_ids"].long(), fixture["lengths"].long()
    lora = {"scale": scale, "modules": modules}
    logits = gm.forward(spec, W, ids, lengths, lora)[0]
    base = gm.forward(spec, W, ids, lengths)[0]
    loss = mean_loss(spec, W, lora, ids, lengths)
    loss.backward()
    out = {"input_ids": ids.to(torch.int32), "lengths": lengths.to(torch.int32), "logits": logits.detach().float(),
           "loss": torch.tensor([float(loss)], dtype=torch.float32)}
    for module, params in modules.items():
        for part, p in zip(["lora_A.weight", "lora_B.weight", "lora_magnitude_vector"], params):
            out[f"grad.{PREFIX}{module}.{part}"] = p.grad.float()
    st.write(os.path.join(d, "fixture.safetensors"), out, metadata={"format": "pt"})
    return {"logit_change_vs_base": float((logits - base).abs().max()), "loss": float(loss)}


def dora_train(data):
    spec, W32 = load(data, "tiny_glm4")
    g = torch.Generator().manual_seed(lora_ref.HP["seed"] + 1)
    init = lora_ref.init_adapter(spec, W32, g)
    scale = lora_ref.HP["lora_alpha"] / lora_ref.HP["r"]
    for k in sorted(init):
        if k.endswith(".lora_A.weight"):
            module = k[len(PREFIX):-len(".lora_A.weight")]
            A, B = init[k].double(), init[PREFIX + module + ".lora_B.weight"].double()
            init[PREFIX + module + ".lora_magnitude_vector"] = \
                magnitude_near_norm(W32[module + ".weight"].double(), A, B, scale, g).float()
    batches = lora_ref.make_data(g)
    W = {k: v.double() for k, v in W32.items()}
    keys = sorted(init)
    params = {k: init[k].double().clone().requires_grad_(True) for k in keys}
    modules = {}
    for k in keys:
        module, part = k[len(PREFIX):].rsplit(".lora_", 1)
        slot = {"A.weight": 0, "B.weight": 1, "magnitude_vector": 2}[part]
        modules.setdefault(module, [None, None, None])[slot] = params[k]
    lora = {"scale": scale, "modules": modules}
    hp = lora_ref.HP
    opt = torch.optim.AdamW([params[k] for k in keys], lr=hp["learning_rate"], betas=tuple(hp["betas"]),
                            eps=hp["eps"], weight_decay=hp["weight_decay"])
    losses, norms, grad0 = [], [], None
    for s, micro in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        total = sum(lora_ref.n_targets(lab) for _, lab, _ in micro)
        loss_sum = 0.0
        for ids, labels, lengths in micro:
            ce = lora_ref.ce_sum(spec, W, lora, ids, labels, lengths)
            (ce / total).backward()
            loss_sum += float(ce.detach())
        losses.append(loss_sum / total)
        if s == 0:
            grad0 = {k: params[k].grad.detach().clone() for k in keys}
        norms.append(float(torch.nn.utils.clip_grad_norm_([params[k] for k in keys], hp["max_grad_norm"])))
        opt.step()
    tensors = {"losses": torch.tensor(losses, dtype=torch.float32),
               "grad_norms": torch.tensor(norms, dtype=torch.float32)}
    for k in keys:
        tensors["init." + k] = init[k].float()
        tensors["grad0." + k] = grad0[k].float()
        tensors["final." + k] = params[k].detach().float()
    for s, micro in enumerate(batches):
        for m, (ids, labels, lengths) in enumerate(micro):
            tensors[f"step{s}.micro{m}.input_ids"] = ids.to(torch.int32)
            tensors[f"step{s}.micro{m}.labels"] = labels.to(torch.int32)
            tensors[f"step{s}.micro{m}.lengths"] = lengths.to(torch.int32)
    meta = dict(hp, use_dora=True, base_model="tiny_glm4", scale=scale, reference_dtype="float64",
                magnitude_init="||W + scale B A||_row * (1 + U(-0.1, 0.1))")
    d = os.path.join(data, "dora_train_glm4")
    os.makedirs(d, exist_ok=True)
    st.write(os.path.join(d, "fixture.safetensors"), tensors,
             metadata={"format": "pt", "meta": json.dumps(meta, sort_keys=True)})
    return {"losses": [round(x, 6) for x in losses], "clipped_steps": [s for s, n in enumerate(norms) if n > 1.0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True, help="tests/data (reads the tiny models, writes the fixtures)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    report = {"chatglm_peft": chatglm_adapter(args.data, False),
              "chatglm_peft_dora": chatglm_adapter(args.data, True),
              "dora_train_glm4": dora_train(args.data)}
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
