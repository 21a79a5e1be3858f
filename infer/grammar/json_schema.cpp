// The schema compiler: one rule per schema node, built on a handful of shared JSON rules
// (whitespace, string, number, any value). Each value rule matches the value alone; whitespace
// comes after "{", "[", ":", "," and after every value inside an object or array.
#include "infer/grammar/json_schema.h"

#include <algorithm>
#include <array>
#include <map>

#include "base/check.h"
#include "infer/grammar/automaton.h"

namespace glm4::grammar {

namespace {
using json = nlohmann::json;

template <class Json>
class Compiler {
 public:
  using json = Json;
  Compiler(const json& root, std::string root_path)
      : root_(root), root_path_(std::move(root_path)) {}

  Grammar finish(int32_t value) {
    const int32_t top = b_.new_rule();
    b_.add(top, {ws(), rule_ref(value)});
    return b_.build(top);
  }

  int32_t value(const json& s, const std::string& path);
  int32_t any_object();

 private:
  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    fail(path, ": ", what);
  }
  Sym ws();
  Sym string_char();
  int32_t string(int min, int max);
  int32_t number(bool integer);
  int32_t any_value();
  int32_t literals(const std::vector<json>& values);
  int32_t typed(const json& s, const std::string& type, const std::string& path);
  int32_t object(const json& s, const std::string& path);
  int32_t array(const json& s, const std::string& path);
  int32_t ref(const std::string& target, const std::string& path);
  int bound(const json& s, const char* key, int fallback, const std::string& path);

