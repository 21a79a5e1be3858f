// Safetensors: round trips of every dtype, the on-disk layout, and one hand-crafted corrupt
// file per validation rule, each checked to name the file and the tensor at fault.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/check.h"
#include "io/safetensors.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using testing::TempDir;
using testing::throws_with;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file made by hand: 8-byte little-endian `len` (default: the header's size), header, data.
std::filesystem::path craft(const std::filesystem::path& p, const std::string& header,
                            size_t data_bytes, std::optional<uint64_t> len = std::nullopt) {
  std::ofstream out(p, std::ios::binary);
  uint64_t n = len.value_or(header.size());
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\x5a');
  return p;
}

struct Case {
  std::string name, dtype;
  std::vector<int64_t> shape;
};

TEST(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  TempDir dir;
  const std::vector<Case> cases = {
      {"a.f32", "F32", {3, 5}}, {"b.bf16", "BF16", {7}},   {"c.f16", "F16", {2, 3, 1}},
      {"d.i32", "I32", {4}},    {"e.i64", "I64", {2, 2}},  {"f.f64", "F64", {3}},
      {"g.i8", "I8", {5}},      {"h.u8", "U8", {9}},       {"i.bool", "BOOL", {3}},
      {"j.i16", "I16", {3}},    {"k.u16", "U16", {1}},     {"l.u32", "U32", {2}},
      {"m.u64", "U64", {1}},    {"n.f8", "F8_E4M3", {4}},  {"o.f8", "F8_E5M2", {2}},
      {"scalar", "F32", {}},    {"empty", "BF16", {0, 4}}, {"empty2", "I64", {3, 0}},
  };
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t numel = 1;
    for (auto d : cases[i].shape) numel *= d;
    size_t nbytes = size_t(numel) * safetensors_dtype_size(cases[i].dtype);
    bufs.push_back(random_bytes(nbytes, uint32_t(i)));
    tensors.push_back({cases[i].name, cases[i].dtype, cases[i].shape, bufs.back().data(), nbytes});
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "héllo"}};
  write_safetensors(dir / "x.safetensors", tensors, meta);

  auto f = SafetensorsFile::open(dir / "x.safetensors");
  EXPECT_EQ(f->path(), dir / "x.safetensors");
  EXPECT_EQ(f->metadata(), meta);
  ASSERT_EQ(f->tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo* t = f->find(cases[i].name);
    ASSERT_NE(t, nullptr) << cases[i].name;
    EXPECT_EQ(t->dtype, cases[i].dtype);
    EXPECT_EQ(t->shape, cases[i].shape);
    ASSERT_EQ(t->nbytes, bufs[i].size()) << cases[i].name;
    if (t->nbytes) {
      EXPECT_EQ(std::memcmp(t->data, bufs[i].data(), t->nbytes), 0) << cases[i].name;
    }
    // The writer orders data by element size, so every tensor is naturally aligned.
    size_t elem = safetensors_dtype_size(t->dtype);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % elem, 0u) << cases[i].name;
  }
  EXPECT_EQ(f->find("missing"), nullptr);
  EXPECT_EQ(&f->at("a.f32"), f->find("a.f32"));
  EXPECT_EQ(f->at("scalar").numel(), 1);
  EXPECT_EQ(f->at("empty").numel(), 0);
  // File order is data order: non-decreasing element sizes never increase, ties keep input order.
  for (size_t i = 1; i < f->tensors().size(); ++i) {
    const auto& a = f->tensors()[i - 1];
    const auto& b = f->tensors()[i];
    EXPECT_GE(safetensors_dtype_size(a.dtype), safetensors_dtype_size(b.dtype));
    EXPECT_LE(a.data + a.nbytes, b.data) << a.name << " then " << b.name;
  }
}

TEST(Safetensors, KeepsInputOrderForOneDtype) {
  TempDir dir;
  std::vector<float> v(6, 1.0f);
  std::vector<TensorToWrite> ts = {f32_tensor("z", {2}, v.data()), f32_tensor("a", {3}, v.data()),
                                   f32_tensor("m", {1}, v.data())};
  write_safetensors(dir / "o.safetensors", ts);
  auto f = SafetensorsFile::open(dir / "o.safetensors");
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->tensors()[0].name, "z");
  EXPECT_EQ(f->tensors()[1].name, "a");
  EXPECT_EQ(f->tensors()[2].name, "m");
  EXPECT_TRUE(f->metadata().empty());
}

