"""Renders chat conversations with GLM's real Jinja chat templates.

The C++ chat renderers (io/tokenizer/glm45_chat.cpp, chat_template.cpp) must write the same
bytes; this script is the oracle. It renders each conversation below with each template in
tests/data/chat_templates the way transformers' apply_chat_template does (a sandboxed
environment with trim_blocks and lstrip_blocks, `enable_thinking` passed only when the case sets
it, so an unset switch is "undefined" to the template), and writes
tests/data/chat_templates/fixtures.json.

Conversations are OpenAI-style (`tools` beside the messages, assistant `tool_calls` with
`arguments` as a JSON string, `tool` results). For the GLM-4.5 family they are passed as vLLM
passes them (arguments parsed into a mapping). glm-4-9b-chat's template reads tools from a
message and calls from `metadata`, so for it they are first put in that layout, as GLM-4's own
OpenAI server does: the tools on the leading system message (an empty one is inserted when there
is none), each call its own assistant message (metadata = name, content = the arguments
string), after the assistant's text when it has some; tool results become `observation`.
GLM-4-0414's template takes the tools as the `tools` argument and calls the same way (metadata =
name, content = the arguments string), results as `observation`; every conversation is rendered
with it (it has no thinking switch: the thinking variants are left out, as for glm-4-9b-chat).

Run with Debian's Jinja (python3-jinja2) from the repository root:
    /usr/bin/python3 tools/reference/chat_fixtures.py
"""

import json
import pathlib

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
# format name the C++ side uses -> template file
FORMATS = {"glm45": "GLM-4.6.jinja", "glm47": "GLM-4.7-Flash.jinja", "glm4": "glm-4-9b-chat.jinja",
           "glm4-0414": "GLM-4-0414.jinja"}
NO_THINKING = ("glm4", "glm4-0414")  # templates without the enable_thinking switch
# Other copies of a format's template that must render every one of its cases the same bytes
# (the script stops otherwise): GLM-4.5-Air's, as embedded in a GGUF (see README.md).
SAME_AS = {"glm45": ["GLM-4.5-Air-gguf.jinja"]}


def user(text):
    return {"role": "user", "content": text}


def assistant(text, reasoning=None):
    m = {"role": "assistant", "content": text}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


def system(text):
    return {"role": "system", "content": text}


def call(name, args, call_id):
    # arguments as OpenAI sends them: a JSON string (Python's default separators)
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def calls(text, *tool_calls, reasoning=None):
    m = assistant(text, reasoning)
    m["tool_calls"] = list(tool_calls)
    return m


def tool(text, call_id):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def function(name, description, properties, required):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


