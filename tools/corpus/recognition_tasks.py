"""Recognition tasks for data/finetune: answers a small model can learn to give on passages and
facts it has not seen in fine-tuning, each from a small closed set.

  source        which text a passage is from: Bible, Jargon File, Devil's Dictionary, Tang poem
  language      the language of a passage: English, Spanish, Chinese
  quiz_yes_no   yes/no over quiz facts (capitals, chemical elements), half of them false
  json_source   source and language together, answered as one JSON object

Passages are held out by passage (each passage is used once, by one task and one split); the
yes/no facts follow the quiz tasks' split (a held-out quiz row is held out here too). Passages
avoid what the older tasks use: Bible passages come from books outside the pretraining corpus
(the Bible tasks use only books inside it), Jargon File entries from the 45% the pretraining
corpus left out, Devil's Dictionary entries from those devil_define does not ask about, poem
lines after the first (poem_line asks for first lines).
"""

import json
import random
import re

SOURCES = ("Bible", "Jargon File", "Devil's Dictionary", "Tang poem")
LANGUAGES = ("English", "Spanish", "Chinese")

# (train, valid) examples per label, and per task for quiz_yes_no.
SOURCE_PER_LABEL = (200, 15)
LANGUAGE_PER_LABEL = (80, 12)
JSON_PER_PAIR = (60, 8)  # per (source, language) pair, five pairs
YES_NO = (300, 48)

SOURCE_PROMPT = ("Which text is this passage from: the Bible, the Jargon File, the Devil's "
                 "Dictionary or a Tang poem? {}")
LANGUAGE_PROMPT = "What language is this passage in: English, Spanish or Chinese? {}"
JSON_PROMPT = 'Give the source and the language of this passage as JSON: {}'

_SENT_RE = re.compile(r".+?[.!?](?=\s+[A-Z\"“(]|\s*$)")


def _words(s):
    return len(s.split())


def _first_sentence(text):
    text = text.split("\n")[0].strip()
    text = re.sub(r"^\d+\.\s+", "", text)       # Jargon File sense numbers: "1. ..."
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)  # and usage notes: "[common] ..."
    m = _SENT_RE.match(text)
    return m.group(0).strip() if m else text


def passage_pools(kjv, spanish, jargon, devil, poems, pretrain_books, devil_asked):
    """Candidate passages per (source, language), each list in a fixed order.
    kjv, spanish: (book, chapter, verse, text); jargon: (term, head, body) entries outside
    the pretraining corpus; devil: (head, pos, body); devil_asked: the lower-case headwords devil_define asks about."""
    def fits(s):
        return 8 <= _words(s) <= 30

    pools = {
        ("Bible", "English"): [t for b, _, n, t in kjv if b not in pretrain_books and n > 1
                               and fits(t)],
        ("Bible", "Spanish"): [t for _, _, n, t in spanish if n > 1 and fits(t)],
        ("Jargon File", "English"): [s for s in (_first_sentence(b) for _, _, b in jargon)
                                     if fits(s) and s.endswith((".", "!", "?"))],
        ("Devil's Dictionary", "English"): [
            s for s in (_first_sentence(b) for h, p, b in devil if p and b and h.lower() not in devil_asked)
            if 6 <= _words(s) <= 30 and s.endswith((".", "!", "?"))],
        ("Tang poem", "Chinese"): [l for p in poems if p["kind"] == "tang" for l in p["lines"][1:]
                                   if 10 <= len(l) <= 24],
        ("Song poem", "Chinese"): [l for p in poems if p["kind"] == "song" for l in p["lines"][1:]
                                   if 10 <= len(l) <= 24],
    }
    for k in pools:  # one copy of each passage
        pools[k] = list(dict.fromkeys(pools[k]))
    return pools


def _take(pool, n):
    assert len(pool) >= n, f"{n} passages wanted, {len(pool)} left"
    out = pool[-n:]
    del pool[-n:]
    return out


def passage_tasks(pools, rng):
    """Returns (train, valid) lists of (task, prompt, answer); passages are not reused."""
    pools = {k: list(v) for k, v in pools.items()}
    for k in sorted(pools):
        rng.shuffle(pools[k])
    train, valid = [], []

    def add(task, prompt, answer, passages_by_key, n):
        nt, nv = n
        for key in passages_by_key:
            for p in _take(pools[key], nv):
                valid.append((task, prompt.format(p), answer(key)))
            for p in _take(pools[key], nt):
                train.append((task, prompt.format(p), answer(key)))

    source_keys = [("Bible", "English"), ("Jargon File", "English"),
                   ("Devil's Dictionary", "English"), ("Tang poem", "Chinese")]
    add("source", SOURCE_PROMPT, lambda k: k[0], source_keys, SOURCE_PER_LABEL)
    # English from all three English texts, Chinese from Tang and Song poems, in equal parts.
    for lang, keys in (("English", [("Bible", "English"), ("Jargon File", "English"),
                                    ("Devil's Dictionary", "English")]),
                       ("Spanish", [("Bible", "Spanish")]),
                       ("Chinese", [("Tang poem", "Chinese"), ("Song poem", "Chinese")])):
        nt, nv = LANGUAGE_PER_LABEL
        for i, key in enumerate(keys):  # split the counts over the keys, remainders first
            share = (nt // len(keys) + (i < nt % len(keys)), nv // len(keys) + (i < nv % len(keys)))
            add("language", LANGUAGE_PROMPT, lambda k, lang=lang: lang, [key], share)
    json_keys = source_keys + [("Bible", "Spanish")]
    add("json_source", JSON_PROMPT,
        lambda k: json.dumps({"source": k[0], "language": k[1]}, ensure_ascii=False),
        json_keys, JSON_PER_PAIR)
    return train, valid


# Quiz questions turned into statements to confirm or deny: (pattern of the quiz prompt,
# yes/no question with {0} = the prompt's subject and {1} = a proposed answer).
_YES_NO = (
    (re.compile(r"^What is the capital of (.+)\?$"), "Is {1} the capital of {0}?"),
    (re.compile(r"^What is the chemical symbol for (.+)\?$"), "Is {1} the chemical symbol for {0}?"),
    (re.compile(r"^Which element has the chemical symbol (.+)\?$"),
     "Is {1} the element with the chemical symbol {0}?"),
    (re.compile(r"^What is the atomic number of (.+)\?$"), "Is {1} the atomic number of {0}?"),
)
YES_NO_PREFIX = "Answer yes or no: "


def yes_no_tasks(old_train, old_valid, rng):
    """quiz_yes_no from the quiz_capital / quiz_element examples of each split: half keep the
    true answer ("yes"), half take another answer of the same question kind and split ("no")."""
    def build(examples, n):
        facts = []  # (kind, subject, answer)
        for task, prompt, answer in examples:
            if task not in ("quiz_capital", "quiz_element"):
                continue
            for kind, (pattern, _) in enumerate(_YES_NO):
                m = pattern.match(prompt)
                if m:
                    facts.append((kind, m.group(1), answer))
                    break
        answers = {}
        for kind, _, a in facts:
            answers.setdefault(kind, [])
            if a not in answers[kind]:
                answers[kind].append(a)
        rng.shuffle(facts)
        out = []
        for i, (kind, subject, answer) in enumerate(facts[:n]):
            truth = i % 2 == 0
            proposed = answer if truth else rng.choice([a for a in answers[kind] if a != answer])
            out.append(("quiz_yes_no", YES_NO_PREFIX + _YES_NO[kind][1].format(subject, proposed),
                        "yes" if truth else "no"))
        return out

    return build(old_train, YES_NO[0]), build(old_valid, YES_NO[1])
