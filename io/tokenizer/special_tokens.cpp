// Special-token matching: next occurrences are cached per token, so splitting is linear in the
// text length times the number of tokens, however many matches there are.
#include "io/tokenizer/special_tokens.h"

#include "base/check.h"

namespace glm4 {

void SpecialTokens::add(std::string text, int32_t id, const std::string& source) {
  GLM4_CHECK(!text.empty(), source, ": special token with id ", id, " has empty text");
  GLM4_CHECK(!id_of(text), source, ": special token '", text, "' is defined twice");
  GLM4_CHECK(!by_id_.count(id), source, ": id ", id, " is given to two special tokens ('",
             *text_of(id), "' and '", text, "')");
  by_id_.emplace(id, by_text_.size());
  by_text_.emplace_back(std::move(text), id);
}

std::optional<int32_t> SpecialTokens::id_of(std::string_view text) const {
  for (const auto& [t, id] : by_text_) {
    if (t == text) return id;
  }
  return std::nullopt;
}

const std::string* SpecialTokens::text_of(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &by_text_[it->second].first;
}

std::vector<int32_t> SpecialTokens::ids() const {
  std::vector<int32_t> out;
  for (const auto& entry : by_text_) out.push_back(entry.second);
  return out;
}

void SpecialTokens::split(std::string_view text,
                          const std::function<void(std::string_view)>& on_text,
                          const std::function<void(int32_t)>& on_special) const {
  std::vector<size_t> next(by_text_.size());
  for (size_t k = 0; k < by_text_.size(); ++k) next[k] = text.find(by_text_[k].first);
  size_t pos = 0;
  while (true) {
    size_t best = std::string_view::npos, best_k = 0;
    for (size_t k = 0; k < by_text_.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < pos)
        next[k] = text.find(by_text_[k].first, pos);
      if (next[k] == std::string_view::npos) continue;
      if (next[k] < best ||
          (next[k] == best && by_text_[k].first.size() > by_text_[best_k].first.size())) {
        best = next[k];
        best_k = k;
      }
    }
    if (best == std::string_view::npos) break;
    if (best > pos) on_text(text.substr(pos, best - pos));
    on_special(by_text_[best_k].second);
    pos = best + by_text_[best_k].first.size();
  }
  if (pos < text.size()) on_text(text.substr(pos));
}

}  // namespace glm4
