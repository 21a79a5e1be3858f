"""The LoRA half of the MoE fixtures: a PEFT adapter over every linear module of tiny_moe (each
routed expert's gate/up/down its own module), its loss and gradients, and a 20-step run with
gradient accumulation, torch clip_grad_norm_ and torch.optim.AdamW, in fp64 (the reference), fp32
and on a bf16 base. Written to tests/data/moe/lora_train_moe/ by moe_reference.py."""

import json
import os

import torch

import glm4_moe_model as mm
from moe_files import write_checked, write_json

MIN_TRAIN_MARGIN = 1e-5  # the run meets ~2,500 routing decisions: 10x an fp32 evaluation's error
SEED_TRIES = 200

LORA_HP = {
    "r": 4,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "use_rslora": False,
    "target_modules": mm.LORA_TARGETS,
    "lora_B_init_std": 0.02,
    "steps": 20,
    "grad_accum": 2,
    "batch_size": 2,
    "seq_len": 16,
    "learning_rate": 1e-3,
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "lr_schedule": "constant",
    "ignore_index": -100,
    "seed": 4242,
}


def init_adapter(spec, W, g):
    """PEFT keys -> fp32: A [r, in] ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform a=sqrt(5)),
    B [out, r] ~ N(0, std^2), nonzero so every gradient is non-trivial."""
    r = LORA_HP["r"]
    out = {}
    for module in mm.lora_module_names(spec):
        rows, cols = W[module + ".weight"].shape
        bound = 1.0 / cols ** 0.5
        out[mm.peft_key(module, "A")] = (torch.rand(r, cols, generator=g) * 2 - 1) * bound
        out[mm.peft_key(module, "B")] = torch.randn(rows, r, generator=g) * LORA_HP[
            "lora_B_init_std"]
    return out


