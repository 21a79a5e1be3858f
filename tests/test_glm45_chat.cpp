// The GLM-4.5 family's chat format against the real templates: every conversation of
// tests/data/chat_templates/fixtures.json (rendered by python3-jinja2) must come out byte for
// byte, and as the ids the GLM-4 tokenizer gives the fixture text (GLM-4-0414's and
// glm-4-9b-chat's cases too); the training targets cover exactly the assistant turns and their
// ends; glm4_moe models get the format.
#include <gtest/gtest.h>

#include <fstream>

#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/glm45_chat.h"
#include "tests/tokenizer_fixtures.h"

namespace glm4 {
namespace {

using testing::shared_tokenizer;

const std::filesystem::path kTemplates = std::filesystem::path(GLM4_TEST_DATA) / "chat_templates";

struct Case {
  std::string name;
  ChatFormat format;
  std::vector<ChatMessage> messages;
  bool add_generation_prompt;
  ChatOptions options;
  std::string text;
};

const std::vector<Case>& fixture_cases() {
  static const std::vector<Case> cases = [] {
    std::ifstream in(kTemplates / "fixtures.json");
    const auto j = nlohmann::ordered_json::parse(in);
    std::vector<Case> out;
    for (const auto& c : j.at("cases")) {
      Case k;
      const std::string format = c.at("format");
      k.format = format == "glm45"       ? ChatFormat::Glm45
                 : format == "glm47"     ? ChatFormat::Glm47
                 : format == "glm4-0414" ? ChatFormat::Glm40414
                                         : ChatFormat::Glm4;
      k.name = format + " " + c.at("name").get<std::string>();
      for (const auto& m : c.at("messages")) {
        ChatMessage msg{m.at("role"), m.at("content")};
        if (m.contains("reasoning_content")) msg.reasoning_content = m.at("reasoning_content");
        for (const auto& tc : m.value("tool_calls", nlohmann::ordered_json::array()))
          msg.tool_calls.push_back(
              {tc.at("id"), tc.at("function").at("name"), tc.at("function").at("arguments")});
        msg.tool_call_id = m.value("tool_call_id", "");
        k.messages.push_back(msg);
      }
      for (const auto& t : c.value("tools", nlohmann::ordered_json::array()))
        k.options.tools.push_back(t.dump());  // keys in the file's order: the rendered order
      k.add_generation_prompt = c.at("add_generation_prompt");
      k.options.enable_thinking = c.value("enable_thinking", true);
      k.text = c.at("text");
      out.push_back(std::move(k));
    }
    return out;
  }();
  return cases;
}

bool ends_with_assistant(const Case& c) {
  return !c.add_generation_prompt && !c.messages.empty() && c.messages.back().role == "assistant";
}

// What a training record appends after a final assistant turn: <|endoftext|>, or
// <|observation|> after a turn that calls tools.
std::vector<int32_t> record_end(const Tokenizer& tok, const Case& c) {
  if (!ends_with_assistant(c)) return {};
  return {
      *tok.special_id(c.messages.back().tool_calls.empty() ? "<|endoftext|>" : "<|observation|>")};
}

TEST(Glm45Chat, TextMatchesJinjaByteForByte) {
  ASSERT_EQ(fixture_cases().size(), 276u);
  for (const Case& c : fixture_cases()) {
    if (calls_by_name_line(c.format)) continue;  // GLM-4 renders ids only: the next test
    EXPECT_EQ(render_glm45_text(c.format, c.messages, c.add_generation_prompt, c.options), c.text)
        << c.name;
  }
}

// The ids equal what the tokenizer gives the template's text (special tokens as single ids),
// plus the <|endoftext|> a training record ends with.
TEST(Glm45Chat, IdsMatchTheEncodedFixtureText) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  for (const Case& c : fixture_cases()) {
    const RenderedChat chat =
        render_chat(tok, c.format, c.messages, c.add_generation_prompt, c.options);
    std::vector<int32_t> want = tok.encode(c.text, /*allow_special=*/true);
    for (int32_t id : record_end(tok, c)) want.push_back(id);
    EXPECT_EQ(chat.ids, want) << c.name;
    EXPECT_EQ(chat.target.size(), chat.ids.size()) << c.name;
    if (calls_by_name_line(c.format)) {  // rendered as ids only: their text is the fixture's
      const size_t n = chat.ids.size() - record_end(tok, c).size();
      EXPECT_EQ(tok.decode(std::span(chat.ids.data(), n), false), c.text) << c.name;
    }
  }
}

// The GLM-4 tokenizer with <think>, </think> and the tool tags as added tokens past its
// vocabulary, as GLM-4.5's tokenizer.json has them: encoding with special tokens splits the text at
// them, as Hugging Face's added tokens do.
class WithThinkTokens : public Tokenizer {
 public:
  explicit WithThinkTokens(const Tokenizer& base) : base_(base) {}
  std::vector<int32_t> encode(std::string_view text, bool allow_special) const override {
    if (!allow_special) return base_.encode(text, false);
    std::vector<int32_t> out;
    while (true) {
      size_t at = text.size(), len = 0;
      int32_t id = -1;
      for (const auto& [token, token_id] : markers()) {
        const size_t p = text.find(token);
        if (p < at) at = p, len = token.size(), id = token_id;
      }
      for (int32_t x : base_.encode(text.substr(0, at), true)) out.push_back(x);
      if (id < 0) return out;
      out.push_back(id);
      text.remove_prefix(at + len);
    }
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    return base_.decode(ids, skip_special);
  }
  int32_t vocab_size() const override { return base_.vocab_size() + int32_t(markers().size()); }
  std::optional<int32_t> special_id(std::string_view token) const override {
    for (const auto& [name, id] : markers())
      if (token == name) return id;
    return base_.special_id(token);
  }
  std::string_view kind() const override { return base_.kind(); }

