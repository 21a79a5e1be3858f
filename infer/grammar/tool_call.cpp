// Tool-call grammars: the call's name among the tools, GLM-4's JSON arguments and Glm45 / Glm47's
// <arg_key> / <arg_value> pairs, built from the tools' parameters schemas.
#include "infer/grammar/tool_call.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "infer/grammar/json_schema.h"

namespace glm4::grammar {

namespace {

using ordered_json = nlohmann::ordered_json;

// Any text not containing `close`, then `close`: rule i holds after a text ending in the first i
// bytes of `close` (a string-search automaton), so no byte completes `close` early.
int32_t raw_until(GrammarBuilder& b, const std::string& close) {
  const size_t m = close.size();
  std::vector<int32_t> rules(m);
  for (size_t i = 0; i < m; ++i) rules[i] = b.new_rule();
  for (size_t i = 0; i < m; ++i) {
    std::vector<ByteSet> to(m);
    for (int c = 0; c < 256; ++c) {
      const std::string seen = close.substr(0, i) + char(c);
      size_t k = std::min(seen.size(), m);
      while (k > 0 && seen.compare(seen.size() - k, k, close, 0, k) != 0) --k;
      if (k < m) to[k].set(size_t(c));
    }
    for (size_t j = 0; j < m; ++j)
      if (to[j].any()) b.add(rules[i], {b.set(to[j]), rule_ref(rules[j])});
    b.add(rules[i], b.literal(close));
  }
  return rules[0];
}

// A compiled schema's value without the whitespace before it: the templates write none there.
int32_t json_value(GrammarBuilder& b, const JsonSchemaGrammar& g) {
  return b.embed(*g.grammar) + g.value;
}

// One UTF-8 character other than '<' (so a bounded value never holds "</arg_value>").
int32_t utf8_char_but_lt(GrammarBuilder& b) {
  const int32_t r = b.new_rule();
  ByteSet ascii;
  for (int c = 0; c < 0x80; ++c) ascii.set(size_t(c));
  ascii.reset('<');
  const Sym cont = b.byte_range(0x80, 0xBF);
  b.add(r, {b.set(ascii)});
  b.add(r, {b.byte_range(0xC2, 0xDF), cont});
  b.add(r, {b.byte_range(0xE0, 0xEF), cont, cont});
  b.add(r, {b.byte_range(0xF0, 0xF4), cont, cont, cont});
  return r;
}

bool is_string_schema(const ordered_json& s) {
  if (!s.is_object()) return false;
  const auto type = s.find("type");
  if (type != s.end()) return type->is_string() && type->get<std::string>() == "string";
  const auto e = s.find("enum");
  return e != s.end() && e->is_array() && !e->empty() &&
         std::all_of(e->begin(), e->end(), [](const ordered_json& v) { return v.is_string(); });
}

// One argument's value and "</arg_value>".
std::vector<Sym> arg_value(GrammarBuilder& b, const ordered_json& schema, const std::string& path) {
  if (is_string_schema(schema)) {
    const auto e = schema.find("enum");
    if (e == schema.end() || !e->is_array()) {
      const auto min = schema.find("minLength"), max = schema.find("maxLength");
      const bool bounded = (min != schema.end() && min->is_number_unsigned()) ||
                           (max != schema.end() && max->is_number_unsigned());
      if (!bounded) return {rule_ref(raw_until(b, "</arg_value>"))};
      const int lo = min != schema.end() && min->is_number_unsigned() ? min->get<int>() : 0;
      const int hi = max != schema.end() && max->is_number_unsigned() ? max->get<int>() : -1;
      GLM4_CHECK(lo <= kMaxRepeatBound && hi <= kMaxRepeatBound && (hi < 0 || lo <= hi), path,
                 ": minLength / maxLength out of range");
      return cat({{rule_ref(b.repeat({rule_ref(utf8_char_but_lt(b))}, lo, hi))},
                  b.literal("</arg_value>")});
    }
    const int32_t r = b.new_rule();
    for (const ordered_json& v : *e)
      if (v.is_string()) b.add(r, b.literal(v.get<std::string>() + "</arg_value>"));
    return {rule_ref(r)};
  }
  return cat(
      {{rule_ref(json_value(b, compile_json_schema(schema, path)))}, b.literal("</arg_value>")});
}

// Glm45 / Glm47: the pairs of `parameters` and "</tool_call>".
int32_t glm45_arguments(GrammarBuilder& b, const ordered_json* parameters, const std::string& nl,
                        const std::string& path) {
  const std::vector<Sym> value_open = b.literal("</arg_key>" + nl + "<arg_value>");
  const std::vector<Sym> key_open = b.literal("<arg_key>"), after = b.literal(nl);
  const std::vector<Sym> end = b.literal("</tool_call>");
  const ordered_json* props = nullptr;
  if (parameters && parameters->is_object()) {
    const auto p = parameters->find("properties");
    if (p != parameters->end() && p->is_object() && !p->empty()) props = &*p;
  }
  const int32_t root = b.new_rule();
  if (!props) {  // any keys, raw values
    const std::vector<Sym> pair = cat({key_open,
                                       {rule_ref(raw_until(b, "</arg_key>"))},
                                       b.literal(nl + "<arg_value>"),
                                       {rule_ref(raw_until(b, "</arg_value>"))},
                                       after});
    b.add(root, cat({{rule_ref(b.repeat(pair, 0, -1))}, end}));
    return root;
  }
  std::vector<std::string> required;
  if (const auto r = parameters->find("required"); r != parameters->end() && r->is_array())
    for (const ordered_json& k : *r)
      if (k.is_string()) required.push_back(k.get<std::string>());
  // rest: the pairs from the k-th property on (each optional one may be skipped), then the end.
  int32_t rest = b.new_rule();
  b.add(rest, end);
  std::vector<std::pair<std::string, const ordered_json*>> items;
  for (const auto& [key, schema] : props->items()) items.emplace_back(key, &schema);
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    const int32_t r = b.new_rule();
    b.add(r, cat({key_open,
                  b.literal(it->first),
                  value_open,
                  arg_value(b, *it->second, path + ".properties." + it->first),
                  after,
                  {rule_ref(rest)}}));
    if (std::find(required.begin(), required.end(), it->first) == required.end())
      b.add(r, {rule_ref(rest)});
    rest = r;
  }
  b.add(root, {rule_ref(rest)});
  return root;
}

// The arguments (and the call's end) of one tool.
int32_t arguments(GrammarBuilder& b, ChatFormat format, const ordered_json& function,
                  const std::string& path) {
  const auto p = function.find("parameters");
  const ordered_json* parameters = p != function.end() && !p->is_null() ? &*p : nullptr;
  if (calls_by_name_line(format)) {
    if (parameters) {
      try {
        return json_value(b, compile_json_schema(*parameters, path));
      } catch (const Error&) {  // a keyword the compiler does not support: any object
      }
    }
    return json_value(b, json_object_grammar());
  }
  const std::string nl = format == ChatFormat::Glm47 ? "" : "\n";
  // Built apart first so that a schema the compiler refuses leaves no half-built rules behind.
  try {
    GrammarBuilder probe;
    glm45_arguments(probe, parameters, nl, path);
  } catch (const Error&) {
    return glm45_arguments(b, nullptr, nl, path);
  }
  return glm45_arguments(b, parameters, nl, path);
}

}  // namespace

