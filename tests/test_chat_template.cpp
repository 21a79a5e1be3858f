// Chat templates against the upstream chat vectors in tests/data/tokenizers, plus the
// training target mask, stop ids and format detection.
#include <gtest/gtest.h>

#include "io/tokenizer/chat_template.h"
#include "tests/tokenizer_fixtures.h"

namespace glm4 {
namespace {

using testing::ids_of;
using testing::read_jsonl;
using testing::shared_tokenizer;
using testing::tokenizer_data;

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m.at("role"), m.at("content")});
  return out;
}

int check_chat_rows(const Tokenizer& tok, const std::string& family) {
  int checked = 0;
  for (const auto& r : read_jsonl(tokenizer_data() / family / "expected.jsonl")) {
    if (r.at("kind") != "chat_template_ids") continue;
    const auto chat =
        render_chat(tok, detect_chat_format(tok), messages_of(r.at("messages")), true);
    EXPECT_EQ(chat.ids, ids_of(r.at("ids"))) << family << " " << r.at("messages").dump();
    EXPECT_EQ(chat.target.size(), chat.ids.size());
    ++checked;
  }
  return checked;
}

TEST(ChatVectors, Glm4) {
  EXPECT_EQ(check_chat_rows(shared_tokenizer("glm4-tiktoken"), "glm4-tiktoken"), 3);
  EXPECT_EQ(check_chat_rows(shared_tokenizer("glm4-json"), "glm4-tiktoken"), 3);
}

TEST(ChatVectors, ChatGlm3) {
  EXPECT_EQ(check_chat_rows(shared_tokenizer("chatglm3"), "chatglm3"), 3);
}

