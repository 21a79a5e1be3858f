// JSON schema -> byte grammar of the JSON texts it accepts: the subset OpenAI structured outputs
// and llama.cpp's json-schema-to-grammar handle. Used by response_format and, through
// compile_json_schema, by anyone constraining a JSON value (tool arguments, say).
//
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties, required, additionalProperties (false or a schema; when properties are given and
// additionalProperties is absent, no other keys, as OpenAI's strict mode requires), enum, const,
// items, minItems / maxItems, minLength / maxLength (up to 1000), anyOf and oneOf (both read as
// anyOf), $ref to "#", "#/$defs/..." or "#/definitions/...", nested to any depth. Annotations
// (title, description, default, examples, $schema, $id, $comment) are ignored. Anything else
// fails with the schema path and the keyword.
//
// Properties are written in the order the schema object iterates them: as declared (the order
// OpenAI's structured outputs keep) for an nlohmann::ordered_json schema, sorted for an
// nlohmann::json one; required ones always, optional ones may be left out; extra keys (when
// allowed) come after, and may repeat a declared name (their values are then not checked).
//
// Whitespace is bounded: between tokens of the JSON text at most one space, or one newline and up
// to 16 spaces, and the same before the value; nothing after it. Unbounded whitespace would let a
// small model write spaces forever while every step stays "valid".
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "infer/grammar/grammar.h"

namespace glm4::grammar {

constexpr int kMaxIndent = 16;         // spaces after a newline between JSON tokens
constexpr int kMaxRepeatBound = 1000;  // largest minItems / maxItems / minLength / maxLength

struct JsonSchemaGrammar {
  std::shared_ptr<const Grammar> grammar;  // root: whitespace, then one value of the schema
  int32_t value = 0;  // the rule of the value alone, without the whitespace before it
};

// `path` names the schema in errors ("response_format.json_schema.schema"); a keyword that is not
// supported, a wrong type of keyword value or an unresolvable $ref throws glm4::Error such as
// `response_format.json_schema.schema.properties.age: "pattern" is not supported`.
JsonSchemaGrammar compile_json_schema(const nlohmann::json& schema, const std::string& path);
// The same keeping the properties' declared order (the server and generate --json-schema parse
// schemas so).
JsonSchemaGrammar compile_json_schema(const nlohmann::ordered_json& schema,
                                      const std::string& path);

// Any JSON object (response_format {"type": "json_object"}).
JsonSchemaGrammar json_object_grammar();

}  // namespace glm4::grammar