TEST(Safetensors, WritesTheStandardLayout) {
  TempDir dir;
  std::vector<uint16_t> h = {1, 2, 3};  // 6 bytes: the next tensor would be misaligned if first
  std::vector<float> w = {1.5f, -2.0f};
  write_safetensors(dir / "l.safetensors",
                    {{"h", "BF16", {3}, h.data(), 6}, {"w", "F32", {2}, w.data(), 8}},
                    {{"k", "v"}});
  std::string bytes = slurp(dir / "l.safetensors");
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 14);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.find_first_of('\0'), std::string::npos);
  size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);  // padding is spaces, less than 8 of them
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["k"], "v");
  EXPECT_EQ(j["w"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(j["h"]["data_offsets"], nlohmann::json::array({8, 14}));
  EXPECT_EQ(j["h"]["shape"], nlohmann::json::array({3}));
  float w0;
  std::memcpy(&w0, bytes.data() + 8 + n, 4);
  EXPECT_EQ(w0, 1.5f);
}

TEST(Safetensors, ReadsWidenedFloatsAndIntegers) {
  TempDir dir;
  std::vector<float> f32 = {1.0f, -0.5f, 3.25f};
  std::vector<uint16_t> bf(3), f16(3);
  for (int i = 0; i < 3; ++i) {
    bf[i] = f32_to_bf16(f32[i]);
    f16[i] = f32_to_f16(f32[i]);
  }
  std::vector<int32_t> i32 = {-7, 0, 2147483647};
  std::vector<int64_t> i64 = {-9000000000LL, 5};
  write_safetensors(dir / "v.safetensors", {{"f32", "F32", {3}, f32.data(), 12},
                                            {"bf16", "BF16", {3}, bf.data(), 6},
                                            {"f16", "F16", {1, 3}, f16.data(), 6},
                                            {"i32", "I32", {3}, i32.data(), 12},
                                            {"i64", "I64", {2}, i64.data(), 16}});
  auto f = SafetensorsFile::open(dir / "v.safetensors");
  EXPECT_EQ(read_f32(f->at("f32")), f32);
  EXPECT_EQ(read_f32(f->at("bf16")), f32);  // all three values are exact in bf16 and f16
  EXPECT_EQ(read_f32(f->at("f16")), f32);
  EXPECT_EQ(f->at("bf16").float_dtype(), DType::BF16);
  EXPECT_EQ(f->at("f16").float_dtype(), DType::F16);
  EXPECT_EQ(read_int(f->at("i32")), std::vector<int64_t>(i32.begin(), i32.end()));
  EXPECT_EQ(read_int(f->at("i64")), i64);
  EXPECT_TRUE(throws_with([&] { f->at("i32").float_dtype(); }, {"'i32'", "I32"}));
  EXPECT_TRUE(throws_with([&] { read_f32(f->at("i64")); }, {"'i64'", "I64"}));
  EXPECT_TRUE(throws_with([&] { read_int(f->at("f16")); }, {"'f16'", "F16"}));
  EXPECT_TRUE(throws_with([&] { f->at("nope"); }, {"v.safetensors", "'nope'"}));
}

TEST(Safetensors, MappingOutlivesEverythingButItsOwner) {
  TempDir dir;
  std::vector<float> v = {4.0f, 5.0f};
  write_safetensors(dir / "k.safetensors", {f32_tensor("t", {2}, v.data())});
  const TensorInfo* t;
  std::shared_ptr<const void> keep;
  {
    auto f = SafetensorsFile::open(dir / "k.safetensors");
    t = &f->at("t");
    keep = f;
  }
  std::filesystem::remove(dir / "k.safetensors");  // a mapping survives unlinking
  EXPECT_EQ(read_f32(*t), v);
}

TEST(Safetensors, AcceptsGapsAndZeroSizedTensorsAnywhere) {
  TempDir dir;
  // 4 bytes of padding between the tensors and after them; zero-size tensors at 0, 8 and 16.
  const std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                        R"("z0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                        R"("z1":{"dtype":"I64","shape":[2,0],"data_offsets":[8,8]},)"
                        R"("z2":{"dtype":"U8","shape":[0],"data_offsets":[16,16]}})";
  auto f = SafetensorsFile::open(craft(dir / "g.safetensors", h, 16));
  EXPECT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->at("b").data - f->at("a").data, 8);
  EXPECT_EQ(f->at("z2").nbytes, 0u);
  // An empty file with just "{}" is valid too.
  EXPECT_TRUE(SafetensorsFile::open(craft(dir / "e.safetensors", "{}", 0))->tensors().empty());
}

