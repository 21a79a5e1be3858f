// The GGUF container: every metadata type round-trips, every tensor type decodes to what ggml's
// rule gives (checked against a scalar re-implementation here), data is aligned, and truncated or
// corrupted files fail with the file and the field named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "base/check.h"
#include "base/dtype.h"
#include "export/ggml_quants.h"
#include "export/gguf_writer.h"
#include "support/temp_dir.h"
#include "tests/support/gguf_reader.h"
#include "tests/support/random_values.h"

namespace glm4 {
namespace {

using glm4::testing::randn;
using glm4::testing::TempDir;
using glm4::testing::throws_with;
namespace fs = std::filesystem;

std::vector<uint8_t> bytes_of(const std::vector<float>& x, GgmlType t) {
  std::vector<uint8_t> out;
  ggml_encode(t, x.data(), int64_t(x.size()), out);
  return out;
}

// ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref restated with plain arithmetic: the
// values a block decodes to (q * fp16(d)) and its bytes.
struct RefBlock {
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;
};

RefBlock ref_q8_0(const float* x) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d == 0 ? 0 : 1 / d;
  const uint16_t dh = f32_to_f16(d);
  RefBlock r{{uint8_t(dh & 0xFF), uint8_t(dh >> 8)}, {}};
  for (int j = 0; j < 32; ++j) {
    const int q = int(std::roundf(x[j] * id));  // halves away from zero
    r.bytes.push_back(uint8_t(int8_t(q)));
    r.decoded.push_back(float(q) * f16_to_f32(dh));
  }
  return r;
}

RefBlock ref_q4_0(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  const float d = max / -8;
  const float id = d == 0 ? 0 : 1 / d;
  const uint16_t dh = f32_to_f16(d);
  RefBlock r{{uint8_t(dh & 0xFF), uint8_t(dh >> 8)}, std::vector<float>(32)};
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = std::min(15, int(std::floor(x[j] * id + 8.5f)));
  for (int j = 0; j < 16; ++j) r.bytes.push_back(uint8_t(q[j] | (q[j + 16] << 4)));
  for (int j = 0; j < 32; ++j) r.decoded[j] = float(q[j] - 8) * f16_to_f32(dh);
  return r;
}

TEST(GgufQuants, BlocksMatchTheReferenceRuleBitForBit) {
  std::vector<float> x = randn(32 * 64, 1);
  // Edge blocks: all zero, one spike, ties at .5 steps, the largest magnitude negative.
  for (int j = 0; j < 32; ++j) x[j] = 0;
  x[32 + 5] = 3.0f;
  for (int j = 0; j < 32; ++j) x[64 + j] = (j - 16) * 0.5f;
  x[96 + 31] = -7.25f;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    const std::vector<uint8_t> got = bytes_of(x, t);
    ASSERT_EQ(got.size(), ggml_row_bytes(t, int64_t(x.size())));
    std::vector<float> decoded(x.size());
    ggml_decode(t, got.data(), int64_t(x.size()), decoded.data());
    const size_t bb = ggml_block_bytes(t);
    for (size_t b = 0; b < x.size() / 32; ++b) {
      const RefBlock r = t == GgmlType::Q8_0 ? ref_q8_0(&x[b * 32]) : ref_q4_0(&x[b * 32]);
      ASSERT_EQ(std::vector<uint8_t>(got.begin() + long(b * bb), got.begin() + long((b + 1) * bb)),
                r.bytes)
          << ggml_type_name(t) << " block " << b;
      for (int j = 0; j < 32; ++j)
        ASSERT_EQ(decoded[b * 32 + j], r.decoded[j]) << ggml_type_name(t) << " " << b;
    }
  }
  // q4_0 zero block: every quant is 8 (value 0), scale 0.
  const std::vector<uint8_t> q4 = bytes_of(std::vector<float>(32, 0.0f), GgmlType::Q4_0);
  for (int j = 2; j < 18; ++j) EXPECT_EQ(q4[j], 0x88);
}

TEST(GgufQuants, ErrorsStayWithinHalfAStepPlusTheFp16ScaleRounding) {
  const std::vector<float> x = randn(32 * 32, 2);
  std::vector<float> y(x.size());
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    const std::vector<uint8_t> b = bytes_of(x, t);
    ggml_decode(t, b.data(), int64_t(x.size()), y.data());
    for (size_t blk = 0; blk < x.size() / 32; ++blk) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[blk * 32 + j]));
      const float step = amax / (t == GgmlType::Q8_0 ? 127 : 8);
      for (int j = 0; j < 32; ++j)
        ASSERT_LE(std::fabs(x[blk * 32 + j] - y[blk * 32 + j]),
                  step * (t == GgmlType::Q8_0 ? 0.57f : 1.01f));
    }
  }
  EXPECT_THROW(bytes_of(std::vector<float>(33, 1.0f), GgmlType::Q8_0), Error);
}

