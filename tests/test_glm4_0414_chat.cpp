// GLM-4-0414's chat format beside glm-4-9b-chat's: which models get it, that without tools it
// renders what Glm4 renders (the main job's data included), its tool turn, system order, call
// turns and training masks (the fixtures in test_glm45_chat check its bytes against the template).
#include <gtest/gtest.h>

#include <fstream>

#include "dataset/records.h"
#include "dataset/text_encoder.h"
#include "io/tokenizer/chat_template.h"
#include "tests/support/chat_spans.h"
#include "tests/support/repo_paths.h"
#include "tests/support/temp_dir.h"
#include "tests/tokenizer_fixtures.h"

namespace glm4 {
namespace {

using testing::spans;

namespace fs = std::filesystem;
using testing::shared_tokenizer;

const fs::path kTemplates = fs::path(GLM4_TEST_DATA) / "chat_templates";
const std::string kTool =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {}}})";

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Glm40414Chat, TemplatesAndModelTypesPickTheFormat) {
  EXPECT_STREQ(chat_format_name(ChatFormat::Glm40414), "glm4-0414");
  EXPECT_EQ(chat_format_of_template(read(kTemplates / "GLM-4-0414.jinja")), ChatFormat::Glm40414);
  EXPECT_EQ(chat_format_of_template(read(kTemplates / "glm-4-9b-chat.jinja")), ChatFormat::Glm4);
  EXPECT_EQ(chat_format_of_template(read(kTemplates / "GLM-4.6.jinja")), ChatFormat::Glm45);
  // model_type "glm4" (Glm4ForCausalLM): the tests' tiny GLM-4 and the embedded model.
  EXPECT_EQ(chat_format_of_model_dir(fs::path(GLM4_TEST_DATA) / "tiny_glm4"), ChatFormat::Glm40414);
  EXPECT_EQ(chat_format_of_model_dir(testing::kModel), ChatFormat::Glm40414);
  // "chatglm" (glm-4-9b-chat's own files) keeps the tokenizer's answer, Glm4.
  const fs::path chat9b = testing::tokenizer_data() / "glm4-tiktoken";
  EXPECT_EQ(chat_format_of_model_dir(chat9b), std::nullopt);
  EXPECT_EQ(detect_chat_format(shared_tokenizer("glm4-tiktoken"), chat9b), ChatFormat::Glm4);
  // Tokenizer-only detection is unchanged.
  EXPECT_EQ(detect_chat_format(shared_tokenizer("glm4-json")), ChatFormat::Glm4);
  // A glm4 directory whose template is glm-4-9b-chat's follows the template.
  testing::TempDir tmp;
  std::ofstream(tmp / "config.json") << R"({"model_type": "glm4"})";
  EXPECT_EQ(chat_format_of_model_dir(tmp.path()), ChatFormat::Glm40414);
  fs::copy_file(kTemplates / "glm-4-9b-chat.jinja", tmp / "chat_template.jinja");
  EXPECT_EQ(chat_format_of_model_dir(tmp.path()), ChatFormat::Glm4);
}

// Without tools, calls or late system messages the two formats are the same ids and targets.
TEST(Glm40414Chat, WithoutToolsItRendersWhatGlm4Renders) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  const std::vector<std::vector<ChatMessage>> dialogs = {
      {{"user", "Hi"}},
      {{"system", "Be brief."}, {"user", "2+2?"}, {"assistant", "4"}},
      {{"system", ""}, {"user", "Q"}, {"assistant", ""}, {"user", "R"}, {"assistant", "S"}},
      {{"assistant", "first"}, {"user", "u"}, {"tool", "result"}, {"assistant", "done"}}};
  for (const auto& dialog : dialogs)
    for (bool gen : {false, true}) {
      const RenderedChat a = render_chat(tok, ChatFormat::Glm4, dialog, gen);
      const RenderedChat b = render_chat(tok, ChatFormat::Glm40414, dialog, gen);
      EXPECT_EQ(a.ids, b.ids) << dialog.size() << gen;
      EXPECT_EQ(a.target, b.target) << dialog.size() << gen;
      EXPECT_EQ(a.tool_result, b.tool_result) << dialog.size() << gen;
    }
}

// The main job trains the embedded model (config model_type "glm4": now Glm40414) on
// data/finetune: every record renders to the ids and targets it had as Glm4.
TEST(Glm40414Chat, TheMainJobsRecordsRenderAsBefore) {
  const TextEncoder encoder = make_text_encoder(testing::kModel);
  const auto tok = load_tokenizer(testing::kModel);
  int64_t checked = 0;
  for (const char* file : {"train.jsonl", "valid.jsonl"})
    for_each_record(testing::kFinetune + "/" + file, [&](const Record& r, int64_t line) {
      ASSERT_EQ(r.kind, Record::Kind::kChat) << file << ":" << line;
      ChatOptions options;
      options.tools = r.tools;
      const RenderedChat now = encoder.render_chat(r.messages, options);
      const RenderedChat before = render_chat(*tok, ChatFormat::Glm4, r.messages, false, options);
      ASSERT_EQ(now.ids, before.ids) << file << ":" << line;
      ASSERT_EQ(now.target, before.target) << file << ":" << line;
      ++checked;
    });
  EXPECT_GT(checked, 5000);
}

