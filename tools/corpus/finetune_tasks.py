"""Instruction (chat) examples for data/finetune, built from the same sources as the corpus.

Every task turns *source items* (a quiz row, a dictionary entry, a poem, a verse, a phrase, a
pair of numbers) into one or more (prompt, answer) pairs. Items, not prompts, are split between
valid and train, so a held-out item's facts never appear in train under another template.
Answers are exactly determined by their prompts (prompts with two different answers are
dropped), short, and single-line.

Knowledge tasks: quiz_capital, quiz_element, quiz_fact, quiz_next_line, devil_define,
poem_line (+ author), bible_quote, bible_book.
Mechanical tasks (learnable on unseen inputs): reverse_words, uppercase, repeat, add,
count_words, last_word.
"""

import random
import re

import corpus_sources as cs

# (train examples, valid examples) per task.
TARGETS = {
    "quiz_capital": (250, 22),
    "quiz_element": (260, 22),
    "quiz_fact": (330, 28),
    "quiz_next_line": (94, 9),
    "devil_define": (250, 22),
    "poem_line": (250, 22),
    "bible_quote": (200, 18),
    "bible_book": (150, 14),
    "reverse_words": (230, 18),
    "uppercase": (230, 18),
    "repeat": (230, 18),
    "add": (230, 18),
    "count_words": (230, 18),
    "last_word": (230, 18),
}
MECHANICAL = ("reverse_words", "uppercase", "repeat", "add", "count_words", "last_word")

# Books whose verses feed bible_book (a small closed answer set) and bible_quote; all of them are
# in the pretraining corpus (see build_corpus.PRETRAIN_BIBLE_BOOKS).
BOOK_TASK_BOOKS = ("Genesis", "Exodus", "Psalms", "Proverbs", "Matthew", "John")

_SENT_END = re.compile(r"[.!?](?=\s+[A-Z\"“(]|\s*$)")


def first_sentence(text):
    text = text.split("\n")[0].strip()
    m = _SENT_END.search(text)
    return text[:m.end()].strip() if m else text


def nwords(s):
    return len(s.split())


# --------------------------------------------------------------------------- item builders
# Each returns a list of items; an item is a list of (prompt, answer) pairs.

def quiz_capital_items():
    items = []
    for name in ("africa", "america", "asia", "europe", "province", "midearth"):
        for row in cs.quiz_table(name):
            if len(row) >= 2 and row[0] and row[1]:
                items.append([(f"What is the capital of {row[0]}?", row[1])])
    for row in cs.quiz_table("state"):
        items.append([(f"What is the capital of the state of {row[0]}?", row[1])])
    return items


def quiz_element_items():
    items = []
    for sym, num, _weight, name in cs.quiz_table("elements"):
        items.append([
            (f"What is the chemical symbol for {name}?", sym),
            (f"Which element has the chemical symbol {sym}?", name),
            (f"What is the atomic number of {name}?", num),
        ])
    return items


def quiz_fact_items():
    items = []

    def add(name, fn):
        for row in cs.quiz_table(name):
            qa = fn(row)
            if qa and qa[0] and qa[1]:
                items.append([qa])

    add("latin", lambda r: (f'What does the Latin word "{r[0]}" mean?', r[1]))
    add("sexes", lambda r: (f'What is the female counterpart of "{r[0]}"?', r[1])
        if len(r[0]) > 1 else None)
    add("collectives", lambda r: (f"What is the collective noun for {r[0]}?", r[1]))
    add("babies", lambda r: (f"What is a young {r[1]} called?", r[0]))
    add("posneg", lambda r: (f'What is the opposite of "{r[0]}"?', r[1]))
    add("chinese", lambda r: (f"In the Chinese zodiac, which year follows the year of the {r[0]}?",
                              r[1]))
    add("inca", lambda r: (f"Which Inca ruler succeeded {r[0].title()}?", r[1].title()))
    add("flowers", lambda r: (f"In the language of flowers, what does {r[0].lower()} mean?", r[1]))
    add("morse", lambda r: (f"What is the Morse code for {r[0]}?", r[1]))
    add("murders", lambda r: (f"Who killed {r[0]}?", r[1]))
    add("sov", lambda r: (f"Who succeeded {r[0]} on the English throne?", r[2])
        if len(r) > 2 else None)
    add("pres", lambda r: (f"Who succeeded {r[0]} as President of the United States?", r[3])
        if len(r) > 3 else None)
    return items


def quiz_next_line_items():
    items = []
    for name in ("poetry", "bard"):
        for row in cs.quiz_table(name):
            line, nxt = row[0].strip(), row[1].strip()
            if line and nxt:
                items.append([(f'What line comes after "{line}"?', nxt)])
    return items


def devil_items(entries):
    items = []
    for head, pos, body in entries:
        if not pos or not body:
            continue
        ans = first_sentence(body)
        if 3 <= nwords(ans) <= 20 and ans.endswith((".", "!", "?")):
            items.append([(f'How does the Devil\'s Dictionary define "{head.lower()}"?', ans)])
    return items


