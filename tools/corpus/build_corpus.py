#!/usr/bin/python3
"""Builds glm4's training data from public-domain / permissively licensed Debian packages.

    scripts/install_corpus_packages.sh && /usr/bin/python3 tools/corpus/build_corpus.py

Writes (relative to the repository root, or --out):
  data/corpus/pretrain.jsonl         {"text": ...} document chunks, shuffled
  data/corpus/tokenizer_train.txt    one paragraph per line, for sentencepiece
  data/finetune/train.jsonl          {"messages": [...], "task": ...}
  data/finetune/valid.jsonl          held-out source items, same task mix
  data/finetune/demo_prompts.txt     held-out user prompts, one per line

Standard library only; fixed seeds, so a rerun gives identical bytes. Prints a JSON summary.
"""

import argparse
import hashlib
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus_sources as cs  # noqa: E402
import finetune_tasks as ft  # noqa: E402
import recognition_tasks as rt  # noqa: E402

SEED = 20240601
TASK_SEED = 20261124  # the recognition tasks and the final order of the fine-tuning set
MIN_CHARS, MAX_CHARS = 300, 1500
MAX_LINE_BYTES = 3900

# Bible books in the pretraining corpus (about 1.2 MB of the 4.3 MB KJV).
PRETRAIN_BIBLE_BOOKS = (
    "Genesis", "Exodus", "Ruth", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Jonah", "Matthew", "Mark", "John", "James", "Revelation",
)
JARGON_FRACTION = 0.55  # of the Jargon File lexicon entries (hash-selected, stable)
TOKENIZER_BYTES = 1_000_000
TOKENIZER_FINETUNE_BYTES = 120_000
DEMO_TASKS = ("repeat", "reverse_words", "uppercase", "add", "last_word", "quiz_capital", "devil_define",
              "poem_line", "bible_book", "source", "language", "quiz_yes_no", "json_source")
DEMO_ANSWERS = {"language": "Spanish", "json_source": "Spanish"}  # the first held-out one with it
# Spanish (Reina-Valera 1909) books read for the language tasks; any would do.
SPANISH_BOOKS = ("Proverbs", "Luke", "Acts")


def split_long(text, max_chars=MAX_CHARS):
    """Splits one over-long unit at sentence (or, failing that, word) boundaries; the text
    between pieces is kept verbatim apart from the whitespace at a cut."""
    if len(text) <= max_chars:
        return [text]
    # Sentences with their trailing whitespace, so "".join(sents) == text.
    sents = re.findall(r".+?(?:[.!?]+(?:\s+|$)|[。！？]+\s*|$)", text, flags=re.S)
    parts, cur = [], ""
    for sent in sents:
        if len(cur) + len(sent) <= max_chars:
            cur += sent
            continue
        if cur.strip() and len(cur.strip()) >= MIN_CHARS // 2:
            parts.append(cur.strip())
            cur = ""
        cur += sent
        while len(cur) > max_chars:  # a run-on sentence: cut at a space
            cut = cur.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            parts.append(cur[:cut].strip())
            cur = cur[cut:].lstrip()
    if cur.strip():
        parts.append(cur.strip())
    return parts


def merge_short(recs, sep="\n", min_chars=MIN_CHARS, max_chars=MAX_CHARS):
    """Joins records shorter than min_chars to a neighbour when the result still fits."""
    out = []
    i = 0
    while i < len(recs):
        r = recs[i]
        if len(r) < min_chars:
            if out and len(out[-1]) + len(sep) + len(r) <= max_chars:
                out[-1] += sep + r
                i += 1
                continue
            if i + 1 < len(recs) and len(r) + len(sep) + len(recs[i + 1]) <= max_chars:
                recs[i + 1] = r + sep + recs[i + 1]
                i += 1
                continue
        out.append(r)
        i += 1
    return out


def pack(units, sep="\n", min_chars=MIN_CHARS, max_chars=MAX_CHARS, header=None):
    """Packs consecutive units into records of min_chars..max_chars (a short tail joins the
    previous record when it fits). header, if given, starts every record."""
    pieces = []
    for u in units:
        pieces += split_long(u, max_chars - (len(header) + 1 if header else 0))
    recs, cur = [], []

    def size(parts):
        return sum(len(p) for p in parts) + len(sep) * max(0, len(parts) - 1)

    for p in pieces:
        if cur and size(cur + [p]) > max_chars - (len(header) + 1 if header else 0):
            recs.append(cur)
            cur = []
        cur.append(p)
        if size(cur) >= (min_chars + max_chars) // 2:
            recs.append(cur)
            cur = []
    if cur:
        if recs and size(recs[-1] + cur) <= max_chars - (len(header) + 1 if header else 0):
            recs[-1] += cur
        else:
            recs.append(cur)
    out = [sep.join(r) for r in recs]
    out = [header + "\n" + r if header else r for r in out]
    return out if header else merge_short(out, sep, min_chars, max_chars)


