// Python's json.dumps layout over nlohmann's ordered JSON values.
#include "io/tokenizer/python_json.h"

namespace glm4 {
namespace {

void write(std::string& out, const ordered_json& v, int indent, int depth) {
  const auto newline = [&](int level) {
    out += '\n';
    out.append(size_t(indent * level), ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  if (v.is_object()) {
    if (v.empty()) return void(out += "{}");
    out += '{';
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) out += item_sep;
      first = false;
      if (indent >= 0) newline(depth + 1);
      out += ordered_json(key).dump();
      out += ": ";
      write(out, value, indent, depth + 1);
    }
    if (indent >= 0) newline(depth);
    out += '}';
  } else if (v.is_array()) {
    if (v.empty()) return void(out += "[]");
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += item_sep;
      if (indent >= 0) newline(depth + 1);
      write(out, v[i], indent, depth + 1);
    }
    if (indent >= 0) newline(depth);
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace

std::string python_json_dumps(const ordered_json& value, int indent) {
  std::string out;
  write(out, value, indent, 0);
  return out;
}

ordered_json parse_ordered_json(std::string_view text) {
  return ordered_json::parse(text, nullptr, false);
}

}  // namespace glm4
