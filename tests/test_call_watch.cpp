// tool_choice "auto": CallWatch leaves a reply free until the model opens a call (GLM-4.5's
// <tool_call>, also inside a token; GLM-4's turn that starts with a name), masks the call by its
// grammar to its end, then frees the reply again.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "infer/grammar/call_watch.h"
#include "infer/grammar/tool_call.h"

namespace glm4::grammar {
namespace {

const std::string kWeather = R"({"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
  "required": ["city"]}}})";

enum Id : int32_t {
  kOpen,
  kName,
  kNewline,
  kKey,
  kCity,
  kKeyEnd,
  kValue,
  kParis,
  kValueEnd,
  kClose,
  kHello,
  kXyz,
  kAssistant,
  kBrace,
  kCityJson,
  kColon,
  kP,
  kBraceEnd,
  kGet,
  kWeatherTail,
  kEnd,
  kInlineOpen,
  kCount
};

std::shared_ptr<const TokenTrie> trie() {
  std::vector<std::optional<std::string>> bytes(kCount);
  bytes[kOpen] = "<tool_call>", bytes[kName] = "get_weather", bytes[kNewline] = "\n";
  bytes[kKey] = "<arg_key>", bytes[kCity] = "city", bytes[kKeyEnd] = "</arg_key>";
  bytes[kValue] = "<arg_value>", bytes[kParis] = "Paris", bytes[kValueEnd] = "</arg_value>";
  bytes[kClose] = "</tool_call>", bytes[kHello] = "Hello", bytes[kXyz] = "xyz";
  bytes[kBrace] = "{", bytes[kCityJson] = "\"city\"", bytes[kColon] = ":", bytes[kP] = " \"P\"";
  bytes[kBraceEnd] = "}", bytes[kGet] = "get", bytes[kWeatherTail] = "_weather";
  bytes[kInlineOpen] = "ok<tool_call>get";
  return std::make_shared<const TokenTrie>(bytes);
}

// Which of `ids` the watch's mask leaves drawable now.
std::vector<bool> allowed(CallWatch& w, const std::vector<int32_t>& ids) {
  std::vector<float> logits(kCount, 0.0f);
  w.mask(logits);
  std::vector<bool> out;
  for (int32_t id : ids) out.push_back(std::isfinite(logits[size_t(id)]));
  return out;
}

CallWatch glm45_watch() {
  return CallWatch(tool_call_grammar(ChatFormat::Glm45, {kWeather}, ""), trie(), {kEnd},
                   CallOpening{"<tool_call>", false, {}});
}

TEST(CallWatch, Glm45CallIsConstrainedFromItsOpeningToItsEnd) {
  CallWatch w = glm45_watch();
  w.accept(kHello);
  EXPECT_FALSE(w.in_call());
  EXPECT_EQ(allowed(w, {kXyz, kEnd}), (std::vector<bool>{true, true}));  // free text
  w.accept(kOpen);
  ASSERT_TRUE(w.in_call());
  EXPECT_EQ(allowed(w, {kName, kXyz, kEnd, kHello}),
            (std::vector<bool>{true, false, false, false}));
  for (int32_t id : {kName, kNewline, kKey}) w.accept(id);
  EXPECT_EQ(allowed(w, {kCity, kXyz}), (std::vector<bool>{true, false}));  // only schema keys
  for (int32_t id : {kCity, kKeyEnd, kNewline, kValue, kParis, kValueEnd, kNewline}) {
    ASSERT_TRUE(w.in_call());
    w.accept(id);
  }
  EXPECT_EQ(allowed(w, {kClose, kKey, kEnd}), (std::vector<bool>{true, false, false}));
  w.accept(kClose);
  EXPECT_FALSE(w.in_call());
  EXPECT_EQ(allowed(w, {kXyz, kEnd, kOpen}), (std::vector<bool>{true, true, true}));
  w.accept(kOpen);  // a second call is watched for too
  EXPECT_TRUE(w.in_call());
}

TEST(CallWatch, Glm45OpeningInsideATokenStartsTheCallThere) {
  CallWatch w = glm45_watch();
  w.accept(kInlineOpen);  // "ok<tool_call>get": the name has begun
  ASSERT_TRUE(w.in_call());
  EXPECT_EQ(allowed(w, {kWeatherTail, kName, kXyz}), (std::vector<bool>{true, false, false}));
}

TEST(CallWatch, Glm45OpeningSplitAcrossTokensIsFound) {
  std::vector<std::optional<std::string>> bytes(4);
  bytes[0] = "a<tool", bytes[1] = "_call>", bytes[2] = "get_weather", bytes[3] = "x";
  auto t = std::make_shared<const TokenTrie>(bytes);
  CallWatch w(tool_call_grammar(ChatFormat::Glm45, {kWeather}, ""), t, {},
              CallOpening{"<tool_call>", false, {}});
  w.accept(0);
  EXPECT_FALSE(w.in_call());
  w.accept(1);
  ASSERT_TRUE(w.in_call());
  std::vector<float> logits(4, 0.0f);
  w.mask(logits);
  EXPECT_TRUE(std::isfinite(logits[2]));
  EXPECT_FALSE(std::isfinite(logits[3]));
}

CallWatch glm4_watch() {
  return CallWatch(tool_call_grammar(ChatFormat::Glm4, {kWeather}, ""), trie(), {kEnd},
                   CallOpening{"", true, {kAssistant}});
}

TEST(CallWatch, Glm4AnswerThatStartsWithNewlineStaysFree) {
  CallWatch w = glm4_watch();
  w.accept(kNewline);
  EXPECT_FALSE(w.in_call());
  w.accept(kGet);  // not a turn's first token: text
  EXPECT_FALSE(w.in_call());
  EXPECT_EQ(allowed(w, {kXyz, kEnd}), (std::vector<bool>{true, true}));
}

TEST(CallWatch, Glm4TurnThatStartsWithANameIsACall) {
  CallWatch w = glm4_watch();
  w.accept(kGet);
  ASSERT_TRUE(w.in_call());
  EXPECT_EQ(allowed(w, {kWeatherTail, kXyz, kEnd}), (std::vector<bool>{true, false, false}));
  for (int32_t id : {kWeatherTail, kNewline, kBrace}) w.accept(id);
  EXPECT_EQ(allowed(w, {kCityJson, kBraceEnd}), (std::vector<bool>{true, false}));  // required
  for (int32_t id : {kCityJson, kColon, kP}) w.accept(id);
  ASSERT_TRUE(w.in_call());
  w.accept(kBraceEnd);
  EXPECT_FALSE(w.in_call());
  // The call was the turn: only the reply's end or the next turn may follow.
  EXPECT_EQ(allowed(w, {kEnd, kAssistant, kHello, kNewline}),
            (std::vector<bool>{true, true, false, false}));
  w.accept(kAssistant);  // the next turn: an answer this time
  w.accept(kHello);
  EXPECT_FALSE(w.in_call());
  w.accept(kAssistant);
  w.accept(kName);
  EXPECT_TRUE(w.in_call());
}

}  // namespace
}  // namespace glm4::grammar
