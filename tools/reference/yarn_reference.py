#!/usr/bin/python3
"""Writes the YaRN fixtures under tests/data/yarn/: a tiny glm4 (interleaved partial RoPE,
transformers 4 "rope_scaling", truncate false, cos/sin scaled by mscale(4)) and a tiny
glm4_moe_lite (rotate-half, transformers 5 "rope_parameters", mscale = mscale_all_dim = 1, so the
softmax scale gains mscale(4, 1)^2) and a tiny glm4_moe (rotate-half on half of each head,
grouped routing, transformers 4 "rope_scaling", cos/sin scaled by mscale(4), no softmax mscale),
each with factor 4 over an original context of 64 at rope_theta 50 so that the ramp mixes several
pairs; logits, hidden states and greedy ids from the fp64 oracles of reference.py,
moe_lite_reference.py and moe_reference.py; and lora_lite_yarn/, a PEFT adapter on
tiny_lite_yarn's attention projections with one batch's loss and every gradient.
Usage: /usr/bin/python3 tools/reference/yarn_reference.py [--out tests/data/yarn]"""

import argparse
import dataclasses
import json
import os
import sys

import torch
import torch.nn.functional as F

import glm4_moe_lite_model as lm
import glm4_moe_model as mm
import glm_model as gm
import moe_lite_reference as lite_ref
import moe_reference as moe_ref
import reference as ref
import st
import yarn

GLM4 = dict(ref.CONFIGS["tiny_glm4"], **{
    "max_position_embeddings": 256, "rope_theta": 50.0,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                     "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False}})
LITE = dict(lite_ref.CONFIG_B, **{
    "max_position_embeddings": 256,
    "rope_parameters": {"rope_theta": 50.0, "rope_type": "yarn", "factor": 4.0,
                        "original_max_position_embeddings": 64, "mscale": 1.0,
                        "mscale_all_dim": 1.0}})
MOE = dict(moe_ref.CONFIG_A, **{
    "max_position_embeddings": 256, "rope_theta": 50.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}})
GLM4_SEED = 10


def ramp_report(spec_yarn, dim, base, max_pos):
    """The fraction of each pair's frequency taken from the interpolated side (0..1)."""
    f = yarn.inv_freq(spec_yarn, dim, base, max_pos)
    plain = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    scaled = plain / yarn.factor(spec_yarn, max_pos)
    return [round(float(v), 4) for v in (plain - f) / (plain - scaled)]


def glm4_case(out):
    name = "tiny_glm4_yarn"
    ref.CONFIGS[name], ref.GENERATION[name] = GLM4, ref.GENERATION["tiny_glm4"]
    spec = gm.spec_from_config(GLM4)
    assert spec.yarn is not None and spec.rotary_dim == 8
    weights = gm.init_canonical(spec, GLM4_SEED)
    d = ref.write_model_dir(out, name, weights)
    W64 = {k: v.double() for k, v in weights.items()}
    tensors, rep = ref.model_fixture(spec, W64, GLM4_SEED + 100)
    # the same weights without YaRN give other logits: the fixture tells the two apart
    plain = gm.spec_from_config({k: v for k, v in GLM4.items() if k != "rope_scaling"})
    ids = tensors["input_ids"][1:2].long()
    rep["logit_change_without_yarn"] = float(
        (gm.forward(plain, W64, ids)[0] - gm.forward(spec, W64, ids)[0]).abs().max())
    assert rep["logit_change_without_yarn"] > 1e-2, rep
    rep["interpolated_share"] = ramp_report(spec.yarn, 8, 50.0, 256)
    rep["cos_sin_scale"] = gm.rope_scale(spec)
    st.write(os.path.join(d, "fixture.safetensors"), tensors, metadata={"format": "pt"})
    ref.check_written_fixture(os.path.join(d, "fixture.safetensors"), spec)
    return rep


def lite_case(out):
    spec, W, t, rep = lite_ref.model_case(out, "tiny_lite_yarn", LITE, 9000, 0.0, False)
    assert spec.yarn is not None and spec.rope_scale == 1.0 and spec.score_mscale > 1.2, spec
    # without YaRN (or with its frequencies but not its softmax scale) the logits move
    W64, ids = mm.cast_weights(W, torch.float64), t["input_ids"][1:2].long()
    base = lm.forward(spec, W64, ids).logits
    for name, yarn_cfg in (("logit_change_without_yarn", None),
                           ("logit_change_without_mscale_all_dim",
                            {k: v for k, v in spec.yarn.items() if k != "mscale_all_dim"})):
        other = lm.forward(dataclasses.replace(spec, yarn=yarn_cfg), W64, ids).logits
        rep[name] = float((other - base).abs().max())
        assert rep[name] > 1e-2, rep
    rep["interpolated_share"] = ramp_report(spec.yarn, spec.qk_rope, 50.0, 256)
    rep["score_mscale"] = spec.score_mscale
    rep["lora"] = lora_case(out, spec, W)
    return rep


def moe_case(out):
    """tiny_moe_yarn: moe_reference's case (a) config (4 expert groups, 8 of 16 head dims
    rotated) with YaRN; the same seed search and self-checks as the MoE fixtures."""
    spec = mm.spec_from_config(MOE)
    assert spec.yarn is not None and (spec.rotary_dim, spec.n_group, spec.max_pos) == (8, 4, 256)
    seed, W = moe_ref.choose_seed(spec, 300, [], need_share=False)
    _, t, rep = moe_ref.model_case(out, "tiny_moe_yarn", MOE, W, seed)
    # the same weights without YaRN give other logits: the fixture tells the two apart
    W64, ids = mm.cast_weights(W, torch.float64), t["input_ids"][1:2].long()
    plain = dataclasses.replace(spec, yarn=None)
    rep["logit_change_without_yarn"] = float(
        (mm.forward(plain, W64, ids).logits - mm.forward(spec, W64, ids).logits).abs().max())
    assert rep["logit_change_without_yarn"] > 1e-2, rep
    rep["interpolated_share"] = ramp_report(spec.yarn, spec.rotary_dim, 50.0, 256)
    rep["cos_sin_scale"] = spec.rope_scale
    return rep


# the attention projections, and the shared expert's gate_proj (a PEFT suffix name): glm4 reads a
# glm4_moe_lite adapter's latent projection names only beside an MLP target
LORA_TARGETS = ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "shared_experts.gate_proj"]


