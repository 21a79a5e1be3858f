// Forced tool calls' grammars: GLM-4's JSON arguments (Glm4, Glm40414) and Glm45 / Glm47's
// <arg_key> / <arg_value> pairs accept the arguments the tool's parameters schema allows and
// reject the others; a free name is one of the tools'.
#include <gtest/gtest.h>

#include "base/check.h"
#include "infer/grammar/automaton.h"
#include "infer/grammar/tool_call.h"

namespace glm4::grammar {
namespace {

const std::string kWeather = R"({"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"},
  "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]}},
  "required": ["city"]}}})";
const std::string kTime = R"({"type": "function", "function": {"name": "get_time"}})";
const std::string kOdd = R"({"type": "function", "function": {"name": "odd",
  "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}}}})";

void expect(ChatFormat format, const std::vector<std::string>& tools, const std::string& name,
            const std::vector<std::string>& good, const std::vector<std::string>& bad) {
  Automaton a(tool_call_grammar(format, tools, name));
  for (const std::string& t : good) EXPECT_TRUE(a.matches(t)) << "should accept " << t;
  for (const std::string& t : bad) EXPECT_FALSE(a.matches(t)) << "should reject " << t;
}

TEST(ToolCallGrammar, Glm4NamedArgumentsFollowTheSchema) {
  expect(ChatFormat::Glm4, {kTime, kWeather}, "get_weather",
         {R"({"city": "Paris"})", R"({"city":"Paris","days":3,"unit":"f"})",
          R"({"city": "Oslo", "unit": "c"})"},
         {R"({})", R"({"days": 3})", R"({"city": 3})", R"({"city": "P", "days": "3"})",
          R"({"city": "P", "unit": "k"})", R"({"city": "P", "other": 1})", R"({"city": "P")",
          R"(get_weather
{"city": "P"})",
          "[]", R"({"city": "P"} x)", R"( {"city": "P"})", "\n{\"city\": \"P\"}"});
}

TEST(ToolCallGrammar, Glm4WithoutParametersTakesAnyObject) {
  expect(ChatFormat::Glm4, {kTime, kWeather}, "get_time", {"{}", R"({"tz": "UTC", "n": [1]})"},
         {"[]", "\"x\"", "{", "3"});
  // A keyword the schema compiler does not support: any object, the call stays well formed.
  expect(ChatFormat::Glm4, {kOdd}, "odd", {R"({"x": "b"})", R"({"y": 1})"}, {"x", "[1]"});
}

TEST(ToolCallGrammar, Glm4FreeNameIsOneOfTheTools) {
  expect(ChatFormat::Glm4, {kTime, kWeather}, "",
         {"get_time\n{}", "get_weather\n{\"city\": \"Rome\"}"},
         {"get_weather\n{}", "get_date\n{}", "get_time{}", "{\"city\": \"Rome\"}",
          "get_time\n{}\nget_time\n{}"});
}

TEST(ToolCallGrammar, Glm40414WritesTheNameWithItsSpace) {
  expect(ChatFormat::Glm40414, {kTime, kWeather}, "",
         {"get_time \n{}", "get_weather \n{\"city\": \"Rome\"}"},
         {"get_time\n{}", "get_weather \n{}", "get_time {}"});
  expect(ChatFormat::Glm40414, {kTime, kWeather}, "get_weather", {R"({"city": "Paris"})"},
         {R"({})", "get_weather \n{\"city\": \"P\"}"});
}

TEST(ToolCallGrammar, Glm45PairsFollowTheSchema) {
  const std::string city = "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n";
  expect(ChatFormat::Glm45, {kWeather}, "get_weather",
         {city + "</tool_call>",
          city + "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
          city + "<arg_key>unit</arg_key>\n<arg_value>f</arg_value>\n</tool_call>",
          "<arg_key>city</arg_key>\n<arg_value>a <b> </arg_valu c</arg_value>\n</tool_call>",
          "<arg_key>city</arg_key>\n<arg_value></arg_value>\n</tool_call>"},
         {"</tool_call>", city, city + "</tool_call>x",
          city + "<arg_key>days</arg_key>\n<arg_value>three</arg_value>\n</tool_call>",
          city + "<arg_key>days</arg_key>\n<arg_value>3.5</arg_value>\n</tool_call>",
          city + "<arg_key>unit</arg_key>\n<arg_value>k</arg_value>\n</tool_call>",
          city + "<arg_key>other</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
          "<arg_key>city</arg_key>\n<arg_value>a</arg_value>b</arg_value>\n</tool_call>",
          "<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
          city + "<arg_key>days</arg_key>\n<arg_value> 3</arg_value>\n</tool_call>"});
}

TEST(ToolCallGrammar, Glm45BoundedStringsCountCharacters) {
  const std::string tool = R"({"type": "function", "function": {"name": "f", "parameters":
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 1, "maxLength": 3}},
    "required": ["s"]}}})";
  auto call = [](const std::string& v) {
    return "<arg_key>s</arg_key>\n<arg_value>" + v + "</arg_value>\n</tool_call>";
  };
  expect(ChatFormat::Glm45, {tool}, "f", {call("a"), call("abc"), call("\xc3\xa9t\xc3\xa9")},
         {call(""), call("abcd"), call("a<b"), call("\xc3")});
}

TEST(ToolCallGrammar, Glm47PairsHaveNoNewlinesAndAFreeName) {
  expect(ChatFormat::Glm47, {kTime, kWeather}, "",
         {"get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>",
          "get_time</tool_call>",
          "get_time<arg_key>a b</arg_key><arg_value>{x</arg_value><arg_key>c</arg_key>"
          "<arg_value></arg_value></tool_call>"},
         {"get_weather</tool_call>", "get_date</tool_call>",
          "get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
          "get_time<arg_key>a</arg_key>b</arg_key><arg_value>x</arg_value></tool_call>"});
}

TEST(ToolCallGrammar, UnknownNameOrFormatIsAnError) {
  EXPECT_THROW(tool_call_grammar(ChatFormat::Glm4, {kTime}, "get_weather"), Error);
  EXPECT_THROW(tool_call_grammar(ChatFormat::ChatGlm3, {kTime}, "get_time"), Error);
}

}  // namespace
}  // namespace glm4::grammar