std::vector<ChatMessage> round_trip() {
  ChatMessage call{"assistant", "Checking."};
  call.tool_calls.push_back({"c1", "get_weather", R"({"city": "Paris"})"});
  call.tool_calls.push_back({"c2", "get_weather", R"({"city": "Oslo"})"});
  return {{"user", "Weather?"},
          call,
          {"tool", "sunny"},
          {"observation", "snow"},
          {"assistant", "Sunny and snowy."}};
}

TEST(Glm40414Chat, ToolTurnCallsAndMasks) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  ChatOptions options;
  options.tools = {kTool};
  const RenderedChat chat = render_chat(tok, ChatFormat::Glm40414, round_trip(), false, options);
  EXPECT_EQ(tok.decode(chat.ids, false),
            "[gMASK]<sop><|system|>\n# 可用工具\n\n## get_weather\n\n{\n    \"name\": "
            "\"get_weather\",\n    \"parameters\": {}\n}\n在调用上述函数时，请使用 Json "
            "格式表示调用的参数。<|user|>\nWeather?<|assistant|>\nChecking.<|assistant|>"
            "get_weather \n{\"city\": \"Paris\"}<|assistant|>get_weather \n{\"city\": \"Oslo\"}"
            "<|observation|>\nsunny<|observation|>\nsnow<|assistant|>\nSunny and snowy."
            "<|endoftext|>");
  EXPECT_EQ(spans(tok, chat, chat.target),
            "[\nChecking.<|assistant|>get_weather \n{\"city\": \"Paris\"}<|assistant|>get_weather "
            "\n{\"city\": \"Oslo\"}<|observation|>][\nSunny and snowy.<|endoftext|>]");
  EXPECT_EQ(spans(tok, chat, chat.tool_result), "[\nsunny][\nsnow]");
  // A record ending with calls ends with <|observation|>, a target: the model stops there.
  std::vector<ChatMessage> calls_last = round_trip();
  calls_last.resize(2);
  const RenderedChat stop = render_chat(tok, ChatFormat::Glm40414, calls_last, false, options);
  EXPECT_EQ(stop.ids.back(), *tok.special_id("<|observation|>"));
  EXPECT_EQ(stop.target.back(), 1);
}

// Every system message comes first (the tool turn before them), the rest keeps its order; an
// assistant turn that a system message followed still ends with its own end token.
TEST(Glm40414Chat, SystemMessagesGoFirst) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  ChatOptions options;
  options.tools = {R"({"name": "f", "parameters": {}})"};  // a bare function: the template's too
  const std::vector<ChatMessage> dialog = {
      {"user", "u1"}, {"assistant", "a1"}, {"system", "late"}, {"user", "u2"}, {"assistant", "a2"}};
  const RenderedChat chat = render_chat(tok, ChatFormat::Glm40414, dialog, false, options);
  EXPECT_EQ(tok.decode(chat.ids, false),
            "[gMASK]<sop><|system|>\n# 可用工具\n\n## f\n\n{\n    \"name\": \"f\",\n    "
            "\"parameters\": {}\n}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
            "<|system|>\nlate<|user|>\nu1<|assistant|>\na1<|user|>\nu2<|assistant|>\na2"
            "<|endoftext|>");
  EXPECT_EQ(spans(tok, chat, chat.target), "[\na1<|user|>][\na2<|endoftext|>]");
  // The system message last: the assistant turn before it is the last one written, so the
  // record ends there.
  const std::vector<ChatMessage> late = {{"user", "u"}, {"assistant", "a"}, {"system", "s"}};
  const RenderedChat ends = render_chat(tok, ChatFormat::Glm40414, late, false);
  EXPECT_EQ(tok.decode(ends.ids, false),
            "[gMASK]<sop><|system|>\ns<|user|>\nu<|assistant|>\na<|endoftext|>");
  EXPECT_EQ(spans(tok, ends, ends.target), "[\na<|endoftext|>]");
}

TEST(Glm40414Chat, ErrorsNameTheToolAndFormat) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  ChatOptions options;
  options.tools = {kTool, R"({"type": "function", "function": {"description": "no name"}})"};
  try {
    render_chat(tok, ChatFormat::Glm40414, {{"user", "q"}}, true, options);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat template glm4-0414: tools[1]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(render_chat(tok, ChatFormat::Glm40414, {{"robot", "hi"}}, true), Error);
  EXPECT_EQ(stop_ids(tok, ChatFormat::Glm40414), stop_ids(tok, ChatFormat::Glm4));
  EXPECT_TRUE(reply_starts_with_newline(ChatFormat::Glm40414));
}

}  // namespace
}  // namespace glm4
