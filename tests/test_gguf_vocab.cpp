// GGUF tokenizer metadata of the real GLM tokenizers in tests/data/tokenizers and of
// models/glm4-tiny: model, pre-tokenizer, sizes, token types, merges (the tiktoken merges rebuilt
// from the ranks must be among tokenizer.json's) and special ids, as llama.cpp's converter sets
// them.
#include <gtest/gtest.h>

#include <set>

#include "export/gguf_vocab.h"
#include "export/gguf_writer.h"
#include "support/temp_dir.h"
#include "tests/support/gguf_reader.h"
#include "tests/support/repo_paths.h"

namespace glm4 {
namespace {

using glm4::testing::TempDir;
namespace fs = std::filesystem;

const std::string kTok = std::string(GLM4_TEST_DATA) + "/tokenizers/";

int32_t id_of(const GgufVocab& v, const std::string& kind) {
  auto id = v.special(kind);
  return id ? *id : -1;
}

bool add_bos(const GgufVocab& v) {
  for (const auto& [k, value] : v.add_special)
    if (k == "bos") return value;
  return true;  // llama.cpp's default for SPM
}

// GLM-4-0414 tokenizer.json (derived from the tiktoken ranks, see its SOURCES.md).
GgufVocab glm4_json_vocab(const TempDir& dir) {
  fs::create_symlink(kTok + "glm4-0414/tokenizer.derived.json", dir / "tokenizer.json");
  return build_gguf_vocab(dir.path(), GgufVocabStyle::Glm4, 151552);
}

TEST(GgufVocab, Glm4TokenizerJson) {
  TempDir dir;
  const GgufVocab v = glm4_json_vocab(dir);
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "glm4");
  ASSERT_EQ(v.tokens.size(), 151552u);
  ASSERT_EQ(v.types.size(), 151552u);
  EXPECT_TRUE(v.scores.empty());
  EXPECT_EQ(v.tokens[0], "!");
  EXPECT_EQ(v.types[0], kTokNormal);
  EXPECT_EQ(v.tokens[151329], "<|endoftext|>");
  EXPECT_EQ(v.types[151329], kTokControl);
  EXPECT_EQ(v.tokens[151336], "<|user|>");
  EXPECT_EQ(v.tokens[151342], "<|end_of_video|>");
  EXPECT_EQ(v.tokens[151343], "[PAD151343]");
  EXPECT_EQ(v.types[151551], kTokUnused);
  ASSERT_EQ(v.merges.size(), 318088u);
  EXPECT_EQ(v.merges[0], "\xC4\xA0 \xC4\xA0");  // "Ġ Ġ"
  EXPECT_EQ(id_of(v, "eos"), 151329);
  EXPECT_EQ(id_of(v, "eot"), 151336);
  EXPECT_EQ(id_of(v, "unk"), 151329);
  EXPECT_EQ(id_of(v, "bos"), 151329);
  EXPECT_TRUE(v.chat_template.empty());
}

TEST(GgufVocab, Glm4TiktokenRebuildsMergesThatTokenizerJsonAlsoHas) {
  const GgufVocab v = build_gguf_vocab(kTok + "glm4-tiktoken", GgufVocabStyle::ChatGlm, 151552);
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "chatglm-bpe");
  ASSERT_EQ(v.tokens.size(), 151552u);
  EXPECT_EQ(v.tokens[151331], "[gMASK]");
  EXPECT_EQ(v.types[151331], kTokControl);
  EXPECT_EQ(v.types[151400], kTokUnused);
  EXPECT_EQ(id_of(v, "eos"), 151329);
  EXPECT_EQ(id_of(v, "eot"), 151336);
  EXPECT_EQ(id_of(v, "unk"), 151329);
  EXPECT_EQ(id_of(v, "pad"), 151329);  // config.json pad_token_id
  EXPECT_EQ(id_of(v, "bos"), -1);      // ChatGLMModel sets none
  EXPECT_FALSE(add_bos(v));
  // One merge for every multi-byte token that two lower-ranked parts build.
  EXPECT_GT(v.merges.size(), 150000u);
  EXPECT_LT(v.merges.size(), 151329u - 256u + 1);
  EXPECT_EQ(v.merges[0], "\xC4\xA0 \xC4\xA0");

  TempDir dir;
  const GgufVocab j = glm4_json_vocab(dir);
  for (size_t id = 0; id < 151329; ++id) ASSERT_EQ(v.tokens[id], j.tokens[id]) << id;
  const std::set<std::string> json_merges(j.merges.begin(), j.merges.end());
  for (const std::string& m : v.merges) ASSERT_TRUE(json_merges.count(m)) << m;
}

