// Tokenizers against ids from other implementations (tests/data/tokenizers), the hand-coded
// pre-tokenizer against Python's regex module, streaming decode, loaders and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include "io/tokenizer/pretokenizer.h"
#include "io/tokenizer/stream_decoder.h"
#include "io/tokenizer/utf8.h"
#include "tests/tokenizer_fixtures.h"

namespace glm4 {
namespace {

using testing::ids_of;
using testing::read_jsonl;
using testing::shared_tokenizer;
using testing::tokenizer_data;

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Checks every row of an expected.jsonl with the given tokenizer; chat rows belong to
// test_chat_template. Returns how many rows were checked here.
int check_rows(const Tokenizer& tok, const std::string& family, const std::string& label) {
  const auto rows = read_jsonl(tokenizer_data() / family / "expected.jsonl");
  const bool glm4 = tok.special_id("<sop>").has_value();
  const std::vector<int32_t> prefix = {*tok.special_id("[gMASK]"),
                                       *tok.special_id(glm4 ? "<sop>" : "sop")};
  int checked = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const std::string kind = r.at("kind");
    SCOPED_TRACE(label + " " + family + " row " + std::to_string(i) + " (" + kind + ")");
    if (kind == "chat_template_ids") continue;
    const std::string text = r.at("text");
    const auto expected = ids_of(r.at("ids"));
    if (kind == "encode_with_prefix") {
      EXPECT_EQ(concat(prefix, tok.encode(text)), expected);
      EXPECT_EQ(tok.decode(std::span(expected).subspan(2)), text);
    } else if (kind == "encode_ordinary") {
      EXPECT_EQ(tok.encode(text), expected);
      EXPECT_EQ(tok.decode(expected), text);
    } else if (kind == "tokenizer_json_encode_text_with_special_tokens") {
      EXPECT_EQ(tok.encode(text, /*allow_special=*/true), expected);
      EXPECT_EQ(tok.decode(expected), text);
    } else {
      ADD_FAILURE() << "unknown row kind " << kind;
    }
    ++checked;
  }
  return checked;
}

TEST(TokenizerVectors, ChatGlm2) {
  EXPECT_EQ(check_rows(shared_tokenizer("chatglm2"), "chatglm2", "sp"), 4);
}
TEST(TokenizerVectors, ChatGlm3) {
  EXPECT_EQ(check_rows(shared_tokenizer("chatglm3"), "chatglm3", "sp"), 1);
}
TEST(TokenizerVectors, Glm4Tiktoken) {
  EXPECT_EQ(check_rows(shared_tokenizer("glm4-tiktoken"), "glm4-tiktoken", "tiktoken"), 4);
}
TEST(TokenizerVectors, Glm4TokenizerJson) {
  EXPECT_EQ(check_rows(shared_tokenizer("glm4-json"), "glm4-0414", "json"), 7);
  // The tiktoken vectors hold for the tokenizer.json too (same vocabulary).
  EXPECT_EQ(check_rows(shared_tokenizer("glm4-json"), "glm4-tiktoken", "json"), 4);
}

TEST(Pretokenizer, MatchesPythonRegexModule) {
  const auto rows =
      read_jsonl(std::filesystem::path(GLM4_TEST_DATA) / "tokenizer" / "pretokenize_cases.jsonl");
  ASSERT_GT(rows.size(), 400u);
  for (const auto& r : rows) {
    const std::string text = r.at("text");
    const auto pieces = pretokenize_glm4(text);
    EXPECT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()),
              r.at("pieces").get<std::vector<std::string>>())
        << nlohmann::json(text).dump();
  }
}

TEST(Pretokenizer, KeepsInvalidBytes) {
  const std::string text = "ab\xE4\xB8 c\xFF\n";
  std::string joined;
  for (auto p : pretokenize_glm4(text)) joined += p;
  EXPECT_EQ(joined, text);
}

