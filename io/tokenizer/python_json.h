// JSON text as the chat templates write it: Python's json.dumps(ensure_ascii=False), which is
// what transformers' `tojson` filter calls, keys in their given order.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace glm4 {

using ordered_json = nlohmann::ordered_json;

// json.dumps(value, ensure_ascii=False) with indent < 0 (separators ", " and ": "), or
// json.dumps(value, ensure_ascii=False, indent=indent) (one item a line, separators "," and
// ": "). Floats as nlohmann writes them (Python's repr agrees for the usual values; very large or
// small magnitudes may differ in exponent form).
std::string python_json_dumps(const ordered_json& value, int indent = -1);

// Parses `text` as JSON keeping key order; nullopt-like: a discarded value when it is not JSON.
ordered_json parse_ordered_json(std::string_view text);

}  // namespace glm4
