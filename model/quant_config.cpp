// Reading and writing config.json's "quantization" object; every error names the field.
#include "model/quant_config.h"

#include "base/check.h"

namespace glm4 {

using json = nlohmann::json;

namespace {

int int_field(const json& j, const char* key, int fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  GLM4_CHECK(it->is_number_integer(), where, ".", key, " must be an integer, got ", it->dump());
  const int64_t v = it->get<int64_t>();
  GLM4_CHECK(v >= INT32_MIN && v <= INT32_MAX, where, ".", key, " is out of range: ", v);
  return int(v);
}

// group_size, bits and mode of the object `j` at `where`, missing ones from `fallback`.
QuantFormat read_format(const json& j, QuantFormat fallback, const std::string& where) {
  QuantFormat f;
  f.group_size = int_field(j, "group_size", fallback.group_size, where);
  f.bits = int_field(j, "bits", fallback.bits, where);
  if (auto it = j.find("mode"); it != j.end() && !it->is_null()) {
    GLM4_CHECK(it->is_string(), where, ".mode must be a string, got ", it->dump());
    GLM4_CHECK(*it == "affine", where, ".mode is \"", it->get<std::string>(),
               "\": only the affine mode is supported");
  }
  GLM4_CHECK(quant_bits_supported(f.bits), where, ".bits is ", f.bits,
             ": expected 2, 3, 4, 5, 6 or 8");
  GLM4_CHECK(quant_group_supported(f.group_size), where, ".group_size is ", f.group_size,
             ": expected 32, 64 or 128");
  return f;
}

bool is_format_key(const std::string& key) {
  return key == "group_size" || key == "bits" || key == "mode";
}

}  // namespace

const std::optional<QuantFormat>* QuantConfig::override_for(const std::string& module) const {
  auto it = modules.find(module);
  return it == modules.end() ? nullptr : &it->second;
}

QuantConfig parse_quant_config(const json& j, const std::string& source, const std::string& field) {
  const std::string where = source + ": field \"" + field + "\"";
  GLM4_CHECK(j.is_object(), where, " must be an object, got ", j.dump());
  if (auto it = j.find("quant_method"); it != j.end())
    fail(where, " has quant_method ", it->dump(),
         ": only mlx's affine quantization (group_size, bits) is supported");
  QuantConfig q;
  q.format = read_format(j, QuantFormat{}, where);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (is_format_key(it.key())) continue;
    const std::string at = where + "." + it.key();
    if (it->is_boolean()) {
      q.modules[it.key()] = it->get<bool>() ? std::optional<QuantFormat>(q.format) : std::nullopt;
    } else if (it->is_object()) {
      q.modules[it.key()] = read_format(*it, q.format, at);
    } else {
      fail(at, " must be a module override (an object with group_size and bits, or false), got ",
           it->dump());
    }
  }
  return q;
}

json quant_config_json(const QuantConfig& q) {
  json j = json::object();
  j["group_size"] = q.format.group_size;
  j["bits"] = q.format.bits;
  j["mode"] = "affine";
  for (const auto& [module, format] : q.modules) {
    if (format)
      j[module] = {{"group_size", format->group_size}, {"bits", format->bits}};
    else
      j[module] = false;
  }
  return j;
}

}  // namespace glm4