TEST(Utf8, RepairsLikePython) {
  // Expected values from Python's bytes.decode("utf-8", "replace").
  const std::string r = std::string(utf8::kReplacement);
  EXPECT_EQ(utf8::repair("\xE4\xB8"
                         "a"),
            r + "a");
  EXPECT_EQ(utf8::repair("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(utf8::repair("\xF0\x9F\x98"), r);
  EXPECT_EQ(utf8::repair("\xC0\xAF"), r + r);
  EXPECT_EQ(utf8::repair("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(utf8::repair("a\x80"
                         "b"),
            "a" + r + "b");
  EXPECT_EQ(utf8::repair("中文👋"), "中文👋");
}

TEST(Utf8, CharClasses) {
  using utf8::CharClass;
  EXPECT_EQ(utf8::char_class('a'), CharClass::kLetter);
  EXPECT_EQ(utf8::char_class(0x4E2D), CharClass::kLetter);   // 中
  EXPECT_EQ(utf8::char_class(0x20000), CharClass::kLetter);  // CJK Ext. B
  EXPECT_EQ(utf8::char_class('7'), CharClass::kNumber);
  EXPECT_EQ(utf8::char_class(0xBD), CharClass::kNumber);  // ½ (No)
  EXPECT_EQ(utf8::char_class(0x3000), CharClass::kSpace);
  EXPECT_EQ(utf8::char_class(0x1C), CharClass::kOther);     // not White_Space
  EXPECT_EQ(utf8::char_class(0x301), CharClass::kOther);    // combining acute (Mn)
  EXPECT_EQ(utf8::char_class(0x1F600), CharClass::kOther);  // emoji (So)
}

TEST(Tokenizer, SpecialIds) {
  const auto& glm4 = shared_tokenizer("glm4-tiktoken");
  const std::map<std::string, int32_t> glm4_ids = {
      {"<|endoftext|>", 151329},   {"[MASK]", 151330},          {"[gMASK]", 151331},
      {"[sMASK]", 151332},         {"<sop>", 151333},           {"<eop>", 151334},
      {"<|system|>", 151335},      {"<|user|>", 151336},        {"<|assistant|>", 151337},
      {"<|observation|>", 151338}, {"<|end_of_video|>", 151342}};
  for (const auto* tok : {&glm4, &shared_tokenizer("glm4-json")}) {
    for (const auto& [text, id] : glm4_ids) EXPECT_EQ(tok->special_id(text), id) << text;
    EXPECT_EQ(tok->special_id("<s>"), std::nullopt);
    EXPECT_EQ(tok->vocab_size(), 151343);
  }
  EXPECT_EQ(glm4.kind(), "tiktoken");
  EXPECT_EQ(shared_tokenizer("glm4-json").kind(), "bpe-json");

  const auto& cg3 = shared_tokenizer("chatglm3");
  const std::map<std::string, int32_t> cg3_ids = {{"<unk>", 0},
                                                  {"<s>", 1},
                                                  {"</s>", 2},
                                                  {"[MASK]", 64789},
                                                  {"[gMASK]", 64790},
                                                  {"[sMASK]", 64791},
                                                  {"sop", 64792},
                                                  {"eop", 64793},
                                                  {"<|system|>", 64794},
                                                  {"<|user|>", 64795},
                                                  {"<|assistant|>", 64796},
                                                  {"<|observation|>", 64797}};
  for (const auto& [text, id] : cg3_ids) EXPECT_EQ(cg3.special_id(text), id) << text;
  EXPECT_EQ(cg3.special_id("<sop>"), std::nullopt);
  EXPECT_EQ(cg3.special_id("▁"), std::nullopt);  // ordinary pieces are not special
  EXPECT_EQ(cg3.vocab_size(), 64798);
  const auto& cg2 = shared_tokenizer("chatglm2");
  EXPECT_EQ(cg2.special_id("eop"), 64793);
  EXPECT_EQ(cg2.special_id("<|user|>"), std::nullopt);
  EXPECT_EQ(cg2.vocab_size(), 64794);
}

TEST(Tokenizer, AllowSpecialControlsLiteralSpecials) {
  for (const char* name : {"glm4-tiktoken", "glm4-json", "chatglm3", "trained-sp"}) {
    SCOPED_TRACE(name);
    const auto& tok = shared_tokenizer(name);
    const std::string text = "a<|user|>b";
    const int32_t user = *tok.special_id("<|user|>");
    const auto plain = tok.encode(text);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), user), 0);
    EXPECT_EQ(tok.decode(plain), text);
    const auto special = tok.encode(text, true);
    EXPECT_EQ(std::count(special.begin(), special.end(), user), 1);
    EXPECT_EQ(tok.decode(special), text);
    // ChatGLM's sentencepiece gives each stretch of text its own dummy-prefix space.
    EXPECT_EQ(tok.decode(special, /*skip_special=*/true),
              std::string(name) == "chatglm3" ? "a b" : "ab");
  }
  // ChatGLM's "sop" is a word in text, never matched.
  const auto& cg3 = shared_tokenizer("chatglm3");
  const auto ids = cg3.encode("Aesop sop", true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 64792), 0);
}

