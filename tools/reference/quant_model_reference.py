#!/usr/bin/python3
"""The quantized tiny GLM-4 fixture (tests/data/tiny_glm4_q): tiny_glm4's weights rounded to
bf16 and quantized in mlx's layout with quant_reference.py's rules (default 4-bit groups of 64,
per-module overrides: both down_proj at group 32 (160 columns; 8 and 4 bits), o_proj of layer 1
at 3 bits, lm_head false = dense bf16), its logits, hidden states and greedy continuation from
the existing fp64 forward on the exactly dequantized weights, and a QLoRA run (the
lora_train_glm4 run, same adapters and data, on that dequantized base, in fp64).

    /usr/bin/python3 tools/reference/quant_model_reference.py --data tests/data
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

import glm_model as gm
import lora_ref
import quant_reference as qr
import reference as ref
import st

NAME = "tiny_glm4_q"
DEFAULT = {"group_size": 64, "bits": 4}
OVERRIDES = {
    "model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8},
    "model.layers.1.mlp.down_proj": {"group_size": 32, "bits": 4},
    "model.layers.1.self_attn.o_proj": {"group_size": 64, "bits": 3},
    "lm_head": False,
}


def module_format(module):
    o = OVERRIDES.get(module)
    if o is False:
        return None
    return dict(DEFAULT, **(o or {}))


def quantize_checkpoint(weights):
    """(mlx-layout tensors, exactly dequantized fp64 weights under the HF names)."""
    out, deq = {}, {}
    for name, w in weights.items():
        wb = w.to(torch.bfloat16)
        module = name[: -len(".weight")] if name.endswith(".weight") else None
        fmt = module_format(module) if module and w.dim() == 2 else None
        if fmt is None:
            out[name] = wb
            deq[name] = wb.double()
            continue
        bits, group = fmt["bits"], fmt["group_size"]
        w32 = wb.float().numpy()
        codes, scale32, bias32 = qr.quantize(w32, bits, group)
        scales, biases = qr.round_to(scale32, torch.bfloat16), qr.round_to(bias32, torch.bfloat16)
        packed = qr.pack(codes, bits)
        assert np.array_equal(qr.unpack(packed, bits, w32.shape[1]), codes)
        out[module + ".weight"] = packed.view("<u4").reshape(w32.shape[0], -1).copy()
        out[module + ".scales"] = qr.torch_of(scales, torch.bfloat16)
        out[module + ".biases"] = qr.torch_of(biases, torch.bfloat16)
        deq[name] = torch.from_numpy(qr.exact_dequantized(codes, scales, biases, group))
    return out, deq


def qlora_fixture(spec, deq):
    """The lora_train_glm4 run (same seed: same adapters and data) on the dequantized base."""
    W32 = {k: v.float() for k, v in deq.items()}
    assert all(torch.equal(W32[k].double(), deq[k]) for k in deq), "deq must be exact in fp32"
    g = torch.Generator().manual_seed(lora_ref.HP["seed"])
    init = lora_ref.init_adapter(spec, W32, g)
    data = lora_ref.make_data(g)
    r64 = lora_ref.train(spec, W32, init, data, torch.float64)
    tensors = {"losses": torch.tensor(r64["losses"], dtype=torch.float32),
               "grad_norms": torch.tensor(r64["grad_norms"], dtype=torch.float32)}
    for k in init:
        tensors["grad0." + k] = r64["grad0"][k].float()
        tensors["final." + k] = r64["final"][k].float()
    return tensors, data, [round(x, 6) for x in r64["losses"]]


def check_same_data(data, fixture_path):
    """The QLoRA run's batches are the ones committed in lora_train_glm4 (the C++ test reads them
    from there)."""
    t, _ = st.read(fixture_path)
    for s, micro in enumerate(data):
        for m, (ids, labels, lengths) in enumerate(micro):
            p = f"step{s}.micro{m}."
            assert torch.equal(t[p + "input_ids"].long(), ids) and torch.equal(t[p + "labels"].long(), labels)
            assert torch.equal(t[p + "lengths"].long(), lengths)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="tests/data")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base_cfg = ref.CONFIGS["tiny_glm4"]
    weights, _ = st.read(os.path.join(args.data, "tiny_glm4", "model.safetensors"))
    spec = gm.spec_from_config(base_cfg)
    mlx, deq = quantize_checkpoint(weights)

    d = os.path.join(args.data, NAME)
    os.makedirs(d, exist_ok=True)
    quant = dict(DEFAULT, mode="affine", **OVERRIDES)
    config = dict(base_cfg, torch_dtype="bfloat16", quantization=quant, quantization_config=quant)
    ref.write_json(os.path.join(d, "config.json"), config)
    ref.write_json(os.path.join(d, "generation_config.json"), ref.GENERATION["tiny_glm4"])
    st.write(os.path.join(d, "model.safetensors"), mlx, metadata={"format": "mlx"})

    tensors, report = ref.model_fixture(spec, deq, ref.SEEDS["tiny_glm4"] + 100)
    st.write(os.path.join(d, "fixture.safetensors"), tensors, metadata={"format": "pt"})
    ref.check_written_fixture(os.path.join(d, "fixture.safetensors"), spec)

    qtensors, data, losses = qlora_fixture(spec, deq)
    check_same_data(data, os.path.join(args.data, "lora_train_glm4", "fixture.safetensors"))
    meta = dict(lora_ref.HP, base_model=NAME, reference_dtype="float64",
                base="tiny_glm4_q dequantized exactly (scale * code + bias in fp64)")
    st.write(os.path.join(d, "qlora.safetensors"), qtensors,
             metadata={"format": "pt", "meta": json.dumps(meta, sort_keys=True)})
    report["qlora_losses"] = losses
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
