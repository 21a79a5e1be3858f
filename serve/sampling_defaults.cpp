// The server's sampling defaults from a model's generation_config.json.
#include "serve/sampling_defaults.h"

#include <cmath>

#include "base/check.h"
#include "io/file/json_file.h"

namespace glm4::serve {

namespace {
// The field as a number in [lo, hi], or nullptr when absent or null.
const nlohmann::json* number_field(const nlohmann::json& j, const char* key, double lo, double hi,
                                   const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  GLM4_CHECK(it->is_number(), file, ": \"", key, "\" must be a number, got ", it->dump());
  const double x = it->get<double>();
  GLM4_CHECK(std::isfinite(x) && x >= lo && x <= hi, file, ": \"", key, "\" = ", it->dump(),
             " is out of range [", lo, ", ", hi, "]");
  return &*it;
}
}  // namespace

SamplingDefaults load_sampling_defaults(const std::filesystem::path& model_dir) {
  SamplingDefaults d;
  d.sampling.temperature = 1;  // OpenAI's
  d.sampling.top_p = 1;
  d.source = "OpenAI defaults";
  const std::filesystem::path path = model_dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return d;
  const nlohmann::json j = read_json_file(path);
  const std::string file = path.string();
  GLM4_CHECK(j.is_object(), file, ": expected a JSON object");
  SamplerConfig& s = d.sampling;
  bool any = false;
  if (auto* v = number_field(j, "temperature", 0, 2, file)) {
    s.temperature = v->get<float>();
    any = true;
  }
  if (auto* v = number_field(j, "top_p", 1e-6, 1, file)) {
    s.top_p = v->get<float>();
    any = true;
  }
  if (auto* v = number_field(j, "top_k", 0, 1 << 30, file)) {
    GLM4_CHECK(v->is_number_integer(), file, ": \"top_k\" must be an integer, got ", v->dump());
    s.top_k = v->get<int>();
    any = true;
  }
  if (auto* v = number_field(j, "min_p", 0, 1, file)) {
    s.min_p = v->get<float>();
    any = true;
  }
  if (auto* v = number_field(j, "repetition_penalty", 1e-6, 100, file)) {
    s.repeat_penalty = v->get<float>();
    any = true;
  }
  if (any) d.source = "generation_config.json";
  return d;
}

}  // namespace glm4::serve
