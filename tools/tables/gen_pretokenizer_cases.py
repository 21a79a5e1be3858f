#!/usr/bin/python3
"""Writes tests/data/tokenizer/pretokenize_cases.jsonl: texts and the pieces that Python's `regex`
module (Debian python3-regex, an independent engine) finds with the GLM-4 pre-tokenizer pattern.
The C++ hand-coded pre-tokenizer must reproduce them. Deterministic (fixed seed)."""
import json
import os
import random

import regex

PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

FIXED = [
    "", "a", " ", "  ", "\n", "\r\n", " \n ", "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "'ſ 'S 'st 'LL 'l 'r", "   hello   world   ", "hello\n\n\nworld\n", "\t\tx", "x\t\t",
    "123456789 1.5 ½ ٣٤٥ 一二三", "你好，世界！我想在apple工作1314151天～", "😶‍🌫️ 🦙🦙 ✅",
    "e\u0301t\u00e9", "a\u00a0b\u3000c\u2009d", "---=== !!!\n\n??", "  \r\n\r\n  x", " \u0085x",
    "\n```c++\n#include <iostream>\n\nint main() {\n    printf(\"hello world\\n\");    // say hello\n}\n```\n",
]

ALPHABET = (list("aZxé中文ぁкД") + list("0129½٣") + list(" \t\n\r\u00a0\u3000\u2009\u0085") +
            list("'\"!?.,-_#()[]{}<>|/\\~") + ["\u0301", "\u200d", "😀", "🦙", "ſ", "S", "s", "T",
                                            "r", "e", "v", "l", "m", "d"])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "..", "tests", "data", "tokenizer", "pretokenize_cases.jsonl")
    rng = random.Random(20240611)
    texts = list(FIXED)
    for _ in range(400):
        texts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))))
    pat = regex.compile(PATTERN)
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        for t in texts:
            pieces = [m.group() for m in pat.finditer(t)]
            assert "".join(pieces) == t
            f.write(json.dumps({"text": t, "pieces": pieces}, ensure_ascii=False) + "\n")
    os.replace(out + ".tmp", out)
    print(f"wrote {len(texts)} cases to {out} (regex {regex.__version__})")


if __name__ == "__main__":
    main()
