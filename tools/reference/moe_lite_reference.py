#!/usr/bin/python3
"""Writes the glm4_moe_lite (GLM-4.7-Flash) reference fixtures under tests/data/moe_lite/: tiny
random checkpoints in the real on-disk layout (MTP layer included), their logits / hidden states /
router choices / greedy continuations, and a PEFT LoRA adapter on every latent attention
projection and every expert with its loss and gradients. Fails loudly when a self-check fails.
See MOE.md (glm4_moe_lite section).
Usage: /usr/bin/python3 tools/reference/moe_lite_reference.py [--out tests/data/moe_lite]"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

import glm4_moe_lite_model as lm
import glm4_moe_model as mm
from moe_files import write_checked, write_hf_dir, write_json

PAD, EOS = 0, [253, 254, 255]
TOKEN_HI = 253
FIX_LENGTHS, FIX_T, PROMPT_LEN, GREEDY_STEPS = [9, 12], 12, 5, 16
MIN_MARGIN = 2e-3
SEED_TRIES = 200

COMMON = {
    "architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite",
    "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 16,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
    "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "n_routed_experts": 16,
    "n_shared_experts": 1, "num_nextn_predict_layers": 1, "hidden_act": "silu",
    "max_position_embeddings": 1024, "eos_token_id": EOS, "pad_token_id": PAD,
    "tie_word_embeddings": False, "attention_dropout": 0.0, "initializer_range": 0.02,
    "use_cache": True, "topk_method": "noaux_tc",
}
# (a) transformers 4.x-style file as the Hub ships GLM-4.7-Flash: q through a bottleneck,
# interleaved RoPE, grouped routing (4 groups, keep 2) with a correction bias negative enough that
# kept experts score below 0.0, so masking dropped groups to 0.0 instead of -inf would pick them.
CONFIG_A = dict(COMMON, **{
    "q_lora_rank": 24, "v_head_dim": 10, "rope_interleave": True, "attention_bias": True,
    "n_group": 4, "topk_group": 2, "num_experts_per_tok": 6, "norm_topk_prob": True,
    "routed_scaling_factor": 1.8, "first_k_dense_replace": 1, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "rope_scaling": None, "partial_rotary_factor": 1.0,
    "torch_dtype": "float32", "transformers_version": "5.0.0"})
# (b) transformers 5 form: q_proj (q_lora_rank null), rotate-half RoPE, values wider than q/k
# heads, mlp_layer_types, rope_parameters, no bias, one group.
CONFIG_B = dict(COMMON, **{
    "q_lora_rank": None, "v_head_dim": 16, "rope_interleave": False, "attention_bias": False,
    "n_group": 1, "topk_group": 1, "num_experts_per_tok": 3, "norm_topk_prob": False,
    "routed_scaling_factor": 1.5, "mlp_layer_types": ["dense", "dense", "sparse"],
    "rms_norm_eps": 1e-06, "dtype": "float32",
    "rope_parameters": {"rope_theta": 50000.0, "rope_type": "default"},
    "transformers_version": "5.0.0"})
GENERATION = {"_from_model_config": True, "eos_token_id": EOS, "pad_token_id": PAD,
              "transformers_version": "5.0.0"}
SCALE = {"matrix": 0.08, "router": 0.3, "score_bias": 0.1}
LORA = {"r": 4, "lora_alpha": 8, "lora_B_init_std": 0.02, "seed": 5151, "steps": 20,
        "learning_rate": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01,
        "max_grad_norm": 1.0}


def init_weights(spec, seed, bias_shift):
    g = torch.Generator().manual_seed(seed)
    W = {}
    for k, shape in lm.shapes(spec, with_mtp=True).items():
        if k.endswith("e_score_correction_bias"):
            W[k] = bias_shift + SCALE["score_bias"] * torch.randn(shape, generator=g)
        elif k.endswith(".gate.weight"):
            W[k] = SCALE["router"] * torch.randn(shape, generator=g)
        elif k.endswith("norm.weight"):
            W[k] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif k.endswith(".bias"):
            W[k] = 0.02 * torch.randn(shape, generator=g)
        else:
            W[k] = SCALE["matrix"] * torch.randn(shape, generator=g)
    return W


def fixture_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(FIX_LENGTHS), FIX_T), PAD, dtype=torch.int64)
    for b, n in enumerate(FIX_LENGTHS):
        ids[b, :n] = torch.randint(1, TOKEN_HI, (n,), generator=g)
    return ids, torch.randint(1, TOKEN_HI, (PROMPT_LEN,), generator=g)


def greedy(spec, W, prompt):
    seq, out, gap, margin = prompt.clone(), [], float("inf"), float("inf")
    for _ in range(GREEDY_STEPS):
        o = lm.forward(spec, W, seq[None])
        margin = min([margin] + [float(r.margin.min()) for r in o.routes.values()])
        top = torch.topk(o.logits[0, -1], 2)
        gap = min(gap, float(top.values[0] - top.values[1]))
        out.append(int(top.indices[0]))
        seq = torch.cat([seq, top.indices[:1]])
    return torch.tensor(out), gap, margin


def evaluate(spec, W64, seed):
    """The fp64 reference on the fixture inputs, each row alone -> (tensors, report)."""
    ids, prompt = fixture_inputs(seed)
    B, T, k = len(FIX_LENGTHS), FIX_T, spec.top_k
    moe_layers = list(range(spec.first_dense, spec.layers))
    t = {"input_ids": ids.to(torch.int32), "lengths": torch.tensor(FIX_LENGTHS, dtype=torch.int32),
         "logits": torch.zeros(B, T, spec.vocab), "hidden.final": torch.zeros(B, T, spec.hidden)}
    for i in range(spec.layers):
        t[f"hidden.{i}"] = torch.zeros(B, T, spec.hidden)
    for i in moe_layers:
        t[f"router.{i}.indices"] = torch.full((B, T, k), -1, dtype=torch.int32)
        t[f"router.{i}.weights"] = torch.zeros(B, T, k)
        t[f"router.{i}.logits"] = torch.zeros(B, T, spec.n_experts)
    margin = float("inf")
    for b, n in enumerate(FIX_LENGTHS):
        out = lm.forward(spec, W64, ids[b:b + 1, :n])
        t["logits"][b, :n] = out.logits[0].float()
        t["hidden.final"][b, :n] = out.final[0].float()
        for i, h in enumerate(out.hiddens):
            t[f"hidden.{i}"][b, :n] = h[0].float()
        for i, r in out.routes.items():
            order = r.indices.argsort(dim=-1)  # stored by ascending expert id
            t[f"router.{i}.indices"][b, :n] = r.indices.gather(1, order).to(torch.int32)
            t[f"router.{i}.weights"][b, :n] = r.weights.detach().gather(1, order).float()
            t[f"router.{i}.logits"][b, :n] = r.logits.float()
            margin = min(margin, float(r.margin.min()))
    gen, gap, gmargin = greedy(spec, W64, prompt)
    t["greedy_prompt"] = prompt.to(torch.int32)
    t["greedy_ids"] = gen.to(torch.int32)
    return t, {"route_margin_min": min(margin, gmargin), "greedy_min_gap": gap,
               "logit_absmax": float(t["logits"].abs().max())}


def zero_masking_changes_routes(spec, W64, ids):
    """How many token-layer routings would change if dropped groups scored 0.0 (glm4_moe's mask)."""
    a = lm.forward(spec, W64, ids)
    spec0 = lm.LiteSpec(**{**spec.__dict__, "dropped_choice": 0.0})
    b = lm.forward(spec0, W64, ids)
    return sum(int((ra.indices.sort(-1).values != rb.indices.sort(-1).values).any(-1).sum())
               for ra, rb in zip(a.routes.values(), b.routes.values()))


def choose_seed(spec, base, bias_shift, need_zero_mask_difference):
    for seed in range(base, base + SEED_TRIES):
        W = init_weights(spec, seed, bias_shift)
        W64 = mm.cast_weights(W, torch.float64)
        _, rep = evaluate(spec, W64, seed + 1000)
        if rep["route_margin_min"] < MIN_MARGIN or rep["greedy_min_gap"] < 1e-3:
            continue
        ids, _ = fixture_inputs(seed + 1000)
        if need_zero_mask_difference and zero_masking_changes_routes(spec, W64, ids[1:]) == 0:
            continue
        return seed, W
    raise RuntimeError("no seed met the margins")


def self_checks(spec, W64, t):
    ids, lengths = t["input_ids"].long(), torch.tensor(FIX_LENGTHS)
    rep = {}
    # the padded batch equals each row alone
    batch = lm.forward(spec, W64, ids, lengths)
    for b, n in enumerate(FIX_LENGTHS):
        assert torch.allclose(batch.logits[b, :n].float(), t["logits"][b, :n], atol=1e-10, rtol=0)
    # rotating interleaved pairs in place gives upstream's de-interleaved layout's logits
    inplace = lm.forward(spec, W64, ids, lengths, rope_in_place=True)
    rep["rope_in_place_vs_upstream_max_abs"] = float((inplace.logits - batch.logits).abs().max())
    assert rep["rope_in_place_vs_upstream_max_abs"] < 1e-12
    # torch fp32 routes as fp64 and lands near it
    W32 = mm.cast_weights(W64, torch.float32)
    f32 = lm.forward(spec, W32, ids, lengths)
    for i, r in f32.routes.items():
        assert torch.equal(r.indices.sort(-1).values, batch.routes[i].indices.sort(-1).values)
    rep["torch_f32_vs_fp64_logits_max_abs"] = max(
        float((f32.logits[b, :n].double() - batch.logits[b, :n]).abs().max())
        for b, n in enumerate(FIX_LENGTHS))
    rep["zero_masking_would_reroute"] = zero_masking_changes_routes(spec, W64, ids[1:])
    return rep


def model_case(out, name, cfg, base_seed, bias_shift, need_zero_mask_difference):
    spec = lm.spec_from_config(cfg)
    seed, W = choose_seed(spec, base_seed, bias_shift, need_zero_mask_difference)
    d = os.path.join(out, name)
    write_hf_dir(d, cfg, GENERATION, W)
    lspec, _, loaded, skipped = lm.load_model_dir(d)
    assert lspec == spec and skipped and all(mm.is_mtp_key(spec, k) for k in skipped)
    W64 = mm.cast_weights(loaded, torch.float64)
    t, rep = evaluate(spec, W64, seed + 1000)
    rep.update(self_checks(spec, W64, t))
    rep["skipped_mtp_keys"] = len(skipped)
    meta = {"case": name, "seed": seed, "reference_dtype": "float64", "config": cfg,
            "router_order": "indices ascending by expert id, weights in the same order",
            "report": rep}
    write_checked(os.path.join(d, "fixture.safetensors"), t,
                  {"format": "pt", "meta": json.dumps(meta, sort_keys=True)})
    return spec, loaded, t, rep


def train_curve(spec, W64, init, scale, data):
    """LORA["steps"] steps of one full batch each: mean CE, torch clip_grad_norm_ and
    torch.optim.AdamW on the adapters in fp64. Experts no token reaches get no gradient (PEFT:
    None) and AdamW skips them."""
    keys = sorted(init)
    params = {k: init[k].double().clone().requires_grad_(True) for k in keys}
    lora = mm.lora_from_tensors(params, scale)
    opt = torch.optim.AdamW([params[k] for k in keys], lr=LORA["learning_rate"],
                            betas=tuple(LORA["betas"]), eps=LORA["eps"],
                            weight_decay=LORA["weight_decay"])
    moe_layers = list(range(spec.first_dense, spec.layers))
    hits = torch.zeros(len(data), len(moe_layers), spec.n_experts, dtype=torch.int32)
    losses, norms, margin = [], [], float("inf")
    for s, (ids, labels) in enumerate(data):
        opt.zero_grad(set_to_none=True)
        o = lm.forward(spec, W64, ids, None, lora)
        loss = F.cross_entropy(o.logits[:, :-1].reshape(-1, spec.vocab),
                               labels[:, 1:].reshape(-1), ignore_index=-100)
        loss.backward()
        for j, i in enumerate(moe_layers):
            hits[s, j] = torch.bincount(o.routes[i].indices.reshape(-1),
                                        minlength=spec.n_experts).to(torch.int32)
            margin = min(margin, float(o.routes[i].margin.min()))
        losses.append(float(loss))
        norms.append(float(torch.nn.utils.clip_grad_norm_([params[k] for k in keys],
                                                          LORA["max_grad_norm"])))
        opt.step()
    return losses, norms, hits, margin, {k: params[k].detach().float() for k in keys}


def lora_case(out, spec, W, fix_ids):
    """A PEFT adapter on every linear of tiny_lite (B nonzero), the loss of one batch of two full
    rows (labels -100 on the second row's first 3 tokens) and every adapter gradient, fp64."""
    g = torch.Generator().manual_seed(LORA["seed"])
    W64 = mm.cast_weights(W, torch.float64)
    init = {}
    for module in lm.lora_module_names(spec):
        rows, cols = W[module + ".weight"].shape
        bound = 1.0 / cols ** 0.5
        init[mm.peft_key(module, "A")] = (torch.rand(LORA["r"], cols, generator=g) * 2 - 1) * bound
        init[mm.peft_key(module, "B")] = torch.randn(rows, LORA["r"], generator=g) * LORA[
            "lora_B_init_std"]
    scale = LORA["lora_alpha"] / LORA["r"]
    params = {k: v.double().clone().requires_grad_(True) for k, v in sorted(init.items())}
    lora = mm.lora_from_tensors(params, scale)
    ids = torch.randint(1, TOKEN_HI, (2, FIX_T), generator=g)
    labels = ids.clone()
    labels[1, :3] = -100
    out_ = lm.forward(spec, W64, ids, None, lora)
    loss = F.cross_entropy(out_.logits[:, :-1].reshape(-1, spec.vocab), labels[:, 1:].reshape(-1),
                           ignore_index=-100)
    loss.backward()
    moe_layers = list(range(spec.first_dense, spec.layers))
    hits = torch.zeros(1, len(moe_layers), spec.n_experts, dtype=torch.int32)
    for j, i in enumerate(moe_layers):
        for e in out_.routes[i].indices.reshape(-1).tolist():
            hits[0, j, e] += 1
    t = {"step0.micro0.input_ids": ids.to(torch.int32),
         "step0.micro0.labels": labels.to(torch.int32),
         "step0.micro0.lengths": torch.tensor([FIX_T, FIX_T], dtype=torch.int32),
         "losses": torch.tensor([float(loss)], dtype=torch.float32), "expert_hits": hits}
    lengths = torch.tensor(FIX_LENGTHS)
    with torch.no_grad():
        adapted = lm.forward(spec, W64, fix_ids, lengths, mm.lora_from_tensors(
            {k: v.double() for k, v in init.items()}, scale)).logits
    t["adapter_input_ids"] = fix_ids.to(torch.int32)
    t["adapter_lengths"] = lengths.to(torch.int32)
    t["adapter_logits"] = adapted.float()
    for k, p in params.items():
        t["grad0." + k] = torch.zeros_like(p).float() if p.grad is None else p.grad.float()
    data = [(ids, labels)]
    for _ in range(1, LORA["steps"]):
        step_ids = torch.randint(1, TOKEN_HI, (2, FIX_T), generator=g)
        step_labels = step_ids.clone()
        step_labels[1, :3] = -100
        data.append((step_ids, step_labels))
    losses, norms, hits20, margin, final = train_curve(spec, W64, init, scale, data)
    assert abs(losses[0] - float(loss)) < 1e-12 and torch.equal(hits20[0], hits[0])
    for s_, (step_ids, step_labels) in enumerate(data[1:], start=1):
        t[f"step{s_}.micro0.input_ids"] = step_ids.to(torch.int32)
        t[f"step{s_}.micro0.labels"] = step_labels.to(torch.int32)
        t[f"step{s_}.micro0.lengths"] = torch.tensor([FIX_T, FIX_T], dtype=torch.int32)
    t["losses"] = torch.tensor(losses, dtype=torch.float32)
    t["grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    t["expert_hits"] = hits20
    for k, v in final.items():
        t["final." + k] = v
    d = os.path.join(out, "lora_train_lite")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "adapter_config.json"), {
        "base_model_name_or_path": "tiny_lite", "bias": "none", "fan_in_fan_out": False,
        "inference_mode": True, "lora_alpha": LORA["lora_alpha"], "lora_dropout": 0.0,
        "peft_type": "LORA", "r": LORA["r"],
        "target_modules": [t for t in lm.LORA_TARGETS if t != ("q_proj" if spec.q_lora_rank else "q_a_proj")
                           and (spec.q_lora_rank or t != "q_b_proj")],
        "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": False})
    write_checked(os.path.join(d, "adapter_model.safetensors"), init, {"format": "pt"})
    rep = {"loss": float(loss), "lora_tensors": len(init),
           "untouched_experts": int((hits == 0).sum()),
           "losses": [round(x, 6) for x in losses], "grad_norms": [round(x, 6) for x in norms],
           "clipped_steps": [i for i, n in enumerate(norms) if n > LORA["max_grad_norm"]],
           "route_margin_min_during_training": margin}
    meta = dict(LORA, scale=scale, base_model="tiny_lite", reference_dtype="float64",
                loss="mean next-token CE over the targets of step{S}.micro0 (no padding); "
                     "losses[0] is the loss whose gradient is grad0.*",
                expert_hits="[step, MoE layer, expert]: picks in the step; 0 = no gradient",
                report=rep)
    write_checked(os.path.join(d, "fixture.safetensors"), t,
                  {"format": "pt", "meta": json.dumps(meta, sort_keys=True)})
    return rep


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.normpath(os.path.join(here, "..", "..", "tests", "data", "moe_lite"))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    report = {}
    spec_a, W_a, t_a, report["tiny_lite"] = model_case(args.out, "tiny_lite", CONFIG_A, 300, -0.75,
                                                       True)
    assert report["tiny_lite"]["zero_masking_would_reroute"] > 0
    _, _, _, report["tiny_lite_plain"] = model_case(args.out, "tiny_lite_plain", CONFIG_B, 400,
                                                    0.0, False)
    report["lora_train_lite"] = lora_case(args.out, spec_a, W_a, t_a["input_ids"].long())
    json.dump(report, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