TEST(Tokenizer, TiktokenAndTokenizerJsonAgree) {
  // Rank-based (tiktoken) and merge-list (tokenizer.json) BPE are different algorithms; on the
  // same vocabulary they must give the same ids.
  std::mt19937 rng(7);
  const std::vector<std::string> parts = {
      "Hello",           " world", "你好", "，", "  ",   "\n\n", "\t",     "123456",
      " 3.14",           "'s",     "'LL",  "😀",  "🦙", "é",    "Привет", "ـــ",
      "    def f(x):\n", "!!!",    "\r\n"};
  std::string text;
  for (int i = 0; i < 4000; ++i) text += parts[rng() % parts.size()];
  EXPECT_EQ(shared_tokenizer("glm4-tiktoken").encode(text),
            shared_tokenizer("glm4-json").encode(text));
}

TEST(Tokenizer, DecodeRejectsOutOfRangeIds) {
  for (const char* name : {"glm4-tiktoken", "glm4-json", "chatglm3", "trained-sp"}) {
    const auto& tok = shared_tokenizer(name);
    const std::vector<int32_t> bad = {tok.vocab_size()}, neg = {-1};
    EXPECT_THROW(tok.decode(bad), Error) << name;
    EXPECT_THROW(tok.decode(neg), Error) << name;
  }
}

TEST(Tokenizer, RoundTripsAllKinds) {
  const std::string text =
      "Hello, 世界! 👋🏽 tabs\tand  spaces \n\n 12345 ½ Ünïcödé\r\nend ";
  for (const char* name : {"glm4-tiktoken", "glm4-json", "trained-sp"}) {
    const auto& tok = shared_tokenizer(name);
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << name;
  }
  // ChatGLM's model adds a dummy-prefix space and strips it again.
  const auto& cg3 = shared_tokenizer("chatglm3");
  EXPECT_EQ(cg3.decode(cg3.encode(text)), text);
}