 private:
  std::vector<std::pair<std::string, int32_t>> markers() const {
    std::vector<std::pair<std::string, int32_t>> out;
    for (const char* tag :
         {"<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
          "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>"})
      out.emplace_back(tag, base_.vocab_size() + int32_t(out.size()));
    return out;
  }
  const Tokenizer& base_;
};

TEST(Glm45Chat, ThinkTagsAreSingleIdsWhenTheVocabularyHasThem) {
  const WithThinkTokens tok(shared_tokenizer("glm4-json"));
  int checked = 0;
  for (const Case& c : fixture_cases()) {
    // The cases whose kept content holds literal tags (GLM-4-0414 keeps all content): glm4
    // encodes message content as text (never as special tokens), where encoding the rendered
    // text would give the tags' ids.
    if (c.name.find("empty_reasoning_string") != std::string::npos) continue;
    if (c.format == ChatFormat::Glm40414 && c.name.find("think_in_content") != std::string::npos)
      continue;
    const RenderedChat chat =
        render_chat(tok, c.format, c.messages, c.add_generation_prompt, c.options);
    std::vector<int32_t> want = tok.encode(c.text, /*allow_special=*/true);
    for (int32_t id : record_end(tok, c)) want.push_back(id);
    EXPECT_EQ(chat.ids, want) << c.name;
    ++checked;
  }
  EXPECT_EQ(checked, 262);
  const RenderedChat chat = render_chat(tok, ChatFormat::Glm45, {{"user", "q"}}, true, {false});
  EXPECT_EQ(std::vector<int32_t>(chat.ids.end() - 2, chat.ids.end()),
            (std::vector<int32_t>{*tok.special_id("<think>"), *tok.special_id("</think>")}));
}

// The target tokens, decoded, are each assistant turn's text after <|assistant|> and the token
// that ends it; nothing of the prompt.
TEST(Glm45Chat, TargetsAreTheAssistantTurns) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  const std::vector<ChatMessage> dialog = {{"system", "Be brief."},
                                           {"user", "Is 91 prime?"},
                                           {"assistant", "No.", "7 * 13 = 91."},
                                           {"user", "Is 97 prime?"},
                                           {"assistant", "Yes.", "No prime up to 9 divides it."}};
  auto targets_of = [&](ChatFormat format) {
    const RenderedChat chat = render_chat(tok, format, dialog, false);
    std::string spans, current;
    for (size_t i = 0; i < chat.ids.size(); ++i) {
      if (chat.target[i]) current += tok.decode(std::span(&chat.ids[i], 1));
      if (!chat.target[i] && !current.empty()) spans += "[" + current + "]", current.clear();
    }
    if (!current.empty()) spans += "[" + current + "]";
    return spans;
  };
  // Earlier reasoning is dropped (the template's rule), the later one kept; each turn's end
  // token (the next <|user|>, the final <|endoftext|>) is a target.
  EXPECT_EQ(targets_of(ChatFormat::Glm45),
            "[\n<think></think>\nNo.<|user|>]"
            "[\n<think>No prime up to 9 divides it.</think>\nYes.<|endoftext|>]");
  EXPECT_EQ(targets_of(ChatFormat::Glm47),
            "[</think>No.<|user|>][<think>No prime up to 9 divides it.</think>Yes.<|endoftext|>]");
  // A generation prompt is never a target, the empty think of thinking-off included.
  ChatOptions no_thinking;
  no_thinking.enable_thinking = false;
  const RenderedChat prompt =
      render_chat(tok, ChatFormat::Glm45, {{"user", "hi"}}, true, no_thinking);
  for (uint8_t t : prompt.target) EXPECT_EQ(t, 0);
}

