// Stop strings on streamed text: holds back whatever might be the start of a stop string, and
// cuts the text at the first match, even when a stop string spans several tokens.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace glm4::serve {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);  // empty strings are ignored

  // Appends `piece` and returns the text that can no longer become part of a stop string. On a
  // match, stopped() turns true and the returned text ends right before the stop string.
  std::string push(std::string_view piece);
  // The text held back, once the reply ended without a match.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace glm4::serve