# --------------------------------------------------------------------------- pretrain sources

def bible_records(verses):
    recs, by_chapter = [], {}
    for b, c, n, t in verses:
        if b in PRETRAIN_BIBLE_BOOKS:
            by_chapter.setdefault((b, c), []).append(f"{c}:{n} {t}")
    for book in PRETRAIN_BIBLE_BOOKS:  # short chapters (Psalm 117) join a neighbour
        recs += merge_short([r for (b, c), lines in by_chapter.items() if b == book
                             for r in pack(lines, header=f"{b} {c}")])
    return recs


def devil_records(entries):
    units = []
    for head, pos, body in entries:
        label = f"{head}, {pos}" if pos else head
        units.append(f"{label} {body}".strip() if body else label)
    return pack(units)


def _stable_fraction(key):
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) / 0xFFFFFFFF


def jargon_records(entries):
    units = []
    for term, head, body in entries:
        if _stable_fraction("jargon:" + term) >= JARGON_FRACTION:
            continue
        label = f"{term} ({head})" if head and head != "//" else term
        units.append(f"{label}: {body}")
    return pack(units)


def poem_records(poems):
    units = ["\n".join([p["title"], "作者：" + p["author"]] + p["lines"]) for p in poems]
    return pack(units, sep="\n\n", min_chars=150, max_chars=900)


def quiz_records():
    t = cs.quiz_table
    groups = {
        "capitals": [f"The capital of {r[0]} is {r[1]}." for n in
                     ("africa", "america", "asia", "europe", "province")
                     for r in t(n) if len(r) > 1 and r[1]]
        + [f"The capital of the state of {r[0]} is {r[1]}; its abbreviation is {r[2]} and "
           f"its state flower is the {r[3]}." for r in t("state")]
        + [f"In Middle-earth, the chief city of {r[0]} is {r[1]}." for r in t("midearth")],
        "elements": [f"{r[3]} has the chemical symbol {r[0]}, atomic number {r[1]} and atomic "
                     f"weight {r[2]}." for r in t("elements")],
        "latin": [f'The Latin word "{r[0]}" means "{r[1]}".' for r in t("latin")],
        "words": [f'The female counterpart of "{r[0]}" is "{r[1]}".' for r in t("sexes")
                  if len(r[0]) > 1]
        + [f"A group of {r[0]} is called a {r[1]}." for r in t("collectives")]
        + [f"A young {r[1]} is called a {r[0]}." for r in t("babies")]
        + [f'The opposite of "{r[0]}" is "{r[1]}".' for r in t("posneg")],
        "history": [f"{r[0]} was President of the United States from {r[1]}; his vice president "
                    f"was {r[2]}" + (f", and he was succeeded by {r[3]}." if len(r) > 3 and r[3]
                                     else ".") for r in t("pres")]
        + [f"{r[0]} reigned in England in century {r[1]}" + (f" and was succeeded by {r[2]}."
                                                             if len(r) > 2 and r[2] else ".")
           for r in t("sov")]
        + [f"The Inca ruler {r[0].title()} was succeeded by {r[1].title()}." for r in t("inca")],
        "misc": [f"In the Chinese zodiac, the year of the {r[0]} is followed by the year of the "
                 f"{r[1]}." for r in t("chinese")]
        + [f"In the language of flowers, {r[0].lower()} means: {r[1]}." for r in t("flowers")]
        + [f"In Morse code, {r[0]} is {r[1]}." for r in t("morse")]
        + [f"Who killed {r[0]}? {r[1][0].upper() + r[1][1:]}." for r in t("murders")],
        "poetry": [f'"{r[0]}" is followed by "{r[1]}", from {r[2]} by {r[3]}.'
                   for r in t("poetry") if len(r) > 3]
        + [f'"{r[0]}" is followed by "{r[1]}", from {r[2]}, spoken by {r[3]}.'
           for r in t("bard") if len(r) > 3],
    }
    recs = []
    for _, sents in groups.items():
        recs += pack(sents, sep=" ", max_chars=900)
    return recs


# --------------------------------------------------------------------------- writers