TEST(TokenizerLoader, PicksImplementationAndReportsMissingFiles) {
  EXPECT_EQ(load_tokenizer(tokenizer_data() / "glm4-tiktoken")->kind(), "tiktoken");
  EXPECT_EQ(load_tokenizer(tokenizer_data() / "chatglm2")->kind(), "sentencepiece");
  const auto dir = testing::scratch_dir("json_dir");
  std::filesystem::remove(dir / "tokenizer.json");
  std::filesystem::create_symlink(tokenizer_data() / "glm4-0414" / "tokenizer.derived.json",
                                  dir / "tokenizer.json");
  EXPECT_EQ(load_tokenizer(dir)->kind(), "bpe-json");
  try {
    load_tokenizer(tokenizer_data() / "glm4-0414");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("glm4-0414"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.model"), std::string::npos) << msg;
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerLoader, MalformedFilesNameFileAndLine) {
  const auto dir = testing::scratch_dir("bad_tiktoken");
  std::string ranks;
  for (int b = 0; b < 256; ++b)
    ranks += "QQ== " + std::to_string(b) + "\n";  // wrong but well-formed
  std::ofstream(dir / "tokenizer.model") << "IQ== 0\nIg== 1\nnot a rank line\n";
  EXPECT_NE(error_of([&] { load_tokenizer(dir); }).find("tokenizer.model:3"), std::string::npos)
      << error_of([&] { load_tokenizer(dir); });
  std::ofstream(dir / "tokenizer.model") << "IQ== 0\nIQ== 1\n";
  EXPECT_NE(error_of([&] { load_tokenizer(dir); }).find("tokenizer.model"), std::string::npos);
  std::ofstream(dir / "tokenizer.model") << ranks;  // 256 lines, all the same bytes
  EXPECT_NE(error_of([&] { load_tokenizer(dir); }).find("repeats"), std::string::npos)
      << error_of([&] { load_tokenizer(dir); });

  const auto jdir = testing::scratch_dir("bad_json");
  std::ofstream(jdir / "tokenizer.json") << "{\n  \"model\": {\n    \"vocab\": {,}\n  }\n}\n";
  const std::string msg = error_of([&] { load_tokenizer(jdir); });
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;

  const auto sdir = testing::scratch_dir("bad_sp");
  std::ofstream(sdir / "tokenizer.model") << std::string(
      "\x0a\x05\x0a\x03"
      "abc\x12\xff",
      9);
  EXPECT_NE(error_of([&] { load_tokenizer(sdir); }).find("tokenizer.model"), std::string::npos)
      << error_of([&] { load_tokenizer(sdir); });

  // Found by fuzz_sentencepiece: libsentencepiece's trie builder aborted the process on these.
  const std::string unk("\x0a\x09\x0a\x05<unk>\x18\x02", 11);  // piece "<unk>", type UNKNOWN
  for (const auto& [piece, what] :
       {std::pair{std::string("\x0a\x02\x0a\x00", 4), "piece 1 is empty"},
        std::pair{std::string("\x0a\x05\x0a\x03\x00\x00"
                              "a",
                              7),
                  "piece 1 holds a NUL byte"}}) {
    std::ofstream(sdir / "tokenizer.model", std::ios::binary) << unk + piece;
    const std::string msg = error_of([&] { load_sentencepiece(sdir / "tokenizer.model"); });
    EXPECT_NE(msg.find(std::string("tokenizer.model: ") + what), std::string::npos) << msg;
  }
}

// The named limits of tokenizer files: each refusal names the file and the limit.
TEST(TokenizerLoader, VocabularyAndMergeLimitsAreNamed) {
  const auto tdir = testing::scratch_dir("limit_tiktoken");
  std::ofstream(tdir / "tokenizer.model") << "IQ== 0\nIg== " << kMaxTokenizerVocab << "\n";
  std::string msg = error_of([&] { load_tiktoken(tdir / "tokenizer.model"); });
  EXPECT_NE(msg.find("tokenizer.model:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kMaxTokenizerVocab = 2097152"), std::string::npos) << msg;

  // tokenizer.json: an id at the limit, then one merge too many.
  nlohmann::json j = {
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", kMaxTokenizerVocab}}},
        {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", std::string(kGlm4PretokenizerRegex)}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}}};
  const auto jdir = testing::scratch_dir("limit_json");
  std::ofstream(jdir / "tokenizer.json") << j.dump();
  msg = error_of([&] { load_tokenizer_json(jdir / "tokenizer.json"); });
  EXPECT_NE(msg.find("tokenizer.json: model.vocab['a'] = 2097152"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kMaxTokenizerVocab"), std::string::npos) << msg;
  j["model"]["vocab"] = {{"a", 0}, {"aa", 1}};
  std::string merges = "[";
  for (int64_t i = 0; i <= kMaxTokenizerMerges; ++i) merges += i ? ",\"a a\"" : "\"a a\"";
  merges += "]";
  std::string text = j.dump();
  const std::string empty = "\"merges\":[]";
  text.replace(text.find(empty), empty.size(), "\"merges\":" + merges);
  std::ofstream(jdir / "tokenizer.json") << text;
  msg = error_of([&] { load_tokenizer_json(jdir / "tokenizer.json"); });
  EXPECT_NE(msg.find("model.merges has 2097153 entries (limit kMaxTokenizerMerges = 2097152)"),
            std::string::npos)
      << msg;

  // sentencepiece: one piece more than the limit (each piece: field 1 holding field 1 = "a").
  std::string proto;
  for (int64_t i = 0; i <= kMaxTokenizerVocab; ++i)
    proto += std::string(
        "\x0a\x03\x0a\x01"
        "a",
        5);
  const auto sdir = testing::scratch_dir("limit_sp");
  std::ofstream(sdir / "tokenizer.model", std::ios::binary) << proto;
  msg = error_of([&] { load_sentencepiece(sdir / "tokenizer.model"); });
  EXPECT_NE(msg.find("tokenizer.model: more than 2097152 pieces (limit kMaxTokenizerVocab)"),
            std::string::npos)
      << msg;
}

// A tiny tokenizer.json written here: the merge list, not ranks, decides (ignore_merges false).
TEST(TokenizerJson, MergeOrderAndAddedTokens) {
  // GPT-2 byte <-> unicode map, written out independently of the loader.
  std::vector<std::string> byte_char(256);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    std::string s;
    utf8::append(s, printable ? b : 256 + extra++);
    byte_char[b] = s;
  }
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char[b]] = b;
  const std::string G = byte_char[' '];  // "Ġ"
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {G, "w"}, {"e", "l"}};
  int next_id = 256;
  nlohmann::json merge_list = nlohmann::json::array();
  for (size_t i = 0; i < merges.size(); ++i) {
    vocab[merges[i].first + merges[i].second] = next_id++;
    // Both spellings of a merge: "a b" (older files) and ["a", "b"].
    if (i % 2)
      merge_list.push_back(merges[i].first + " " + merges[i].second);
    else
      merge_list.push_back({merges[i].first, merges[i].second});
  }
  nlohmann::json j = {
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", false}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", std::string(kGlm4PretokenizerRegex)}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens",
       {{{"id", 300}, {"content", "<|x|>"}, {"special", true}},
        {{"id", 301}, {"content", "<think>"}, {"special", false}}}}};
  const auto dir = testing::scratch_dir("tiny_json");
  std::ofstream(dir / "tokenizer.json") << j.dump();
  const auto tok = load_tokenizer(dir);
  const auto id = [](char c) { return int32_t(uint8_t(c)); };
  EXPECT_EQ(tok->encode("hello"), std::vector<int32_t>{259});
  // h e l: (h,e) has rank 0 and wins over (e,l) at rank 5.
  EXPECT_EQ(tok->encode("hel"), (std::vector<int32_t>{256, id('l')}));
  EXPECT_EQ(tok->encode("ell"), (std::vector<int32_t>{id('e'), 257}));
  EXPECT_EQ(tok->encode(" world"), (std::vector<int32_t>{260, id('o'), id('r'), id('l'), id('d')}));
  EXPECT_EQ(
      tok->encode("a<think>b<|x|>"),
      (std::vector<int32_t>{id('a'), 301, id('b'), id('<'), id('|'), id('x'), id('|'), id('>')}));
  EXPECT_EQ(tok->encode("<|x|><think>", true), (std::vector<int32_t>{300, 301}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{300, 301}, true), "<think>");
  EXPECT_EQ(tok->vocab_size(), 302);
  EXPECT_EQ(tok->special_id("<|x|>"), 300);

  // Unsupported settings are refused with the field named.
  auto refuse = [&](const std::string& field, nlohmann::json bad) {
    std::ofstream(dir / "tokenizer.json") << bad.dump();
    EXPECT_NE(error_of([&] { load_tokenizer(dir); }).find(field), std::string::npos)
        << field << ": " << error_of([&] { load_tokenizer(dir); });
  };
  auto bad = j;
  bad["normalizer"] = {{"type", "NFC"}};
  refuse("normalizer", bad);
  bad = j;
  bad["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  refuse("regex", bad);
  bad = j;
  bad["model"]["merges"][1] = "l q";
  refuse("merges[1]", bad);
  bad = j;
  bad["added_tokens"][0]["lstrip"] = true;
  refuse("lstrip", bad);
}

// --- streaming -------------------------------------------------------------------------------

// Pushes ids one by one: every chunk is valid UTF-8, what is out so far is a prefix of
// decode(all), and flush completes it exactly. Also, for every split point p, a fresh stream of
// ids[:p] yields exactly decode(ids[:p]).
void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  const std::string full = tok.decode(ids, skip_special);
  StreamDecoder stream(tok, skip_special);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string chunk = stream.push(ids[i]);
    ASSERT_TRUE(utf8::is_valid(chunk)) << "after id " << i;
    out += chunk;
    ASSERT_EQ(full.compare(0, out.size(), out), 0) << "after id " << i;
  }
  out += stream.flush();
  ASSERT_EQ(out, full);
  for (size_t p = 0; p <= ids.size(); ++p) {
    StreamDecoder part(tok, skip_special);
    std::string s;
    for (size_t i = 0; i < p; ++i) s += part.push(ids[i]);
    s += part.flush();
    ASSERT_EQ(s, tok.decode(std::span(ids).first(p), skip_special)) << "split at " << p;
  }
}