def poem_items(poems):
    titles = {}
    for p in poems:
        titles.setdefault(p["title"], set()).add(p["author"])
    items = []
    for p in poems:
        m = re.match(r"^(.*?[。？！；])", p["lines"][0])
        first = m.group(1) if m else p["lines"][0]
        if len(first) > 30:
            continue
        kind = "Tang poem" if p["kind"] == "tang" else "Song poem"
        item = [(f"What is the first line of the {kind} {p['title']} by {p['author']}?", first)]
        if len(titles[p["title"]]) == 1:
            item.append((f"Who wrote the {kind} {p['title']}?", p["author"]))
        items.append(item)
    return items


def phrase_pool(verses, devil):
    """Short lowercase word sequences (3-7 words) taken from verse clauses and Devil's
    Dictionary sentences, deduplicated, in a fixed order."""
    seen, pool = set(), []
    texts = [v[3] for v in verses[::7]] + [b for _, _, b in devil]
    for t in texts:
        for clause in re.split(r"[,;:.!?()\"“”\n]| -- ", t):
            words = re.findall(r"[A-Za-z']+", clause)
            words = [w.lower().strip("'") for w in words]
            words = [w for w in words if w and w.isalpha()]
            if 3 <= len(words) <= 7:
                p = " ".join(words)
                if p not in seen:
                    seen.add(p)
                    pool.append(p)
    return pool


# --------------------------------------------------------------------------- assembly


def _mechanical(task, phrase):
    if task == "reverse_words":
        return (f"Reverse the word order: {phrase}", " ".join(reversed(phrase.split())))
    if task == "uppercase":
        return (f"Uppercase: {phrase}", phrase.upper())
    if task == "repeat":
        return (f"Repeat: {phrase}", phrase)
    if task == "count_words":
        return (f"How many words are in: {phrase}", str(nwords(phrase)))
    if task == "last_word":
        return (f"What is the last word of: {phrase}", phrase.split()[-1])
    raise ValueError(task)


def _split(items, n_train, n_valid, rng):
    """Shuffles items, fills valid first then train (whole items only)."""
    items = list(items)
    rng.shuffle(items)
    valid, train = [], []
    for it in items:
        if sum(map(len, valid)) < n_valid:
            valid.append(it)
        elif sum(map(len, train)) < n_train:
            train.append(it)
        else:
            break
    return [qa for it in train for qa in it], [qa for it in valid for qa in it]


def build(verses, devil, poems, pretrain_books, seed=1234):
    """Returns (train, valid): lists of (task, prompt, answer), shuffled."""
    rng = random.Random(seed)
    items = {
        "quiz_capital": quiz_capital_items(),
        "quiz_element": quiz_element_items(),
        "quiz_fact": quiz_fact_items(),
        "quiz_next_line": quiz_next_line_items(),
        "devil_define": devil_items(devil),
        "poem_line": poem_items(poems),
    }
    # Bible: one global verse split so a held-out verse is never seen in train by either task.
    short = [v for v in verses if v[0] in pretrain_books and 6 <= nwords(v[3]) <= 20]
    rng.shuffle(short)
    quote_n = sum(TARGETS["bible_quote"])
    items["bible_quote"] = [[(f"Quote {b} {c}:{n}.", t)] for b, c, n, t in short[:quote_n]]
    book_pool = [v for v in short[quote_n:] if v[0] in BOOK_TASK_BOOKS]
    items["bible_book"] = [[(f"Which book of the Bible is this verse from? {t}", b)]
                           for b, c, n, t in book_pool]

    train, valid = [], []
    for task in TARGETS:
        if task in MECHANICAL:
            continue
        tr, va = _split(items[task], *TARGETS[task], rng)
        train += [(task, p, a) for p, a in tr]
        valid += [(task, p, a) for p, a in va]

    # Mechanical tasks: one global phrase split (valid phrases never appear in train prompts).
    pool = phrase_pool(verses, devil)
    rng.shuffle(pool)
    text_tasks = [t for t in MECHANICAL if t != "add"]
    n_valid_phr = sum(TARGETS[t][1] for t in text_tasks)
    n_train_phr = sum(TARGETS[t][0] for t in text_tasks)
    vpool, tpool = pool[:n_valid_phr], pool[n_valid_phr:n_valid_phr + n_train_phr]
    for task in text_tasks:
        nt, nv = TARGETS[task]
        valid += [(task,) + _mechanical(task, vpool.pop()) for _ in range(nv)]
        train += [(task,) + _mechanical(task, tpool.pop()) for _ in range(nt)]
    pairs = [(a, b) for a in range(100) for b in range(100)]
    rng.shuffle(pairs)
    nt, nv = TARGETS["add"]
    for i, (a, b) in enumerate(pairs[:nt + nv]):
        ex = ("add", f"What is {a} plus {b}?", str(a + b))
        (valid if i < nv else train).append(ex)

    # Exactness: drop any prompt that has two different answers; drop train copies of valid
    # prompts; keep one copy of duplicates.
    answers = {}
    for _, p, a in train + valid:
        answers.setdefault(p, set()).add(a)
    ok = {p for p, s in answers.items() if len(s) == 1}

    def dedupe(exs, banned):
        out, seen = [], set(banned)
        for t, p, a in exs:
            if p in ok and p not in seen:
                seen.add(p)
                out.append((t, p, a))
        return out

    valid = dedupe(valid, ())
    train = dedupe(train, {p for _, p, _ in valid})
    rng.shuffle(train)
    rng.shuffle(valid)
    return train, valid
