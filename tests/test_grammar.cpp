// The JSON-schema grammar: texts accepted and rejected (nested objects, enums, numbers, escapes,
// unicode, arrays, anyOf, $ref), schema errors naming the path, bounded whitespace.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "infer/grammar/automaton.h"
#include "infer/grammar/json_schema.h"

namespace glm4::grammar {
namespace {

using json = nlohmann::json;

Automaton automaton_of(const json& schema) {
  return Automaton(compile_json_schema(schema, "schema").grammar);
}

void expect_matches(const json& schema, const std::vector<std::string>& good,
                    const std::vector<std::string>& bad) {
  Automaton a = automaton_of(schema);
  for (const std::string& t : good)
    EXPECT_TRUE(a.matches(t)) << schema.dump() << " should accept " << t;
  for (const std::string& t : bad)
    EXPECT_FALSE(a.matches(t)) << schema.dump() << " should reject " << t;
}

TEST(Grammar, ObjectRequiredOptionalAndOrder) {
  const json schema = json::parse(R"({"type": "object",
    "properties": {"age": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["name"]})");
  expect_matches(schema,
                 {R"({"age":3,"name":"x"})", R"({"name":"x"})", R"({ "age": 3, "name": "x" })",
                  "{\n  \"name\": \"\"\n}", R"( {"name":"x"})"},
                 {R"({})", R"({"age":3})", R"({"name":"x","age":3})", R"({"name":"x",})",
                  R"({"name":"x","other":1})", R"({"name":3})", R"({"age":3.5,"name":"x"})",
                  R"({"name":"x"} )",
                  R"({"name":"x"})"
                  "\n"});
}

TEST(Grammar, AnOrderedSchemaKeepsTheDeclaredOrder) {
  const auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties":
      {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}}, "required": ["alpha", "zeta"]})");
  Automaton a(compile_json_schema(schema, "schema").grammar);
  EXPECT_TRUE(a.matches(R"({"zeta":1,"alpha":2})"));
  EXPECT_FALSE(a.matches(R"({"alpha":2,"zeta":1})"));
}

TEST(Grammar, NestedObjectsAndArrays) {
  const json schema = json::parse(R"({"type": "object", "properties": {
    "user": {"type": "object", "properties": {"id": {"type": "integer"},
             "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["id", "tags"]},
    "scores": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3}},
    "required": ["scores", "user"]})");
  expect_matches(
      schema,
      {R"({"scores":[1],"user":{"id":1,"tags":[]}})",
       R"({"scores":[1, 2.5, -3e2],"user":{"id":-7,"tags":["a", "b"]}})"},
      {R"({"scores":[],"user":{"id":1,"tags":[]}})",
       R"({"scores":[1,2,3,4],"user":{"id":1,"tags":[]}})",
       R"({"scores":[1],"user":{"id":1,"tags":[1]}})", R"({"scores":[1],"user":{"id":1}})",
       R"({"scores":[1,],"user":{"id":1,"tags":[]}})"});
}

TEST(Grammar, EnumConstAndTypeLists) {
  expect_matches(json::parse(R"({"enum": ["red", "green", 3, null, {"a": [true]}]})"),
                 {R"("red")", R"("green")", "3", "null", R"({"a":[true]})"},
                 {R"("blue")", R"("re")", "4", "true", R"({"a": [true]})"});
  expect_matches(json::parse(R"({"const": "yes"})"), {R"("yes")"}, {R"("no")", "yes"});
  expect_matches(json::parse(R"({"type": ["string", "null"]})"), {R"("a")", "null"},
                 {"1", "nul", "false"});
  expect_matches(json::parse(R"({"type": "boolean"})"), {"true", "false"}, {"tru", "1", "True"});
}

TEST(Grammar, Numbers) {
  expect_matches(json::parse(R"({"type": "number"})"),
                 {"0", "-0", "12", "-12.5", "1e5", "1E+5", "2.5e-3", "0.25"},
                 {"01", "-", "1.", ".5", "+1", "1e", "1e+", "--1", "0x10", "1.5.2", "NaN"});
  expect_matches(json::parse(R"({"type": "integer"})"), {"0", "-3", "1234567890"},
                 {"1.0", "1e3", "007", "-"});
}

TEST(Grammar, StringEscapesAndUnicode) {
  expect_matches(json::parse(R"({"type": "string"})"),
                 {R"("")", R"("a\"b")", R"("\\\/\b\f\n\r\t")", R"("\u00e9\uD83D")",
                  "\"\xc3\xa9t\xc3\xa9\"", "\"\xe4\xb8\xad\xe6\x96\x87\"", "\"\xf0\x9f\x98\x80\""},
                 {R"(")", R"("a)", R"("\x")", R"("\u12")", "\"a\nb\"", "\"\xc3\"", "\"\xc0\xaf\"",
                  "\"\xed\xa0\x80\"", "\"\xf5\x80\x80\x80\"", "\"\xff\""});
  expect_matches(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"),
                 {R"("ab")", R"("abc")", "\"\xc3\xa9\xc3\xa9\""}, {R"("a")", R"("abcd")"});
}