  const json& root_;
  std::string root_path_;
  GrammarBuilder b_;
  Sym ws_ = kEnd, char_ = kEnd;
  int32_t any_ = -1, any_object_ = -1, number_ = -1, integer_ = -1;
  std::map<std::pair<int, int>, int32_t> strings_;
  std::map<std::string, int32_t> refs_;
};

template <class Json>
Sym Compiler<Json>::ws() {
  if (ws_ != kEnd) return ws_;
  const int32_t r = b_.new_rule();
  b_.add(r, {});
  b_.add(r, b_.literal(" "));
  b_.add(r, cat({b_.literal("\n"), {rule_ref(b_.repeat(b_.literal(" "), 0, kMaxIndent))}}));
  return ws_ = rule_ref(r);
}

template <class Json>
Sym Compiler<Json>::string_char() {
  if (char_ != kEnd) return char_;
  const int32_t r = b_.new_rule();
  ByteSet plain;
  for (int c = 0x20; c < 0x80; ++c) plain.set(size_t(c));
  plain.reset('"');
  plain.reset('\\');
  b_.add(r, {b_.set(plain)});
  ByteSet escapes;
  for (char c : std::string("\"\\/bfnrt")) escapes.set(uint8_t(c));
  b_.add(r, {b_.byte_range('\\', '\\'), b_.set(escapes)});
  ByteSet hex;
  for (char c : std::string("0123456789abcdefABCDEF")) hex.set(uint8_t(c));
  const Sym h = b_.set(hex);
  b_.add(r, cat({b_.literal("\\u"), {h, h, h, h}}));
  // Well-formed UTF-8 of U+0080 and up (no overlong forms, no surrogates), byte by byte.
  const Sym cont = b_.byte_range(0x80, 0xBF);
  b_.add(r, {b_.byte_range(0xC2, 0xDF), cont});
  b_.add(r, {b_.byte_range(0xE0, 0xE0), b_.byte_range(0xA0, 0xBF), cont});
  b_.add(r, {b_.byte_range(0xE1, 0xEC), cont, cont});
  b_.add(r, {b_.byte_range(0xED, 0xED), b_.byte_range(0x80, 0x9F), cont});
  b_.add(r, {b_.byte_range(0xEE, 0xEF), cont, cont});
  b_.add(r, {b_.byte_range(0xF0, 0xF0), b_.byte_range(0x90, 0xBF), cont, cont});
  b_.add(r, {b_.byte_range(0xF1, 0xF3), cont, cont, cont});
  b_.add(r, {b_.byte_range(0xF4, 0xF4), b_.byte_range(0x80, 0x8F), cont, cont});
  return char_ = rule_ref(r);
}

template <class Json>
int32_t Compiler<Json>::string(int min, int max) {
  auto [it, added] = strings_.try_emplace({min, max}, -1);
  if (!added) return it->second;
  const int32_t r = b_.new_rule();
  const Sym q = b_.byte_range('"', '"');
  b_.add(r, {q, rule_ref(b_.repeat({string_char()}, min, max)), q});
  return it->second = r;
}

template <class Json>
int32_t Compiler<Json>::number(bool integer) {
  int32_t& cached = integer ? integer_ : number_;
  if (cached >= 0) return cached;
  const Sym digit = b_.byte_range('0', '9');
  const int32_t sign = b_.new_rule();
  b_.add(sign, {});
  b_.add(sign, b_.literal("-"));
  const int32_t whole = b_.new_rule();
  b_.add(whole, b_.literal("0"));
  b_.add(whole, {b_.byte_range('1', '9'), rule_ref(b_.repeat({digit}, 0, -1))});
  const int32_t r = b_.new_rule();
  if (integer) {
    b_.add(r, {rule_ref(sign), rule_ref(whole)});
  } else {
    const int32_t digits = b_.repeat({digit}, 1, -1);
    const int32_t frac = b_.new_rule();
    b_.add(frac, {});
    b_.add(frac, {b_.byte_range('.', '.'), rule_ref(digits)});
    const int32_t exp = b_.new_rule();
    b_.add(exp, {});
    ByteSet e, pm;
    e.set('e');
    e.set('E');
    pm.set('+');
    pm.set('-');
    b_.add(exp, {b_.set(e), rule_ref(digits)});
    b_.add(exp, {b_.set(e), b_.set(pm), rule_ref(digits)});
    b_.add(r, {rule_ref(sign), rule_ref(whole), rule_ref(frac), rule_ref(exp)});
  }
  return cached = r;
}

template <class Json>
int32_t Compiler<Json>::any_value() {
  if (any_ >= 0) return any_;
  any_ = b_.new_rule();  // before the parts: objects and arrays refer back to it
  const Sym w = ws(), comma = b_.byte_range(',', ',');
  const int32_t array = b_.new_rule(), rest = b_.new_rule();
  b_.add(rest, {});
  b_.add(rest, {comma, w, rule_ref(any_), w, rule_ref(rest)});
  b_.add(array, cat({b_.literal("["), {w}, b_.literal("]")}));
  b_.add(array, cat({b_.literal("["), {w, rule_ref(any_), w, rule_ref(rest)}, b_.literal("]")}));
  b_.add(any_, {rule_ref(any_object())});
  b_.add(any_, {rule_ref(array)});
  b_.add(any_, {rule_ref(string(0, -1))});
  b_.add(any_, {rule_ref(number(false))});
  for (const char* lit : {"true", "false", "null"}) b_.add(any_, b_.literal(lit));
  return any_;
}

template <class Json>
int32_t Compiler<Json>::any_object() {
  if (any_object_ >= 0) return any_object_;
  any_object_ = b_.new_rule();
  const Sym w = ws();
  const int32_t member = b_.new_rule(), rest = b_.new_rule();
  b_.add(member,
         cat({{rule_ref(string(0, -1)), w}, b_.literal(":"), {w, rule_ref(any_value()), w}}));
  b_.add(rest, {});
  b_.add(rest, {b_.byte_range(',', ','), w, rule_ref(member), rule_ref(rest)});
  b_.add(any_object_, cat({b_.literal("{"), {w}, b_.literal("}")}));
  b_.add(any_object_,
         cat({b_.literal("{"), {w, rule_ref(member), rule_ref(rest)}, b_.literal("}")}));
  return any_object_;
}

template <class Json>
int32_t Compiler<Json>::literals(const std::vector<json>& values) {
  const int32_t r = b_.new_rule();
  for (const json& v : values) b_.add(r, b_.literal(v.dump()));
  return r;
}

template <class Json>
int Compiler<Json>::bound(const json& s, const char* key, int fallback, const std::string& path) {
  auto it = s.find(key);
  if (it == s.end()) return fallback;
  if (!it->is_number_integer() || it->template get<int64_t>() < 0 ||
      it->template get<int64_t>() > kMaxRepeatBound)
    bad(path + "." + key, str_cat("expected an integer in [0, ", kMaxRepeatBound, "]"));
  return int(it->template get<int64_t>());
}

template <class Json>
int32_t Compiler<Json>::value(const json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (!s.template get<bool>()) bad(path, "the schema false accepts no value");
    return any_value();
  }
  if (!s.is_object()) bad(path, std::string("expected a schema object, got ") + s.type_name());
  static const char* kKnown[] = {"type",      "properties",  "required", "additionalProperties",
                                 "enum",      "const",       "items",    "anyOf",
                                 "oneOf",     "minItems",    "maxItems", "minLength",
                                 "maxLength", "$ref",        "$defs",    "definitions",
                                 "title",     "description", "default",  "examples",
                                 "$schema",   "$id",         "$comment"};
  for (const auto& [key, v] : s.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) bad(path, "\"" + key + "\" is not supported");
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) bad(path + ".$ref", "expected a string");
    return ref(it->template get<std::string>(), path + ".$ref");
  }
  if (auto it = s.find("const"); it != s.end()) return literals({*it});
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array() || it->empty()) bad(path + ".enum", "expected a non-empty array");
    return literals(std::vector<json>(it->begin(), it->end()));
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    const std::string p = path + "." + key;
    if (!it->is_array() || it->empty()) bad(p, "expected a non-empty array of schemas");
    if (s.contains("type"))
      bad(path, std::string("\"type\" beside \"") + key + "\" is not supported");
    const int32_t r = b_.new_rule();
    for (size_t i = 0; i < it->size(); ++i)
      b_.add(r, {rule_ref(value((*it)[i], str_cat(p, "[", i, "]")))});
    return r;
  }
  auto t = s.find("type");
  if (t == s.end()) {
    if (s.contains("properties") || s.contains("additionalProperties")) return object(s, path);
    if (s.contains("items")) return array(s, path);
    return any_value();
  }
  if (t->is_string()) return typed(s, t->template get<std::string>(), path);
  if (!t->is_array() || t->empty()) bad(path + ".type", "expected a type name or a list of them");
  const int32_t r = b_.new_rule();
  for (const json& one : *t) {
    if (!one.is_string()) bad(path + ".type", "expected a type name or a list of them");
    b_.add(r, {rule_ref(typed(s, one.template get<std::string>(), path))});
  }
  return r;
}

