// Request bodies of the OpenAI API: every field this server reads is checked for its type and
// range, and the error names it (OpenAI's "param"); then prompt, model and limits become a slot
// request.
#include <algorithm>
#include <limits>

#include "base/check.h"
#include "io/file/json_depth.h"
#include "io/tokenizer/glm45_chat.h"
#include "serve/openai_schema.h"

namespace glm4::serve {

ApiError::ApiError(int status_, std::string message, std::string param_, std::string code_,
                   std::string type_)
    : std::runtime_error(std::move(message)),
      status(status_),
      param(std::move(param_)),
      code(std::move(code_)),
      type(std::move(type_)) {}

json error_body(const ApiError& e) {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", or_null(e.param)},
            {"code", or_null(e.code)}}}};
}

namespace {
constexpr int kMaxTopLogprobs = 20;
constexpr int64_t kMaxChoices = 16;  // n: answers per request (each takes a slot)
constexpr size_t kMaxStops = 16;
constexpr int kMaxDepth = 32;  // JSON values are copied and destroyed recursively: bound the depth
constexpr size_t kMaxMessages =
    4096;  // per chat request (the body's size is bounded by the server)

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "': " + message, param, "invalid_value");
}

// A field that is absent or null counts as not given.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const char* name, double lo, double hi) {
  if (!v.is_number()) bad(name, "expected a number, got " + std::string(v.type_name()));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) bad(name, str_cat(x, " is out of range [", lo, ", ", hi, "]"));
  return x;
}

int64_t integer(const json& v, const char* name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    bad(name,
        "expected an integer, got " + (v.is_number() ? v.dump() : std::string(v.type_name())));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, v.dump() + " is out of range");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(name, str_cat(x, " is out of range [", lo, ", ", hi, "]"));
  return x;
}

bool boolean(const json& v, const char* name) {
  if (!v.is_boolean()) bad(name, "expected a boolean, got " + std::string(v.type_name()));
  return v.get<bool>();
}

std::string message_content(const json& content, const std::string& param) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "expected a string or an array of text parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string p = str_cat(param, "[", i, "]");
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    const json* text_field = part.is_object() ? field(part, "text") : nullptr;
    if (!type || *type != "text" || !text_field || !text_field->is_string())
      bad(p, "only {\"type\": \"text\", \"text\": ...} parts are supported");
    text += text_field->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  const json* m = field(body, "messages");
  if (!m) bad("messages", "is required");
  if (!m->is_array() || m->empty()) bad("messages", "expected a non-empty array");
  if (m->size() > kMaxMessages)
    bad("messages", str_cat("has ", m->size(), " messages; the limit is ", kMaxMessages));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string p = str_cat("messages[", i, "]");
    if (!msg.is_object()) bad(p, "expected an object");
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) bad(p + ".role", "expected a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r == "tool") r = "observation";
    if (r != "system" && r != "user" && r != "assistant" && r != "observation")
      bad(p + ".role", "unknown role \"" + role->get<std::string>() +
                           "\" (system, developer, user, assistant, tool)");
    const json* content = field(msg, "content");
    out.push_back({r, content ? message_content(*content, p + ".content") : std::string()});
    if (const json* calls = field(msg, "tool_calls"); calls && r == "assistant")
      out.back().tool_calls = parse_tool_calls(*calls, p);
    // The thinking of an earlier answer, as OpenAI-style clients send it back (the GLM-4.5
    // family's template writes it after the last user turn; other formats ignore it).
    if (const json* reasoning = field(msg, "reasoning_content"); reasoning && r == "assistant") {
      if (!reasoning->is_string()) bad(p + ".reasoning_content", "expected a string");
      out.back().reasoning_content = reasoning->get<std::string>();
    }
  }
  return out;
}

