// Response bodies in OpenAI's shapes: chat.completion / text_completion objects, their stream
// chunks, usage, logprobs (chat: content[{token, logprob, bytes, top_logprobs}]; completions:
// {tokens, token_logprobs, top_logprobs, text_offset}) and the model list.
#include "io/file/json_line.h"
#include "serve/openai_schema.h"

namespace glm4::serve {

json usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
// A token's own text (a piece of a multi-byte character shows as U+FFFD, as decode gives it).
std::string token_text(const Tokenizer& tokenizer, int32_t id) {
  const int32_t one[1] = {id};
  return tokenizer.decode(one, false);
}

json bytes_of(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(int(c));
  return out;
}

json chat_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer& tok) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = token_text(tok, lp.id);
    json top = json::array();
    for (const TopLogprob& alt : lp.top) {
      const std::string a = token_text(tok, alt.id);
      top.push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes_of(a)}});
    }
    content.push_back(
        {{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json completion_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer& tok,
                         int64_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = token_text(tok, lp.id);
    tokens.push_back(t);
    token_logprobs.push_back(lp.logprob);
    json alts = json::object();
    for (const TopLogprob& alt : lp.top) alts[token_text(tok, alt.id)] = alt.logprob;
    top.push_back(alts);
    offsets.push_back(offset);
    offset += int64_t(t.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json logprobs_json(Endpoint endpoint, const std::vector<TokenLogprob>* lps, const Tokenizer& tok) {
  if (!lps) return nullptr;
  return endpoint == Endpoint::Chat ? chat_logprobs(*lps, tok) : completion_logprobs(*lps, tok, 0);
}

json reason_or_null(const std::string& finish_reason) {
  return finish_reason.empty() ? json(nullptr) : json(finish_reason);
}

json head(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}
}  // namespace

json completion_body(const ResponseMeta& meta, const std::vector<ChoiceText>& choices,
                     int64_t prompt_tokens, int64_t completion_tokens, const Tokenizer& tokenizer) {
  const bool chat = meta.endpoint == Endpoint::Chat;
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceText& c = choices[i];
    json choice = {{"index", i},
                   {"logprobs", logprobs_json(meta.endpoint, c.logprobs, tokenizer)},
                   {"finish_reason", reason_or_null(c.finish_reason)}};
    if (chat && !c.message.is_null())
      choice["message"] = c.message;
    else if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    else
      choice["text"] = c.text;
    list.push_back(choice);
  }
  json body = head(meta, chat ? "chat.completion" : "text_completion");
  body["choices"] = list;
  body["usage"] = usage(prompt_tokens, completion_tokens);
  return body;
}

json stream_chunk(const ResponseMeta& meta, size_t index, const std::string& text,
                  const std::vector<TokenLogprob>* logprobs, const std::string& finish_reason,
                  const json& usage, const Tokenizer& tokenizer, bool role_only) {
  const bool chat = meta.endpoint == Endpoint::Chat;
  json choice = {{"index", index},
                 {"logprobs", logprobs_json(meta.endpoint, logprobs, tokenizer)},
                 {"finish_reason", reason_or_null(finish_reason)}};
  if (chat) {
    if (role_only)
      choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    else if (!text.empty() || finish_reason.empty())
      choice["delta"] = {{"content", text}};
    else
      choice["delta"] = json::object();
  } else {
    choice["text"] = text;
  }
  json body = head(meta, chat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = json::array({choice});
  if (!usage.is_null()) body["usage"] = usage;
  return body;
}

json delta_chunk(const ResponseMeta& meta, size_t index, const json& delta,
                 const std::vector<TokenLogprob>* logprobs, const Tokenizer& tokenizer) {
  json choice = {{"index", index},
                 {"delta", delta.is_null() ? json::object() : delta},
                 {"logprobs", logprobs_json(meta.endpoint, logprobs, tokenizer)},
                 {"finish_reason", nullptr}};
  json body = head(meta, "chat.completion.chunk");
  body["choices"] = json::array({choice});
  return body;
}

json usage_chunk(const ResponseMeta& meta, int64_t prompt_tokens, int64_t completion_tokens) {
  json body =
      head(meta, meta.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = json::array();
  body["usage"] = usage(prompt_tokens, completion_tokens);
  return body;
}

json models_body(const ServedModels& served) {
  json data = json::array();
  auto add = [&](const std::string& id, const char* kind) {
    data.push_back({{"id", id},
                    {"object", "model"},
                    {"created", served.created},
                    {"owned_by", "glm4"},
                    {"kind", kind}});
  };
  add(served.base_name, "base");
  for (const std::string& name : served.adapter_names) add(name, "adapter");
  return {{"object", "list"}, {"data", data}};
}

std::string dump(const json& j) { return json_line(j); }

}  // namespace glm4::serve