TEST(Glm45Chat, StripIsPythons) {
  EXPECT_EQ(python_strip(" \t\n a b \r\f\v"), "a b");
  EXPECT_EQ(python_strip("\u3000\u00a0x\u2003\u0085"), "x");
  EXPECT_EQ(python_strip("\x1c\x1f"), "");
  EXPECT_EQ(python_strip("\u200bx"), "\u200bx");  // zero-width space is not whitespace to Python
  EXPECT_EQ(python_strip(""), "");
}

TEST(Glm45Chat, RefusesUnknownRolesAndBadArgumentsAndNamesThem) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  auto error_of = [&](const std::vector<ChatMessage>& messages) {
    try {
      render_chat(tok, ChatFormat::Glm45, messages, true);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({{"user", "q"}, {"function", "r"}}).find("message 1 has role 'function'"),
            std::string::npos);
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"c1", "f", "[1, 2]"});
  EXPECT_NE(error_of({{"user", "q"}, call})
                .find("message 1 tool_calls[0] arguments are not a JSON object: [1, 2]"),
            std::string::npos)
      << error_of({{"user", "q"}, call});
  // "observation" is the tool role's other name: both render as a tool result.
  ChatOptions none;
  EXPECT_EQ(
      render_glm45_text(ChatFormat::Glm47, {{"user", "q"}, {"observation", "r"}}, false, none),
      "[gMASK]<sop><|user|>q<|observation|><tool_response>r</tool_response>");
}

TEST(Glm45Chat, StopIds) {
  const Tokenizer& tok = shared_tokenizer("glm4-json");
  const std::vector<int32_t> want = {*tok.special_id("<|endoftext|>"), *tok.special_id("<|user|>"),
                                     *tok.special_id("<|observation|>")};
  EXPECT_EQ(stop_ids(tok, ChatFormat::Glm45), want);
  EXPECT_EQ(stop_ids(tok, ChatFormat::Glm47), want);
}

TEST(Glm45Chat, FormatFromTemplateTextOrModelType) {
  auto read = [](const char* file) {
    std::ifstream in(kTemplates / file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(chat_format_of_template(read("GLM-4.6.jinja")), ChatFormat::Glm45);
  EXPECT_EQ(chat_format_of_template(read("GLM-4.5-Air-gguf.jinja")), ChatFormat::Glm45);
  EXPECT_EQ(chat_format_of_template(read("GLM-4.7-Flash.jinja")), ChatFormat::Glm47);
  EXPECT_EQ(chat_format_of_template("{% for m in messages %}<|user|>{% endfor %}"), std::nullopt);
  // The glm4_moe fixture model has no tokenizer or template: model_type decides.
  const auto moe = std::filesystem::path(GLM4_TEST_DATA) / "moe" / "tiny_moe";
  EXPECT_EQ(chat_format_of_model_dir(moe), ChatFormat::Glm45);
  EXPECT_EQ(detect_chat_format(shared_tokenizer("glm4-json"), moe), ChatFormat::Glm45);
  // A dense GLM-4 directory keeps the tokenizer's answer.
  EXPECT_EQ(chat_format_of_model_dir(testing::tokenizer_data() / "glm4-tiktoken"), std::nullopt);
  EXPECT_EQ(detect_chat_format(shared_tokenizer("glm4-tiktoken"),
                               testing::tokenizer_data() / "glm4-tiktoken"),
            ChatFormat::Glm4);
}

TEST(Glm45Chat, TemplateFilesInADirectoryWin) {
  const auto dir = std::filesystem::temp_directory_path() / "glm45_chat_dir_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "config.json") << R"({"model_type": "glm4_moe"})";
    std::ifstream in(kTemplates / "GLM-4.7-Flash.jinja", std::ios::binary);
    nlohmann::json config = {
        {"chat_template", std::string(std::istreambuf_iterator<char>(in), {})}};
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
  }
  EXPECT_EQ(chat_format_of_model_dir(dir), ChatFormat::Glm47);
  std::filesystem::copy_file(kTemplates / "GLM-4.6.jinja", dir / "chat_template.jinja",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(chat_format_of_model_dir(dir), ChatFormat::Glm45);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace glm4
