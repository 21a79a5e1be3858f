#include "cli/model_session.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/check.h"
#include "cli/cli_common.h"
#include "model/adapter/adapter_io.h"

namespace glm4::cli {

ModelSession open_without_weights(const std::string& model_dir, const std::string& adapter_dir,
                                  TokenizerNeed need) {
  ModelSession s;
  s.model_dir = model_dir;
  s.adapter_dir = adapter_dir;
  namespace fs = std::filesystem;
  check_model_dir(model_dir, "--model", true);
  if (fs::exists(fs::path(model_dir) / "tokenizer.json") ||
      fs::exists(fs::path(model_dir) / "tokenizer.model")) {
    s.tokenizer = with_flag("--model", model_dir, [&] { return load_tokenizer(model_dir); });
    s.format = detect_chat_format(*s.tokenizer, model_dir);
  }
  if (need.what) s.require_tokenizer(need);
  if (!adapter_dir.empty())
    with_flag("--adapter", adapter_dir, [&] { read_adapter_info(adapter_dir); });
  return s;
}

void load_weights(ModelSession& s, const std::string& compute, FileResidency memory) {
  s.model = with_flag("--model", s.model_dir, [&] { return load_model(s.model_dir, memory); });
  if (!s.adapter_dir.empty()) {
    std::string warning = with_flag("--adapter", s.adapter_dir, [&] {
      return load_adapter(*s.model, s.adapter_dir, s.model_dir);
    });
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  }
  s.compute = apply_compute_flag(*s.model, compute);
}

ModelSession open_session(const std::string& model_dir, const std::string& adapter_dir,
                          const std::string& compute, FileResidency memory, TokenizerNeed need) {
  ModelSession s = open_without_weights(model_dir, adapter_dir, need);
  load_weights(s, compute, memory);
  return s;
}

Tokenizer& ModelSession::require_tokenizer(TokenizerNeed need) const {
  GLM4_CHECK(tokenizer, "--model ", model_dir,
             ": no tokenizer.json or tokenizer.model, needed for ", need.what,
             need.instead ? std::string(" (pass token ids with ") + need.instead + " instead)"
                          : std::string());
  return *tokenizer;
}

std::vector<int32_t> ModelSession::encode_prompt(const std::string& text) const {
  Tokenizer& tok = require_tokenizer({"--prompt", "--tokens"});
  std::vector<int32_t> ids = prompt_prefix_ids(tok);
  std::vector<int32_t> body = tok.encode(text, true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int32_t> ModelSession::render(const std::vector<ChatMessage>& messages,
                                          const ChatOptions& options) const {
  return render_chat(require_tokenizer({"--chat"}), format, messages, true, options).ids;
}

std::vector<int32_t> ModelSession::stop_ids(bool chat) const {
  std::vector<int32_t> ids = load_eos_ids(model_dir);
  if (chat && tokenizer)
    for (int32_t id : glm4::stop_ids(*tokenizer, format))
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

}  // namespace glm4::cli
