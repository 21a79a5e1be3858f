// The reply parser: answers, reasoning and tool calls split out of GLM replies, the same whether
// the text comes whole or one byte at a time; malformed and truncated calls.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/tokenizer/reply_parser.h"

namespace glm4 {
namespace {

const std::string kWeather =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",)"
    R"( "properties": {"city": {"type": "string"}, "days": {"type": "integer"},)"
    R"( "code": {"type": "string"}}}}})";

struct Parsed {
  ParsedReply reply;
  std::string content, reasoning;             // concatenated deltas
  std::vector<std::string> names, arguments;  // per call index, from the deltas
};

// Feeds `text` in pieces of `step` bytes (0: whole) and collects the deltas.
Parsed parse(const std::string& text, size_t step, ReplyParserOptions options = {}) {
  ReplyParser parser(options);
  Parsed run;
  auto take = [&](const ReplyDelta& d) {
    run.content += d.content;
    run.reasoning += d.reasoning;
    for (const ToolCallDelta& c : d.calls) {
      if (size_t(c.index) >= run.names.size())
        run.names.resize(c.index + 1), run.arguments.resize(c.index + 1);
      run.names[c.index] += c.name;
      run.arguments[c.index] += c.arguments;
    }
  };
  if (step == 0) step = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += step) take(parser.push(text.substr(i, step)));
  take(parser.finish());
  run.reply = parser.reply();
  return run;
}

ReplyParserOptions glm(ChatFormat format, bool thinking = true) {
  ReplyParserOptions o;
  o.format = format;
  o.enable_thinking = thinking;
  o.tools = {kWeather};
  return o;
}

TEST(ReplyParser, Glm45ReasoningAnswerAndTwoCallsAnyChunking) {
  const std::string text =
      "\n<think>Need weather.\n</think>\nLet me check.\n<tool_call>get_weather\n"
      "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
      "<arg_value>3</arg_value>\n<arg_key>code</arg_key>\n<arg_value>75</arg_value>\n"
      "</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo"
      "</arg_value>\n</tool_call>";
  for (size_t step : {0, 1, 2, 3, 7}) {
    const Parsed r = parse(text, step, glm(ChatFormat::Glm45));
    EXPECT_EQ(r.reply.reasoning, "Need weather.") << step;
    EXPECT_EQ(r.reply.content, "Let me check.") << step;
    ASSERT_EQ(r.reply.calls.size(), 2u) << step;
    EXPECT_EQ(r.reply.calls[0].name, "get_weather");
    // "code" is a string in the schema: "75" stays a string; "days" becomes a number.
    EXPECT_EQ(r.reply.calls[0].arguments, R"({"city": "Paris", "days": 3, "code": "75"})");
    EXPECT_EQ(r.reply.calls[1].arguments, R"({"city": "Oslo"})");
    // The deltas add up to the same reply.
    EXPECT_EQ(r.content, r.reply.content) << step;
    EXPECT_EQ(r.reasoning, r.reply.reasoning) << step;
    EXPECT_EQ(r.names, (std::vector<std::string>{"get_weather", "get_weather"})) << step;
    EXPECT_EQ(r.arguments[0], r.reply.calls[0].arguments) << step;
    EXPECT_FALSE(r.reply.truncated_call);
    EXPECT_FALSE(r.reply.malformed_call);
  }
}

TEST(ReplyParser, Glm47StartsInsideThinkingWhenOn) {
  const std::string text =
      "plan</think>Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome"
      "</arg_value></tool_call>";
  const Parsed r = parse(text, 1, glm(ChatFormat::Glm47));
  EXPECT_EQ(r.reply.reasoning, "plan");
  EXPECT_EQ(r.reply.content, "Sure.");
  ASSERT_EQ(r.reply.calls.size(), 1u);
  EXPECT_EQ(r.reply.calls[0].arguments, R"({"city": "Rome"})");
  // Thinking off: the same text has no reasoning part; "</think>" is dropped as a tag.
  const Parsed off = parse("Hi <b>there</b>", 1, glm(ChatFormat::Glm47, false));
  EXPECT_EQ(off.reply.content, "Hi <b>there</b>");
  EXPECT_EQ(off.reply.reasoning, "");
}

TEST(ReplyParser, HeldBackTextIsReleasedWhenItIsNoTag) {
  ReplyParser p(glm(ChatFormat::Glm45));
  EXPECT_EQ(p.push("a <tool").content, "a");  // " <tool" may open a call
  EXPECT_EQ(p.push("box> b").content, " <toolbox> b");
  EXPECT_EQ(p.finish().content, "");
  EXPECT_EQ(p.reply().content, "a <toolbox> b");
}

TEST(ReplyParser, CallsAreTextWhenParsingIsOff) {
  ReplyParserOptions o = glm(ChatFormat::Glm45);
  o.parse_calls = false;
  const Parsed r = parse("<tool_call>get_weather\n</tool_call>", 1, o);
  EXPECT_TRUE(r.reply.calls.empty());
  EXPECT_EQ(r.reply.content, "<tool_call>get_weather\n</tool_call>");
}

TEST(ReplyParser, CallWithoutArgumentsHasAnEmptyObject) {
  const Parsed r = parse("<tool_call>get_weather\n</tool_call>", 2, glm(ChatFormat::Glm45));
  ASSERT_EQ(r.reply.calls.size(), 1u);
  EXPECT_EQ(r.reply.calls[0].arguments, "{}");
  EXPECT_EQ(r.arguments[0], "{}");
}

TEST(ReplyParser, MalformedCalls) {
  // No name: not a call, the text stays.
  const Parsed unnamed = parse("x <tool_call></tool_call>", 1, glm(ChatFormat::Glm45));
  EXPECT_TRUE(unnamed.reply.calls.empty());
  EXPECT_TRUE(unnamed.reply.malformed_call);
  EXPECT_EQ(unnamed.reply.content, "x<tool_call></tool_call>");
  // Stray text in the body: the call closes with what it read; the rest is answer text.
  const Parsed stray = parse(
      "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Oslo</arg_value>oops"
      "</tool_call>",
      1, glm(ChatFormat::Glm45));
  ASSERT_EQ(stray.reply.calls.size(), 1u);
  EXPECT_EQ(stray.reply.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(stray.arguments[0], R"({"city": "Oslo"})");
  EXPECT_TRUE(stray.reply.malformed_call);
  EXPECT_EQ(stray.reply.content, "oops</tool_call>");
  // Arguments that are JSON-looking but not valid JSON stay strings.
  const Parsed loose =
      parse("<tool_call>f\n<arg_key>q</arg_key><arg_value>{not json</arg_value></tool_call>", 3,
            glm(ChatFormat::Glm45));
  ASSERT_EQ(loose.reply.calls.size(), 1u);
  EXPECT_EQ(loose.reply.calls[0].arguments, R"({"q": "{not json"})");
}

TEST(ReplyParser, TruncatedCallBecomesAnswerText) {
  const std::string text = "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key><arg_va";
  for (size_t step : {0, 1, 5}) {
    const Parsed r = parse(text, step, glm(ChatFormat::Glm45));
    EXPECT_TRUE(r.reply.truncated_call);
    EXPECT_TRUE(r.reply.calls.empty());
    EXPECT_EQ(r.reply.content, "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key><arg_va");
    // The stream saw the call open (its name) before it broke off.
    EXPECT_EQ(r.names, std::vector<std::string>{"get_weather"}) << step;
  }
  // Cut inside the name: nothing was streamed for the call.
  const Parsed early = parse("<tool_call>get_wea", 1, glm(ChatFormat::Glm45));
  EXPECT_TRUE(early.reply.truncated_call);
  EXPECT_TRUE(early.names.empty());
  EXPECT_EQ(early.reply.content, "<tool_call>get_wea");
}

TEST(ReplyParser, Glm4CallsAndAnswers) {
  // glm-4-9b-chat: a call is "name\n{json}"; an answer starts with "\n".
  const Parsed call = parse("get_weather\n{\"city\": \"Paris\"}", 1, glm(ChatFormat::Glm4));
  ASSERT_EQ(call.reply.calls.size(), 1u);
  EXPECT_EQ(call.reply.calls[0].name, "get_weather");
  EXPECT_EQ(call.reply.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(call.arguments[0], "{\"city\": \"Paris\"}");
  EXPECT_EQ(call.reply.content, "");
  const Parsed answer = parse("\nIt is sunny.", 1, glm(ChatFormat::Glm4));
  EXPECT_TRUE(answer.reply.calls.empty());
  EXPECT_EQ(answer.reply.content, "It is sunny.");
  // Not a tool's name: an answer after all.
  const Parsed other = parse("Hello\nthere", 1, glm(ChatFormat::Glm4));
  EXPECT_TRUE(other.reply.calls.empty());
  EXPECT_EQ(other.reply.content, "Hello\nthere");
  // Arguments cut short are not a JSON object: the call's text is the answer.
  const Parsed cut = parse("get_weather\n{\"city\": \"Par", 4, glm(ChatFormat::Glm4));
  EXPECT_TRUE(cut.reply.calls.empty());
  EXPECT_TRUE(cut.reply.truncated_call);
  EXPECT_EQ(cut.reply.content, "get_weather\n{\"city\": \"Par");
}

// A GLM-4 reply that answers and then calls in a new <|assistant|> turn (its token left out of the
// decoded text, so turn() marks it): the text is the answer, the call a call; for both formats,
// and a name line cut by the turn is answer text.
TEST(ReplyParser, Glm4TextThenACallInTheNextTurn) {
  for (ChatFormat format : {ChatFormat::Glm4, ChatFormat::Glm40414}) {
    ReplyParser p(glm(format));
    std::string content, args;
    auto take = [&](const ReplyDelta& d) {
      content += d.content;
      for (const ToolCallDelta& c : d.calls) args += c.arguments;
    };
    take(p.push("\nLet me look."));
    take(p.turn());
    take(p.push("get_weather \n{\"city\": "));
    take(p.push("\"Oslo\"}"));
    take(p.turn());
    take(p.push("get_weather\n{\"city\": \"Rome\"}"));
    take(p.finish());
    ASSERT_EQ(p.reply().calls.size(), 2u) << chat_format_name(format);
    EXPECT_EQ(p.reply().calls[0].arguments, "{\"city\": \"Oslo\"}");
    EXPECT_EQ(p.reply().calls[1].arguments, "{\"city\": \"Rome\"}");
    EXPECT_EQ(p.reply().content, "Let me look.");
    EXPECT_EQ(content, "Let me look.");
    EXPECT_EQ(args, "{\"city\": \"Oslo\"}{\"city\": \"Rome\"}");
  }
  ReplyParser cut(glm(ChatFormat::Glm40414));
  cut.push("get_wea");
  cut.turn();
  cut.push("\nNo call after all.");
  cut.finish();
  EXPECT_TRUE(cut.reply().calls.empty());
  EXPECT_EQ(cut.reply().content, "get_wea\nNo call after all.");
  // Other formats ignore it.
  ReplyParser g45(glm(ChatFormat::Glm45, false));
  EXPECT_TRUE(g45.turn().empty());
}

// GLM-4-0414: "name \n{json}" (the template's form) or "name\n{json}"; further calls follow the
// closed object (their <|assistant|> is not in the decoded text); the same at any chunking.
TEST(ReplyParser, Glm40414CallsAndAnswers) {
  const std::string two =
      "get_weather \n{\"city\": \"Paris\", \"code\": \"}{\\\"\"}get_weather\n{\"city\": "
      "\"Oslo\"}\n";
  for (size_t step : {0, 1, 2, 5}) {
    const Parsed r = parse(two, step, glm(ChatFormat::Glm40414));
    ASSERT_EQ(r.reply.calls.size(), 2u) << step;
    EXPECT_EQ(r.reply.calls[0].name, "get_weather");
    EXPECT_EQ(r.reply.calls[0].arguments, "{\"city\": \"Paris\", \"code\": \"}{\\\"\"}");
    EXPECT_EQ(r.reply.calls[1].arguments, "{\"city\": \"Oslo\"}");
    EXPECT_EQ(r.arguments[1], "{\"city\": \"Oslo\"}") << step;
    EXPECT_EQ(r.reply.content, "");
    EXPECT_FALSE(r.reply.truncated_call);
  }
  const Parsed answer = parse("\nIt is sunny.", 1, glm(ChatFormat::Glm40414));
  EXPECT_TRUE(answer.reply.calls.empty());
  EXPECT_EQ(answer.content, "It is sunny.");
  // A first line that is not a name is answer text as soon as that shows, not at its end.
  ReplyParser p(glm(ChatFormat::Glm40414));
  EXPECT_EQ(p.push("Sure, ").content, "Sure,");
  // Not one of the tools: an answer.
  EXPECT_EQ(parse("get_time \n{}", 1, glm(ChatFormat::Glm40414)).reply.content, "get_time \n{}");
  // A second call cut short: the first stands, the second's text is the answer.
  const Parsed cut =
      parse("get_weather \n{\"city\": \"Rome\"}get_weather \n{\"ci", 3, glm(ChatFormat::Glm40414));
  ASSERT_EQ(cut.reply.calls.size(), 1u);
  EXPECT_EQ(cut.reply.calls[0].arguments, "{\"city\": \"Rome\"}");
  EXPECT_TRUE(cut.reply.truncated_call);
  EXPECT_EQ(cut.reply.content, "get_weather \n{\"ci");
  // Answer text after a call is kept as the answer.
  const Parsed after = parse("get_weather \n{}\n\nDone.\n", 1, glm(ChatFormat::Glm40414));
  ASSERT_EQ(after.reply.calls.size(), 1u);
  EXPECT_EQ(after.reply.content, "Done.");
  // The prefill of a forced call is the template's "name \n".
  EXPECT_EQ(tool_call_prefill(ChatFormat::Glm40414, true, "f"), "f \n");
  EXPECT_EQ(tool_call_prefill(ChatFormat::Glm40414, true, ""), "");
  // A forced call: the streamed arguments add up to the reply's, whitespace at the ends left out,
  // whether the object closes or the reply breaks off inside it.
  ReplyParserOptions forced = glm(ChatFormat::Glm40414);
  forced.forced_call = true;
  for (const std::vector<std::string>& pieces :
       {std::vector<std::string>{" {\"city\":", " \"Lima\"", "}"},
        std::vector<std::string>{"{\"city\"", "\n  ", "  "}}) {
    ReplyParser q(forced);
    std::string streamed;
    auto take = [&](const ReplyDelta& d) {
      for (const ToolCallDelta& c : d.calls) streamed += c.arguments;
    };
    take(q.begin_call("get_weather"));
    for (const std::string& piece : pieces) take(q.push(piece));
    take(q.finish());
    ASSERT_EQ(q.reply().calls.size(), 1u);
    const bool closed = pieces.back() == "}";
    EXPECT_EQ(q.reply().calls[0].arguments, closed ? "{\"city\": \"Lima\"}" : "{\"city\"");
    EXPECT_EQ(streamed, q.reply().calls[0].arguments);
    EXPECT_EQ(q.reply().malformed_call, !closed);
  }
}

TEST(ReplyParser, PrefillOpensTheCall) {
  EXPECT_EQ(tool_call_prefill(ChatFormat::Glm45, true, "get_weather"),
            "\n<think></think>\n<tool_call>get_weather\n");
  EXPECT_EQ(tool_call_prefill(ChatFormat::Glm45, false, ""), "\n<tool_call>");
  EXPECT_EQ(tool_call_prefill(ChatFormat::Glm47, true, "f"), "</think><tool_call>f");
  EXPECT_EQ(tool_call_prefill(ChatFormat::Glm4, true, "f"), "f\n");
  EXPECT_EQ(tool_call_prefill(ChatFormat::Glm4, true, ""), "");
  // The parser fed the prefill and then the model's continuation reads one call.
  ReplyParser p(glm(ChatFormat::Glm47));
  p.push(tool_call_prefill(ChatFormat::Glm47, true, "get_weather"));
  p.push("<arg_key>city</arg_key><arg_value>Lima</arg_value></tool_call>");
  p.finish();
  ASSERT_EQ(p.reply().calls.size(), 1u);
  EXPECT_EQ(p.reply().calls[0].arguments, R"({"city": "Lima"})");
  EXPECT_EQ(p.reply().reasoning, "");
}

// A call the prompt opened (tool_choice naming a function) stays a call when it breaks off.
TEST(ReplyParser, ForcedCallsStayCalls) {
  ReplyParserOptions o = glm(ChatFormat::Glm47);
  o.forced_call = true;
  ReplyParser p(o);
  EXPECT_EQ(p.begin_call("get_weather").calls.at(0).name, "get_weather");
  p.push("<arg_key>city</arg_key><arg_value>Lima</arg_value><arg_key>days</arg_key><arg_v");
  const ReplyDelta end = p.finish();
  ASSERT_EQ(p.reply().calls.size(), 1u);
  EXPECT_EQ(p.reply().calls[0].arguments, R"({"city": "Lima"})");  // the complete arguments
  EXPECT_EQ(end.calls.at(0).arguments, "}");
  EXPECT_TRUE(p.reply().truncated_call);
  EXPECT_EQ(p.reply().content, "");
  // Glm4: the arguments as written, even when not JSON.
  ReplyParserOptions g4 = glm(ChatFormat::Glm4);
  g4.forced_call = true;
  ReplyParser q(g4);
  q.begin_call("get_weather");
  q.push("{\"city\": Par");
  q.finish();
  ASSERT_EQ(q.reply().calls.size(), 1u);
  EXPECT_EQ(q.reply().calls[0].arguments, "{\"city\": Par");
  EXPECT_TRUE(q.reply().malformed_call);
}

}  // namespace
}  // namespace glm4