// --- one crafted file per validation rule ---------------------------------------------------

class SafetensorsCorrupt : public ::testing::Test {
 protected:
  // Opening a file made of `header` + `data` zero bytes must throw naming it and `parts`.
  ::testing::AssertionResult rejects(const std::string& header, size_t data,
                                     std::vector<std::string> parts,
                                     std::optional<uint64_t> len = std::nullopt) {
    auto p = craft(dir_ / "bad.safetensors", header, data, len);
    parts.push_back("bad.safetensors");
    return throws_with([&] { SafetensorsFile::open(p); }, parts);
  }
  static std::string one(const std::string& entry) { return R"({"t":)" + entry + "}"; }
  TempDir dir_;
};

TEST_F(SafetensorsCorrupt, FileShorterThanEightBytes) {
  std::ofstream(dir_ / "bad.safetensors", std::ios::binary) << "abc";
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir_ / "bad.safetensors"); },
                          {"bad.safetensors", "3 bytes"}));
  std::ofstream(dir_ / "empty.safetensors", std::ios::binary);
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir_ / "empty.safetensors"); },
                          {"empty.safetensors", "0 bytes"}));
}

TEST_F(SafetensorsCorrupt, MissingFileAndDirectory) {
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir_ / "none.safetensors"); },
                          {"none.safetensors", "cannot open"}));
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir_.path()); }, {"not a regular file"}));
}

TEST_F(SafetensorsCorrupt, HeaderLongerThanFile) {
  EXPECT_TRUE(rejects("{}", 0, {"header length 100", "past the end"}, 100));
}

TEST_F(SafetensorsCorrupt, HeaderLengthAbsurd) {
  EXPECT_TRUE(rejects("{}", 0, {"absurd"}, 100'000'001));
  EXPECT_TRUE(rejects("{}", 0, {"absurd"}, ~uint64_t(0)));  // no overflow in 8 + len
}

TEST_F(SafetensorsCorrupt, HeaderLengthLimitIsNamed) {
  EXPECT_TRUE(
      rejects("{}", 0, {"kMaxSafetensorsHeaderBytes = 100000000"}, kMaxSafetensorsHeaderBytes + 1));
}

TEST_F(SafetensorsCorrupt, TooManyTensors) {
  // kMaxSafetensorsTensors + 1 empty tensors (plus __metadata__, which is not a tensor but counts
  // as a key: the limit allows one key more than tensors).
  std::string header = R"({"__metadata__":{})";
  for (size_t i = 0; i <= kMaxSafetensorsTensors; ++i)
    header += str_cat(",\"", i, "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}");
  header += "}";
  // Parsing is linear in the header: with nlohmann's parser callback (or ordered_json) this took
  // 150 s, a denial of service well below every limit. It takes about a second.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(rejects(header, 0, {"more than 262144 tensors", "kMaxSafetensorsTensors"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST_F(SafetensorsCorrupt, TooManyDimensions) {
  EXPECT_TRUE(rejects(one(R"({"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]})"), 1,
                      {"tensor 't'", "9 dimensions", "kMaxSafetensorsDims = 8"}));
  // Eight are fine.
  auto p = craft(dir_ / "eight.safetensors",
                 one(R"({"dtype":"U8","shape":[1,1,1,1,1,1,1,1],"data_offsets":[0,1]})"), 1);
  EXPECT_EQ(SafetensorsFile::open(p)->at("t").shape.size(), 8u);
}

TEST_F(SafetensorsCorrupt, HeaderNotJson) {
  EXPECT_TRUE(rejects(R"({"t": {"dtype": "F32",)", 0, {"not valid JSON"}));
  EXPECT_TRUE(rejects("{} trailing", 0, {"not valid JSON"}));
  EXPECT_TRUE(rejects(std::string("{\"\xff\": 1}"), 0, {"not valid JSON"}));  // bad UTF-8
}

