// The OpenAI API as the server speaks it: request bodies of /v1/chat/completions and
// /v1/completions checked field by field (errors name the field), turned into slot requests, and
// the response, stream-chunk, model-list and error bodies. No HTTP here.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "infer/grammar/json_schema.h"
#include "infer/grammar/token_trie.h"
#include "io/tokenizer/chat_template.h"
#include "io/tokenizer/tokenizer.h"
#include "serve/openai_tools.h"
#include "serve/scheduler.h"

namespace glm4::serve {

using json = nlohmann::json;

// An error the client caused (or a refusal), as OpenAI reports it:
// {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "invalid_request_error");
  int status;
  std::string param, code, type;
};
json error_body(const ApiError& e);

enum class Endpoint { Chat, Completion };

// A request body after checking, before tokenization.
struct ParsedRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;                  // empty when not given
  std::vector<ChatMessage> messages;  // chat
  ChatOptions chat_options;           // chat_template_kwargs (enable_thinking), tools
  ToolRequest tools;                  // tools and tool_choice (serve/openai_tools.h)
  std::string prompt;                 // completions, given as text
  std::vector<int32_t> prompt_ids;    // completions, given as token ids
  bool prompt_is_ids = false;
  std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens
  SamplerConfig sampling;             // repeat_last_n = -1 is not used: the last 64, as generate
  // Which sampling fields the body set; the others come from ServedModels::sampling_defaults.
  bool temperature_given = false, top_p_given = false, top_k_given = false, min_p_given = false,
       repetition_penalty_given = false;
  bool seed_given = false;
  int64_t n = 1;  // choices to sample, each in its own slot
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  int top_logprobs = -1;  // -1: no logprobs
  // response_format json_object / json_schema, compiled; null for text (or none).
  std::shared_ptr<const glm4::grammar::Grammar> grammar;
};

// Throws ApiError (400) for malformed JSON, a body that is not an object, a missing required
// field, or a field of the wrong type or out of range, or a response_format schema that cannot be
// compiled (the message names the schema path); unknown fields are ignored.
ParsedRequest parse_request(std::string_view body, Endpoint endpoint);

// What the server serves: one base model and adapters registered at start by name.
struct ServedModels {
  const Glm4Model* model = nullptr;
  const Tokenizer* tokenizer = nullptr;  // required by the HTTP endpoints
  ChatFormat format = ChatFormat::Glm4;
  std::string base_name;
  std::vector<std::string> adapter_names;  // resident slot i
  std::vector<int32_t> eos_ids;            // end a completion (generation_config / config)
  std::vector<int32_t> chat_stop_ids;      // end a chat reply: eos_ids + the template's role tokens
  int64_t created = 0;                     // unix time the server started
  // What a request samples with where it sets no temperature, top_p, top_k, min_p or
  // repetition_penalty: OpenAI's defaults (temperature 1, top_p 1) unless the model's
  // generation_config.json says otherwise (serve/sampling_defaults.h).
  SamplerConfig sampling_defaults{1.0f, 0, 1.0f};
  // The tokenizer's vocabulary trie for response_format; built per request when null.
  std::shared_ptr<const glm4::grammar::TokenTrie> token_trie;

  // -1 for the base (or an empty name), the adapter's slot, or nullopt for an unknown name.
  std::optional<int32_t> slot_of(const std::string& name) const;
  int64_t context_length() const { return model->config.max_position_embeddings; }
};

// Tokenizes and resolves the model: 404 for an unknown model, 400 for a prompt that does not
// fit the context (prompt tokens >= context length) or token ids outside the vocabulary. A chat
// prompt ends with reply_reading's prefill (a forced tool call's opening).
// A request without a seed gets `fallback_seed`; without max_tokens, the rest of the context;
// without a sampling field, served.sampling_defaults' value.
SlotRequest build_slot_request(const ParsedRequest& r, const ServedModels& served,
                               uint64_t fallback_seed);

// Responses. `id` is "chatcmpl-..." / "cmpl-...", `model` as the client named it.
struct ResponseMeta {
  Endpoint endpoint;
  std::string id, model;
  int64_t created;
};
// One sampled answer of a non-streamed request (choices[index]).
struct ChoiceText {
  std::string text, finish_reason;
  const std::vector<TokenLogprob>* logprobs = nullptr;  // null: no logprobs asked for
  json message = nullptr;  // a chat reply read by ChatReply: its message, else {content: text}
};
// The whole answer of a non-streamed request: one choice per answer, in order; usage counts the
// prompt once and the tokens of every choice.
json completion_body(const ResponseMeta& meta, const std::vector<ChoiceText>& choices,
                     int64_t prompt_tokens, int64_t completion_tokens, const Tokenizer& tokenizer);
// {"prompt_tokens", "completion_tokens", "total_tokens"}.
json usage(int64_t prompt_tokens, int64_t completion_tokens);
// One server-sent event's data for choice `index`; `usage` (not null) rides along, as on the
// finish chunk of a one-choice stream. `role_only` makes a chat choice's first chunk
// ({"role": "assistant", "content": ""}).
json stream_chunk(const ResponseMeta& meta, size_t index, const std::string& text,
                  const std::vector<TokenLogprob>* logprobs, const std::string& finish_reason,
                  const json& usage, const Tokenizer& tokenizer, bool role_only = false);
// A chat chunk of choice `index` whose delta is `delta` (ChatReply's: content,
// reasoning_content, tool_calls).
json delta_chunk(const ResponseMeta& meta, size_t index, const json& delta,
                 const std::vector<TokenLogprob>* logprobs, const Tokenizer& tokenizer);
// The usage-only chunk OpenAI sends last when stream_options.include_usage is set.
json usage_chunk(const ResponseMeta& meta, int64_t prompt_tokens, int64_t completion_tokens);
json models_body(const ServedModels& served);

// JSON text for the wire: invalid UTF-8 (never expected) is replaced, not thrown.
std::string dump(const json& j);

}  // namespace glm4::serve