void parse_prompt(const json& body, ParsedRequest& r) {
  const json* p = field(body, "prompt");
  if (!p) bad("prompt", "is required");
  const json* v = p;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array()))
    v = &(*v)[0];  // a batch of one
  if (v->is_string()) {
    r.prompt = v->get<std::string>();
    return;
  }
  if (v->is_array() && !v->empty() &&
      std::all_of(v->begin(), v->end(), [](const json& x) { return x.is_number_integer(); })) {
    for (const json& x : *v)
      r.prompt_ids.push_back(int32_t(integer(x, "prompt", 0, std::numeric_limits<int32_t>::max())));
    r.prompt_is_ids = true;
    return;
  }
  bad("prompt", "expected a string or an array of token ids (one prompt: n = 1)");
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict"}}.
void parse_response_format(const json& body, std::string_view text, ParsedRequest& r) {
  const json* f = field(body, "response_format");
  if (!f) return;
  if (!f->is_object()) bad("response_format", "expected an object");
  const json* type = field(*f, "type");
  if (!type || !type->is_string())
    bad("response_format.type", "expected \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = type->get<std::string>();
  if (t == "text") return;
  if (t == "json_object") {
    r.grammar = grammar::json_object_grammar().grammar;
    return;
  }
  if (t != "json_schema")
    bad("response_format.type", "unknown type \"" + t + "\" (text, json_object, json_schema)");
  const json* js = field(*f, "json_schema");
  if (!js || !js->is_object()) bad("response_format.json_schema", "expected an object");
  if (const json* name = field(*js, "name"); name && !name->is_string())
    bad("response_format.json_schema.name", "expected a string");
  if (const json* strict = field(*js, "strict"))
    boolean(*strict, "response_format.json_schema.strict");
  const json* schema = field(*js, "schema");
  if (!schema) bad("response_format.json_schema.schema", "is required");
  const std::string path = "response_format.json_schema.schema";
  // Parsed again keeping the order of keys: properties are written in the order declared.
  const auto ordered = nlohmann::ordered_json::parse(text, nullptr, false);
  try {
    r.grammar = grammar::compile_json_schema(
                    ordered.at("response_format").at("json_schema").at("schema"), path)
                    .grammar;
  } catch (const Error& e) {
    throw ApiError(400, e.what(), path, "invalid_value");
  }
}

void parse_stop(const json& body, ParsedRequest& r) {
  const json* s = field(body, "stop");
  if (!s) return;
  if (s->is_string()) {
    if (!s->get<std::string>().empty()) r.stop.push_back(s->get<std::string>());
    return;
  }
  if (!s->is_array() || s->size() > kMaxStops)
    bad("stop", str_cat("expected a string or up to ", kMaxStops, " strings"));
  for (const json& x : *s) {
    if (!x.is_string()) bad("stop", "expected strings, got " + std::string(x.type_name()));
    if (!x.get<std::string>().empty()) r.stop.push_back(x.get<std::string>());
  }
}
}  // namespace

ParsedRequest parse_request(std::string_view text, Endpoint endpoint) {
  if (json_nesting_depth(text) > kMaxDepth)
    throw ApiError(
        400, str_cat("the request body nests arrays/objects deeper than ", kMaxDepth, " levels"),
        "", "invalid_json");
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded())
    throw ApiError(400, "the request body is not valid JSON", "", "invalid_json");
  if (!body.is_object())
    throw ApiError(400, "the request body must be a JSON object", "", "invalid_json");
  ParsedRequest r;
  r.endpoint = endpoint;
  if (const json* v = field(body, "model")) {
    if (!v->is_string()) bad("model", "expected a string");
    r.model = v->get<std::string>();
  }
  if (endpoint == Endpoint::Chat) {
    r.messages = parse_messages(body);
    r.tools = parse_tool_fields(body, text);
    r.chat_options.tools = r.tools.tools;
    if (const json* kwargs = field(body, "chat_template_kwargs")) {
      if (!kwargs->is_object()) bad("chat_template_kwargs", "expected an object");
      if (const json* v = field(*kwargs, "enable_thinking"))
        r.chat_options.enable_thinking = boolean(*v, "chat_template_kwargs.enable_thinking");
    }
  } else
    parse_prompt(body, r);

  for (const char* name : {"max_tokens", "max_completion_tokens"})
    if (const json* v = field(body, name))
      r.max_tokens = integer(*v, name, 1, std::numeric_limits<int32_t>::max());
  SamplerConfig& s = r.sampling;
  if (const json* v = field(body, "temperature")) {
    s.temperature = float(number(*v, "temperature", 0, 2));
    r.temperature_given = true;
  }
  if (const json* v = field(body, "top_p")) {
    s.top_p = float(number(*v, "top_p", 0, 1));
    r.top_p_given = true;
  }
  if (const json* v = field(body, "top_k")) {
    s.top_k = int(std::max<int64_t>(0, integer(*v, "top_k", -1, 1 << 30)));
    r.top_k_given = true;
  }
  if (const json* v = field(body, "min_p")) {
    s.min_p = float(number(*v, "min_p", 0, 1));
    r.min_p_given = true;
  }
  if (const json* v = field(body, "repetition_penalty")) {
    s.repeat_penalty = float(number(*v, "repetition_penalty", 1e-6, 100));
    r.repetition_penalty_given = true;
  }
  if (const json* v = field(body, "seed")) {
    s.seed = uint64_t(integer(*v, "seed", std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max()));
    r.seed_given = true;
  }
  parse_stop(body, r);
  parse_response_format(body, text, r);
  if (const json* v = field(body, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "expected an object");
    if (const json* u = field(*v, "include_usage"))
      r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (const json* v = field(body, "n")) r.n = integer(*v, "n", 1, kMaxChoices);
  if (endpoint == Endpoint::Chat) {
    const bool want = field(body, "logprobs") && boolean(*field(body, "logprobs"), "logprobs");
    if (const json* v = field(body, "top_logprobs")) {
      const int k = int(integer(*v, "top_logprobs", 0, kMaxTopLogprobs));
      if (!want) bad("top_logprobs", "needs logprobs: true");
      r.top_logprobs = k;
    } else if (want) {
      r.top_logprobs = 0;
    }
  } else {
    if (const json* v = field(body, "logprobs"))
      r.top_logprobs = int(integer(*v, "logprobs", 0, kMaxTopLogprobs));
    if (const json* v = field(body, "echo"); v && boolean(*v, "echo"))
      bad("echo", "echo is not supported");
    if (const json* v = field(body, "best_of"); v && integer(*v, "best_of", 1, 128) != 1)
      bad("best_of", "only best_of = 1 is supported");
  }
  return r;
}

