// Test helper: the tokens of a rendered chat that a per-token flag marks (loss targets, turn
// starts), decoded and shown as bracketed runs, for assertions on what a format covers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4::testing {

// The decoded runs of tokens whose flag is set, each in brackets.
std::string spans(const Tokenizer& tok, const RenderedChat& chat, const std::vector<uint8_t>& on);

}  // namespace glm4::testing
