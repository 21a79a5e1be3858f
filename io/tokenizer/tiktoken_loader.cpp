// Loads a tiktoken rank file (glm-4-9b-chat tokenizer.model): one "<base64 bytes> <rank>" line per
// mergeable token; special tokens follow the ranks, as tokenizer_config.json lists them (or,
// without it, in the order of the official ChatGLM4Tokenizer).
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "io/file/json_file.h"
#include "io/tokenizer/byte_level_tokenizer.h"
#include "io/tokenizer/tiktoken_ranks.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

// glm-4-9b-chat tokenization_chatglm.py: ids len(ranks) + i.
const char* const kGlm4Specials[] = {"<|endoftext|>",
                                     "[MASK]",
                                     "[gMASK]",
                                     "[sMASK]",
                                     "<sop>",
                                     "<eop>",
                                     "<|system|>",
                                     "<|user|>",
                                     "<|assistant|>",
                                     "<|observation|>",
                                     "<|begin_of_image|>",
                                     "<|end_of_image|>",
                                     "<|begin_of_video|>",
                                     "<|end_of_video|>"};

}  // namespace

bool looks_like_tiktoken(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  GLM4_CHECK(in, "cannot open tokenizer file ", file.string());
  std::string line;
  char c;
  while (line.size() < 4096 && in.get(c) && c != '\n') line += c;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return is_tiktoken_rank_line(line);
}

std::unique_ptr<Tokenizer> load_tiktoken(const std::filesystem::path& file) {
  const std::string where = file.string();
  std::vector<std::optional<std::string>> tokens = read_tiktoken_ranks(file);
  GLM4_CHECK(!tokens.empty(), where, ": no ranks found");
  const int32_t n_ranks = int32_t(tokens.size());
  ByteBpe bpe(std::move(tokens), where);
  bpe.derive_merges_from_ranks();
  bpe.set_whole_piece_lookup(true);

  SpecialTokens specials;
  const auto config_path = file.parent_path() / "tokenizer_config.json";
  std::map<int32_t, std::string> from_config;
  if (std::filesystem::exists(config_path)) {
    nlohmann::json config = read_json_file(config_path);
    if (config.contains("added_tokens_decoder")) {
      for (const auto& [key, value] : config["added_tokens_decoder"].items()) {
        GLM4_CHECK(value.is_object() && value.contains("content") && value["content"].is_string(),
                   config_path.string(), ": added_tokens_decoder.", key, " has no content");
        int32_t id = -1;
        try {
          id = std::stoi(key);
        } catch (const std::exception&) {
        }
        GLM4_CHECK(id >= n_ranks, config_path.string(), ": added_tokens_decoder.", key,
                   " must be an id at or after the ", n_ranks, " ranks of ", where);
        from_config[id] = value["content"].get<std::string>();
      }
    }
  }
  if (from_config.empty()) {
    for (size_t i = 0; i < std::size(kGlm4Specials); ++i)
      specials.add(kGlm4Specials[i], n_ranks + int32_t(i), where);
  } else {
    for (const auto& [id, content] : from_config) specials.add(content, id, config_path.string());
  }
  return std::make_unique<ByteLevelTokenizer>(std::move(bpe), std::move(specials), SpecialTokens{},
                                              "tiktoken");
}

}  // namespace glm4
