// The one way glm4 prints JSON: command output (evaluate, perplexity, classify, generate --json),
// metrics.jsonl, the server's event and request log lines, and its response bodies.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace glm4 {

// `j` as one line (no newline): compact, keys sorted (nlohmann::json's order), UTF-8 as it is,
// invalid bytes as U+FFFD instead of an exception, floats in their shortest form that reads back
// to the same double, or to the same float for a number that is exactly a float (0.6f prints
// 0.6); NaN and infinities as null.
std::string json_line(const nlohmann::json& j);

}  // namespace glm4
