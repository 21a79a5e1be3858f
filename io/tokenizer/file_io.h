// Whole-file reads for the tokenizer code: errors name the file.
#pragma once
#include <filesystem>
#include <string>

namespace glm4::tok_io {

std::string read_file(const std::filesystem::path& file);  // throws glm4::Error naming the file

}  // namespace glm4::tok_io