// ChatGLM2's vectors are prompt texts "[Round N]\n\n问：q\n\n答：a\n\n..."; parse them back into
// messages and check that rendering gives the same ids.
TEST(ChatVectors, ChatGlm2) {
  const auto& tok = shared_tokenizer("chatglm2");
  int checked = 0;
  for (const auto& r : read_jsonl(tokenizer_data() / "chatglm2" / "expected.jsonl")) {
    const std::string text = r.at("text");
    if (text.rfind("[Round ", 0) != 0) continue;
    std::vector<ChatMessage> messages;
    const std::string q_mark = "\n\n问：", a_mark = "\n\n答：";
    for (size_t pos = 0; pos < text.size();) {
      const size_t q = text.find(q_mark, pos) + q_mark.size();
      const size_t a = text.find(a_mark, q);
      messages.push_back({"user", text.substr(q, a - q)});
      const size_t next = text.find("\n\n[Round ", a);
      const std::string answer =
          text.substr(a + a_mark.size(),
                      next == std::string::npos ? std::string::npos : next - a - a_mark.size());
      if (!answer.empty()) messages.push_back({"assistant", answer});
      pos = next == std::string::npos ? text.size() : next + 2;
    }
    ASSERT_EQ(messages.back().role, "user");
    const auto chat = render_chat(tok, ChatFormat::ChatGlm2, messages, true);
    EXPECT_EQ(chat.ids, ids_of(r.at("ids"))) << text;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(ChatFormat, Detection) {
  EXPECT_EQ(detect_chat_format(shared_tokenizer("glm4-tiktoken")), ChatFormat::Glm4);
  EXPECT_EQ(detect_chat_format(shared_tokenizer("glm4-json")), ChatFormat::Glm4);
  EXPECT_EQ(detect_chat_format(shared_tokenizer("chatglm3")), ChatFormat::ChatGlm3);
  EXPECT_EQ(detect_chat_format(shared_tokenizer("chatglm2")), ChatFormat::ChatGlm2);
  EXPECT_EQ(detect_chat_format(shared_tokenizer("trained-sp")), ChatFormat::Glm4);
}

TEST(ChatFormat, StopIds) {
  EXPECT_EQ(stop_ids(shared_tokenizer("glm4-tiktoken"), ChatFormat::Glm4),
            (std::vector<int32_t>{151329, 151336, 151338}));
  EXPECT_EQ(stop_ids(shared_tokenizer("chatglm3"), ChatFormat::ChatGlm3),
            (std::vector<int32_t>{2, 64795, 64797}));
  EXPECT_EQ(stop_ids(shared_tokenizer("chatglm2"), ChatFormat::ChatGlm2), std::vector<int32_t>{2});
  const auto& sp = shared_tokenizer("trained-sp");
  EXPECT_EQ(stop_ids(sp, ChatFormat::Glm4),
            (std::vector<int32_t>{*sp.special_id("<|endoftext|>"), *sp.special_id("<|user|>"),
                                  *sp.special_id("<|observation|>")}));
}

// Text of the target tokens, and of everything else.
std::pair<std::string, std::string> split_by_target(const Tokenizer& tok, const RenderedChat& c) {
  std::vector<int32_t> yes, no;
  for (size_t i = 0; i < c.ids.size(); ++i) (c.target[i] ? yes : no).push_back(c.ids[i]);
  return {tok.decode(yes), tok.decode(no)};
}

const std::vector<ChatMessage> kDialog = {{"system", "Be brief."},
                                          {"user", "2+2?"},
                                          {"assistant", "4, 显然。"},
                                          {"user", "And 3+3?"},
                                          {"assistant", "\nSix 🎲"}};

TEST(ChatMask, Glm4TargetsAssistantContentAndTurnEnds) {
  for (const char* name : {"glm4-tiktoken", "glm4-json", "trained-sp"}) {
    SCOPED_TRACE(name);
    const auto& tok = shared_tokenizer(name);
    const auto chat = render_chat(tok, ChatFormat::Glm4, kDialog, false);
    const auto [targets, rest] = split_by_target(tok, chat);
    // The turn ends: the <|user|> after the first answer, <|endoftext|> after the last one. The
    // "\n" after <|assistant|> is a target: generation prompts end at <|assistant|>.
    EXPECT_EQ(targets, "\n4, 显然。<|user|>\n\nSix 🎲<|endoftext|>");
    EXPECT_EQ(
        rest,
        "[gMASK]<sop><|system|>\nBe brief.<|user|>\n2+2?<|assistant|>\nAnd 3+3?<|assistant|>");
    EXPECT_EQ(tok.decode(chat.ids),
              "[gMASK]<sop><|system|>\nBe brief.<|user|>\n2+2?<|assistant|>\n4, 显然。<|user|>\n"
              "And 3+3?<|assistant|>\n\nSix 🎲<|endoftext|>");
    // With a generation prompt after a user turn nothing is a target.
    const std::vector<ChatMessage> ask(kDialog.begin(), kDialog.begin() + 4);
    const auto prompt = render_chat(tok, ChatFormat::Glm4, ask, true);
    EXPECT_EQ(prompt.ids.back(), *tok.special_id("<|assistant|>"));
    EXPECT_EQ(split_by_target(tok, prompt).first, "\n4, 显然。<|user|>");
  }
}

TEST(ChatMask, ChatGlm3TargetsAssistantContentAndTurnEnds) {
  const auto& tok = shared_tokenizer("chatglm3");
  const auto chat = render_chat(tok, ChatFormat::ChatGlm3, kDialog, false);
  ASSERT_EQ(chat.ids.back(), 2);  // </s> ends the final answer
  EXPECT_EQ(chat.target.back(), 1);
  std::vector<int32_t> targets;
  for (size_t i = 0; i < chat.ids.size(); ++i) {
    if (chat.target[i]) targets.push_back(chat.ids[i]);
  }
  // Each answer is "\n", sp.encode(content) (its own dummy prefix), then the turn-ending token.
  const std::vector<int32_t> newline = tok.encode("\n");
  std::vector<int32_t> expected = newline;
  for (int32_t id : tok.encode("4, 显然。")) expected.push_back(id);
  expected.push_back(64795);
  expected.insert(expected.end(), newline.begin(), newline.end());
  for (int32_t id : tok.encode("\nSix 🎲")) expected.push_back(id);
  expected.push_back(2);
  EXPECT_EQ(targets, expected);
  // The "\n" after <|assistant|> ([30910, 13]) is a target; the role token itself is not.
  ASSERT_EQ(newline, (std::vector<int32_t>{30910, 13}));
  for (size_t i = 0; i + 2 < chat.ids.size(); ++i) {
    if (chat.ids[i] != 64796) continue;
    EXPECT_EQ(chat.target[i], 0) << "at " << i;
    EXPECT_EQ(chat.target[i + 1], 1) << "at " << i + 1;
    EXPECT_EQ(chat.target[i + 2], 1) << "at " << i + 2;
  }
}

TEST(ChatMask, ChatGlm2TrainsFinalAnswerAndEos) {
  const auto& tok = shared_tokenizer("chatglm2");
  const std::vector<ChatMessage> dialog = {
      {"user", "你好"}, {"assistant", "你好！"}, {"user", "1+1?"}, {"assistant", "2"}};
  const auto chat = render_chat(tok, ChatFormat::ChatGlm2, dialog, false);
  std::vector<int32_t> prompt = {64790, 64792};
  for (int32_t id :
       tok.encode("[Round 1]\n\n问：你好\n\n答：你好！\n\n[Round 2]\n\n问：1+1?\n\n答：")) {
    prompt.push_back(id);
  }
  std::vector<int32_t> expected = prompt;
  for (int32_t id : tok.encode("2")) expected.push_back(id);
  expected.push_back(2);
  EXPECT_EQ(chat.ids, expected);
  for (size_t i = 0; i < chat.ids.size(); ++i) EXPECT_EQ(chat.target[i], i >= prompt.size()) << i;
}

TEST(ChatTemplate, RejectsBadInput) {
  const auto& glm4 = shared_tokenizer("glm4-tiktoken");
  EXPECT_THROW(render_chat(glm4, ChatFormat::Glm4, {{"robot", "hi"}}, true), Error);
  EXPECT_THROW(render_chat(shared_tokenizer("chatglm2"), ChatFormat::Glm4, {{"user", "hi"}}, true),
               Error);  // no <|user|> / <sop>
  EXPECT_THROW(render_chat(shared_tokenizer("chatglm2"), ChatFormat::ChatGlm2,
                           {{"system", "x"}, {"user", "hi"}}, true),
               Error);
  const auto empty = render_chat(glm4, ChatFormat::Glm4, {}, true);
  EXPECT_EQ(empty.ids, (std::vector<int32_t>{151331, 151333, 151337}));
}

}  // namespace
}  // namespace glm4
