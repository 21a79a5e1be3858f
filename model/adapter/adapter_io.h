// LoRA adapter directories in the two layouts users bring: PEFT (adapter_model.safetensors, A
// [r, in], B [out, r], lora_alpha) and mlx-lm (adapters.safetensors, lora_a [in, r], lora_b
// [r, out], absolute scale). Saving, loading into a model, and converting without the model.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/lora.h"

namespace glm4 {

class Glm4Model;
struct ModelConfig;

struct AdapterInfo {
  // rank, alpha (PEFT meaning: scale = alpha / r, or alpha / sqrt(r) with rsLoRA; an MLX scale s
  // reads as alpha = s * r), dropout, targets (in lora_module_names() order), num_layers (-1 =
  // every layer, else the number of adapted layers).
  LoraConfig lora;
  std::string base_model_name_or_path;  // PEFT base_model_name_or_path, MLX "model"
  std::string format;                   // "peft" | "mlx"
  // The adapted decoder layers, ascending, when not all of them (PEFT layers_to_transform, or the
  // layers an MLX adapter holds); empty = every layer.
  std::vector<int64_t> layers;
  // The scale applied to B A x: exactly the MLX file's scale, or lora.scale() for PEFT.
  double scale = 0;
};

// "peft" or "mlx"; throws naming the flag/argument otherwise.
std::string check_adapter_format(const std::string& format);

// Throws, naming the target, when adapters with these targets cannot be saved in `format` for a
// model of config `c`: query_key_value on a model that is not ChatGLM, separate q/k/v
// adapters on a ChatGLM model in PEFT layout (PEFT adapts its fused q|k|v with one A), or
// glm4_moe_lite's kv_b_proj in MLX layout (mlx-lm splits it into modules its LoRA cannot adapt).
void check_adapter_layout(const ModelConfig& c, const LoraConfig& lora, const std::string& format);

// Writes DIR/adapter_model.safetensors + adapter_config.json (PEFT) or DIR/adapters.safetensors +
// adapter_config.json (MLX), each file atomically, tensors in F32. `lora` gives rank, alpha,
// dropout, rsLoRA and DoRA and must agree with the model's LoRA modules (targets, rank, scale);
// the adapted layers are the ones that carry modules. A weight file of the other layout left in
// DIR by an earlier save is removed. ChatGLM models use PEFT's ChatGLM key names
// (transformer.encoder.layers.N.self_attention.query_key_value ...). Throws for a model without
// adapters, an MLX adapter on layers that are not the last N, or what check_adapter_layout refuses.
void save_adapter(Glm4Model& model, const LoraConfig& lora, const std::filesystem::path& dir,
                  const std::string& format, const std::string& base_model);

// The adapter's settings, from adapter_config.json and the weight file's header. The layout
// comes from the weight file present (adapter_model.safetensors: PEFT, adapters.safetensors:
// MLX). Throws naming the file and field at fault.
AdapterInfo read_adapter_info(const std::filesystem::path& dir);

// Adds the adapter's LoRA modules (rank, scale, dropout, targets and layers from its own config)
// to `model` and fills them. Strict: every tensor must belong to an expected module and have the
// shape the model needs, every expected module must be present; errors name the file and key,
// and a shape or layer mismatch says the adapter was made for another model. Throws when the
// model already has adapters. Returns a warning (else empty) when the adapter's
// base_model_name_or_path names neither `model_dir` nor its last path component.
std::string load_adapter(Glm4Model& model, const std::filesystem::path& dir,
                         const std::filesystem::path& model_dir = {});

// The same reading and checks, but the adapter goes into resident slot `slot` of each adapted
// linear (Linear::resident), beside the live LoRA and the other slots, for per-row adapters at
// inference (ForwardContext::adapter_rows). Throws when the slot is taken; a bad adapter leaves
// the model as it was.
std::string load_resident_adapter(Glm4Model& model, const std::filesystem::path& dir, size_t slot,
                                  const std::filesystem::path& model_dir = {});

// Rewrites the adapter in `in_dir` as `to_format` in `out_dir` (may be the same layout), without
// loading a model. An MLX adapter only says "the last N layers", so converting a PEFT adapter
// with layers_to_transform to MLX needs the base model's layer count, and splitting ChatGLM's
// query_key_value into q/k/v needs its head counts: from `base_model_dir`/config.json, else from
// base_model_name_or_path when that is a local model directory, else it throws saying so. An MLX
// adapter of a ChatGLM model (our model_type field, or a ChatGLM `base_model_dir`) becomes PEFT's
// ChatGLM keys, its q/k/v joined into query_key_value (they must share A). glm4_moe's routed
// experts are stacked per layer in the MLX layout, as deep as `base_model_dir`'s
// n_routed_experts (else the highest expert present), absent experts zero.
void convert_adapter(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                     const std::string& to_format,
                     const std::filesystem::path& base_model_dir = {});

}  // namespace glm4
