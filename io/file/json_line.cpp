// JSON text in glm4's one printing style (see json_line.h).
#include "io/file/json_line.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace glm4 {

namespace {

// A number that is exactly a float (a setting or loss glm4 keeps in single precision) as the
// double of that float's shortest form: 0.6f prints 0.6, not 0.6000000238418579.
void shorten_floats(nlohmann::json& j) {
  if (j.is_structured()) {
    for (nlohmann::json& v : j) shorten_floats(v);
    return;
  }
  if (!j.is_number_float()) return;
  const double d = j.get<double>();
  const float f = static_cast<float>(d);
  if (!std::isfinite(d) || static_cast<double>(f) != d) return;
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text) - 1, f).ptr;
  *end = '\0';
  j = std::strtod(text, nullptr);
}

bool has_float(const nlohmann::json& j) {
  if (j.is_number_float()) return true;
  if (!j.is_structured()) return false;
  for (const nlohmann::json& v : j)
    if (has_float(v)) return true;
  return false;
}

}  // namespace

std::string json_line(const nlohmann::json& j) {
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  if (!has_float(j)) return j.dump(-1, ' ', false, kReplace);
  nlohmann::json copy = j;
  shorten_floats(copy);
  return copy.dump(-1, ' ', false, kReplace);
}

}  // namespace glm4
