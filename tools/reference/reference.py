#!/usr/bin/python3
"""Writes the committed reference fixtures: tiny GLM-4 family checkpoints in the real Hugging
Face layouts, their logits / hidden states / greedy continuations, and a LoRA training run.
Usage: /usr/bin/python3 tools/reference/reference.py --out tests/data"""

import argparse
import json
import os
import sys

import torch

import glm_model as gm
import lora_ref
import sensitivity
import st

VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 512, 64, 160, 2, 4, 2, 16
PAD, EOS = 0, [509, 510, 511]
FIX_T, FIX_LENGTHS, PROMPT_LEN, GREEDY_STEPS = 160, [131, 160], 7, 40
TOKEN_HI = 509  # fixture tokens are drawn from 1..508: never pad, never eos
SENSITIVITY = 5e-4  # every mutation must move some logit by more than this

CONFIGS = {
    "tiny_glm4": {
        "architectures": ["Glm4ForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": EOS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 1024,
        "model_type": "glm4",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": PAD,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.51.3",
        "use_cache": True,
        "vocab_size": VOCAB,
    },
    "tiny_glm": {
        "architectures": ["GlmForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": EOS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 1024,
        "model_type": "glm",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": PAD,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1.5625e-07,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.46.0",
        "use_cache": True,
        "vocab_size": VOCAB,
    },
    "tiny_chatglm": {
        "_name_or_path": "tiny_chatglm",
        "add_bias_linear": False,
        "add_qkv_bias": True,
        "apply_query_key_layer_scaling": True,
        "apply_residual_connection_post_layernorm": False,
        "architectures": ["ChatGLMModel"],
        "attention_dropout": 0.0,
        "attention_softmax_in_fp32": True,
        "auto_map": {
            "AutoConfig": "configuration_chatglm.ChatGLMConfig",
            "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
            "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration",
            "AutoModelForSeq2SeqLM": "modeling_chatglm.ChatGLMForConditionalGeneration",
            "AutoModelForSequenceClassification":
                "modeling_chatglm.ChatGLMForSequenceClassification",
        },
        "bias_dropout_fusion": True,
        "eos_token_id": EOS,
        "ffn_hidden_size": INTER,
        "fp32_residual_connection": False,
        "hidden_dropout": 0.0,
        "hidden_size": HIDDEN,
        "kv_channels": HEAD_DIM,
        "layernorm_epsilon": 1.5625e-07,
        "model_type": "chatglm",
        "multi_query_attention": True,
        "multi_query_group_num": KV_HEADS,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_layers": LAYERS,
        "original_rope": True,
        "pad_token_id": PAD,
        "padded_vocab_size": VOCAB,
        "post_layer_norm": True,
        "rmsnorm": True,
        "rope_ratio": 500,
        "seq_length": 1024,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.44.0",
        "use_cache": True,
    },
}
CONFIGS["tiny_glm4_bf16"] = dict(CONFIGS["tiny_glm4"], torch_dtype="bfloat16")

GENERATION = {
    "tiny_glm4": {"_from_model_config": True, "do_sample": True, "eos_token_id": EOS,
                  "pad_token_id": PAD, "temperature": 0.6, "top_p": 0.8,
                  "transformers_version": "4.51.3"},
    "tiny_glm": {"do_sample": True, "eos_token_id": EOS, "max_length": 1024,
                 "pad_token_id": PAD, "temperature": 0.8, "top_p": 0.8,
                 "transformers_version": "4.46.0"},
    "tiny_chatglm": {"do_sample": True, "eos_token_id": EOS, "max_length": 1024,
                     "pad_token_id": PAD, "temperature": 0.8, "top_p": 0.8,
                     "transformers_version": "4.44.0"},
}
GENERATION["tiny_glm4_bf16"] = GENERATION["tiny_glm4"]
SEEDS = {"tiny_glm4": 4, "tiny_glm": 5, "tiny_chatglm": 6}


def write_json(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_model_dir(out, name, weights):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "config.json"), CONFIGS[name])
    write_json(os.path.join(d, "generation_config.json"), GENERATION[name])
    st.write(os.path.join(d, "model.safetensors"), weights, metadata={"format": "pt"})
    back, _ = st.read(os.path.join(d, "model.safetensors"))
    assert sorted(back) == sorted(weights)
    for k in weights:
        assert back[k].dtype == weights[k].dtype and torch.equal(back[k], weights[k]), k
    return d


def fixture_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((len(FIX_LENGTHS), FIX_T), PAD, dtype=torch.int64)
    for b, n in enumerate(FIX_LENGTHS):
        ids[b, :n] = torch.randint(1, TOKEN_HI, (n,), generator=g)
    return ids, g


def greedy(spec, W, prompt):
    """GREEDY_STEPS argmax tokens by full recomputation; also the smallest top-1/top-2 gap."""
    seq = prompt.clone()
    out, gap = [], float("inf")
    for _ in range(GREEDY_STEPS):
        logits = gm.forward(spec, W, seq[None])[0][0, -1]
        top = torch.topk(logits, 2)
        gap = min(gap, float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        out.append(nxt)
        seq = torch.cat([seq, torch.tensor([nxt])])
    return torch.tensor(out), gap


def model_fixture(spec, W, seed):
    """W: checkpoint tensors already in fp64. Returns (tensors, report dict)."""
    ids, g = fixture_inputs(seed)
    B, T = ids.shape
    logits = torch.zeros(B, T, spec.vocab, dtype=torch.float64)
    hidden = [torch.zeros(B, T, spec.hidden, dtype=torch.float64) for _ in range(spec.layers + 1)]
    for b, n in enumerate(FIX_LENGTHS):
        lg, hs, fin = gm.forward(spec, W, ids[b : b + 1, :n])  # each sequence alone, unpadded
        logits[b, :n] = lg[0]
        for i, h in enumerate(hs + [fin]):
            hidden[i][b, :n] = h[0]
    # self-check: the padded batch with a key mask gives the same values at valid positions
    lg_b, hs_b, fin_b = gm.forward(spec, W, ids, torch.tensor(FIX_LENGTHS))
    for b, n in enumerate(FIX_LENGTHS):
        assert torch.allclose(lg_b[b, :n], logits[b, :n], rtol=0, atol=1e-11), "padded batch"
        for i, h in enumerate(hs_b + [fin_b]):
            assert torch.allclose(h[b, :n], hidden[i][b, :n], rtol=0, atol=1e-11)
    # how far a plain fp32 evaluation lands from this fp64 reference (a tolerance hint)
    lg32 = gm.forward(spec, {k: v.float() for k, v in W.items()}, ids[1:2])[0]
    fp32_dev = float((lg32.double() - logits[1:2]).abs().max())
    prompt = torch.randint(1, TOKEN_HI, (PROMPT_LEN,), generator=g)
    gen, gap = greedy(spec, W, prompt)
    tensors = {
        "input_ids": ids.to(torch.int32),
        "lengths": torch.tensor(FIX_LENGTHS, dtype=torch.int32),
        "logits": logits.float(),
        "hidden.final": hidden[-1].float(),
        "greedy_prompt": prompt.to(torch.int32),
        "greedy_ids": gen.to(torch.int32),
    }
    for i in range(spec.layers):
        tensors[f"hidden.{i}"] = hidden[i].float()
    return tensors, {"greedy_min_gap": gap, "logit_absmax": float(logits.abs().max()),
                     "fp32_vs_fp64_logits_max_abs": fp32_dev}


def check_written_fixture(path, spec, extra=()):
    """Read the file back and check the published names (plus `extra` [B, T, V] logits),
    dtypes and shapes."""
    t, _ = st.read(path)
    B, T, V, h = len(FIX_LENGTHS), FIX_T, spec.vocab, spec.hidden
    want = {"input_ids": (torch.int32, [B, T]), "lengths": (torch.int32, [B]),
            "logits": (torch.float32, [B, T, V]), "hidden.final": (torch.float32, [B, T, h]),
            "greedy_prompt": (torch.int32, [PROMPT_LEN]),
            "greedy_ids": (torch.int32, [GREEDY_STEPS])}
    want.update({f"hidden.{i}": (torch.float32, [B, T, h]) for i in range(spec.layers)})
    want.update({name: (torch.float32, [B, T, V]) for name in extra})
    assert sorted(t) == sorted(want), sorted(t)
    for k, (dtype, shape) in want.items():
        assert t[k].dtype == dtype and list(t[k].shape) == shape, k
    for b, n in enumerate(FIX_LENGTHS):
        assert int((t["input_ids"][b, n:] != PAD).sum()) == 0
        assert int((t["input_ids"][b, :n] == PAD).sum()) == 0
        assert float(t["logits"][b, n:].abs().sum()) == 0.0


def check_rope_scalar(spec):
    """Both vectorised RoPE forms against a scalar loop over pairs (x[2i], x[2i+1])."""
    T, D = 9, spec.head_dim
    x = torch.randn(1, 1, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    angles = gm.rope_angles(spec, T)
    ref = x.clone()
    for p in range(T):
        for i in range(spec.rotary_dim // 2):
            a = float(angles[p, i])
            x0, x1 = float(x[0, 0, p, 2 * i]), float(x[0, 0, p, 2 * i + 1])
            c = torch.tensor(a, dtype=torch.float32).cos()
            s = torch.tensor(a, dtype=torch.float32).sin()
            ref[0, 0, p, 2 * i] = x0 * float(c) - x1 * float(s)
            ref[0, 0, p, 2 * i + 1] = x1 * float(c) + x0 * float(s)
    assert torch.allclose(gm.rope_hf(x, angles), ref, rtol=0, atol=1e-14)
    assert torch.allclose(gm.rope_chatglm(x, angles), ref, rtol=0, atol=1e-14)


def check_chatglm_matches_glm(spec_c, Wc64, canonical64):
    """The ChatGLM forward on fused weights equals the HF-layout forward on the unfused ones
    when the HF config carries the same base and rotary dims (two independent code paths)."""
    spec_h = gm.Spec(**{**spec_c.__dict__, "family": "glm"})
    ids, _ = fixture_inputs(99)
    a = gm.forward(spec_c, Wc64, ids[:1, :40])[0]
    b = gm.forward(spec_h, canonical64, ids[:1, :40])[0]
    assert torch.allclose(a, b, rtol=0, atol=1e-12), float((a - b).abs().max())


def check_lora_zero(spec, W64, dtype):
    W64 = {k: v.to(dtype) for k, v in W64.items()}
    ids, _ = fixture_inputs(3)
    g = torch.Generator().manual_seed(11)
    init = lora_ref.init_adapter(spec, W64, g)
    modules = {}
    for k, t in init.items():
        module = k[len("base_model.model."):].rsplit(".lora_", 1)[0]
        modules.setdefault(module, [None, None])
        modules[module][0 if ".lora_A." in k else 1] = \
            t.to(dtype) if ".lora_A." in k else torch.zeros_like(t, dtype=dtype)
    lora = {"scale": 2.0, "modules": modules}
    base = gm.forward(spec, W64, ids, torch.tensor(FIX_LENGTHS))[0]
    with_lora = gm.forward(spec, W64, ids, torch.tensor(FIX_LENGTHS), lora)[0]
    assert torch.equal(base, with_lora), "LoRA with B = 0 must give the base logits exactly"


def lora_fixture(out, spec, W32):
    g = torch.Generator().manual_seed(lora_ref.HP["seed"])
    init = lora_ref.init_adapter(spec, W32, g)
    data = lora_ref.make_data(g)
    lora_ref.check_accumulation(spec, W32, init, data[0])
    r64 = lora_ref.train(spec, W32, init, data, torch.float64)
    r32 = lora_ref.train(spec, W32, init, data, torch.float32)
    tensors = {
        "losses": torch.tensor(r64["losses"], dtype=torch.float32),
        "grad_norms": torch.tensor(r64["grad_norms"], dtype=torch.float32),
    }
    for k in init:
        tensors["init." + k] = init[k].float()
        tensors["final." + k] = r64["final"][k].float()
        tensors["grad0." + k] = r64["grad0"][k].float()
    # The logits of the base with the final adapter (as saved, fp32) on step 0's first batch:
    # what a PEFT adapter file must reproduce when loaded.
    ids0, _, lengths0 = data[0][0]
    final = {k: r64["final"][k].float().double() for k in init}
    modules = {}
    for k in sorted(final):
        module = k[len("base_model.model."):].rsplit(".lora_", 1)[0]
        modules.setdefault(module, [None, None])[0 if ".lora_A." in k else 1] = final[k]
    lora = {"scale": lora_ref.HP["lora_alpha"] / lora_ref.HP["r"], "modules": modules}
    W64 = {k: v.double() for k, v in W32.items()}
    tensors["final_logits"] = gm.forward(spec, W64, ids0, lengths0, lora)[0].float()
    # The same run on the base rounded to bf16: in fp64 (the reference) and as PyTorch runs it
    # in bf16 with fp32 adapters (the yardstick for our bf16 compute).
    Wbf = {k: v.to(torch.bfloat16).float() for k, v in W32.items()}
    r64_bf = lora_ref.train(spec, Wbf, init, data, torch.float64)
    r_torch_bf = lora_ref.train(spec, Wbf, init, data, torch.float32, base_dtype=torch.bfloat16)
    tensors["bf16_base.losses_fp64"] = torch.tensor(r64_bf["losses"], dtype=torch.float32)
    tensors["bf16_base.losses_torch_bf16"] = torch.tensor(r_torch_bf["losses"], dtype=torch.float32)
    for s, micro in enumerate(data):
        for m, (ids, labels, lengths) in enumerate(micro):
            tensors[f"step{s}.micro{m}.input_ids"] = ids.to(torch.int32)
            tensors[f"step{s}.micro{m}.labels"] = labels.to(torch.int32)
            tensors[f"step{s}.micro{m}.lengths"] = lengths.to(torch.int32)
    meta = dict(lora_ref.HP, base_model="tiny_glm4", scale=lora_ref.HP["lora_alpha"] /
                lora_ref.HP["r"], loss="sum of next-token CE over the step's targets / "
                "target count of the step (both micro-batches)", reference_dtype="float64")
    d = os.path.join(out, "lora_train_glm4")
    os.makedirs(d, exist_ok=True)
    st.write(os.path.join(d, "fixture.safetensors"), tensors,
             metadata={"format": "pt", "meta": json.dumps(meta, sort_keys=True)})
    drift = max(float((r64["final"][k] - r32["final"][k].double()).abs().max()) for k in init)
    return {
        "losses": [round(x, 6) for x in r64["losses"]],
        "grad_norms": [round(x, 6) for x in r64["grad_norms"]],
        "clipped_steps": [s for s, n in enumerate(r64["grad_norms"]) if n > 1.0],
        "fp32_vs_fp64_final_max_abs": drift,
        "fp32_vs_fp64_loss_max_abs": max(abs(a - b) for a, b in zip(r64["losses"],
                                                                     r32["losses"])),
        "bf16_base_torch_bf16_vs_fp64_loss_max_abs": max(
            abs(a - b) for a, b in zip(r64_bf["losses"], r_torch_bf["losses"])),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="directory for the fixtures (tests/data)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    report = {}
    for name in ("tiny_glm4", "tiny_glm", "tiny_chatglm"):
        spec = gm.spec_from_config(CONFIGS[name])
        # rotary over half of each head (int(16 * 0.5); ChatGLM: kv_channels / 2) and
        # ChatGLM's base 10000 * rope_ratio
        assert spec.rotary_dim == HEAD_DIM // 2 and spec.head_dim == HEAD_DIM, spec
        assert spec.rope_base == (5e6 if name == "tiny_chatglm" else 1e4), spec
        check_rope_scalar(spec)
        canonical = gm.init_canonical(gm.spec_from_config(
            dict(CONFIGS["tiny_glm4"], model_type="glm4" if name == "tiny_glm4" else "glm")),
            SEEDS[name])
        weights = gm.canonical_to_chatglm(spec, canonical) if name == "tiny_chatglm" \
            else canonical
        d = write_model_dir(args.out, name, weights)
        W64 = {k: v.double() for k, v in weights.items()}
        if name == "tiny_chatglm":
            check_chatglm_matches_glm(spec, W64, {k: v.double() for k, v in canonical.items()})
        tensors, rep = model_fixture(spec, W64, SEEDS[name] + 100)
        st.write(os.path.join(d, "fixture.safetensors"), tensors, metadata={"format": "pt"})
        check_written_fixture(os.path.join(d, "fixture.safetensors"), spec)
        rep["mutation_logit_change"] = sensitivity.check(
            spec, W64, tensors["input_ids"][1:2].long(), SENSITIVITY)
        report[name] = rep
        if name == "tiny_glm4":
            for dtype in (torch.float64, torch.float32):
                check_lora_zero(spec, W64, dtype)
            bf16 = {k: v.to(torch.bfloat16) for k, v in weights.items()}
            d16 = write_model_dir(args.out, "tiny_glm4_bf16", bf16)
            tensors, rep = model_fixture(spec, {k: v.double() for k, v in bf16.items()},
                                         SEEDS[name] + 100)
            # What PyTorch computes in bf16 (transformers' dtype rules), each row alone: the
            # yardstick for our bf16 compute against the fp64 logits above.
            ids16 = tensors["input_ids"].long()
            torch_bf16 = torch.zeros_like(tensors["logits"])
            for b, n in enumerate(FIX_LENGTHS):
                torch_bf16[b, :n] = gm.forward(spec, bf16, ids16[b : b + 1, :n])[0][0].float()
            tensors["logits_torch_bf16"] = torch_bf16
            rep["torch_bf16_vs_fp64_logits_max_abs"] = float(
                max((torch_bf16[b, :n].double() - tensors["logits"][b, :n].double()).abs().max()
                    for b, n in enumerate(FIX_LENGTHS)))
            st.write(os.path.join(d16, "fixture.safetensors"), tensors,
                     metadata={"format": "pt"})
            check_written_fixture(os.path.join(d16, "fixture.safetensors"), spec,
                                  extra=["logits_torch_bf16"])
            report["tiny_glm4_bf16"] = rep
            report["lora_train_glm4"] = lora_fixture(args.out, spec, weights)
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
