// Reading a JSON file with errors that name it: config.json, adapter configs, shard indexes.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>

namespace glm4 {

// The parsed file. Throws glm4::Error "PATH: cannot open..." or "PATH: invalid JSON at byte N:
// ...".
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace glm4