std::shared_ptr<const Grammar> tool_call_grammar(ChatFormat format,
                                                 const std::vector<std::string>& tools,
                                                 const std::string& name) {
  GLM4_CHECK(
      calls_by_name_line(format) || format == ChatFormat::Glm45 || format == ChatFormat::Glm47,
      "[grammar] the ", chat_format_name(format), " chat format has no tool calls");
  GrammarBuilder b;
  const int32_t root = b.new_rule();
  const std::string after_name = format == ChatFormat::Glm47      ? ""
                                 : format == ChatFormat::Glm40414 ? " \n"
                                                                  : "\n";
  int found = 0;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json tool = ordered_json::parse(tools[i]);
    const ordered_json& function = tool.at("function");
    const std::string tool_name = function.at("name").get<std::string>();
    if (!name.empty() && tool_name != name) continue;
    ++found;
    const int32_t args =
        arguments(b, format, function, "tools[" + std::to_string(i) + "].function.parameters");
    if (name.empty())
      b.add(root, cat({b.literal(tool_name + after_name), {rule_ref(args)}}));
    else
      b.add(root, {rule_ref(args)});
  }
  GLM4_CHECK(found > 0, "[grammar] no tool named \"", name, "\" among ", tools.size(), " tools");
  return std::make_shared<const Grammar>(b.build(root));
}

}  // namespace glm4::grammar
