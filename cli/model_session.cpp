#include "cli/model_session.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/check.h"
#include "cli/cli_common.h"
#include "model/adapter/adapter_io.h"

namespace glm4::cli {

ModelSession open_session(const std::string& model_dir, const std::string& adapter_dir,
                          const std::string& compute, FileResidency memory) {
  ModelSession s;
  s.model_dir = model_dir;
  s.model = with_flag("--model", model_dir, [&] { return load_model(model_dir, memory); });
  if (!adapter_dir.empty()) {
    std::string warning = with_flag("--adapter", adapter_dir,
                                    [&] { return load_adapter(*s.model, adapter_dir, model_dir); });
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  }
  s.compute = apply_compute_flag(*s.model, compute);
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(model_dir) / "tokenizer.json") ||
      fs::exists(fs::path(model_dir) / "tokenizer.model")) {
    s.tokenizer = with_flag("--model", model_dir, [&] { return load_tokenizer(model_dir); });
    s.format = detect_chat_format(*s.tokenizer, model_dir);
  }
  return s;
}

Tokenizer& ModelSession::require_tokenizer(const char* why) const {
  GLM4_CHECK(tokenizer, "--model ", model_dir,
             ": no tokenizer.json or tokenizer.model, needed for ", why,
             " (pass token ids with --tokens instead)");
  return *tokenizer;
}

std::vector<int32_t> ModelSession::encode_prompt(const std::string& text) const {
  Tokenizer& tok = require_tokenizer("--prompt");
  std::vector<int32_t> ids = prompt_prefix_ids(tok);
  std::vector<int32_t> body = tok.encode(text, true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int32_t> ModelSession::render(const std::vector<ChatMessage>& messages,
                                          const ChatOptions& options) const {
  return render_chat(require_tokenizer("--chat"), format, messages, true, options).ids;
}

std::vector<int32_t> ModelSession::stop_ids(bool chat) const {
  std::vector<int32_t> ids = load_eos_ids(model_dir);
  if (chat && tokenizer)
    for (int32_t id : glm4::stop_ids(*tokenizer, format))
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

}  // namespace glm4::cli