def lora_case(out, spec, W, seed=4242):
    """PEFT LoRA (r 4, alpha 8, B nonzero) on LORA_TARGETS of tiny_lite_yarn; the
    mean next-token loss of two rows (labels -100 on the second's first 3) and its gradients,
    fp64, in the step / micro-batch names of the other LoRA fixtures."""
    g = torch.Generator().manual_seed(seed)
    r, alpha = 4, 8
    init = {}
    for module in lm.lora_module_names(spec):
        if not any(module == t or module.endswith("." + t) for t in LORA_TARGETS):
            continue
        rows, cols = W[module + ".weight"].shape
        init[mm.peft_key(module, "A")] = (torch.rand(r, cols, generator=g) * 2 - 1) / cols ** 0.5
        init[mm.peft_key(module, "B")] = torch.randn(rows, r, generator=g) * 0.02
    params = {k: v.double().clone().requires_grad_(True) for k, v in sorted(init.items())}
    ids = torch.randint(1, lite_ref.TOKEN_HI, (2, lite_ref.FIX_T), generator=g)
    labels = ids.clone()
    labels[1, :3] = -100
    logits = lm.forward(spec, mm.cast_weights(W, torch.float64), ids, None,
                        mm.lora_from_tensors(params, alpha / r)).logits
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, spec.vocab), labels[:, 1:].reshape(-1),
                           ignore_index=-100)
    loss.backward()
    t = {"step0.micro0.input_ids": ids.to(torch.int32),
         "step0.micro0.labels": labels.to(torch.int32),
         "step0.micro0.lengths": torch.tensor([lite_ref.FIX_T] * 2, dtype=torch.int32),
         "losses": torch.tensor([float(loss)], dtype=torch.float32)}
    for k, p in params.items():
        t["grad0." + k] = p.grad.float()
    d = os.path.join(out, "lora_lite_yarn")
    os.makedirs(d, exist_ok=True)
    lite_ref.write_json(os.path.join(d, "adapter_config.json"), {
        "base_model_name_or_path": "tiny_lite_yarn", "bias": "none", "fan_in_fan_out": False,
        "inference_mode": True, "lora_alpha": alpha, "lora_dropout": 0.0, "peft_type": "LORA",
        "r": r, "target_modules": LORA_TARGETS, "task_type": "CAUSAL_LM", "use_dora": False,
        "use_rslora": False})
    lite_ref.write_checked(os.path.join(d, "adapter_model.safetensors"), init, {"format": "pt"})
    lite_ref.write_checked(os.path.join(d, "fixture.safetensors"), t, {"format": "pt"})
    return {"loss": float(loss), "lora_tensors": len(init),
            "grad_absmax": max(float(p.grad.abs().max()) for p in params.values())}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="tests/data/yarn", help="directory for the fixtures")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    report = {"tiny_glm4_yarn": glm4_case(args.out), "tiny_lite_yarn": lite_case(args.out),
              "tiny_moe_yarn": moe_case(args.out)}
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
