#!/usr/bin/python3
"""Writes the corpus of the embedded model's fifth pretraining phase: the quiz facts that
data/corpus/pretrain.jsonl states once each (capitals, chemical elements, and the facts of the
quiz_fact task), now each stated in four or five wordings, mixed half and half with documents
of the fourth phase (tools/corpus/copy_documents.py --phase 4) so that what that phase taught stays.
One wording of every fact, drawn for half of the statements, puts the answer at the start of
the next line ("The capital of Kenya:" then "Nairobi"), where a chat answer starts: there the
tokenizer spells a word without its leading space, so its first piece differs from the one
inside a sentence (tools/corpus/copy_documents.py says the same of copies).

    /usr/bin/python3 tools/corpus/fact_documents.py OUT.jsonl

A 5M-parameter model does not recall a fact it read once; read many times in several wordings it
does, and a model that knows a fact in several wordings can be taught to answer a question about
it (README, "Why the fifth phase"). Only statements are written, never the questions of the
fine-tune's tasks, so the chat layout of those questions is still learnt only in the fine-tune,
on its training split. Needs the quiz tables of scripts/install_corpus_packages.sh (bsdgames).
Standard library only; a fixed seed, so a rerun gives identical bytes.
"""

import argparse
import os
import random

import copy_documents
import corpus_sources as cs

SEED = 6
DOCUMENTS = 12000
FACT_SHARE = 0.5
LINE_START_SHARE = 0.5

CAPITAL = ("The capital of {s} is {o}.", "{o} is the capital of {s}.",
           "{S} has {o} as its capital.", "The capital city of {s} is {o}.",
           "The capital of {s}:\n{o}")
SYMBOL = ("The chemical symbol for {s} is {o}.", "{S} has the chemical symbol {o}.",
          "{O} is the chemical symbol of {s}.", "The chemical symbol of {s} is {o}.",
          "The chemical symbol for {s}:\n{o}")
SYMBOL_NAME = ("The element with the chemical symbol {s} is {o}.",
               "The chemical symbol {s} stands for {o}.", "{O} is the element whose symbol is {s}.",
               "The element with the chemical symbol {s}:\n{o}")
NUMBER = ("The atomic number of {s} is {o}.", "{S} has atomic number {o}.",
          "Element number {o} is {s}.", "The atomic number of {s}:\n{o}")

# quiz table: (subject, answer) of a row or None, and the wordings of the fact.
QUIZ_FACTS = {
    "latin": (lambda r: (r[0], r[1]),
              ('The Latin word "{s}" means "{o}".', '"{s}" is Latin for "{o}".',
               "In Latin, {s} means {o}.", 'The Latin word "{s}" means:\n{o}')),
    "sexes": (lambda r: (r[0], r[1]) if len(r[0]) > 1 else None,
              ('The female counterpart of "{s}" is "{o}".', "The female counterpart of {s} is {o}.",
               '"{o}" is the female counterpart of "{s}".',
               'The female counterpart of "{s}":\n{o}')),
    "collectives": (lambda r: (r[0], r[1]),
                    ("A group of {s} is called a {o}.", "The collective noun for {s} is {o}.",
                     "A {o} is a group of {s}.", "The collective noun for {s}:\n{o}")),
    "babies": (lambda r: (r[1], r[0]),
               ("A young {s} is called a {o}.", "The young of the {s} is called a {o}.",
                "A {o} is a young {s}.", "A young {s} is called:\n{o}")),
    "posneg": (lambda r: (r[0], r[1]),
               ('The opposite of "{s}" is "{o}".', "The opposite of {s} is {o}.",
                '"{o}" is the opposite of "{s}".', 'The opposite of "{s}":\n{o}')),
    "chinese": (lambda r: (r[0], r[1]),
                ("In the Chinese zodiac, the year of the {s} is followed by the year of the {o}.",
                 "In the Chinese zodiac, the year of the {o} follows the year of the {s}.",
                 "After the year of the {s} comes the year of the {o} in the Chinese zodiac.",
                 "In the Chinese zodiac, after the year of the {s}:\n{o}")),
    "inca": (lambda r: (r[0].title(), r[1].title()),
             ("The Inca ruler {s} was succeeded by {o}.", "{O} succeeded {s} as Inca ruler.",
              "After {s}, {o} ruled the Incas.", "The Inca ruler after {s}:\n{o}")),
    "flowers": (lambda r: (r[0].lower(), r[1]),
                ("In the language of flowers, {s} means: {o}.",
                 "In the language of flowers, {s} stands for {o}.",
                 '{S} means "{o}" in the language of flowers.',
                 "In the language of flowers, {s} means:\n{o}")),
    "morse": (lambda r: (r[0], r[1]),
              ("In Morse code, {s} is {o}.", "The Morse code for {s} is {o}.",
               "{O} is {s} in Morse code.", "The Morse code for {s}:\n{o}")),
    "murders": (lambda r: (r[0], r[1]),
                ("{S} was killed by {o}.", "{O} killed {s}.", "The killer of {s} was {o}.",
                 "The killer of {s}:\n{o}")),
    "sov": (lambda r: (r[0], r[2]) if len(r) > 2 else None,
            ("{S} was succeeded on the English throne by {o}.",
             "{O} succeeded {s} on the English throne.", "After {s}, {o} took the English throne.",
             "On the English throne, after {s}:\n{o}")),
    "pres": (lambda r: (r[0], r[3]) if len(r) > 3 else None,
             ("{S} was succeeded as President of the United States by {o}.",
              "{O} succeeded {s} as President of the United States.",
              "After {s}, {o} became President of the United States.",
              "President of the United States after {s}:\n{o}")),
}


