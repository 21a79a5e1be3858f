// The GLM-4 family model: embed_tokens, decoder layers, final norm, lm_head. Fields are named
// after the checkpoint keys (model.embed_tokens, model.layers.N..., model.norm, lm_head).
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/embedding.h"
#include "model/forward_context.h"
#include "model/glm4_decoder_layer.h"
#include "model/lora.h"
#include "model/weights_load.h"

namespace glm4 {

class Glm4Model {
 public:
  explicit Glm4Model(const ModelConfig& config);

  // ids [B * T] -> hidden states after the final norm [B, T, hidden]. With `rows` (B = 1, no
  // tape) each row's keys/values go into its KV cache and it attends to that cache; the caller
  // began and commits the caches. The layers run with ctx.compute set to `compute`.
  Tensor forward_hidden(std::span<const int32_t> ids, const ForwardContext& ctx,
                        CachedRows* rows = nullptr) const;
  Tensor logits(const Tensor& hidden, const ForwardContext& ctx) const;  // [..., vocab]

  // Every tensor, named by its key in a glm4/glm model file.
  void visit(const ParamVisitor& fn);
  // Every linear layer: the decoder layers' q/k/v/o_proj, gate_up_proj, down_proj in order, then
  // lm_head when it is not tied. LoRA, adapter files, merging and the optimizer walk this.
  void visit_linears(const LinearVisitor& fn);
  // The linear layer at a path such as "model.layers.3.mlp.down_proj", or nullptr.
  Linear* find_linear(const std::string& path);
  // Adds PEFT-initialised adapters to the configured modules (DoRA: with m = ||W|| per row);
  // returns how many linears got one. query_key_value (ChatGLM only) gives q/k/v one shared A.
  int64_t add_lora(const LoraConfig& lora, uint64_t seed);
  // Every trainable adapter tensor in visit_linears order, each once (a shared A under the first
  // linear holding it), named "PATH.lora_A", "PATH.lora_B", "PATH.lora_magnitude".
  std::vector<std::pair<std::string, Tensor>> lora_parameters();
  // The output projection [vocab, hidden]: lm_head, or embed_tokens when tied.
  const Param& lm_head_weight() const { return lm_head ? lm_head->weight : embed_tokens.weight; }

  ModelConfig config;
  // How the frozen products of every forward run (--compute: model/compute_choice.h).
  ComputeChoice compute = kF32Compute;
  Embedding embed_tokens;
  std::vector<Glm4DecoderLayer> layers;
  RmsNorm norm;
  std::optional<Linear> lm_head;  // absent when tie_word_embeddings
  WeightsLoad loaded;             // how load_model brought the weights in
};

// Builds the model of DIR/config.json and loads DIR's safetensors (strict name walk). Matrices
// stay views of the files' bytes, held as `residency` says (kAuto: read into 2 MB pages when
// they fit the memory available, else mapped).
std::unique_ptr<Glm4Model> load_model(const std::filesystem::path& dir,
                                      FileResidency residency = FileResidency::kAuto);

}  // namespace glm4