WEATHER = function("get_weather", "Current weather of a city.",
                   {"city": {"type": "string", "description": "City name, e.g. 上海"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   ["city"])
SEARCH = function("search", "Search the web.",
                  {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1},
                   "filters": {"type": "object"}},
                  ["query"])
TOOLS = [WEATHER, SEARCH]

# name -> (messages, tools); only glm4-family formats render these
TOOL_CONVERSATIONS = {
    "tools_offered": ([system("Be helpful."), user("Weather in Paris?")], TOOLS),
    "tools_no_system": ([user("Weather in Paris?")], [WEATHER]),
    "tool_call_only": ([user("Weather in Paris?"),
                        calls("", call("get_weather", {"city": "Paris"}, "call_1"))], TOOLS),
    "tool_round_trip": ([
        system("Use tools when needed."),
        user("Weather in Paris?"),
        calls("", call("get_weather", {"city": "Paris", "unit": "celsius"}, "call_1"),
              reasoning="I should call get_weather."),
        tool('{"temperature": 21, "sky": "clear"}', "call_1"),
        assistant("It is 21 °C and clear in Paris.", reasoning="The tool says 21."),
    ], TOOLS),
    "parallel_calls": ([
        user("Weather in Paris and news about 北京?"),
        calls("Let me check both.",
              call("get_weather", {"city": "Paris"}, "call_a"),
              call("search", {"query": "北京 news", "limit": 3, "filters": {"lang": "zh", "safe": True},
                              "tags": ["a", 1, None, 2.5]}, "call_b")),
        tool("sunny", "call_a"),
        tool("Headline: \"tests pass\"\nsecond line", "call_b"),
    ], TOOLS),
    "multi_turn_tools": ([
        user("Weather in Rome?"),
        calls("", call("get_weather", {"city": "Rome"}, "c1"), reasoning="Call it."),
        tool("rain", "c1"),
        assistant("Rain in Rome.", reasoning="It rains."),
        user("And Oslo?"),
        calls("", call("get_weather", {"city": "Oslo"}, "c2"), reasoning="Again."),
        tool("snow", "c2"),
    ], TOOLS),
}


CONVERSATIONS = {
    "single_turn": [user("Hello, who are you?")],
    "system_prompt": [system("You are a terse assistant."), user("Name a prime.")],
    "answered": [user("2+2?"), assistant("4")],
    "multi_turn": [
        system("Answer in one word."),
        user("Capital of France?"),
        assistant("Paris"),
        user("And of Italy?"),
        assistant("Rome"),
        user("And of Spain?"),
    ],
    "reasoning_last": [
        user("Is 91 prime?"),
        assistant("No: 91 = 7 x 13.", reasoning="91 / 7 = 13, so it has a factor."),
    ],
    "reasoning_earlier": [
        user("Is 91 prime?"),
        assistant("No.", reasoning="7 * 13 = 91."),
        user("Is 97 prime?"),
        assistant("Yes.", reasoning="No prime up to 9 divides 97."),
    ],
    "reasoning_two_after_last_user": [
        user("Think twice."),
        assistant("First.", reasoning="one"),
        assistant("Second.", reasoning="two"),
    ],
    "think_in_content": [
        user("Old style"),
        assistant("<think>\nlet me see\n</think>\n\nAnswer here."),
        user("Again"),
        assistant("<think>thought</think>Final."),
    ],
    "reasoning_padded": [
        user("  spaces  "),
        assistant("\n  padded answer \n", reasoning="\n  padded thought\n\n"),
    ],
    "empty_reasoning_string": [user("Q"), assistant("<think>kept</think>A", reasoning="")],
    "empty_answer": [user("Say nothing."), assistant("", reasoning="silence")],
    "user_nothink_suffix": [user("Quick answer /nothink")],
    "unicode": [
        system("Réponds en français — s'il te plaît."),
        user("你好，世界！🚀 Ça va?"),
        assistant("Très bien ✓ 日本語もOK。", reasoning="Unicode: ünïcødé → ✔"),
        user("Merci 🙏"),
    ],
    "system_only": [system("Only a system prompt.")],
    "system_late": [
        system("Be brief."),
        user("Hi"),
        assistant("Hello."),
        system("Now answer in French."),
        user("Why?"),
    ],
    "assistant_first": [assistant("I speak first."), user("Fine.")],
}

# (name suffix, add_generation_prompt, enable_thinking: None = not passed)
VARIANTS = [
    ("gen", True, None),
    ("gen_think_true", True, True),
    ("gen_think_false", True, False),
    ("full", False, None),
    ("full_think_false", False, False),
]


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def parsed_arguments(messages):
    """The GLM-4.5 family's templates iterate arguments as a mapping: parse the JSON strings."""
    out = []
    for m in messages:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [dict(tc, function=dict(
                tc["function"], arguments=json.loads(tc["function"]["arguments"])))
                for tc in m["tool_calls"]]
        out.append(m)
    return out


def calls_as_turns(messages):
    """Each call its own assistant turn (metadata = name), results as observation turns."""
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            if m["content"]:
                out.append({"role": "assistant", "content": m["content"]})
            for tc in m["tool_calls"]:
                out.append({"role": "assistant", "metadata": tc["function"]["name"],
                            "content": tc["function"]["arguments"]})
        elif m["role"] == "tool":
            out.append({"role": "observation", "content": m["content"]})
        else:
            out.append({k: v for k, v in m.items() if k != "reasoning_content"})
    return out


def glm4_layout(messages, tools):
    """glm-4-9b-chat's layout (see the module comment)."""
    out = calls_as_turns(messages)
    if tools:
        if out and out[0]["role"] == "system":
            out[0] = dict(out[0], tools=tools)
        else:
            out.insert(0, {"role": "system", "content": "", "tools": tools})
    return out


def render(template, fmt, messages, tools, gen, thinking):
    if fmt == "glm4":
        kwargs = {"messages": glm4_layout(messages, tools), "add_generation_prompt": gen}
    elif fmt == "glm4-0414":
        kwargs = {"messages": calls_as_turns(messages), "tools": tools,
                  "add_generation_prompt": gen}
    else:
        kwargs = {"messages": parsed_arguments(messages), "tools": tools,
                  "add_generation_prompt": gen}
    if thinking is not None:
        kwargs["enable_thinking"] = thinking
    return template.render(**kwargs)


def main():
    env = environment()
    cases = []
    for fmt, file in FORMATS.items():
        template = env.from_string((TEMPLATES / file).read_text(encoding="utf-8"))
        copies = {f: env.from_string((TEMPLATES / f).read_text(encoding="utf-8"))
                  for f in SAME_AS.get(fmt, [])}
        conversations = [(n, m, None) for n, m in CONVERSATIONS.items()] if fmt != "glm4" else []
        conversations += [(n, m, t) for n, (m, t) in TOOL_CONVERSATIONS.items()]
        for name, messages, tools in conversations:
            for suffix, gen, thinking in VARIANTS:
                if fmt in NO_THINKING and thinking is not None:
                    continue  # no thinking switch
                case = {"format": fmt, "name": f"{name}/{suffix}", "messages": messages,
                        "add_generation_prompt": gen}
                if tools:
                    case["tools"] = tools
                if thinking is not None:
                    case["enable_thinking"] = thinking
                case["text"] = render(template, fmt, messages, tools, gen, thinking)
                for f, copy in copies.items():
                    if render(copy, fmt, messages, tools, gen, thinking) != case["text"]:
                        raise SystemExit(f"{f} renders {case['name']} unlike {file}")
                cases.append(case)
    out = {
        "about": "texts rendered by tools/reference/chat_fixtures.py with python3-jinja2 "
                 + jinja2.__version__ + " from the templates in this folder",
        "templates": FORMATS,
        "cases": cases,
    }
    path = TEMPLATES / "fixtures.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
