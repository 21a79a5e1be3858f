// A set of special tokens (literal strings with ids), and splitting text at their occurrences.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace glm4 {

class SpecialTokens {
 public:
  // Throws glm4::Error naming `source` if the text or id is already present.
  void add(std::string text, int32_t id, const std::string& source);

  std::optional<int32_t> id_of(std::string_view text) const;
  const std::string* text_of(int32_t id) const;  // nullptr if id is not one of these
  bool empty() const { return by_text_.empty(); }
  size_t size() const { return by_text_.size(); }
  std::vector<int32_t> ids() const;  // in the order added

  // Calls on_text for each stretch between matches (never empty) and on_special for each match,
  // in text order. The leftmost occurrence wins, the longest one at a position.
  void split(std::string_view text, const std::function<void(std::string_view)>& on_text,
             const std::function<void(int32_t)>& on_special) const;

 private:
  std::vector<std::pair<std::string, int32_t>> by_text_;
  std::unordered_map<int32_t, size_t> by_id_;
};

}  // namespace glm4
