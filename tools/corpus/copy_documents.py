#!/usr/bin/python3
"""Writes the corpus of the embedded model's second, third or fourth pretraining phase:
documents of repeated word sequences (phase 4: and of sums) mixed with documents of
data/corpus/pretrain.jsonl.

    /usr/bin/python3 tools/corpus/copy_documents.py [--phase 2|3|4] OUT.jsonl

A repeated line can be predicted only by finding its earlier copy, so these documents teach the
in-context copying that the repeat, last-word and reverse tasks need and that the first phase's
corpus teaches too slowly (README, "The embedded model"). Lines are 2-12 (phase 3: 1-10) words
drawn uniformly from the corpus's 3,000 most common (lower-cased).

Phase 2 (20,000 documents, 70% copy documents): a line followed by itself (half of the time), by
another line and then itself (a quarter), or a line followed by its own first words (a quarter).

Phase 3 (10,000 documents, 70% copy documents) moves copies across the start of a line, which
the chat tasks need: their answer starts a line, where the tokenizer spells a word without the
leading space it has inside the prompt, so its first piece differs (" roaring" is pieces
810 299 302 inside a line, "roaring" 349 299 302 at its start). A line after a colon starts the
next line (35%) or starts it reversed (25%); a line is copied after a colon (15%); the ending
of a line starts the next (15%); a line follows itself (10%).

Phase 4 (10,000 documents: 40% copy documents, 35% sums, 25% corpus) drills what the third
left weakest. Copy documents of lines of 2-7 words, mostly reversed: a line after a colon starts
the next reversed (60%) or as it is (20%); a line is copied after a colon (7%); the ending of a
line starts the next (8%); a line follows itself (5%). Sum documents add two numbers below 100
("a + b = c" half of the time, "a plus b is c" a quarter, "add a and b:" with the sum on the
next line a quarter); no operand pair of a held-out add question (data/finetune/valid.jsonl)
appears, in either order, so the fine-tune's add scores stay held out.
Standard library only; fixed seeds, so a rerun gives identical bytes.
"""

import argparse
import json
import os
import random
import re
from collections import Counter

VOCABULARY = 3000
DOCUMENT_CHARS = 1200


def random_line(rng, words, fewest, most):
    return " ".join(rng.choice(words) for _ in range(rng.randint(fewest, most)))


def copy_document(next_lines):
    """Joins the groups of lines next_lines() returns until the document has DOCUMENT_CHARS."""
    lines = []
    while sum(map(len, lines)) < DOCUMENT_CHARS:
        lines += next_lines()
    return "\n".join(lines)


def phase2_documents(rng, words, texts):
    def next_lines():
        line, kind = random_line(rng, words, 2, 12), rng.random()
        if kind < 0.5:
            return [line, line]
        if kind < 0.75:
            return [line, random_line(rng, words, 2, 12), line]
        return [line + " " + random_line(rng, words, 2, 12), line]

    for _ in range(20000):
        yield rng.choice(texts) if rng.random() > 0.7 else copy_document(next_lines)


def line_start_copies(rng, words, fewest, most, upto):
    """A function returning one group of lines that copies a line of fewest-most words to the
    start of a line. upto holds the cumulative chances of the first four kinds: the line after a
    colon, then itself; after a colon, then reversed; itself, then after a colon; after other
    words, then itself. The rest: the line twice."""
    def after_colon(line):
        return random_line(rng, words, 1, 6) + ": " + line

    def next_lines():
        line, kind = random_line(rng, words, fewest, most), rng.random()
        if kind < upto[0]:
            return [after_colon(line), line]
        if kind < upto[1]:
            return [after_colon(line), " ".join(reversed(line.split()))]
        if kind < upto[2]:
            return [line, after_colon(line)]
        if kind < upto[3]:
            return [random_line(rng, words, 1, 8) + " " + line, line]
        return [line, line]

    return next_lines


def phase3_documents(rng, words, texts):
    next_lines = line_start_copies(rng, words, 1, 10, (0.35, 0.6, 0.75, 0.9))
    for _ in range(10000):
        yield rng.choice(texts) if rng.random() < 0.3 else copy_document(next_lines)


def held_out_sums(valid):
    """The operand pairs of the held-out add questions, in both orders."""
    pairs = set()
    with open(valid, encoding="utf-8") as f:
        for line in f:
            example = json.loads(line)
            if example.get("task") == "add":
                a, b = map(int, re.findall(r"\d+", example["messages"][0]["content"]))
                pairs |= {(a, b), (b, a)}
    return pairs


def phase4_documents(rng, words, texts, held_out):
    reversal_lines = line_start_copies(rng, words, 2, 7, (0.2, 0.8, 0.87, 0.95))

    def sum_lines():
        a, b = rng.randrange(100), rng.randrange(100)
        while (a, b) in held_out:
            a, b = rng.randrange(100), rng.randrange(100)
        kind = rng.random()
        if kind < 0.5:
            return [f"{a} + {b} = {a + b}"]
        if kind < 0.75:
            return [f"{a} plus {b} is {a + b}"]
        return [f"add {a} and {b}:", str(a + b)]

    for _ in range(10000):
        kind = rng.random()
        if kind < 0.25:
            yield rng.choice(texts)
        elif kind < 0.65:
            yield copy_document(reversal_lines)
        else:
            yield copy_document(sum_lines)


# phase: (seed, documents)
PHASES = {2: (1, phase2_documents), 3: (4, phase3_documents), 4: (5, phase4_documents)}


def corpus_words(corpus):
    """The corpus's documents and its VOCABULARY most common words (lower-cased)."""
    with open(corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    counts = Counter(w.lower() for t in texts for w in re.findall(r"[A-Za-z]+", t))
    return [w for w, _ in counts.most_common(VOCABULARY)], texts


def write_documents(out, documents):
    """Writes one JSON line {"text": ...} per document to out, through a temporary name."""
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for text in documents:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    os.replace(tmp, out)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--phase", type=int, choices=sorted(PHASES), default=2)
    ap.add_argument("--corpus", default=os.path.join(root, "data", "corpus", "pretrain.jsonl"))
    ap.add_argument("--held-out", default=os.path.join(root, "data", "finetune", "valid.jsonl"),
                    help="phase 4 leaves out the operand pairs of this file's add questions")
    args = ap.parse_args()
    words, texts = corpus_words(args.corpus)
    seed, documents = PHASES[args.phase]
    extra = (held_out_sums(args.held_out),) if args.phase == 4 else ()
    write_documents(args.out, documents(random.Random(seed), words, texts, *extra))


if __name__ == "__main__":
    main()