def state(wording, subject, answer):
    upper = lambda t: t[:1].upper() + t[1:]
    return wording.format(s=subject, o=answer, S=upper(subject), O=upper(answer))


def fact_statements():
    """Every quiz fact in every one of its wordings, subjects and answers spelt as the
    fine-tune's questions and answers spell them (tools/corpus/finetune_tasks.py)."""
    facts = []  # (subject, answer, wordings)
    for name in ("africa", "america", "asia", "europe", "province", "midearth"):
        facts += [(r[0], r[1], CAPITAL) for r in cs.quiz_table(name) if len(r) >= 2 and r[1]]
    facts += [("the state of " + r[0], r[1], CAPITAL) for r in cs.quiz_table("state")]
    for sym, num, _weight, name in cs.quiz_table("elements"):
        facts += [(name, sym, SYMBOL), (sym, name, SYMBOL_NAME), (name, num, NUMBER)]
    for table, (subject_answer, wordings) in QUIZ_FACTS.items():
        for row in cs.quiz_table(table):
            pair = subject_answer(row)
            if pair:
                facts.append(pair + (wordings,))
    return [state(w, s, o) for s, o, wordings in facts if s and o for w in wordings]


def fact_document(rng, line_start, sentences):
    """Statements drawn at random, LINE_START_SHARE of them from line_start."""
    lines = []
    while sum(map(len, lines)) < copy_documents.DOCUMENT_CHARS:
        lines.append(rng.choice(line_start if rng.random() < LINE_START_SHARE else sentences))
    return "\n".join(lines)


def phase5_documents(rng, statements, fourth_phase):
    """DOCUMENTS documents: fact documents (FACT_SHARE of them), else the next of fourth_phase."""
    line_start = [t for t in statements if ":\n" in t]
    sentences = [t for t in statements if ":\n" not in t]
    for _ in range(DOCUMENTS):
        yield (fact_document(rng, line_start, sentences) if rng.random() < FACT_SHARE
               else next(fourth_phase))


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--corpus", default=os.path.join(root, "data", "corpus", "pretrain.jsonl"))
    ap.add_argument("--held-out", default=os.path.join(root, "data", "finetune", "valid.jsonl"),
                    help="the fourth phase's sums leave out the operand pairs of this file's add "
                         "questions")
    args = ap.parse_args()
    words, texts = copy_documents.corpus_words(args.corpus)
    # The fourth phase's own documents, in its order.
    fourth_phase = copy_documents.phase4_documents(
        random.Random(copy_documents.PHASES[4][0]), words, texts,
        copy_documents.held_out_sums(args.held_out))
    documents = phase5_documents(random.Random(SEED), fact_statements(), fourth_phase)
    copy_documents.write_documents(args.out, documents)


if __name__ == "__main__":
    main()