TEST(StreamDecoder, ConcatenationEqualsDecodeForAllKinds) {
  // clang-format counts the columns of these emoji sequences differently from run to run.
  // clang-format off
  const std::string text =
      "你好👋！很高兴见到你 😶‍🌫️ emoji 🦙🦙 and Chinese 晚上睡不着应该怎么办 \n\n  "
      "code:\tx = 1 ½ 🇺🇳 end";
  // clang-format on
  for (const char* name : {"glm4-tiktoken", "glm4-json", "chatglm3", "trained-sp"}) {
    SCOPED_TRACE(name);
    const auto& tok = shared_tokenizer(name);
    auto ids = tok.encode("<|assistant|>" + text + "<|user|>", true);
    check_stream(tok, ids, false);
    check_stream(tok, ids, true);
  }
}

TEST(StreamDecoder, RandomIdsIncludingBrokenCharacters) {
  std::mt19937 rng(3);
  for (const char* name : {"glm4-tiktoken", "chatglm3", "trained-sp"}) {
    SCOPED_TRACE(name);
    const auto& tok = shared_tokenizer(name);
    // Byte tokens (tiktoken ranks of single bytes; sp byte pieces <0x..>) mixed with others.
    const std::vector<int32_t> bytes_like =
        tok.kind() == "tiktoken" ? tok.encode("\xE4\xB8\xAD\xF0\x9F\x91\x8B")
                                 : std::vector<int32_t>{231, 187, 176, 243, 162, 148, 142};
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int32_t> ids;
      for (int i = 0; i < 40; ++i) {
        const int pick = rng() % 4;
        ids.push_back(pick == 0 ? int32_t(rng() % tok.vocab_size())
                                : bytes_like[rng() % bytes_like.size()]);
      }
      check_stream(tok, ids, trial % 2 == 1);
    }
  }
}