std::optional<int32_t> ServedModels::slot_of(const std::string& name) const {
  if (name.empty() || name == base_name) return -1;
  auto it = std::find(adapter_names.begin(), adapter_names.end(), name);
  if (it == adapter_names.end()) return std::nullopt;
  return int32_t(it - adapter_names.begin());
}

SlotRequest build_slot_request(const ParsedRequest& r, const ServedModels& served,
                               uint64_t fallback_seed) {
  SlotRequest out;
  std::shared_ptr<const grammar::Grammar> constraint = r.grammar;
  std::optional<int32_t> slot = served.slot_of(r.model);
  if (!slot) {
    std::string known = served.base_name;
    for (const std::string& n : served.adapter_names) known += ", " + n;
    throw ApiError(404, "The model '" + r.model + "' does not exist (served: " + known + ")",
                   "model", "model_not_found");
  }
  out.adapter = *slot;
  const Tokenizer& tok = *served.tokenizer;
  if (r.endpoint == Endpoint::Chat) {
    const ReplyReading reading = reply_reading(served.format, r.chat_options, r.tools);
    try {
      out.prompt = render_chat(tok, served.format, r.messages, true, r.chat_options).ids;
    } catch (const Error& e) {
      throw ApiError(400, std::string("messages: ") + e.what(), "messages", "invalid_value");
    }
    const std::vector<int32_t> prefill = encode_template_text(tok, reading.prefill);
    out.prompt.insert(out.prompt.end(), prefill.begin(), prefill.end());
    if (reading.grammar) constraint = reading.grammar;  // a forced call: the reply is the call
    if (reading.call_grammar) {
      out.call_grammar = reading.call_grammar;
      out.call_opening = grammar::call_opening(served.format, tok);
    }
    out.stop_ids = served.chat_stop_ids;
    // A parsed reply drops its leading whitespace itself (and Glm4's "\n" tells answers from
    // calls there).
    out.strip_leading_newline = reply_starts_with_newline(served.format) && !reading.parse;
  } else if (r.prompt_is_ids) {
    const int64_t vocab = served.model->config.vocab_size;
    for (int32_t id : r.prompt_ids)
      if (id >= vocab)
        bad("prompt", str_cat("token id ", id, " is outside the vocabulary of ", vocab));
    out.prompt = r.prompt_ids;
    out.stop_ids = served.eos_ids;
  } else {
    out.prompt = prompt_prefix_ids(tok);
    std::vector<int32_t> body = tok.encode(r.prompt, true);
    out.prompt.insert(out.prompt.end(), body.begin(), body.end());
    out.stop_ids = served.eos_ids;
  }
  const int64_t context = served.context_length(), n = int64_t(out.prompt.size());
  if (n == 0) bad(r.endpoint == Endpoint::Chat ? "messages" : "prompt", "the prompt is empty");
  if (context > 0 && n >= context)
    throw ApiError(400,
                   str_cat("the prompt has ", n, " tokens; this model's context is ", context,
                           " tokens, and at least one must remain for the reply"),
                   r.endpoint == Endpoint::Chat ? "messages" : "prompt", "context_length_exceeded");
  out.max_tokens = r.max_tokens ? *r.max_tokens : (context > 0 ? context - n : 256);
  const SamplerConfig& d = served.sampling_defaults;
  out.sampling = r.sampling;
  if (!r.temperature_given) out.sampling.temperature = d.temperature;
  if (!r.top_p_given) out.sampling.top_p = d.top_p;
  if (!r.top_k_given) out.sampling.top_k = d.top_k;
  if (!r.min_p_given) out.sampling.min_p = d.min_p;
  if (!r.repetition_penalty_given) out.sampling.repeat_penalty = d.repeat_penalty;
  if (!r.seed_given) out.sampling.seed = fallback_seed;
  out.stop = r.stop;
  out.top_logprobs = r.top_logprobs;
  if (constraint) out.grammar = constraint;
  if (constraint || out.call_grammar) {
    out.token_trie =
        served.token_trie ? served.token_trie : std::make_shared<const grammar::TokenTrie>(tok);
  }
  return out;
}

}  // namespace glm4::serve
