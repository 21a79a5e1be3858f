// What generate, chat, fuse and perplexity share: a model (with an adapter applied live), its
// tokenizer when the directory has one, and the prompt/stop conventions of its family.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"
#include "model/compute_choice.h"
#include "model/glm4_model.h"

namespace glm4::cli {

struct ModelSession {
  std::string model_dir;
  std::unique_ptr<Glm4Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has no tokenizer files
  ChatFormat format = ChatFormat::Glm4;
  ComputeChoice compute;  // what the frozen products run in (--compute), as model->compute

  Tokenizer& require_tokenizer(const char* why) const;
  // [gMASK]<sop> + encode(text) (what Hugging Face's encode adds for GLM models).
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  std::vector<int32_t> render(const std::vector<ChatMessage>& messages,
                              const ChatOptions& options = {}) const;  // with generation prompt
  std::vector<int32_t> stop_ids(bool chat) const;
};

// Loads --model and, when given, applies --adapter live (a warning goes to stderr), and sets the
// model's compute choice from --compute (auto | f32 | bf16).
// The weights are held as `memory` says (load_model; model->loaded reports what was used).
ModelSession open_session(const std::string& model_dir, const std::string& adapter_dir,
                          const std::string& compute = "auto",
                          FileResidency memory = FileResidency::kAuto);

}  // namespace glm4::cli
