// Whole-file reads and atomic writes (temporary name in the same directory, then rename) for the
// tokenizer code.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace glm4::tok_io {

std::string read_file(const std::filesystem::path& file);  // throws glm4::Error naming the file
void write_file_atomic(const std::filesystem::path& file, std::string_view data);

}  // namespace glm4::tok_io
