// The GGUF v3 container as ggml defines it: metadata value types, tensor types (ggml_type ids
// and block layouts) and a metadata value that the writer and the reader share.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm4 {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kGgufVersion = 3;
constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr uint32_t kGgmlQuantVersion = 2;  // general.quantization_version
constexpr int kGgmlMaxDims = 4;

// Metadata value types (gguf_type), numbered as in the file.
enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
const char* gguf_type_name(GgufType t);
bool gguf_type_valid(uint32_t t);
size_t gguf_scalar_size(GgufType t);  // bytes in the file; 0 for String and Array

// Tensor types (ggml_type ids) this project writes and reads.
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30 };
const char* ggml_type_name(GgmlType t);  // "f32", "f16", "q4_0", "q8_0", "bf16"
bool ggml_type_known(uint32_t t);
// Parses a --type value ("f32" | "f16" | "bf16" | "q8_0" | "q4_0"); false otherwise.
bool parse_ggml_type(std::string_view s, GgmlType* out);
int64_t ggml_block_size(GgmlType t);  // elements per block: 32 for q8_0/q4_0, else 1
size_t ggml_block_bytes(GgmlType t);  // bytes per block: 34 (q8_0), 18 (q4_0), 4, 2
// llama_ftype of a file whose large matrices are `t` (general.file_type).
uint32_t llama_file_type(GgmlType t);

// One metadata value: a scalar, a string or an array of one element type (arrays may nest).
// Integers are kept widened (u or i), floats as double (an F32 value converts exactly).
struct GgufValue {
  GgufType type = GgufType::U32;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  GgufType elem = GgufType::U8;  // element type when type == Array
  std::vector<GgufValue> items;

  static GgufValue of_u32(uint32_t v);
  static GgufValue of_i32(int32_t v);
  static GgufValue of_u64(uint64_t v);
  static GgufValue of_f32(float v);
  static GgufValue of_bool(bool v);
  static GgufValue of_string(std::string v);
  static GgufValue scalar(GgufType t, uint64_t u, int64_t i, double f);  // any numeric type
  static GgufValue array(GgufType elem, std::vector<GgufValue> items);
  static GgufValue string_array(const std::vector<std::string>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);
  static GgufValue f32_array(const std::vector<float>& v);

  bool operator==(const GgufValue& o) const;
  std::string describe() const;  // short text for messages and `gguf` dumps
};

}  // namespace glm4
