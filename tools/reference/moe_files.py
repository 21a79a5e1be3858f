"""The files of the MoE fixtures, written as their real producers write them: a Hugging Face model
directory (per-expert keys, MTP layer kept), an mlx-lm conversion (stacked experts), JSON, and
safetensors read back and compared after writing."""

import json
import os

import torch

import glm4_moe_model as mm
import st


def write_json(path, obj, indent=2, sort_keys=True):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, indent=indent, sort_keys=sort_keys) + "\n")
    os.replace(tmp, path)


def write_checked(path, tensors, metadata):
    st.write(path, tensors, metadata=metadata)
    back, meta = st.read(path)
    assert sorted(back) == sorted(tensors), path
    for k, t in tensors.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t), (path, k)
    return meta


def write_hf_dir(d, cfg, generation, weights):
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "config.json"), cfg)
    write_json(os.path.join(d, "generation_config.json"), generation)
    write_checked(os.path.join(d, "model.safetensors"), weights, {"format": "pt"})


def write_mlx_dir(d, cfg, generation, spec, weights):
    """What mlx_lm.convert writes for an unquantised model: sanitize()d weights (stacked experts,
    no MTP layer) in one model.safetensors with {"format": "mlx"}, an index with total_size and
    total_parameters, config.json sorted with indent 4, generation_config.json copied."""
    os.makedirs(d, exist_ok=True)
    stacked = mm.to_mlx_layout(spec, weights)
    write_json(os.path.join(d, "config.json"), cfg, indent=4)
    write_json(os.path.join(d, "generation_config.json"), generation)
    write_checked(os.path.join(d, "model.safetensors"), stacked, {"format": "mlx"})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in stacked.values()),
                          "total_parameters": sum(t.numel() for t in stacked.values())},
             "weight_map": {k: "model.safetensors" for k in sorted(stacked)}}
    write_json(os.path.join(d, "model.safetensors.index.json"), index, indent=4, sort_keys=False)
    return stacked
