// The GLM-4 pre-tokenizer (the cl100k pattern), hand-coded so that no regex library with \p{..}
// support is needed. It splits text into pieces that BPE then encodes one by one.
#pragma once
#include <functional>
#include <string_view>
#include <vector>

namespace glm4 {

// The pattern as GLM-4 tokenizer files spell it (tiktoken pat_str, tokenizer.json Split regex).
inline constexpr std::string_view kGlm4PretokenizerRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Calls fn for each match of kGlm4PretokenizerRegex in `text`, left to right. The pieces tile the
// text exactly. Ill-formed UTF-8 bytes are kept and classed like punctuation.
void pretokenize_glm4(std::string_view text, const std::function<void(std::string_view)>& fn);

std::vector<std::string_view> pretokenize_glm4(std::string_view text);

}  // namespace glm4