def make_data(g, token_hi):
    """Per step and micro-batch: input_ids [B, T] (right-padded with 0), labels (-100 on padding
    and on a masked prompt prefix in some rows), lengths. Every third step repeats a short motif
    (large aligned gradients, so clipping fires); the others are arithmetic progressions. Each
    micro-batch is as wide as its longest row: padding positions are routed too (transformers
    routes every position), so the width decides which experts a step touches."""
    B, T = LORA_HP["batch_size"], LORA_HP["seq_len"]
    hi = token_hi - 1
    motifs = [torch.randint(1, hi + 1, (n,), generator=g) for n in (2, 3)]
    data = []
    for s in range(LORA_HP["steps"]):
        micro = []
        for _ in range(LORA_HP["grad_accum"]):
            ids = torch.zeros(B, T, dtype=torch.int64)
            labels = torch.full((B, T), -100, dtype=torch.int64)
            lengths = []
            for b in range(B):
                n = T if torch.rand(1, generator=g).item() < 0.5 else \
                    int(torch.randint(8, T, (1,), generator=g))
                if s % 3 == 2:  # full rows: no padding for the few experts a motif leaves idle
                    n = T
                    motif = motifs[(s // 3) % 2]
                    row = motif.roll(int(torch.randint(0, len(motif), (1,), generator=g)))
                    row = row.repeat(T)[:n]
                else:
                    start = int(torch.randint(1, hi, (1,), generator=g))
                    step = int(torch.randint(1, 6, (1,), generator=g))
                    row = (start + step * torch.arange(n)) % hi + 1
                ids[b, :n] = row
                labels[b, :n] = row
                if torch.rand(1, generator=g).item() < 0.5:
                    labels[b, : int(torch.randint(2, 6, (1,), generator=g))] = -100
                lengths.append(n)
            width = max(lengths)
            micro.append((ids[:, :width], labels[:, :width], torch.tensor(lengths)))
        data.append(micro)
    return data


def n_targets(labels):
    return int((labels[:, 1:] != -100).sum())


def make_lora(init, dtype, scale):
    keys = sorted(init)
    params = {k: init[k].to(dtype).clone().requires_grad_(True) for k in keys}
    return params, mm.lora_from_tensors(params, scale)


def step_loss_and_grads(spec, W, init, micro, dtype, **kw):
    """The token-weighted mean CE of one step's micro-batches and its gradients."""
    params, lora = make_lora(init, dtype, LORA_HP["lora_alpha"] / LORA_HP["r"])
    total = sum(n_targets(lab) for _, lab, _ in micro)
    loss = 0.0
    for ids, labels, lengths in micro:
        ce = mm.ce_sum(spec, W, lora, ids, labels, lengths, **kw)
        (ce / total).backward()
        loss += float(ce.detach()) / total
    # an expert no token reached has no gradient (None under PEFT): reported as zeros here
    return loss, {k: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                  for k, p in params.items()}


def train(spec, W, init, data, dtype):
    """20 steps of accumulation, torch clip_grad_norm_ and torch.optim.AdamW in `dtype` (the
    adapters; W is the base in its own dtype). Also the routing of every micro-batch, to compare
    runs, and the smallest routing margin met."""
    keys = sorted(init)
    params, lora = make_lora(init, dtype, LORA_HP["lora_alpha"] / LORA_HP["r"])
    opt = torch.optim.AdamW([params[k] for k in keys], lr=LORA_HP["learning_rate"],
                            betas=tuple(LORA_HP["betas"]), eps=LORA_HP["eps"],
                            weight_decay=LORA_HP["weight_decay"])
    moe_layers = [i for i in range(spec.layers) if mm.is_moe_layer(spec, i)]
    hits = torch.zeros(len(data), len(moe_layers), spec.n_experts, dtype=torch.int32)
    losses, norms, routing, margins, pad_only = [], [], [], [], 0
    for s, micro in enumerate(data):
        pad_hits = torch.zeros(len(moe_layers), spec.n_experts, dtype=torch.int32)
        margin = float("inf")
        opt.zero_grad(set_to_none=True)
        total = sum(n_targets(lab) for _, lab, _ in micro)
        loss = 0.0
        for ids, labels, lengths in micro:
            out = mm.forward(spec, W, ids, lengths, lora)
            logits = out.logits.to(mm.work_dtype(out.logits))
            ce = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, spec.vocab), labels[:, 1:].reshape(-1),
                ignore_index=-100, reduction="sum")
            (ce / total).backward()
            loss += float(ce.detach()) / total
            T = ids.shape[1]
            valid = (torch.arange(T)[None, :] < lengths[:, None]).reshape(-1)
            for j, i in enumerate(moe_layers):
                r = out.routes[i]
                routing.append(r.indices[valid].sort(-1).values)
                margin = min(margin, float(r.margin[valid].min()))
                hits[s, j] += torch.bincount(r.indices[valid].reshape(-1),
                                             minlength=spec.n_experts).to(torch.int32)
                pad_hits[j] += torch.bincount(r.indices[~valid].reshape(-1),
                                              minlength=spec.n_experts).to(torch.int32)
        pad_only += int(((hits[s] == 0) & (pad_hits > 0)).sum())
        margins.append(margin)
        for j, i in enumerate(moe_layers):  # PEFT: untouched experts' adapters get no gradient
            for e in range(spec.n_experts):
                prefix = f"base_model.model.model.layers.{i}.mlp.experts.{e}."
                for k in keys:
                    if k.startswith(prefix):
                        assert (params[k].grad is None) == (hits[s, j, e] + pad_hits[j, e] == 0), k
        losses.append(loss)
        norms.append(float(torch.nn.utils.clip_grad_norm_([params[k] for k in keys],
                                                          LORA_HP["max_grad_norm"])))
        opt.step()
    return {"losses": losses, "grad_norms": norms, "routing": routing, "margin": min(margins),
            "margins": margins,
            "final": {k: params[k].detach().clone() for k in keys}, "expert_hits": hits,
            "pad_only_experts": pad_only}


def check_gradients(spec, W64, init, micro):
    """Autograd gradients equal central differences in fp64 on a few entries of each kind of
    module (attention, dense MLP, shared and routed experts of both MoE layers)."""
    loss, grads = step_loss_and_grads(spec, W64, init, micro, torch.float64)
    picks = []
    for module in mm.lora_module_names(spec):
        kinds = ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj", "shared_experts.up_proj",
                 "experts.3.gate_proj", "experts.11.down_proj", "experts.6.up_proj")
        if module.endswith(kinds):
            for which in "AB":
                picks.append(mm.peft_key(module, which))
    g = torch.Generator().manual_seed(9)
    worst, eps = 0.0, 1e-5
    for key in picks:
        flat = torch.randint(0, init[key].numel(), (1,), generator=g).item()
        vals = []
        for sign in (1, -1):
            moved = {k: v.double().clone() for k, v in init.items()}
            moved[key].view(-1)[flat] += sign * eps
            vals.append(step_loss_and_grads(spec, W64, moved, micro, torch.float64)[0])
        numeric = (vals[0] - vals[1]) / (2 * eps)
        analytic = float(grads[key].view(-1)[flat])
        err = abs(numeric - analytic)
        assert err <= 1e-8 + 1e-5 * abs(analytic), \
            f"gradcheck {key}[{flat}]: autograd {analytic}, central difference {numeric}"
        worst = max(worst, err / max(abs(analytic), 1e-12))
    return {"entries": len(picks), "max_rel_err": worst}