TEST(Gguf, EveryMetadataTypeRoundTripsInOrder) {
  TempDir dir;
  std::vector<std::pair<std::string, GgufValue>> kvs = {
      {"t.u8", GgufValue::scalar(GgufType::U8, 255, 0, 0)},
      {"t.i8", GgufValue::scalar(GgufType::I8, 0, -128, 0)},
      {"t.u16", GgufValue::scalar(GgufType::U16, 65535, 0, 0)},
      {"t.i16", GgufValue::scalar(GgufType::I16, 0, -32768, 0)},
      {"t.u32", GgufValue::of_u32(4000000000u)},
      {"t.i32", GgufValue::of_i32(-2000000000)},
      {"t.f32", GgufValue::of_f32(1.5625e-07f)},
      {"t.bool", GgufValue::of_bool(true)},
      {"t.string", GgufValue::of_string("[gMASK]<sop>\n\xE4\xBD\xA0\xE5\xA5\xBD")},
      {"t.u64", GgufValue::of_u64(18000000000000000000ull)},
      {"t.i64", GgufValue::scalar(GgufType::I64, 0, -9000000000000000000ll, 0)},
      {"t.f64", GgufValue::scalar(GgufType::F64, 0, 0, 0.1)},
      {"t.strings", GgufValue::string_array({"a", "", "Ġthe", "<|user|>"})},
      {"t.i32s", GgufValue::i32_array({1, -3, 5})},
      {"t.f32s", GgufValue::f32_array({-10000.0f, 0.25f})},
      {"t.empty", GgufValue::array(GgufType::U8, {})},
      {"t.nested",
       GgufValue::array(GgufType::Array, {GgufValue::i32_array({7}), GgufValue::i32_array({})})},
  };
  GgufWriter w;
  for (const auto& [k, v] : kvs) w.set(k, v);
  EXPECT_THROW(w.set("t.u8", GgufValue::of_u32(1)), Error);
  w.write(dir / "m.gguf");
  auto f = GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->kvs().size(), kvs.size());
  for (size_t k = 0; k < kvs.size(); ++k) {
    EXPECT_EQ(f->kvs()[k].first, kvs[k].first);
    EXPECT_TRUE(f->kvs()[k].second == kvs[k].second)
        << kvs[k].first << ": " << f->kvs()[k].second.describe();
  }
  EXPECT_EQ(f->get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(f->get_f32("t.f32"), 1.5625e-07f);
  EXPECT_TRUE(throws_with([&] { f->get_u32("t.i32"); }, {"m.gguf", "t.i32", "int32", "uint32"}));
  EXPECT_TRUE(throws_with([&] { f->get_string("nope"); }, {"m.gguf", "nope"}));
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(dir.list(), std::vector<std::string>{"m.gguf"});  // no .tmp left behind
}

TEST(Gguf, EveryTensorTypeRoundTripsWithGgmlDimsAndAlignment) {
  TempDir dir;
  const std::vector<float> mat = randn(3 * 64, 3), vec = randn(40, 4);
  const GgmlType types[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                            GgmlType::Q4_0};
  for (uint32_t alignment : {32u, 64u}) {
    GgufWriter w(alignment);
    for (GgmlType t : types) {
      w.add_tensor(std::string("m.") + ggml_type_name(t), {64, 3}, t,
                   [&, t] { return bytes_of(mat, t); });
    }
    w.add_tensor("v", {40}, GgmlType::F32, [&] { return bytes_of(vec, GgmlType::F32); });
    EXPECT_THROW(w.add_tensor("v", {40}, GgmlType::F32, nullptr), Error);
    EXPECT_TRUE(throws_with([&] { w.add_tensor("bad", {40}, GgmlType::Q8_0, nullptr); },
                            {"bad", "40", "q8_0"}));
    const fs::path path = dir / ("a" + std::to_string(alignment) + ".gguf");
    w.write(path);

    auto f = GgufFile::open(path);
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->find("general.alignment") != nullptr, alignment != 32);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    ASSERT_EQ(f->tensors().size(), 6u);
    uint64_t end = 0;
    for (const GgufTensorInfo& t : f->tensors()) {
      EXPECT_EQ(t.offset % alignment, 0u) << t.name;
      EXPECT_EQ((f->data_offset() + t.offset) % alignment, 0u);
      end = std::max(end, f->data_offset() + t.offset + t.nbytes);
    }
    EXPECT_EQ(fs::file_size(path) % alignment, 0u);
    EXPECT_LT(fs::file_size(path) - end, alignment);
    for (GgmlType t : types) {
      const GgufTensorInfo& info = f->tensor(std::string("m.") + ggml_type_name(t));
      EXPECT_EQ(info.ne, (std::vector<int64_t>{64, 3}));
      EXPECT_EQ(info.type, t);
      const std::vector<float> got = info.to_f32();
      ASSERT_EQ(got.size(), mat.size());
      for (size_t i = 0; i < mat.size(); ++i) {
        float want = mat[i];
        if (t == GgmlType::F16) want = f16_to_f32(f32_to_f16(mat[i]));
        if (t == GgmlType::BF16) want = bf16_to_f32(f32_to_bf16(mat[i]));
        if (t == GgmlType::Q8_0) want = ref_q8_0(&mat[i / 32 * 32]).decoded[i % 32];
        if (t == GgmlType::Q4_0) want = ref_q4_0(&mat[i / 32 * 32]).decoded[i % 32];
        ASSERT_EQ(got[i], want) << ggml_type_name(t) << " element " << i;
      }
    }
    EXPECT_EQ(f->tensor("v").to_f32(), vec);
    EXPECT_TRUE(throws_with([&] { f->tensor("w"); }, {"no tensor 'w'"}));
  }
}