def dump_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def chat(task, prompt, answer):
    prompt, answer = cs.clean_text(prompt), cs.clean_text(answer)
    return {"messages": [{"role": "user", "content": prompt},
                         {"role": "assistant", "content": answer}], "task": task}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "..", "data"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(os.path.join(out, "corpus"), exist_ok=True)
    os.makedirs(os.path.join(out, "finetune"), exist_ok=True)

    verses = cs.bible_verses()
    devil = cs.devil_entries()
    jargon = cs.jargon_entries()
    poems = cs.chinese_poems()

    sources = {
        "bible": bible_records(verses),
        "devil": devil_records(devil),
        "jargon": jargon_records(jargon),
        "poems": poem_records(poems),
        "quiz": quiz_records(),
    }
    rng = random.Random(SEED)
    records = [(name, cs.clean_text(r).strip()) for name, rs in sources.items() for r in rs]
    records = [(n, r) for n, r in records if r]
    rng.shuffle(records)
    dump_jsonl(os.path.join(out, "corpus", "pretrain.jsonl"), [{"text": r} for _, r in records])

    # Tokenizer text: every poem and quiz record (so CJK characters and the quiz vocabulary are
    # covered), then a deterministic sample of the rest, then some finetune train turns so the
    # instruction templates and upper-case words get pieces of their own.
    train, valid = ft.build(verses, devil, poems, set(PRETRAIN_BIBLE_BOOKS))
    lines, total = [], 0
    first = [r for n, r in records if n in ("poems", "quiz")]
    rest = [r for n, r in records if n not in ("poems", "quiz")]
    for r in first + rest:
        line = re.sub(r"\s*\n\s*", " ", r)
        b = len(line.encode("utf-8")) + 1
        if b > MAX_LINE_BYTES:
            continue
        if total + b > TOKENIZER_BYTES - TOKENIZER_FINETUNE_BYTES:
            break
        lines.append(line)
        total += b
    for _, p, a in train:
        line = f"{p} {a}"
        b = len(line.encode("utf-8")) + 1
        if total + b > TOKENIZER_BYTES:
            break
        lines.append(line)
        total += b
    rng.shuffle(lines)
    with open(os.path.join(out, "corpus", "tokenizer_train.txt"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write("\n".join(lines) + "\n")

    # The recognition tasks join after the tokenizer text is cut, so that text (and the
    # embedded model's tokenizer trained on it) does not depend on them.
    devil_asked = {m.group(1) for t, p, _ in train + valid if t == "devil_define"
                   for m in [re.search(r'define "(.+)"\?$', p)]}
    unseen_jargon = [e for e in jargon if _stable_fraction("jargon:" + e[0]) >= JARGON_FRACTION]
    pools = rt.passage_pools(verses, cs.spanish_verses(SPANISH_BOOKS), unseen_jargon, devil, poems,
                             set(PRETRAIN_BIBLE_BOOKS), devil_asked)
    task_rng = random.Random(TASK_SEED)
    more_train, more_valid = rt.passage_tasks(pools, task_rng)
    yn_train, yn_valid = rt.yes_no_tasks(train, valid, task_rng)
    train, valid = train + more_train + yn_train, valid + more_valid + yn_valid
    task_rng.shuffle(train)
    task_rng.shuffle(valid)
    prompts = [p for _, p, _ in train + valid]
    assert len(prompts) == len(set(prompts)), "a prompt occurs twice in the fine-tuning set"

    dump_jsonl(os.path.join(out, "finetune", "train.jsonl"), [chat(*e) for e in train])
    dump_jsonl(os.path.join(out, "finetune", "valid.jsonl"), [chat(*e) for e in valid])
    demo = []
    for task in DEMO_TASKS:
        demo.append(next(p for t, p, a in valid if t == task and DEMO_ANSWERS.get(task, "") in a))
    with open(os.path.join(out, "finetune", "demo_prompts.txt"), "w", encoding="utf-8",
              newline="\n") as f:
        f.write("\n".join(demo) + "\n")

    def count(exs):
        c = {}
        for t, _, _ in exs:
            c[t] = c.get(t, 0) + 1
        return dict(sorted(c.items()))

    summary = {
        "pretrain_records": {n: sum(1 for m, _ in records if m == n) for n in sources},
        "pretrain_chars": {n: sum(len(r) for m, r in records if m == n) for n in sources},
        "pretrain_bytes": os.path.getsize(os.path.join(out, "corpus", "pretrain.jsonl")),
        "tokenizer_lines": len(lines),
        "tokenizer_bytes": os.path.getsize(os.path.join(out, "corpus", "tokenizer_train.txt")),
        "train": len(train), "valid": len(valid),
        "train_tasks": count(train), "valid_tasks": count(valid),
    }
    print(json.dumps(summary, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