def router_gradient_share(spec, W64, init, micro):
    """How much of the gradient flows through the routing weights: the relative change of the
    adapter gradients when they are detached (a backward without the router path fails)."""
    _, full = step_loss_and_grads(spec, W64, init, micro, torch.float64)
    _, cut = step_loss_and_grads(spec, W64, init, micro, torch.float64, detach_weights=True)
    num = sum(float((full[k] - cut[k]).pow(2).sum()) for k in full) ** 0.5
    den = sum(float(full[k].pow(2).sum()) for k in full) ** 0.5
    return num / den


def choose_lora_seed(spec, W32, W64, token_hi):
    """The first seed from LORA_HP["seed"] whose adapter and data give a run that stays
    LoRA-exact under fp32 rounding: no expert reached by padding alone in any step (the run
    would then depend on routing padding), routing margins >= MIN_TRAIN_MARGIN, torch fp32
    routing equal to fp64. Returns (seed, init, data, fp64 run, fp32 run)."""
    for seed in range(LORA_HP["seed"], LORA_HP["seed"] + SEED_TRIES):
        g = torch.Generator().manual_seed(seed)
        init = init_adapter(spec, W32, g)
        data = make_data(g, token_hi)
        r64 = train(spec, W64, init, data, torch.float64)
        if r64["pad_only_experts"] or r64["margin"] < MIN_TRAIN_MARGIN:
            continue
        r32 = train(spec, mm.cast_weights(W32, torch.float32), init, data, torch.float32)
        if all(torch.equal(a, b) for a, b in zip(r64["routing"], r32["routing"])):
            return seed, init, data, r64, r32
    raise SystemExit("no LoRA seed meets the fixture conditions")


