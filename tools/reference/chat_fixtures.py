"""Renders chat conversations with the GLM-4.5 family's real Jinja chat templates.

The C++ chat renderer (io/tokenizer/glm45_chat.cpp) must write the same bytes; this script is
the oracle. It renders each conversation below with each template in tests/data/chat_templates
the way transformers' apply_chat_template does (a sandboxed environment with trim_blocks and
lstrip_blocks, `enable_thinking` passed only when the case sets it, so an unset switch is
"undefined" to the template), and writes tests/data/chat_templates/fixtures.json.

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
FORMATS = {"glm45": "GLM-4.6.jinja", "glm47": "GLM-4.7-Flash.jinja"}


def user(text):
    return {"role": "user", "content": text}


def assistant(text, reasoning=None):
    m = {"role": "assistant", "content": text}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


def system(text):
    return {"role": "system", "content": text}


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


def main():
    env = environment()
    cases = []
    for fmt, file in FORMATS.items():
        template = env.from_string((TEMPLATES / file).read_text(encoding="utf-8"))
        for name, messages in CONVERSATIONS.items():
            for suffix, gen, thinking in VARIANTS:
                kwargs = {"messages": messages, "tools": None, "add_generation_prompt": gen}
                if thinking is not None:
                    kwargs["enable_thinking"] = thinking
                case = {"format": fmt, "name": f"{name}/{suffix}", "messages": messages,
                        "add_generation_prompt": gen}
                if thinking is not None:
                    case["enable_thinking"] = thinking
                case["text"] = template.render(**kwargs)
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
