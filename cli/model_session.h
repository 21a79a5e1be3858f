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

// What a command needs --model's tokenizer for ("chat", "--prompt"), and the flag that does
// without one ("--tokens"), if any.
struct TokenizerNeed {
  const char* what = nullptr;  // null: the command runs without a tokenizer
  const char* instead = nullptr;
};

struct ModelSession {
  std::string model_dir, adapter_dir;
  std::unique_ptr<Glm4Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has no tokenizer files
  ChatFormat format = ChatFormat::Glm4;
  ComputeChoice compute;  // what the frozen products run in (--compute), as model->compute

  Tokenizer& require_tokenizer(TokenizerNeed need) const;
  // [gMASK]<sop> + encode(text) (what Hugging Face's encode adds for GLM models).
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  std::vector<int32_t> render(const std::vector<ChatMessage>& messages,
                              const ChatOptions& options = {}) const;  // with generation prompt
  std::vector<int32_t> stop_ids(bool chat) const;
};

// What is quick to read and check, before any weights: --model's tokenizer (when the directory
// has its files; one `need` asks for must be there) and chat format, and --adapter's config and
// weight file header. A command with input files to read reads them next (they may need the
// tokenizer), so that a wrong flag, file or record fails in a moment rather than after the
// minutes a large model takes to load.
ModelSession open_without_weights(const std::string& model_dir, const std::string& adapter_dir,
                                  TokenizerNeed need = {});
// Then the weights, held as `memory` says (load_model; model->loaded reports what was used), with
// --adapter applied live (a warning goes to stderr), and the compute choice from --compute
// (auto | f32 | bf16).
void load_weights(ModelSession& s, const std::string& compute = "auto",
                  FileResidency memory = FileResidency::kAuto);
// Both.
ModelSession open_session(const std::string& model_dir, const std::string& adapter_dir,
                          const std::string& compute = "auto",
                          FileResidency memory = FileResidency::kAuto, TokenizerNeed need = {});

}  // namespace glm4::cli