def lora_case(out, spec, W32, W_bf16, fix_ids, fix_lengths, token_hi):
    W64 = mm.cast_weights(W32, torch.float64)
    seed, init, data, r64, r32 = choose_lora_seed(spec, W32, W64, token_hi)
    scale = LORA_HP["lora_alpha"] / LORA_HP["r"]
    gradcheck = check_gradients(spec, W64, init, data[0])
    router_share = router_gradient_share(spec, W64, init, data[0])
    assert router_share > 1e-3, f"the router path carries too little gradient: {router_share}"
    dense = mm.check_dense_formulation(spec, W32, fix_ids, torch.tensor(fix_lengths),
                                       mm.lora_from_tensors(init, scale))
    same32 = all(torch.equal(a, b) for a, b in zip(r64["routing"], r32["routing"]))
    assert same32, "LoRA run: torch fp32 routes differently from fp64"
    assert r64["margin"] >= MIN_TRAIN_MARGIN, f"LoRA run: routing margin {r64['margin']}"
    assert r64["pad_only_experts"] == 0, "an expert reached only by padding in some step"
    assert torch.equal(r64["expert_hits"], r32["expert_hits"])
    loss0, grad0 = step_loss_and_grads(spec, W64, init, data[0], torch.float64)
    assert abs(loss0 - r64["losses"][0]) < 1e-12
    Wbf64 = mm.cast_weights(W_bf16, torch.float64)
    rbf64 = train(spec, Wbf64, init, data, torch.float64)
    rbf = train(spec, mm.cast_weights(W_bf16, torch.bfloat16), init, data, torch.float32)
    bf_same = sum(torch.equal(a, b) for a, b in zip(rbf64["routing"], rbf["routing"]))
    # adapted logits: the init adapter on the base, fixture inputs of tiny_moe (fp64)
    lora64 = mm.lora_from_tensors({k: v.double() for k, v in init.items()}, scale)
    adapted = torch.zeros(*fix_ids.shape, spec.vocab)
    for b, n in enumerate(fix_lengths):
        adapted[b, :n] = mm.forward(spec, W64, fix_ids[b:b + 1, :n], lora=lora64).logits[0].float()
    t = {"losses": torch.tensor(r64["losses"], dtype=torch.float32),
         "grad_norms": torch.tensor(r64["grad_norms"], dtype=torch.float32),
         "losses_torch_f32": torch.tensor(r32["losses"], dtype=torch.float32),
         "grad_norms_torch_f32": torch.tensor(r32["grad_norms"], dtype=torch.float32),
         "bf16_base.losses_fp64": torch.tensor(rbf64["losses"], dtype=torch.float32),
         "bf16_base.losses_torch_bf16": torch.tensor(rbf["losses"], dtype=torch.float32),
         "adapter_input_ids": fix_ids.to(torch.int32),
         "adapter_lengths": torch.tensor(fix_lengths, dtype=torch.int32),
         "adapter_logits": adapted,
         "expert_hits": r64["expert_hits"],
         "route_margin_per_step": torch.tensor(r64["margins"], dtype=torch.float32)}
    for k in init:
        t["init." + k] = init[k].float()
        t["grad0." + k] = grad0[k].float()
        t["final." + k] = r64["final"][k].float()
    for s, micro in enumerate(data):
        for m, (ids, labels, lengths) in enumerate(micro):
            t[f"step{s}.micro{m}.input_ids"] = ids.to(torch.int32)
            t[f"step{s}.micro{m}.labels"] = labels.to(torch.int32)
            t[f"step{s}.micro{m}.lengths"] = lengths.to(torch.int32)
    rep = {"losses": [round(x, 6) for x in r64["losses"]],
           "grad_norms": [round(x, 6) for x in r64["grad_norms"]],
           "clipped_steps": [s for s, n in enumerate(r64["grad_norms"]) if n > 1.0],
           "torch_f32_vs_fp64_loss_max_abs": max(abs(a - b) for a, b in
                                                 zip(r64["losses"], r32["losses"])),
           "torch_f32_vs_fp64_final_max_abs": max(
               float((r64["final"][k] - r32["final"][k].double()).abs().max()) for k in init),
           "torch_f32_routes_like_fp64": same32,
           "bf16_base_torch_bf16_vs_fp64_loss_max_abs": max(
               abs(a - b) for a, b in zip(rbf64["losses"], rbf["losses"])),
           "bf16_base_routing_agreement": f"{bf_same}/{len(rbf['routing'])} micro-batch layers",
           "route_margin_min_during_training": r64["margin"],
           "untouched_expert_steps": int((r64["expert_hits"] == 0).sum()),
           "gradcheck": gradcheck, "router_path_gradient_share": router_share,
           "dense_formulation_max_abs_with_lora": dense, "lora_tensors": len(init)}
    d = os.path.join(out, "lora_train_moe")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "adapter_config.json"), peft_config())
    write_checked(os.path.join(d, "adapter_model.safetensors"), init, {"format": "pt"})
    _, loaded = mm.load_peft_adapter(d)
    assert sorted(loaded["modules"]) == sorted(mm.lora_module_names(spec))
    meta = dict(LORA_HP, seed=seed, base_model="tiny_moe", scale=scale, reference_dtype="float64",
                loss="sum of next-token CE over the step's targets / target count of the step "
                     "(both micro-batches); losses[0] is the loss whose gradient is grad0.*",
                adapter="adapter_model.safetensors holds init.* (PEFT keys, fp32)",
                expert_hits="[step, MoE layer, expert]: valid-token picks in the step (both "
                            "micro-batches); 0 means no token, padding included, reached the "
                            "expert, so PEFT leaves its adapters without a gradient and "
                            "torch.optim.AdamW skips them that step (no decay, no moment update, "
                            "their step count falls behind); grad0.* holds zeros for them",
                adapter_logits="the base tiny_moe with the init adapter on adapter_input_ids, "
                               "each row alone, zero past its length", report=rep)
    write_checked(os.path.join(d, "fixture.safetensors"), t,
                  {"format": "pt", "meta": json.dumps(meta, sort_keys=True)})
    return rep


def peft_config():
    return {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "tiny_moe",
            "bias": "none", "fan_in_fan_out": False, "inference_mode": True,
            "init_lora_weights": True, "layer_replication": None, "layers_pattern": None,
            "layers_to_transform": None, "loftq_config": {}, "lora_alpha": LORA_HP["lora_alpha"],
            "lora_dropout": 0.0, "megatron_config": None, "megatron_core": "megatron.core",
            "modules_to_save": None, "peft_type": "LORA", "r": LORA_HP["r"], "rank_pattern": {},
            "revision": None, "target_modules": LORA_HP["target_modules"],
            "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": False}