template <class Json>
int32_t Compiler<Json>::typed(const json& s, const std::string& type, const std::string& path) {
  if (type == "object") return object(s, path);
  if (type == "array") return array(s, path);
  if (type == "string") {
    const int max = bound(s, "maxLength", -1, path);
    const int min = bound(s, "minLength", 0, path);
    if (max >= 0 && min > max) bad(path, "minLength is above maxLength");
    return string(min, max);
  }
  if (type == "number" || type == "integer") return number(type == "integer");
  const int32_t r = b_.new_rule();
  if (type == "boolean") {
    b_.add(r, b_.literal("true"));
    b_.add(r, b_.literal("false"));
  } else if (type == "null") {
    b_.add(r, b_.literal("null"));
  } else {
    bad(path + ".type", "unknown type \"" + type + "\"");
  }
  return r;
}

template <class Json>
int32_t Compiler<Json>::object(const json& s, const std::string& path) {
  const json empty = Json::object();
  auto pit = s.find("properties");
  const json& props = pit == s.end() ? empty : *pit;
  if (!props.is_object()) bad(path + ".properties", "expected an object");
  std::vector<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) bad(path + ".required", "expected an array of property names");
    for (const json& n : *it) {
      if (!n.is_string()) bad(path + ".required", "expected an array of property names");
      if (!props.contains(n.template get<std::string>()))
        bad(path + ".required", "\"" + n.template get<std::string>() + "\" is not in properties");
      required.push_back(n.template get<std::string>());
    }
  }
  // Extra keys: their value rule, or -1 for none.
  int32_t extra = pit == s.end() ? any_value() : -1;
  if (auto it = s.find("additionalProperties"); it != s.end()) {
    if (it->is_boolean())
      extra = it->template get<bool>() ? any_value() : -1;
    else
      extra = value(*it, path + ".additionalProperties");
  }
  const Sym w = ws(), comma = b_.byte_range(',', ',');
  // tails[k][first]: the members from property k on; `first` = nothing written yet.
  const size_t n = props.size();
  std::vector<std::array<int32_t, 2>> tails(n + 1);
  for (int first = 0; first < 2; ++first) tails[n][size_t(first)] = b_.new_rule();
  for (int first = 0; first < 2; ++first) b_.add(tails[n][size_t(first)], {});
  if (extra >= 0) {
    const int32_t member = b_.new_rule(), more = b_.new_rule();
    b_.add(member, cat({{rule_ref(string(0, -1)), w}, b_.literal(":"), {w, rule_ref(extra), w}}));
    b_.add(more, {});
    b_.add(more, {comma, w, rule_ref(member), rule_ref(more)});
    b_.add(tails[n][1], {rule_ref(member), rule_ref(more)});
    b_.add(tails[n][0], {comma, w, rule_ref(member), rule_ref(more)});
  }
  std::vector<std::pair<std::string, const json*>> list;
  for (const auto& [name, sub] : props.items()) list.emplace_back(name, &sub);
  for (size_t k = n; k-- > 0;) {
    const auto& [name, sub] = list[k];
    const int32_t v = value(*sub, path + ".properties." + name);
    const bool req = std::find(required.begin(), required.end(), name) != required.end();
    for (int first = 0; first < 2; ++first) {
      const int32_t r = b_.new_rule();
      std::vector<Sym> lead = first ? std::vector<Sym>{} : std::vector<Sym>{comma, w};
      b_.add(r, cat({lead,
                     b_.literal(json(name).dump()),
                     {w},
                     b_.literal(":"),
                     {w, rule_ref(v), w, rule_ref(tails[k + 1][0])}}));
      if (!req) b_.add(r, {rule_ref(tails[k + 1][size_t(first)])});
      tails[k][size_t(first)] = r;
    }
  }
  const int32_t r = b_.new_rule();
  b_.add(r, cat({b_.literal("{"), {w, rule_ref(tails[0][1])}, b_.literal("}")}));
  return r;
}

