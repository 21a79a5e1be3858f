#!/usr/bin/python3
"""Writes the second pretraining phase's corpus for the embedded model: documents of repeated
word sequences mixed with documents of data/corpus/pretrain.jsonl.

    /usr/bin/python3 tools/copy_documents.py OUT.jsonl

A repeated line can be predicted only by finding its earlier copy, so these documents teach
the in-context copying that the repeat and last-word tasks need and that the first phase's
corpus teaches too slowly (README, "The embedded model"). Each copy document is lines of 2-12
words drawn uniformly from the corpus's 3,000 most common (lower-cased): a line followed by
itself (half of the time), by another line and then itself (a quarter), or a line followed by
its own first words (a quarter).
Standard library only; fixed seed, so a rerun gives identical bytes.
"""

import argparse
import json
import os
import random
import re
from collections import Counter

SEED = 1
DOCUMENTS = 20000
COPY_FRACTION = 0.7  # the rest are corpus documents, so the model keeps its text
VOCABULARY = 3000
DOCUMENT_CHARS = 1200


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--corpus", default=os.path.join(root, "data", "corpus", "pretrain.jsonl"))
    args = ap.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    counts = Counter(w.lower() for t in texts for w in re.findall(r"[A-Za-z]+", t))
    words = [w for w, _ in counts.most_common(VOCABULARY)]
    rng = random.Random(SEED)

    def sequence():
        return " ".join(rng.choice(words) for _ in range(rng.randint(2, 12)))

    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for _ in range(DOCUMENTS):
            if rng.random() > COPY_FRACTION:
                text = rng.choice(texts)
            else:
                lines = []
                while sum(map(len, lines)) < DOCUMENT_CHARS:
                    line, kind = sequence(), rng.random()
                    if kind < 0.5:
                        lines += [line, line]
                    elif kind < 0.75:
                        lines += [line, sequence(), line]
                    else:
                        lines += [line + " " + sequence(), line]
                text = "\n".join(lines)
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