// A tiny file with known byte positions: header 24 bytes; kv "a" (u32) at 24..41; tensor info
// "t" at 41..74 (n_dims at 50, ne[0] at 54, type at 62, offset at 66); data at 96..224.
fs::path tiny_file(const TempDir& dir) {
  GgufWriter w;
  w.set("a", GgufValue::of_u32(7));
  w.add_tensor("t", {32}, GgmlType::F32,
               [] { return bytes_of(std::vector<float>(32, 1.0f), GgmlType::F32); });
  w.write(dir / "tiny.gguf");
  return dir / "tiny.gguf";
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

fs::path write_variant(const TempDir& dir, const std::string& name, std::string bytes) {
  std::ofstream(dir / name, std::ios::binary) << bytes;
  return dir / name;
}

template <typename T>
std::string patched(std::string s, size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof v);
  return s;
}

TEST(Gguf, TruncatedAndCorruptFilesNameTheFileAndField) {
  TempDir dir;
  const std::string good = read_all(tiny_file(dir));
  ASSERT_EQ(good.size(), 96u + 128u);
  ASSERT_NO_THROW(GgufFile::open(dir / "tiny.gguf"));
  struct Case {
    std::string name, bytes;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"empty", "", {"empty.gguf", "magic", "truncated"}},
      {"magic", patched(good, 0, uint32_t(0x46554746)), {"magic", "not a GGUF file"}},
      {"version", patched(good, 4, uint32_t(99)), {"version", "99"}},
      {"kv_count", patched(good, 16, uint64_t(1000)), {"metadata_kv_count", "cannot fit"}},
      {"tensor_count", patched(good, 8, uint64_t(1000)), {"tensor_count", "cannot fit"}},
      {"key_len", patched(good, 24, uint64_t(100000)), {"kv[0] key", "string length", "runs past"}},
      // The named limits, checked before the counts are compared with the file's size.
      {"kv_limit",
       patched(good, 16, kMaxGgufKeyValues + 1),
       {"metadata_kv_count", "kMaxGgufKeyValues = 65536"}},
      {"tensor_limit",
       patched(good, 8, kMaxGgufTensors + 1),
       {"tensor_count", "kMaxGgufTensors = 1048576"}},
      {"string_limit",
       patched(good, 24, kMaxGgufStringBytes + 1),
       {"kv[0] key", "kMaxGgufStringBytes = 67108864"}},
      {"value_type", patched(good, 33, uint32_t(99)), {"kv[0]", "'a'", "unknown value type 99"}},
      {"n_dims", patched(good, 50, uint32_t(5)), {"tensor 't' n_dims", "5"}},
      {"ggml_type", patched(good, 62, uint32_t(12)), {"tensor 't' type", "ggml type 12"}},
      {"offset_align", patched(good, 66, uint64_t(8)), {"tensor 't' offset", "alignment 32"}},
      {"offset_past",
       patched(good, 66, uint64_t(1024)),
       {"tensor 't' offset", "runs past the data section"}},
      {"dims_past", patched(good, 54, uint64_t(64)), {"tensor 't' offset", "runs past"}},
      {"cut_header", good.substr(0, 20), {"metadata_kv_count", "truncated"}},
      {"cut_kv", good.substr(0, 38), {"tensor_count", "cannot fit"}},  // counts are checked first
      {"cut_infos", good.substr(0, 60), {"tensor 't' ne[0]", "truncated"}},
      {"cut_data", good.substr(0, 200), {"tensor 't' offset", "runs past", "truncated"}},
  };
  for (const Case& c : cases) {
    const fs::path p = write_variant(dir, c.name + ".gguf", c.bytes);
    std::vector<std::string> parts = c.parts;
    parts.push_back(c.name + ".gguf");
    EXPECT_TRUE(throws_with([&] { GgufFile::open(p); }, parts)) << c.name;
  }
  // An array whose length cannot fit, and a bool byte that is neither 0 nor 1.
  GgufWriter w;
  w.set("arr", GgufValue::i32_array({1, 2}));
  w.set("flag", GgufValue::of_bool(true));
  w.write(dir / "arr.gguf");
  std::string arr = read_all(dir / "arr.gguf");
  // "arr": key 24..35, type 35, elem type 39, length 43.
  EXPECT_TRUE(throws_with(
      [&] { GgufFile::open(write_variant(dir, "len.gguf", patched(arr, 43, uint64_t(1000)))); },
      {"len.gguf", "kv[0] 'arr'", "array length 1000", "cannot fit"}));
  EXPECT_TRUE(throws_with(
      [&] {
        GgufFile::open(write_variant(dir, "big.gguf", patched(arr, 43, kMaxGgufArrayLength + 1)));
      },
      {"big.gguf", "kv[0] 'arr'", "kMaxGgufArrayLength = 16777216"}));
  EXPECT_TRUE(
      throws_with([&] { GgufFile::open(write_variant(dir, "cut.gguf", arr.substr(0, 55))); },
                  {"cut.gguf", "kv[0] 'arr'", "array length 2", "cannot fit"}));
  const size_t flag_at = arr.find("flag") + 4 + 4;
  EXPECT_TRUE(throws_with(
      [&] { GgufFile::open(write_variant(dir, "bool.gguf", patched(arr, flag_at, uint8_t(2)))); },
      {"bool.gguf", "'flag'", "bool byte is 2"}));
}