TEST_F(SafetensorsCorrupt, HeaderNotAnObject) {
  EXPECT_TRUE(rejects("[1, 2]", 0, {"array", "expected an object"}));
  EXPECT_TRUE(rejects(one("5"), 0, {"tensor 't'", "expected an object"}));
}

TEST_F(SafetensorsCorrupt, DuplicateKey) {
  const std::string e = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  EXPECT_TRUE(rejects(R"({"t":)" + e + R"(,"t":)" + e + "}", 1, {"'t' twice"}));
}

TEST_F(SafetensorsCorrupt, MetadataNotStrings) {
  EXPECT_TRUE(rejects(R"({"__metadata__":{"a":1}})", 0, {"__metadata__", "'a'"}));
  EXPECT_TRUE(rejects(R"({"__metadata__":[]})", 0, {"__metadata__"}));
}

TEST_F(SafetensorsCorrupt, MissingOrIllTypedDtype) {
  EXPECT_TRUE(rejects(one(R"({"shape":[1],"data_offsets":[0,4]})"), 4, {"'t'", "missing 'dtype'"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})"), 4,
                      {"'t'", "'dtype'", "number"}));
}

TEST_F(SafetensorsCorrupt, UnknownDtype) {
  EXPECT_TRUE(rejects(one(R"({"dtype":"F31","shape":[1],"data_offsets":[0,4]})"), 4,
                      {"'t'", "unknown dtype 'F31'"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})"), 4,
                      {"'t'", "unknown dtype 'f32'"}));
}

TEST_F(SafetensorsCorrupt, MissingOrIllTypedShape) {
  EXPECT_TRUE(
      rejects(one(R"({"dtype":"F32","data_offsets":[0,4]})"), 4, {"'t'", "missing 'shape'"}));
  EXPECT_TRUE(
      rejects(one(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})"), 4, {"'t'", "'shape'"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})"), 4,
                      {"'t'", "'shape'", "integers"}));
}

TEST_F(SafetensorsCorrupt, NegativeDimension) {
  EXPECT_TRUE(
      rejects(one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), 4, {"'t'", "negative"}));
}

TEST_F(SafetensorsCorrupt, HugeShapeOverflows) {
  EXPECT_TRUE(
      rejects(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})"), 4,
              {"'t'", "too large"}));
}

TEST_F(SafetensorsCorrupt, MissingOrIllTypedOffsets) {
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1]})"), 4, {"'t'", "missing 'data_offsets'"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"), 8,
                      {"'t'", "'data_offsets'"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1],"data_offsets":{"a":0}})"), 4,
                      {"'t'", "'data_offsets'"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), 4,
                      {"'t'", "non-negative"}));
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1],"data_offsets":["0","4"]})"), 4,
                      {"'t'", "non-negative"}));
}

TEST_F(SafetensorsCorrupt, OffsetsEndBeforeBegin) {
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), 8,
                      {"'t'", "before begin"}));
}

TEST_F(SafetensorsCorrupt, OffsetsBeyondDataSection) {
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), 7,
                      {"'t'", "past the data section (7 bytes)"}));
  EXPECT_TRUE(rejects(
      one(R"({"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]})"),
      7, {"'t'"}));
}

TEST_F(SafetensorsCorrupt, ByteCountDisagreesWithShape) {
  EXPECT_TRUE(rejects(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), 8,
                      {"'t'", "holds 4 bytes", "needs 8"}));
  EXPECT_TRUE(
      rejects(one(R"({"dtype":"BF16","shape":[],"data_offsets":[0,4]})"), 4, {"'t'", "needs 2"}));
}

TEST_F(SafetensorsCorrupt, OverlappingTensors) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_TRUE(rejects(h, 8, {"'b'", "overlaps tensor 'a'"}));
}

TEST_F(SafetensorsCorrupt, TruncatedFile) {
  std::vector<float> v(100, 2.0f);
  write_safetensors(dir_ / "bad.safetensors",
                    {f32_tensor("x", {10}, v.data()), f32_tensor("last", {90}, v.data())});
  ASSERT_NO_THROW(SafetensorsFile::open(dir_ / "bad.safetensors"));
  auto size = std::filesystem::file_size(dir_ / "bad.safetensors");
  std::filesystem::resize_file(dir_ / "bad.safetensors", size - 1);
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir_ / "bad.safetensors"); },
                          {"bad.safetensors", "tensor 'last'", "truncated"}));
  std::filesystem::resize_file(dir_ / "bad.safetensors", 20);  // cut inside the header
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir_ / "bad.safetensors"); },
                          {"bad.safetensors", "past the end of the file"}));
}