TEST(Grammar, AnyOfRefsAndAdditionalProperties) {
  const json schema = json::parse(R"({"anyOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"type": "object", "properties": {"b": {"$ref": "#/$defs/node"}}, "required": ["b"]}],
    "$defs": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"},
      {"type": "null"}]}}, "required": ["next"]}}})");
  expect_matches(schema,
                 {R"({"a":1})", R"({"b":{"next":null}})", R"({"b":{"next":{"next":null}}})"},
                 {R"({"a":1,"b":{"next":null}})", R"({"b":{"next":1}})", R"({"c":1})"});
  expect_matches(json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"),
                 {R"({})", R"({"x":1,"y":2})"}, {R"({"x":"1"})"});
  expect_matches(json::parse(R"({"type": "object", "properties": {"k": {"type": "null"}},
                               "additionalProperties": true})"),
                 {R"({"k":null,"z":[1,{}]})", R"({"z":"q"})"}, {R"({"k":null,})", R"({"z"})"});
}

TEST(Grammar, JsonObjectIsAnyObject) {
  Automaton a(json_object_grammar().grammar);
  for (const char* good : {"{}", R"({"a":[1,{"b":null}],"c":"\u00e9"})", "\n{ \"x\" : true }"})
    EXPECT_TRUE(a.matches(good)) << good;
  for (const char* bad : {"[1]", R"("x")", "1", "{\"a\"}", "{'a':1}", "{} {}", "{\"a\":1,}"})
    EXPECT_FALSE(a.matches(bad)) << bad;
}

TEST(Grammar, WhitespaceIsBounded) {
  Automaton a(json_object_grammar().grammar);
  EXPECT_TRUE(a.matches("{\n" + std::string(16, ' ') + "}"));
  EXPECT_FALSE(a.matches("{\n" + std::string(17, ' ') + "}"));
  EXPECT_FALSE(a.matches("{  }"));
  EXPECT_FALSE(a.matches("{\n\n}"));
  EXPECT_FALSE(a.matches("{\t}"));
}

TEST(Grammar, PrefixesStayAliveUntilComplete) {
  Automaton a = automaton_of(json::parse(R"({"type": "object", "properties":
      {"name": {"type": "string"}}, "required": ["name"]})"));
  const std::string text = R"({"name":"h\u00e9)"
                           "\xc3\xa9"
                           R"("})";
  int32_t s = a.start();
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_FALSE(a.accepting(s)) << "after " << i << " bytes";
    s = a.step(s, uint8_t(text[i]));
    ASSERT_NE(s, Automaton::kDead) << "after " << i + 1 << " bytes";
  }
  EXPECT_TRUE(a.accepting(s));
  EXPECT_FALSE(a.can_continue(s));  // nothing may follow the object
}

void expect_schema_error(const json& schema, const std::string& message) {
  try {
    compile_json_schema(schema, "response_format.json_schema.schema");
    ADD_FAILURE() << "no error for " << schema.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(Grammar, UnsupportedSchemasNameThePath) {
  expect_schema_error(
      json::parse(
          R"({"type": "object", "properties": {"age": {"type": "string", "pattern": "x"}}})"),
      R"(response_format.json_schema.schema.properties.age: "pattern" is not supported)");
  expect_schema_error(json::parse(R"({"type": "array", "items": {"type": "strin"}})"),
                      R"(response_format.json_schema.schema.items.type: unknown type "strin")");
  expect_schema_error(json::parse(R"({"type": "object", "properties": {}, "required": ["x"]})"),
                      R"(schema.required: "x" is not in properties)");
  expect_schema_error(json::parse(R"({"$ref": "#/$defs/missing"})"),
                      R"(schema.$ref: "#/$defs/missing" does not name a schema)");
  expect_schema_error(json::parse(R"({"anyOf": [{"minimum": 3}]})"),
                      R"(schema.anyOf[0]: "minimum" is not supported)");
  expect_schema_error(json::parse(R"({"type": "array", "maxItems": 100000})"),
                      R"(schema.maxItems: expected an integer in [0, 1000])");
  expect_schema_error(json::parse(R"({"$ref": "#"})"), "response_format.json_schema.schema: ");
  expect_schema_error(json::parse(R"({"$ref": "#/$defs/a", "$defs": {"a": {"format": "email"}}})"),
                      R"(response_format.json_schema.schema.$defs.a: "format" is not supported)");
  expect_schema_error(json(false), "accepts no value");
}

}  // namespace
}  // namespace glm4::grammar