// A megabyte of pseudo-English round-trips (its speed is measured by benchmarks/bench_tokenizer).
TEST(TokenizerLongText, OneMegabyteRoundTrips) {
  // Pseudo-English: common words plus invented ones that need real BPE merging.
  const std::vector<std::string> common = {"the", "of",   "and", "to",    "in",
                                           "is",  "that", "for", "it",    "with",
                                           "as",  "was",  "on",  "model", "training"};
  const std::vector<std::string> syll = {"ka", "tor", "mi", "zen", "qua", "lin", "dro", "pex"};
  std::mt19937 rng(11);
  std::string text;
  while (text.size() < (1u << 20)) {
    if (rng() % 3 == 0) {
      std::string w;
      for (int k = 1 + rng() % 4; k > 0; --k) w += syll[rng() % syll.size()];
      text += w;
    } else {
      text += common[rng() % common.size()];
    }
    text += rng() % 12 == 0 ? ", " : (rng() % 20 == 0 ? ".\n" : " ");
  }
  for (const char* name : {"glm4-tiktoken", "glm4-json"}) {
    const auto& tok = shared_tokenizer(name);
    const auto ids = tok.encode(text);
    EXPECT_LT(ids.size(), text.size() / 3) << name;  // merged, not byte by byte
    EXPECT_EQ(tok.decode(ids), text) << name;
  }
}

