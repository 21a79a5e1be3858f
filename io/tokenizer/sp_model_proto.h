// Reads the piece list (text, score and type) and the normalizer flags out of a serialized
// sentencepiece ModelProto; the sentencepiece C++ API does not say which pieces are user-defined
// symbols.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace glm4 {

struct SpPiece {
  enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  std::string text;
  float score = 0;
  int type = kNormal;
};

// The NormalizerSpec fields that change how text is split (defaults as in sentencepiece).
struct SpNormalizer {
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
};

// Throws glm4::Error naming `where` if the bytes are not a well-formed ModelProto.
std::vector<SpPiece> read_sp_pieces(std::string_view proto, const std::string& where);
SpNormalizer read_sp_normalizer(std::string_view proto, const std::string& where);

}  // namespace glm4
