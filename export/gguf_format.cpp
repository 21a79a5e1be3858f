// Names and sizes of GGUF value and ggml tensor types, and the metadata value helpers.
#include "export/gguf_format.h"

#include "base/check.h"

namespace glm4 {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8:
      return "uint8";
    case GgufType::I8:
      return "int8";
    case GgufType::U16:
      return "uint16";
    case GgufType::I16:
      return "int16";
    case GgufType::U32:
      return "uint32";
    case GgufType::I32:
      return "int32";
    case GgufType::F32:
      return "float32";
    case GgufType::Bool:
      return "bool";
    case GgufType::String:
      return "string";
    case GgufType::Array:
      return "array";
    case GgufType::U64:
      return "uint64";
    case GgufType::I64:
      return "int64";
    case GgufType::F64:
      return "float64";
  }
  return "?";
}

bool gguf_type_valid(uint32_t t) { return t <= uint32_t(GgufType::F64); }

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::String:
    case GgufType::Array:
      return 0;
  }
  return 0;
}

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return "f32";
    case GgmlType::F16:
      return "f16";
    case GgmlType::Q4_0:
      return "q4_0";
    case GgmlType::Q8_0:
      return "q8_0";
    case GgmlType::BF16:
      return "bf16";
  }
  return "?";
}

bool ggml_type_known(uint32_t t) { return t == 0 || t == 1 || t == 2 || t == 8 || t == 30; }

bool parse_ggml_type(std::string_view s, GgmlType* out) {
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    if (s == ggml_type_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

int64_t ggml_block_size(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0 ? 32 : 1; }

size_t ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return 4;
    case GgmlType::F16:
    case GgmlType::BF16:
      return 2;
    case GgmlType::Q8_0:
      return 2 + 32;  // fp16 scale, 32 int8 quants
    case GgmlType::Q4_0:
      return 2 + 16;  // fp16 scale, 32 4-bit quants
  }
  return 0;
}

uint32_t llama_file_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case GgmlType::F16:
      return 1;  // MOSTLY_F16
    case GgmlType::Q4_0:
      return 2;  // MOSTLY_Q4_0
    case GgmlType::Q8_0:
      return 7;  // MOSTLY_Q8_0
    case GgmlType::BF16:
      return 32;  // MOSTLY_BF16
  }
  return 0;
}

GgufValue GgufValue::of_u32(uint32_t v) { return scalar(GgufType::U32, v, 0, 0); }
GgufValue GgufValue::of_i32(int32_t v) { return scalar(GgufType::I32, 0, v, 0); }
GgufValue GgufValue::of_u64(uint64_t v) { return scalar(GgufType::U64, v, 0, 0); }
GgufValue GgufValue::of_f32(float v) { return scalar(GgufType::F32, 0, 0, v); }

GgufValue GgufValue::of_bool(bool v) {
  GgufValue x;
  x.type = GgufType::Bool;
  x.b = v;
  return x;
}

GgufValue GgufValue::of_string(std::string v) {
  GgufValue x;
  x.type = GgufType::String;
  x.s = std::move(v);
  return x;
}

GgufValue GgufValue::scalar(GgufType t, uint64_t u, int64_t i, double f) {
  GLM4_CHECK(gguf_scalar_size(t) > 0 && t != GgufType::Bool,
             "GgufValue::scalar: ", gguf_type_name(t), " is not a numeric type");
  GgufValue x;
  x.type = t;
  x.u = u;
  x.i = i;
  x.f = t == GgufType::F32 ? double(float(f)) : f;
  return x;
}

GgufValue GgufValue::array(GgufType elem, std::vector<GgufValue> items) {
  for (size_t k = 0; k < items.size(); ++k) {
    GLM4_CHECK(items[k].type == elem, "GgufValue::array: item ", k, " is ",
               gguf_type_name(items[k].type), ", the array holds ", gguf_type_name(elem));
  }
  GgufValue x;
  x.type = GgufType::Array;
  x.elem = elem;
  x.items = std::move(items);
  return x;
}

GgufValue GgufValue::string_array(const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(of_string(s));
  return array(GgufType::String, std::move(items));
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(of_i32(x));
  return array(GgufType::I32, std::move(items));
}

GgufValue GgufValue::f32_array(const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(of_f32(x));
  return array(GgufType::F32, std::move(items));
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::U8:
    case GgufType::U16:
    case GgufType::U32:
    case GgufType::U64:
      return u == o.u;
    case GgufType::I8:
    case GgufType::I16:
    case GgufType::I32:
    case GgufType::I64:
      return i == o.i;
    case GgufType::F32:
    case GgufType::F64:
      return f == o.f;
    case GgufType::Bool:
      return b == o.b;
    case GgufType::String:
      return s == o.s;
    case GgufType::Array:
      return elem == o.elem && items == o.items;
  }
  return false;
}

std::string GgufValue::describe() const {
  switch (type) {
    case GgufType::U8:
    case GgufType::U16:
    case GgufType::U32:
    case GgufType::U64:
      return std::to_string(u);
    case GgufType::I8:
    case GgufType::I16:
    case GgufType::I32:
    case GgufType::I64:
      return std::to_string(i);
    case GgufType::F32:
    case GgufType::F64:
      return str_cat(f);
    case GgufType::Bool:
      return b ? "true" : "false";
    case GgufType::String:
      return s.size() <= 60 ? '"' + s + '"' : '"' + s.substr(0, 57) + "...\"";
    case GgufType::Array: {
      std::string out = str_cat("[", gguf_type_name(elem), " x ", items.size(), "]");
      if (!items.empty())
        out.append(" ").append(items[0].describe()).append(items.size() > 1 ? ", ..." : "");
      return out;
    }
  }
  return "?";
}

}  // namespace glm4