// --- sentencepiece training ------------------------------------------------------------------

TEST(SpTrainer, TrainedTokenizerRoundTripsAndKnowsSpecials) {
  const auto dir = testing::trained_sp_dir();
  ASSERT_TRUE(std::filesystem::exists(dir / "tokenizer.model"));
  const auto config = nlohmann::json::parse(std::ifstream(dir / "tokenizer_config.json"));
  const auto& tok = shared_tokenizer("trained-sp");
  EXPECT_EQ(tok.kind(), "sentencepiece");
  EXPECT_EQ(tok.vocab_size(), 320);
  std::set<int32_t> ids;
  for (const char* s : {"<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
                        "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"}) {
    const auto id = tok.special_id(s);
    ASSERT_TRUE(id) << s;
    EXPECT_EQ(config.at("special_tokens").at(s), *id) << s;
    EXPECT_EQ(tok.encode(s, true), std::vector<int32_t>{*id}) << s;
    ids.insert(*id);
  }
  EXPECT_EQ(ids.size(), 10u);
  std::istringstream corpus(testing::tiny_corpus());
  std::string line;
  while (std::getline(corpus, line)) ASSERT_EQ(tok.decode(tok.encode(line)), line);
  const std::string unseen =
      "Zebra 世界 🦙 x\n\n  y\t7";  // byte fallback for unseen characters
  EXPECT_EQ(tok.decode(tok.encode(unseen)), unseen);
  EXPECT_LT(tok.encode("the model learns").size(), std::string("the model learns").size());
}

TEST(SpTrainer, IsDeterministic) {
  const auto first = testing::trained_sp_dir();  // also writes the corpus
  const auto corpus = testing::scratch_dir("corpus") / "corpus.txt";
  ASSERT_TRUE(std::filesystem::exists(corpus));
  const auto again = testing::scratch_dir("trained_sp_again");
  train_sentencepiece({corpus}, 320, again);
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(again / "tokenizer.model"), read(first / "tokenizer.model"));
}

TEST(SpTrainer, ReportsBadInputs) {
  testing::trained_sp_dir();  // writes the corpus
  const auto out = testing::scratch_dir("trained_bad");
  EXPECT_NE(
      error_of([&] { train_sentencepiece({out / "missing.txt"}, 320, out); }).find("missing.txt"),
      std::string::npos);
  EXPECT_THROW(train_sentencepiece({}, 320, out), Error);
  EXPECT_THROW(train_sentencepiece({testing::scratch_dir("corpus") / "corpus.txt"}, 100, out),
               Error);
}

}  // namespace
}  // namespace glm4
