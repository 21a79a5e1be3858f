// kMaxJsonDepth: every JSON text glm4 reads from a file (config.json, adapter configs,
// tokenizer.json, tokenizer_config.json, safetensors headers, data records, the training state's
// config) is refused above 64 levels of nesting before it is parsed, naming the file and the limit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "base/check.h"
#include "dataset/records.h"
#include "io/file/json_depth.h"
#include "io/file/json_file.h"
#include "io/safetensors.h"
#include "io/tokenizer/tokenizer.h"
#include "model/config.h"
#include "tests/support/temp_dir.h"

namespace glm4 {
namespace {

using testing::TempDir;
using testing::throws_with;

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("1"), 0);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[\"[[["})"),
            1);  // brackets and escaped quotes in strings
  EXPECT_EQ(json_nesting_depth(nested(kMaxJsonDepth)), kMaxJsonDepth);
  EXPECT_NO_THROW(check_json_depth(nested(kMaxJsonDepth), "x"));
  EXPECT_TRUE(throws_with([] { check_json_depth(nested(kMaxJsonDepth + 1), "x.json"); },
                          {"x.json", "65 levels", "kMaxJsonDepth = 64"}));
}

TEST(JsonDepth, JsonFilesAreCheckedBeforeParsing) {
  TempDir dir;
  std::ofstream(dir / "config.json") << R"({"architectures": )" << nested(100000) << "}";
  EXPECT_TRUE(throws_with([&] { load_model_config(dir / "config.json"); },
                          {"config.json", "kMaxJsonDepth"}));
  EXPECT_TRUE(
      throws_with([&] { read_json_file(dir / "config.json"); }, {"config.json", "100001 levels"}));
  std::ofstream(dir / "tokenizer.json") << R"({"model": )" << nested(1000) << "}";
  EXPECT_TRUE(throws_with([&] { load_tokenizer_json(dir / "tokenizer.json"); },
                          {"tokenizer.json", "kMaxJsonDepth"}));
}

// The tokenizer_config.json beside a tiktoken or sentencepiece tokenizer.model.
TEST(JsonDepth, TokenizerConfigsAreChecked) {
  TempDir dir;
  std::filesystem::create_directories(dir / "tiktoken");
  std::filesystem::create_directories(dir / "sp");
  const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string ranks;  // every single byte, base64-encoded, ranked by value
  for (int b = 0; b < 256; ++b) ranks += str_cat(b64[b >> 2], b64[(b & 3) << 4], "== ", b, "\n");
  std::ofstream(dir / "tiktoken" / "tokenizer.model") << ranks;
  std::ofstream(dir / "tiktoken" / "tokenizer_config.json")
      << R"({"added_tokens_decoder": )" << nested(1000) << "}";
  EXPECT_TRUE(throws_with([&] { load_tiktoken(dir / "tiktoken" / "tokenizer.model"); },
                          {"tokenizer_config.json", "kMaxJsonDepth"}));
  // Pieces "<unk>" (type UNKNOWN) and "a": enough for the config to be read.
  std::ofstream(dir / "sp" / "tokenizer.model", std::ios::binary) << std::string(
      "\x0a\x09\x0a\x05<unk>\x18\x02"
      "\x0a\x03\x0a\x01"
      "a",
      16);
  std::ofstream(dir / "sp" / "tokenizer_config.json")
      << R"({"tokenizer_class": )" << nested(1000) << "}";
  EXPECT_TRUE(throws_with([&] { load_sentencepiece(dir / "sp" / "tokenizer.model"); },
                          {"tokenizer_config.json", "kMaxJsonDepth"}));
}

TEST(JsonDepth, SafetensorsHeadersAndRecordsAreChecked) {
  TempDir dir;
  const std::string header = R"({"__metadata__": )" + nested(5000) + "}";
  std::string file(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(file.data(), &len, 8);
  std::ofstream(dir / "deep.safetensors", std::ios::binary) << file << header;
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir / "deep.safetensors"); },
                          {"deep.safetensors", "header", "kMaxJsonDepth"}));
  EXPECT_TRUE(throws_with([&] { parse_record(R"({"text": "a", "x": )" + nested(200) + "}"); },
                          {"JSON nests deeper than 64 levels (limit kMaxJsonDepth)"}));
  EXPECT_EQ(parse_record(R"({"text": "a", "x": )" + nested(60) + "}").text, "a");
}

// Found by fuzz_safetensors_index: a number beyond double's range made nlohmann throw
// out_of_range, which read_json_file did not turn into glm4::Error (it escaped the loader).
TEST(JsonFiles, NumberOverflowIsAnErrorNamingTheFile) {
  TempDir dir;
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"a": 1e999999}})";
  EXPECT_TRUE(throws_with([&] { read_json_file(dir / "model.safetensors.index.json"); },
                          {"model.safetensors.index.json", "invalid JSON", "number overflow"}));
  EXPECT_TRUE(throws_with([&] { parse_record(R"({"input_ids": [1e999999]})"); },
                          {"invalid JSON", "number overflow"}));
}

}  // namespace
}  // namespace glm4
