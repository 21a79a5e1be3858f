// Reads the piece list (text and type) out of a serialized sentencepiece ModelProto; the
// sentencepiece C++ API does not say which pieces are user-defined symbols.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace glm4 {

struct SpPiece {
  enum Type { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  std::string text;
  int type = kNormal;
};

// Throws glm4::Error naming `where` if the bytes are not a well-formed ModelProto.
std::vector<SpPiece> read_sp_pieces(std::string_view proto, const std::string& where);

}  // namespace glm4