TEST(GgufVocab, MergesFromRanksSkipTokensNoTwoPartMergeReaches) {
  std::vector<std::optional<std::string>> ranks;
  for (int b = 0; b < 256; ++b) ranks.push_back(std::string(1, char(b)));
  ranks.push_back(std::string("ab"));   // 256: a + b
  ranks.push_back(std::string("abc"));  // 257: ab + c
  ranks.push_back(std::string("xyz"));  // 258: no "xy" or "yz" token
  ranks.push_back(std::string(" a"));   // 259: the space is written as U+0120
  size_t unreachable = 0;
  const std::vector<std::string> m = merges_from_ranks(ranks, &unreachable);
  EXPECT_EQ(m, (std::vector<std::string>{"a b", "ab c", "\xC4\xA0 a"}));
  EXPECT_EQ(unreachable, 1u);
  EXPECT_EQ(to_byte_level(std::string("\n\xff", 2)), "\xC4\x8A\xC3\xBF");  // Ċ ÿ
}

TEST(GgufVocab, ChatGlm3SentencepieceTakesTheChatglm3Path) {
  const GgufVocab v = build_gguf_vocab(kTok + "chatglm3", GgufVocabStyle::ChatGlm, 65024);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.pre, "chatglm-spm");
  ASSERT_EQ(v.tokens.size(), 65024u);
  ASSERT_EQ(v.scores.size(), 65024u);
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.tokens[1], "<bos>");
  EXPECT_EQ(v.tokens[2], "<eos>");
  EXPECT_EQ(v.tokens[64790], "[gMASK]");
  EXPECT_EQ(v.types[64790], kTokControl);
  EXPECT_EQ(v.tokens[64792], "sop");
  EXPECT_EQ(v.types[64792], kTokControl);
  EXPECT_EQ(v.tokens[64795], "<|user|>");
  EXPECT_EQ(v.tokens[64797], "<|observation|>");
  EXPECT_EQ(v.tokens[64798], "[PAD64798]");
  EXPECT_EQ(v.types[64798], kTokUnused);
  EXPECT_EQ(v.scores[64790], 0.0f);
  EXPECT_NE(v.scores[1000], 0.0f);
  EXPECT_FALSE(add_bos(v));
  EXPECT_NE(v.chat_template.find("[gMASK]sop"), std::string::npos);

  const GgufVocab v2 = build_gguf_vocab(kTok + "chatglm2", GgufVocabStyle::ChatGlm, 65024);
  EXPECT_EQ(v2.tokens[64793], "eop");
  EXPECT_EQ(v2.tokens[64794], "[PAD64794]");  // ChatGLM2 has five specials
}

TEST(GgufVocab, EmbeddedModelIsSpmWithScoresUserDefinedSpecialsAndNoSpacePrefix) {
  const std::string& dir = glm4::testing::kModel;
  const GgufVocab v = build_gguf_vocab(dir, GgufVocabStyle::Glm4, 4000);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.pre, "default");
  ASSERT_EQ(v.tokens.size(), 4000u);
  ASSERT_EQ(v.scores.size(), 4000u);
  EXPECT_EQ(v.tokens[5], "[gMASK]");
  EXPECT_EQ(v.types[5], kTokUserDefined);
  EXPECT_EQ(v.tokens[10], "<|user|>");
  EXPECT_EQ(id_of(v, "eos"), 3);
  EXPECT_EQ(id_of(v, "eot"), 10);
  EXPECT_EQ(id_of(v, "pad"), 0);
  EXPECT_EQ(v.types[size_t(id_of(v, "unk"))], kTokUnknown);
  EXPECT_EQ(v.add_space_prefix, std::optional<bool>(false));
  EXPECT_FALSE(add_bos(v));
  int bytes = 0;
  for (int32_t t : v.types) bytes += t == kTokByte;
  EXPECT_EQ(bytes, 256);  // byte_fallback pieces <0x00>..<0xFF>
}

TEST(GgufVocab, MetadataKeysAsGgufPyNamesThem) {
  TempDir dir;
  const GgufVocab v = build_gguf_vocab(kTok + "chatglm3", GgufVocabStyle::ChatGlm, 65024);
  GgufWriter w;
  add_vocab_metadata(v, w);
  w.write(dir / "v.gguf");
  auto f = GgufFile::open(dir / "v.gguf");
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "chatglm-spm");
  EXPECT_EQ(f->at("tokenizer.ggml.tokens", GgufType::Array).items.size(), 65024u);
  EXPECT_EQ(f->at("tokenizer.ggml.scores", GgufType::Array).elem, GgufType::F32);
  EXPECT_EQ(f->at("tokenizer.ggml.token_type", GgufType::Array).elem, GgufType::I32);
  EXPECT_FALSE(f->at("tokenizer.ggml.add_bos_token", GgufType::Bool).b);
  EXPECT_EQ(f->get_string("tokenizer.chat_template"), v.chat_template);
  EXPECT_EQ(f->find("tokenizer.ggml.merges"), nullptr);
}

}  // namespace
}  // namespace glm4
