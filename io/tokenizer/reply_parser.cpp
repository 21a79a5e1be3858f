// The reply parser: a small state machine over the decoded text, holding back what may still
// become a tag.
#include "io/tokenizer/reply_parser.h"

#include <cctype>
#include <span>
#include <utility>

#include "io/tokenizer/python_json.h"

namespace glm4 {
namespace {

using Tags = std::span<const std::string_view>;

constexpr std::string_view kThink = "<think>", kThinkEnd = "</think>", kCall = "<tool_call>",
                           kCallEnd = "</tool_call>", kKey = "<arg_key>", kKeyEnd = "</arg_key>",
                           kValue = "<arg_value>", kValueEnd = "</arg_value>";
// The tags each state looks for.
constexpr std::string_view kContentTags[] = {kThink, kThinkEnd, kCall};
constexpr std::string_view kReasoningTags[] = {kThinkEnd};
constexpr std::string_view kNameEnds[] = {kKey, kCallEnd, "\n"};
constexpr std::string_view kNameTags[] = {kKey, kCallEnd};
constexpr std::string_view kBodyTags[] = {kKey, kCallEnd};
constexpr std::string_view kGapTags[] = {kValue};
constexpr std::string_view kKeyTags[] = {kKeyEnd};
constexpr std::string_view kValueTags[] = {kValueEnd};

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The first of `tags` in s: {position, length}, or {npos, 0}.
std::pair<size_t, size_t> find_first(std::string_view s, Tags tags) {
  std::pair<size_t, size_t> best{std::string_view::npos, 0};
  for (std::string_view t : tags)
    if (size_t p = s.find(t); p < best.first) best = {p, t.size()};
  return best;
}

// Length of the longest suffix of s that is a proper prefix of one of `tags`.
size_t held_suffix(std::string_view s, Tags tags) {
  size_t best = 0;
  for (std::string_view t : tags)
    for (size_t n = std::min(s.size(), t.size() - 1); n > best; --n)
      if (s.substr(s.size() - n) == t.substr(0, n)) {
        best = n;
        break;
      }
  return best;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// A GLM-4 call's first line so far: a name (ASCII letters, digits, '_', '-', '.', or any non-ASCII
// byte), then perhaps spaces (GLM-4-0414 writes "name \n").
bool name_line_so_far(std::string_view s) {
  size_t i = 0;
  const auto name_char = [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c >= 0x80;
  };
  while (i < s.size() && name_char(static_cast<unsigned char>(s[i]))) ++i;
  while (i < s.size() && s[i] == ' ') ++i;
  return i == s.size();
}

}  // namespace

ReplyParser::ReplyParser(ReplyParserOptions options) : options_(std::move(options)) {
  for (const std::string& text : options_.tools) {
    const ordered_json tool = parse_ordered_json(text);
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) continue;
    const ordered_json& f = tool["function"];
    if (!f.contains("name") || !f["name"].is_string()) continue;
    auto& params = string_params_[f["name"].get<std::string>()];
    const auto p = f.find("parameters");
    if (p == f.end() || !p->is_object() || !p->contains("properties")) continue;
    const ordered_json& props = (*p)["properties"];
    if (!props.is_object()) continue;
    for (const auto& [key, schema] : props.items())
      params[key] = schema.is_object() && schema.value("type", "") == "string";
  }
  state_ = State::Start;
}

void ReplyParser::emit_content(ReplyDelta& out, std::string_view text) {
  if (!content_started_) {
    while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    content_started_ = true;
  }
  std::string all = std::exchange(held_space_, "") + std::string(text);
  size_t end = all.size();
  while (end > 0 && is_space(all[end - 1])) --end;
  held_space_ = all.substr(end);
  out.content += all.substr(0, end);
  reply_.content += all.substr(0, end);
}

void ReplyParser::emit_reasoning(ReplyDelta& out, std::string_view text) {
  if (!reasoning_started_) {
    while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    reasoning_started_ = true;
  }
  std::string all = std::exchange(held_space_, "") + std::string(text);
  size_t end = all.size();
  while (end > 0 && is_space(all[end - 1])) --end;
  held_space_ = all.substr(end);
  out.reasoning += all.substr(0, end);
  reply_.reasoning += all.substr(0, end);
}

size_t ReplyParser::ObjectEnd::find(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!started) {
      if (is_space(c)) continue;
      started = true;
      object = c == '{';  // anything else never closes: not an object
    }
    if (!object) return std::string_view::npos;
    brackets.step(c);
    if (!brackets.in_string && (c == '}' || c == ']') && brackets.depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

void ReplyParser::open_call(ReplyDelta& out, std::string name) {
  args_in_call_ = 0;
  args_end_ = {};
  reply_.calls.push_back({"", std::move(name), ""});
  out.calls.push_back({int(reply_.calls.size()) - 1, reply_.calls.back().name, ""});
}

void ReplyParser::close_call(ReplyDelta& out) {
  const std::string piece = args_in_call_ == 0 ? "{}" : "}";
  reply_.calls.back().arguments += piece;
  out.calls.push_back({int(reply_.calls.size()) - 1, "", piece});
  call_raw_.clear();
}

std::string ReplyParser::value_json(const std::string& key, const std::string& value) const {
  const std::string& tool = reply_.calls.back().name;
  if (auto t = string_params_.find(tool); t != string_params_.end())
    if (auto p = t->second.find(key); p != t->second.end() && p->second)
      return ordered_json(value).dump();
  const ordered_json parsed = parse_ordered_json(value);
  if (parsed.is_discarded() || parsed.is_string()) return ordered_json(value).dump();
  return python_json_dumps(parsed);
}

void ReplyParser::run(ReplyDelta& out, bool at_end) {
  const bool glm4 = calls_by_name_line(options_.format);
  while (true) {
    switch (state_) {
      case State::Start:
        if (glm4) {
          if (buf_.empty()) return;
          state_ = buf_[0] == '\n' || !options_.parse_calls ? State::Verbatim : State::Glm4Name;
        } else {
          const bool thinking = options_.format == ChatFormat::Glm47 && options_.enable_thinking;
          state_ = thinking ? State::Reasoning : State::Content;
        }
        continue;
      case State::Verbatim:
        emit_content(out, buf_);
        buf_.clear();
        return;
      case State::Content:
      case State::Reasoning: {
        const bool reasoning = state_ == State::Reasoning;
        const Tags tags = reasoning              ? Tags(kReasoningTags)
                          : options_.parse_calls ? Tags(kContentTags)
                                                 : Tags(kContentTags).first(2);
        const auto [at, len] = find_first(buf_, tags);
        const size_t text_len =
            at != std::string::npos ? at : buf_.size() - (at_end ? 0 : held_suffix(buf_, tags));
        const std::string_view text = std::string_view(buf_).substr(0, text_len);
        reasoning ? emit_reasoning(out, text) : emit_content(out, text);
        if (at == std::string::npos) {
          buf_.erase(0, text_len);
          return;
        }
        const std::string tag = buf_.substr(at, len);
        buf_.erase(0, at + len);
        held_space_.clear();  // whitespace before a tag: the template strips it
        if (tag == kThink) {
          state_ = State::Reasoning;
        } else if (tag == kThinkEnd) {
          state_ = State::Content;
          if (reply_.content.empty()) content_started_ = false;
        } else {
          state_ = State::CallName;
          field_.clear();
          call_raw_ = tag;
        }
        continue;
      }
      case State::CallName: {
        const auto [at, len] = find_first(buf_, kNameEnds);
        if (at == std::string::npos) {
          const size_t keep = at_end ? 0 : held_suffix(buf_, kNameTags);
          field_ += buf_.substr(0, buf_.size() - keep);
          call_raw_ += buf_.substr(0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        field_ += buf_.substr(0, at);
        const std::string name(trim(field_));
        if (name.empty()) {  // no name: not a call; its text is answer text
          state_ = State::Verbatim;
          reply_.malformed_call = true;
          emit_content(out, call_raw_ + buf_.substr(0, at));
          call_raw_.clear();
          continue;
        }
        call_raw_ += buf_.substr(0, at);
        open_call(out, name);
        state_ = State::CallBody;
        if (buf_[at] == '\n') {
          buf_.erase(0, at + 1);
          call_raw_ += "\n";
        } else {
          buf_.erase(0, at);  // the tag is read by CallBody
        }
        continue;
      }
      case State::CallBody:
      case State::ArgGap: {
        size_t ws = 0;
        while (ws < buf_.size() && is_space(buf_[ws])) ++ws;
        call_raw_ += buf_.substr(0, ws);
        buf_.erase(0, ws);
        const std::string_view rest = buf_;
        const bool body = state_ == State::CallBody;
        const Tags expected = body ? Tags(kBodyTags) : Tags(kGapTags);
        std::string_view matched;
        for (std::string_view t : expected)
          if (starts_with(rest, t)) matched = t;
        if (!matched.empty()) {
          call_raw_ += std::string(matched);
          buf_.erase(0, matched.size());
          field_.clear();
          if (matched == kCallEnd) {
            close_call(out);
            state_ = State::Content;
          } else {
            state_ = matched == kKey ? State::ArgKey : State::ArgValue;
          }
          continue;
        }
        if (rest.empty()) return;
        bool prefix = false;
        for (std::string_view t : expected) prefix = prefix || starts_with(t, rest);
        if (prefix || at_end) return;  // more may come; at the end finish() reports truncation
        // Stray text inside a call: the call ends with what it has, the rest is answer text.
        reply_.malformed_call = true;
        close_call(out);
        state_ = State::Verbatim;
        continue;
      }
      case State::ArgKey:
      case State::ArgValue: {
        const Tags end = state_ == State::ArgKey ? Tags(kKeyTags) : Tags(kValueTags);
        const auto [at, len] = find_first(buf_, end);
        if (at == std::string::npos) {
          const size_t keep = at_end ? 0 : held_suffix(buf_, end);
          field_ += buf_.substr(0, buf_.size() - keep);
          call_raw_ += buf_.substr(0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        field_ += buf_.substr(0, at);
        call_raw_ += buf_.substr(0, at + len);
        buf_.erase(0, at + len);
        if (state_ == State::ArgKey) {
          key_ = std::string(trim(field_));
          state_ = State::ArgGap;
        } else {
          const std::string piece = std::string(args_in_call_ == 0 ? "{" : ", ") +
                                    ordered_json(key_).dump() + ": " + value_json(key_, field_);
          ++args_in_call_;
          reply_.calls.back().arguments += piece;
          out.calls.push_back({int(reply_.calls.size()) - 1, "", piece});
          state_ = State::CallBody;
        }
        continue;
      }
      case State::Glm4Name: {
        const size_t nl = buf_.find('\n');
        field_ += buf_.substr(0, nl);
        call_raw_ += buf_.substr(0, nl == std::string::npos ? nl : nl + 1);
        buf_.erase(0, nl == std::string::npos ? nl : nl + 1);
        const std::string name(trim(field_));
        const bool known = options_.tools.empty() || string_params_.count(name) > 0;
        if (!name_line_so_far(field_) || (nl != std::string::npos && (name.empty() || !known))) {
          state_ = State::Verbatim;  // not a call (or not to one of the tools): an answer
          emit_content(out, std::exchange(call_raw_, "") + std::exchange(buf_, ""));
          continue;
        }
        if (nl == std::string::npos) return;
        open_call(out, name);
        state_ = State::Glm4Args;
        continue;
      }
      case State::Glm4Args: {
        const size_t end = args_end_.find(buf_);
        call_raw_ += buf_.substr(0, end);
        // Whitespace at either end is not the arguments': trailing whitespace is held until more
        // follows, so that the deltas add up to the arguments even when the reply breaks off.
        std::string piece = std::exchange(held_space_, "") + buf_.substr(0, end);
        buf_.erase(0, end);
        std::string& args = reply_.calls.back().arguments;
        size_t lead = 0;
        while (args.empty() && lead < piece.size() && is_space(piece[lead])) ++lead;
        piece.erase(0, lead);
        size_t keep = piece.size();
        while (keep > 0 && is_space(piece[keep - 1])) --keep;
        held_space_ = piece.substr(keep);
        piece.resize(keep);
        args += piece;
        if (!piece.empty()) out.calls.push_back({int(reply_.calls.size()) - 1, "", piece});
        if (end == std::string::npos) return;
        // The object closed: the call is complete; the model may go on with another.
        held_space_.clear();
        call_raw_.clear();
        state_ = State::Glm4Next;
        continue;
      }
      case State::Glm4Next: {
        size_t ws = 0;
        while (ws < buf_.size() && is_space(buf_[ws])) ++ws;
        buf_.erase(0, ws);
        if (buf_.empty()) return;
        field_.clear();
        state_ = State::Glm4Name;
        continue;
      }
    }
  }
}

ReplyDelta ReplyParser::push(std::string_view piece) {
  ReplyDelta out;
  buf_ += piece;
  run(out, false);
  return out;
}

ReplyDelta ReplyParser::begin_call(const std::string& name) {
  ReplyDelta out;
  const bool glm4 = calls_by_name_line(options_.format);
  call_raw_ = glm4 ? tool_call_prefill(options_.format, true, name) : std::string(kCall) + name;
  open_call(out, name);
  state_ = glm4 ? State::Glm4Args : State::CallBody;
  return out;
}

ReplyDelta ReplyParser::turn() {
  ReplyDelta out;
  if (!calls_by_name_line(options_.format) || !options_.parse_calls) return out;
  if (state_ == State::Glm4Name) {  // the line ended with the turn: not a call
    emit_content(out, std::exchange(call_raw_, "") + std::exchange(buf_, ""));
  } else if (state_ != State::Verbatim && state_ != State::Glm4Next && state_ != State::Start) {
    return out;
  }
  field_.clear();
  state_ = State::Start;
  run(out, false);
  return out;
}

ReplyDelta ReplyParser::finish() {
  ReplyDelta out;
  run(out, true);
  const bool in_call = state_ == State::CallName || state_ == State::CallBody ||
                       state_ == State::ArgKey || state_ == State::ArgGap ||
                       state_ == State::ArgValue || state_ == State::Glm4Name;
  bool glm4_bad = false;
  if (state_ == State::Glm4Args) {
    const ordered_json args = parse_ordered_json(trim(reply_.calls.back().arguments));
    glm4_bad = args.is_discarded() || !args.is_object();
  }
  const bool opened = state_ == State::CallBody || state_ == State::ArgKey ||
                      state_ == State::ArgGap || state_ == State::ArgValue ||
                      state_ == State::Glm4Args;
  if (options_.forced_call && opened && (in_call || glm4_bad)) {
    // A forced call stays a call: with its complete arguments (Glm45 / Glm47) or its text.
    if (glm4_bad) {
      reply_.calls.back().arguments = std::string(trim(reply_.calls.back().arguments));
      reply_.malformed_call = true;
    } else {
      close_call(out);
      reply_.truncated_call = true;
    }
    buf_.clear();
    call_raw_.clear();
    held_space_.clear();
    state_ = State::Verbatim;
    return out;
  }
  if (in_call || glm4_bad) {
    // The call never ended (or its JSON did not): its text is answer text in the whole reply.
    if (state_ != State::CallName && state_ != State::Glm4Name) reply_.calls.pop_back();
    reply_.truncated_call = true;
    held_space_.clear();
    const bool started = content_started_;
    content_started_ = true;  // keep the call's text as written
    std::string raw = std::exchange(call_raw_, "") + std::exchange(buf_, "");
    if (!started) raw = std::string(trim(raw));
    out.content += (reply_.content.empty() ? "" : "\n") + raw;
    reply_.content += (reply_.content.empty() ? "" : "\n") + raw;
  } else if (state_ == State::Content && reply_.calls.empty()) {
    out.content += held_space_;
    reply_.content += held_space_;
  }
  if (state_ == State::Glm4Args && !glm4_bad)
    reply_.calls.back().arguments = std::string(trim(reply_.calls.back().arguments));
  held_space_.clear();
  state_ = State::Verbatim;
  return out;
}

std::string tool_call_prefill(ChatFormat format, bool enable_thinking, const std::string& name) {
  switch (format) {
    case ChatFormat::Glm45:
      // The template writes "\n<think></think>" for a turn without reasoning; a thinking-off
      // prompt already ends with it.
      return std::string(enable_thinking ? "\n<think></think>" : "") + "\n<tool_call>" +
             (name.empty() ? "" : name + "\n");
    case ChatFormat::Glm47:
      return std::string(enable_thinking ? "</think>" : "") + "<tool_call>" + name;
    case ChatFormat::Glm4:
      return name.empty() ? "" : name + "\n";
    case ChatFormat::Glm40414:
      return name.empty() ? "" : name + " \n";
    case ChatFormat::ChatGlm3:
    case ChatFormat::ChatGlm2:
      return "";
  }
  return "";
}

}  // namespace glm4