// Random byte edits of a valid file: every open either succeeds with tensors inside the file or
// throws glm4::Error; it never crashes or reads outside the mapping.
TEST(SafetensorsCorruptRandom, MutatedFilesFailCleanly) {
  TempDir dir;
  std::vector<float> v(16, 1.0f);
  std::vector<int64_t> ids = {1, 2, 3};
  write_safetensors(dir / "ok.safetensors",
                    {f32_tensor("w", {4, 4}, v.data()),
                     {"ids", "I64", {3}, ids.data(), 24},
                     f32_tensor("s", {}, v.data())},
                    {{"format", "pt"}});
  const std::string good = slurp(dir / "ok.safetensors");
  std::mt19937 rng(1234);
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = good;
    int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % std::min<size_t>(bytes.size(), 8 + 200);  // mostly length and header
      const char pool[] = "0123456789[]{},:\"-9eE. \x00\xff";
      bytes[at] = rng() % 2 ? char(rng()) : pool[rng() % (sizeof(pool) - 1)];
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    std::ofstream(dir / "m.safetensors", std::ios::binary | std::ios::trunc) << bytes;
    try {
      auto f = SafetensorsFile::open(dir / "m.safetensors");
      ++opened;
      uint8_t sum = 0;
      for (const auto& t : f->tensors())
        for (size_t i = 0; i < t.nbytes; ++i) sum ^= uint8_t(t.data[i]);  // touches every byte
      (void)sum;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);  // most edits of length or JSON break the file
  EXPECT_GT(opened, 0);       // some (edits in data or metadata values) do not
}

// --- the writer -----------------------------------------------------------------------------

TEST(SafetensorsWriter, RejectsBadInputAndLeavesNoFile) {
  TempDir dir;
  std::vector<float> v(4);
  auto p = dir / "w.safetensors";
  EXPECT_TRUE(throws_with(
      [&] {
        write_safetensors(p, {f32_tensor("a", {2}, v.data()), f32_tensor("a", {2}, v.data())});
      },
      {"w.safetensors", "'a'", "twice"}));
  EXPECT_TRUE(throws_with(
      [&] {
        write_safetensors(p, {{"a", "F32", {3}, v.data(), 8}});
      },
      {"'a'", "nbytes 8", "need 12"}));
  EXPECT_TRUE(throws_with(
      [&] {
        write_safetensors(p, {{"a", "Q4", {1}, v.data(), 1}});
      },
      {"'a'", "unknown dtype 'Q4'"}));
  EXPECT_TRUE(throws_with(
      [&] {
        write_safetensors(p, {{"a", "F32", {-1}, v.data(), 0}});
      },
      {"'a'", "negative"}));
  EXPECT_TRUE(throws_with(
      [&] {
        write_safetensors(p, {{"__metadata__", "F32", {1}, v.data(), 4}});
      },
      {"invalid name"}));
  EXPECT_TRUE(throws_with(
      [&] {
        write_safetensors(p, {{"a", "F32", {1}, nullptr, 4}});
      },
      {"'a'", "null"}));
  EXPECT_TRUE(dir.list().empty());
}

TEST(SafetensorsWriter, IsAtomicAndReplacesTheOldFile) {
  TempDir dir;
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  write_safetensors(dir / "m.safetensors", {f32_tensor("t", {2}, a.data())});
  EXPECT_EQ(dir.list(), std::vector<std::string>{"m.safetensors"});
  auto old = SafetensorsFile::open(dir / "m.safetensors");
  write_safetensors(dir / "m.safetensors", {f32_tensor("t", {3}, b.data())});
  EXPECT_EQ(dir.list(), std::vector<std::string>{"m.safetensors"});  // no .tmp left behind
  EXPECT_EQ(read_f32(old->at("t")), a);  // a reader of the old file keeps its own inode
  EXPECT_EQ(read_f32(SafetensorsFile::open(dir / "m.safetensors")->at("t")), b);
}

}  // namespace
}  // namespace glm4
