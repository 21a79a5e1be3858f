// Reading a tiktoken rank file ("<base64 bytes> <rank>" per line): the token bytes indexed by
// rank. Shared by the tiktoken tokenizer and the GGUF vocabulary export.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glm4 {

// tokens[rank] = the bytes of that rank; an empty optional for a rank the file skips. Throws
// glm4::Error naming the file and line for a malformed line, a repeated or absurd rank.
std::vector<std::optional<std::string>> read_tiktoken_ranks(const std::filesystem::path& file);

// True if `line` has the form "<base64> <decimal rank>".
bool is_tiktoken_rank_line(std::string_view line);

}  // namespace glm4
