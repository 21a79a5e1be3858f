#include "serve/stop_text.h"

#include <algorithm>

namespace glm4::serve {

StopText::StopText(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopText::push(std::string_view piece) {
  if (stopped_) return "";
  held_ += piece;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Keep the longest tail of held_ that begins some stop string (everything before it is final:
  // a match starting earlier would already have been found).
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t k = std::min(held_.size(), s.size() - 1); k > keep; --k)
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopText::flush() {
  std::string out = stopped_ ? std::string() : held_;
  held_.clear();
  return out;
}

}  // namespace glm4::serve
