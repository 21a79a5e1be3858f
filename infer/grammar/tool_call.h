// The grammar of a forced tool call's rest, after the prompt's prefill (tool_call_prefill): the
// tool's name when the prefill left it open, then its arguments in the chat format's syntax,
// constrained by the tool's "parameters" schema, then the call's end.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "infer/grammar/grammar.h"
#include "io/tokenizer/chat_template.h"

namespace glm4::grammar {

// `tools`: OpenAI tool specs as JSON text ({"type": "function", "function": {"name",
// "parameters"}}), already checked. `name`: the call the prefill opened; empty when the name is
// free (then it is one of the tools', and its arguments follow that tool's schema).
//
// Glm4 (glm-4-9b-chat) / Glm40414 (GLM-4-0414): [name "\n" / name " \n"] then one JSON object of
// the parameters schema (compile_json_schema; any object when there is none); the call ends with
// the object.
// Glm45 / Glm47: [name ["\n"]] then <arg_key>k</arg_key>[\n]<arg_value>v</arg_value>[\n] per
// argument and "</tool_call>": keys the schema's properties in their declared order (required
// ones present, optional ones may be left out, no others), a string property's value raw text
// (not containing "</arg_value>"; one of its enum when it has one; with minLength / maxLength,
// that many characters, none of them '<'), any other the JSON of its
// property schema. Without properties: any keys and raw values.
// A tool whose schema uses what compile_json_schema does not support gets the schema-free form
// (any JSON object / any pairs): the call stays well formed, the schema is not enforced.
std::shared_ptr<const Grammar> tool_call_grammar(ChatFormat format,
                                                 const std::vector<std::string>& tools,
                                                 const std::string& name);

}  // namespace glm4::grammar
