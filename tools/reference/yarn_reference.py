#!/usr/bin/python3
"""Writes the YaRN fixtures under tests/data/yarn/: a tiny glm4 (interleaved partial RoPE,
transformers 4 "rope_scaling", truncate false, cos/sin scaled by mscale(4)) and a tiny
glm4_moe_lite (rotate-half, transformers 5 "rope_parameters", mscale = mscale_all_dim = 1, so the
softmax scale gains mscale(4, 1)^2), each with factor 4 over an original context of 64 at
rope_theta 50 so that the ramp mixes several pairs; logits, hidden states and greedy ids from
the fp64 oracles of reference.py and moe_lite_reference.py.
Usage: /usr/bin/python3 tools/reference/yarn_reference.py [--out tests/data/yarn]"""

import argparse
import json
import os
import sys

import torch

import glm_model as gm
import moe_lite_reference as lite_ref
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
    spec, _, _, rep = lite_ref.model_case(out, "tiny_lite_yarn", LITE, 9000, 0.0, False)
    assert spec.yarn is not None and spec.rope_scale == 1.0 and spec.score_mscale > 1.2, spec
    rep["interpolated_share"] = ramp_report(spec.yarn, spec.qk_rope, 50.0, 256)
    rep["score_mscale"] = spec.score_mscale
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="tests/data/yarn", help="directory for the fixtures")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    report = {"tiny_glm4_yarn": glm4_case(args.out), "tiny_lite_yarn": lite_case(args.out)}
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
