// Minimal protobuf wire-format walk over ModelProto: field 1 is `repeated SentencePiece pieces`,
// and SentencePiece has 1: piece (string), 2: score (float), 3: type (enum, default NORMAL);
// field 3 is NormalizerSpec, with 3: add_dummy_prefix and 4: remove_extra_whitespaces (bools).
#include "io/tokenizer/sp_model_proto.h"

#include <cstdint>
#include <cstring>

#include "base/check.h"
#include "io/tokenizer/tokenizer.h"

namespace glm4 {
namespace {

class Reader {
 public:
  Reader(std::string_view data, const std::string& where) : data_(data), where_(where) {}
  bool done() const { return pos_ >= data_.size(); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      GLM4_CHECK(pos_ < data_.size(), where_, ": truncated varint at byte ", pos_);
      const uint8_t b = uint8_t(data_[pos_++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail(where_, ": varint longer than 10 bytes at byte ", pos_);
  }

  std::string_view bytes(size_t n) {
    GLM4_CHECK(n <= data_.size() - pos_, where_, ": field of ", n, " bytes at byte ", pos_,
               " runs past the end (", data_.size(), " bytes)");
    const std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  // Reads a tag; for length-delimited fields returns the payload in *payload.
  // Returns the field number; *wire receives the wire type. Non-payload fields are skipped.
  uint32_t field(int* wire, std::string_view* payload, uint64_t* value) {
    const uint64_t tag = varint();
    *wire = int(tag & 7);
    switch (*wire) {
      case 0:
        *value = varint();
        break;
      case 1:
        bytes(8);
        break;
      case 2:
        *payload = bytes(varint());
        break;
      case 5: {  // fixed32: the raw little-endian bits in *value
        const std::string_view b = bytes(4);
        uint32_t bits = 0;
        std::memcpy(&bits, b.data(), 4);
        *value = bits;
        break;
      }
      default:
        fail(where_, ": unsupported protobuf wire type ", *wire, " at byte ", pos_);
    }
    return uint32_t(tag >> 3);
  }

 private:
  std::string_view data_;
  const std::string& where_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<SpPiece> read_sp_pieces(std::string_view proto, const std::string& where) {
  std::vector<SpPiece> pieces;
  Reader top(proto, where);
  while (!top.done()) {
    int wire = 0;
    std::string_view payload;
    uint64_t value = 0;
    if (top.field(&wire, &payload, &value) != 1 || wire != 2) continue;
    SpPiece piece;
    Reader inner(payload, where);
    while (!inner.done()) {
      std::string_view p;
      uint64_t v = 0;
      const uint32_t f = inner.field(&wire, &p, &v);
      if (f == 1 && wire == 2) piece.text = std::string(p);
      if (f == 2 && wire == 5) std::memcpy(&piece.score, &v, 4);
      if (f == 3 && wire == 0) piece.type = int(v);
    }
    pieces.push_back(std::move(piece));
    GLM4_CHECK(int64_t(pieces.size()) <= kMaxTokenizerVocab, where, ": more than ",
               kMaxTokenizerVocab, " pieces (limit kMaxTokenizerVocab)");
  }
  GLM4_CHECK(!pieces.empty(), where, ": not a sentencepiece model (no pieces)");
  return pieces;
}

SpNormalizer read_sp_normalizer(std::string_view proto, const std::string& where) {
  SpNormalizer out;
  Reader top(proto, where);
  while (!top.done()) {
    int wire = 0;
    std::string_view payload;
    uint64_t value = 0;
    if (top.field(&wire, &payload, &value) != 3 || wire != 2) continue;
    Reader inner(payload, where);
    while (!inner.done()) {
      std::string_view p;
      uint64_t v = 0;
      const uint32_t f = inner.field(&wire, &p, &v);
      if (f == 3 && wire == 0) out.add_dummy_prefix = v != 0;
      if (f == 4 && wire == 0) out.remove_extra_whitespaces = v != 0;
    }
  }
  return out;
}

}  // namespace glm4