template <class Json>
int32_t Compiler<Json>::array(const json& s, const std::string& path) {
  auto it = s.find("items");
  const int32_t item = it == s.end() ? any_value() : value(*it, path + ".items");
  const int min = bound(s, "minItems", 0, path), max = bound(s, "maxItems", -1, path);
  if (max >= 0 && min > max) bad(path, "minItems is above maxItems");
  const Sym w = ws();
  const int32_t r = b_.new_rule();
  if (min == 0) b_.add(r, cat({b_.literal("["), {w}, b_.literal("]")}));
  if (max != 0) {
    const int32_t rest = b_.repeat({b_.byte_range(',', ','), w, rule_ref(item), w},
                                   std::max(min - 1, 0), max < 0 ? -1 : max - 1);
    b_.add(r, cat({b_.literal("["), {w, rule_ref(item), w, rule_ref(rest)}, b_.literal("]")}));
  }
  return r;
}

template <class Json>
int32_t Compiler<Json>::ref(const std::string& target, const std::string& path) {
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  if (target.empty() || target[0] != '#')
    bad(path, "only local references (\"#/...\") are supported");
  const json* node = nullptr;
  try {
    const typename Json::json_pointer ptr(target.substr(1));
    if (root_.contains(ptr)) node = &root_.at(ptr);
  } catch (const nlohmann::json::exception&) {
  }
  if (!node) bad(path, "\"" + target + "\" does not name a schema in this document");
  const int32_t r = b_.new_rule();  // registered first: a schema may refer to itself
  refs_[target] = r;
  std::string where = root_path_ + target.substr(1);  // "#/$defs/x" -> "<root>.$defs.x"
  std::replace(where.begin() + long(root_path_.size()), where.end(), '/', '.');
  b_.add(r, {rule_ref(value(*node, where))});
  return r;
}

template <class Json>
JsonSchemaGrammar finish(Compiler<Json>& c, int32_t value, const std::string& path) {
  auto g = std::make_shared<const Grammar>(c.finish(value));
  try {
    Automaton check(g);  // a reference loop that consumes nothing fails here, not mid-reply
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  return {g, value};
}
}  // namespace

JsonSchemaGrammar compile_json_schema(const nlohmann::json& schema, const std::string& path) {
  Compiler<nlohmann::json> c(schema, path);
  const int32_t v = c.value(schema, path);
  return finish(c, v, path);
}

JsonSchemaGrammar compile_json_schema(const nlohmann::ordered_json& schema,
                                      const std::string& path) {
  Compiler<nlohmann::ordered_json> c(schema, path);
  const int32_t v = c.value(schema, path);
  return finish(c, v, path);
}

JsonSchemaGrammar json_object_grammar() {
  static const json kEmpty = json::object();
  Compiler<nlohmann::json> c(kEmpty, "json_object");
  const int32_t v = c.any_object();
  return finish(c, v, "json_object");
}

}  // namespace glm4::grammar