// Found by fuzz_gguf: decoding a tensor with a zero dimension passed a null destination to
// memcpy (undefined behaviour, reported by UBSan). Empty tensors decode to nothing.
TEST(Gguf, EmptyTensorsDecodeToNothing) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor("empty", {0, 4}, GgmlType::F32, [] { return std::vector<uint8_t>(); });
  w.add_tensor("x", {2}, GgmlType::F32, [] {
    return bytes_of(std::vector<float>{1.0f, 2.0f}, GgmlType::F32);
  });
  w.write(dir / "empty.gguf");
  auto f = GgufFile::open(dir / "empty.gguf");
  EXPECT_EQ(f->tensor("empty").numel(), 0);
  EXPECT_TRUE(f->tensor("empty").to_f32().empty());
  EXPECT_EQ(f->tensor("x").to_f32(), (std::vector<float>{1.0f, 2.0f}));
}

// Found by fuzz_gguf (UBSan: signed overflow in numel()): a zero dimension kept the byte size
// at 0 while the other dimensions' product overflowed.
TEST(Gguf, ElementCountOverflowIsRefused) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor("ZZZ", {4, 2, 0}, GgmlType::F32, [] { return std::vector<uint8_t>(); });
  w.write(dir / "z.gguf");
  std::string s = read_all(dir / "z.gguf");
  const size_t ne0 = s.find("ZZZ") + 3 + 4;  // name, n_dims
  EXPECT_TRUE(throws_with(
      [&] { GgufFile::open(write_variant(dir, "big.gguf", patched(s, ne0, uint64_t(1) << 62))); },
      {"big.gguf", "tensor 'ZZZ' ne[1]", "element count overflows"}));
}

TEST(Gguf, OverlappingTensorsAreRefused) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor("x", {32}, GgmlType::F32,
               [] { return bytes_of(std::vector<float>(32, 0.0f), GgmlType::F32); });
  w.add_tensor("y", {32}, GgmlType::F32,
               [] { return bytes_of(std::vector<float>(32, 0.0f), GgmlType::F32); });
  w.write(dir / "two.gguf");
  std::string s = read_all(dir / "two.gguf");
  const size_t y_offset = s.find('y', 24) + 1 + 4 + 8 + 4;  // name, n_dims, ne[0], type
  EXPECT_TRUE(throws_with(
      [&] { GgufFile::open(write_variant(dir, "ov.gguf", patched(s, y_offset, uint64_t(64)))); },
      {"ov.gguf", "tensor 'y' offset", "overlaps tensor 'x'"}));
}

}  // namespace
}  // namespace glm4
