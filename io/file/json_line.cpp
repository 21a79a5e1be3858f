// JSON text in glm4's one printing style (see json_line.h).
#include "io/file/json_line.h"

namespace glm4 {

std::string json_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace glm4
