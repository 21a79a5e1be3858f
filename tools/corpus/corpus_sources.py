"""Per-source extractors for the training corpus (standard library only).

Every function reads one installed Debian package (see scripts/install_corpus_packages.sh) and
returns plain Python data in a fixed order, so tools/corpus/build_corpus.py is deterministic:

  bible_verses()    bible-kjv(-text)  [(book, chapter, verse, text)]           KJV, public domain
  spanish_verses()  sword-text-sparv  [(book, chapter, verse, text)]           Reina-Valera 1909, PD
  devil_entries()   dict-devil        [(headword, pos, body)]                  public domain
  jargon_entries()  jargon-text       [(term, body)]                           public domain
  chinese_poems()   fortunes-zh       [{"title", "author", "lines", "kind"}]   public domain texts
  quiz_table(name)  bsdgames          [[field, ...]] with each field's alternatives resolved
"""

import base64
import gzip
import re
import subprocess
import unicodedata

QUIZ_DIR = "/usr/share/games/bsdgames/quiz"
FORTUNE_DIR = "/usr/share/games/fortunes"
DEVIL_DICT = "/usr/share/dictd/devil.dict.dz"
DEVIL_INDEX = "/usr/share/dictd/devil.index"
JARGON_TXT = "/usr/share/doc/jargon-text/jargon.txt.gz"

ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean_text(s):
    """Strips ANSI escapes and control characters (keeps \\n and \\t as spaces/newlines)."""
    s = ANSI_RE.sub("", s)
    s = unicodedata.normalize("NFC", s)
    out = []
    for ch in s:
        if ch == "\n":
            out.append(ch)
        elif ch == "\t" or ch == "\u00a0":
            out.append(" ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            continue
        else:
            out.append(ch)
    return "".join(out)


def unwrap(lines):
    """Joins wrapped lines of one paragraph into a single line with single spaces."""
    return re.sub(r"\s+", " ", " ".join(l.strip() for l in lines)).strip()


# --------------------------------------------------------------------------- Bible (KJV)

# `bible -f -` abbreviations, in canonical order, with the full book names.
BIBLE_BOOKS = [
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"),
    ("Deu", "Deuteronomy"), ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"),
    ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"), ("1Ki", "1 Kings"), ("2Ki", "2 Kings"),
    ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"), ("Neh", "Nehemiah"),
    ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"), ("Prv", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"), ("Isa", "Isaiah"),
    ("Jer", "Jeremiah"), ("Lam", "Lamentations"), ("Eze", "Ezekiel"), ("Dan", "Daniel"),
    ("Hos", "Hosea"), ("Joel", "Joel"), ("Amos", "Amos"), ("Obad", "Obadiah"),
    ("Jonah", "Jonah"), ("Mic", "Micah"), ("Nahum", "Nahum"), ("Hab", "Habakkuk"),
    ("Zep", "Zephaniah"), ("Hag", "Haggai"), ("Zec", "Zechariah"), ("Mal", "Malachi"),
    ("Mat", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"), ("John", "John"), ("Acts", "Acts"),
    ("Rom", "Romans"), ("1Cor", "1 Corinthians"), ("2Cor", "2 Corinthians"),
    ("Gal", "Galatians"), ("Eph", "Ephesians"), ("Phi", "Philippians"), ("Col", "Colossians"),
    ("1Th", "1 Thessalonians"), ("2Th", "2 Thessalonians"), ("1Tim", "1 Timothy"),
    ("2Tim", "2 Timothy"), ("Titus", "Titus"), ("Phmn", "Philemon"), ("Heb", "Hebrews"),
    ("Jas", "James"), ("1Pet", "1 Peter"), ("2Pet", "2 Peter"), ("1Jn", "1 John"),
    ("2Jn", "2 John"), ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
_ABBREV = dict(BIBLE_BOOKS)
_VERSE_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def bible_verses():
    """All 31,102 KJV verses as (book name, chapter, verse, text), in canonical order."""
    out = subprocess.run(["bible", "-f", "-"], input="gen1:1-rev22:21\n", capture_output=True,
                         text=True, check=True, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
                         ).stdout
    lines = out.split("\n")
    # The reader prints a banner and the first verse once before the "bible(KJV) ...>" prompt.
    start = next(i for i, l in enumerate(lines) if l.startswith("bible(KJV)")) + 1
    verses = []
    for l in lines[start:]:
        m = _VERSE_RE.match(l)
        if not m:
            continue
        verses.append((_ABBREV[m.group(1)], int(m.group(2)), int(m.group(3)),
                       clean_text(m.group(4)).strip()))
    assert len(verses) == 31102, len(verses)
    return verses


# --------------------------------------------------------------------------- Bible (Spanish)

SPANISH_MODULE = "spaRV1909eb"  # sword-text-sparv: Reina-Valera 1909, read with diatheke
_SWORD_VERSE_RE = re.compile(r"^(.+?) (\d+):(\d+): (.*)$")
_STRONGS_RE = re.compile(r"\s*<[GH]\d+>")  # Strong's numbers left in the plain rendering


def spanish_verses(books):
    """Reina-Valera 1909 verses of `books` (English book names, as diatheke keys them) as
    (book, chapter, verse, text), in canonical order."""
    verses = []
    for book in books:
        out = subprocess.run(["diatheke", "-b", SPANISH_MODULE, "-f", "plain", "-k", book],
                             capture_output=True, text=True, check=True,
                             env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/nonexistent"}
                             ).stdout
        for line in out.split("\n"):
            m = _SWORD_VERSE_RE.match(line)
            if m and m.group(1) == book:
                text = re.sub(r"\s+", " ", _STRONGS_RE.sub("", clean_text(m.group(4))))
                verses.append((book, int(m.group(2)), int(m.group(3)), text.strip()))
    assert verses, "diatheke printed no verses; is sword-text-sparv installed?"
    return verses


# --------------------------------------------------------------------------- Devil's Dictionary

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64num(s):
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


_DEVIL_HEAD_RE = re.compile(r"^([A-Z][A-Z0-9'\- ]*[A-Z]|[A-Z])(?:, ([a-z.]+(?: and [a-z.]+)?))?\.?\s*")


def devil_entries():
    """(HEADWORD, part of speech or "", body text with paragraph breaks) per dictionary entry."""
    data = gzip.open(DEVIL_DICT, "rb").read()
    entries = []
    with open(DEVIL_INDEX, encoding="utf-8") as f:
        for line in f:
            word, off, length = line.rstrip("\n").split("\t")
            if word.startswith("00database"):
                continue
            raw = data[_b64num(off):_b64num(off) + _b64num(length)].decode("utf-8", "replace")
            entries.append((_b64num(off), raw))
    entries.sort()
    out = []
    seen = set()
    for off, raw in entries:
        if off in seen:
            continue
        seen.add(off)
        text = clean_text(raw).strip("\n")
        paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
        if not paras:
            continue
        first = unwrap(paras[0].split("\n"))
        m = _DEVIL_HEAD_RE.match(first)
        if not m:
            continue
        head, pos = m.group(1), (m.group(2) or "")
        rest = first[m.end():].strip()
        body = [rest] if rest else []
        for p in paras[1:]:
            plines = p.split("\n")
            # Verse quotations are indented; keep their line structure, unwrap prose.
            if all(l.startswith("    ") for l in plines if l.strip()):
                body.append("\n".join(l.strip() for l in plines if l.strip()))
            else:
                body.append(unwrap(plines))
        out.append((head, pos, "\n".join(body).strip()))
    return out


# --------------------------------------------------------------------------- Jargon File

_JARGON_HEAD_RE = re.compile(r"^   :(.+?):(.*)$")


def jargon_entries():
    """(term, text) per Jargon File lexicon entry; {cross-reference} braces removed."""
    lines = clean_text(gzip.open(JARGON_TXT, "rt", encoding="utf-8").read()).split("\n")
    out = []
    cur = None
    for l in lines:
        if l.strip().startswith("Part III.") and cur is not None:
            break  # "Part III. Appendices": the lexicon is over
        m = _JARGON_HEAD_RE.match(l)
        if m:
            if cur:
                out.append(cur)
            cur = [m.group(1).strip(), m.group(2).strip(), []]
            continue
        if cur is None:
            continue
        if l.startswith("  ") and not l.startswith("   ") and l.strip():
            out.append(cur)  # a letter heading of the glossary index ends the entry
            cur = None
            continue
        cur[2].append(l)
    if cur:
        out.append(cur)
    result = []
    for term, head, body in out:
        paras = [unwrap(p.split("\n")) for p in re.split(r"\n\s*\n", "\n".join(body))
                 if p.strip()]
        text = "\n".join(paras)
        text = re.sub(r"\{([^{}]*)\}", r"\1", text)
        head = re.sub(r"\{([^{}]*)\}", r"\1", head).strip(" ,")
        if text:
            result.append((term, head, text))
    return result


# --------------------------------------------------------------------------- Chinese poems


def chinese_poems():
    """tang300 (唐诗三百首) and song100 (宋词一百首) from fortunes-zh, in file order."""
    poems = []
    for name, kind in (("tang300", "tang"), ("song100", "song")):
        with open(f"{FORTUNE_DIR}/{name}", encoding="utf-8") as f:
            raw = clean_text(f.read())
        for rec in raw.split("\n%\n"):
            lines = [l.strip() for l in rec.strip("%\n").split("\n") if l.strip()]
            if len(lines) < 3:
                continue
            title = re.sub(r"^题目[:：]", "", lines[0]).strip()
            author = re.sub(r"^作者[:：]", "", lines[1]).strip()
            author = re.sub(r"[（(].*?[）)]$", "", author).strip()  # drop (946-999) dates
            if not title.startswith("《"):
                continue
            poems.append({"title": title, "author": author, "lines": lines[2:], "kind": kind})
    return poems


# --------------------------------------------------------------------------- bsdgames quiz

def _resolve(s):
    """One canonical reading of a quiz field: '{x}' optional text is kept, '[a|b]' and
    top-level 'a|b' alternatives take the first choice. '{(note)}' annotations are dropped."""
    pos = 0

    def alt_seq(stop):
        nonlocal pos
        choices, cur = [], []
        while pos < len(s) and s[pos] not in stop:
            ch = s[pos]
            if ch == "|":
                choices.append("".join(cur))
                cur = []
                pos += 1
            elif ch in "{[":
                close = "}" if ch == "{" else "]"
                pos += 1
                inner = alt_seq(close + "")
                pos += 1  # skip the closing bracket
                if not (ch == "{" and inner.startswith("(")):
                    cur.append(inner)
            elif ch == "\\" and pos + 1 < len(s):
                cur.append(s[pos + 1])
                pos += 2
            else:
                cur.append(ch)
                pos += 1
        choices.append("".join(cur))
        return choices[0]

    return re.sub(r"\s+", " ", alt_seq("")).strip()


def _split_fields(line):
    """Splits on ':' outside {} and [] brackets."""
    fields, depth, cur = [], 0, []
    for ch in line:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == ":" and depth == 0:
            fields.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    fields.append("".join(cur))
    return fields


_OVERSTRIKE = {"'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303", ",": "\u0327",
               "°": "\u030a", '"': "\u0308"}


def _overstrike(m):
    """Terminal overstrike accents in the quiz files ("e<BS>'", "'<BS>e") -> "é"."""
    a, b = m.group(1), m.group(2)
    mark, letter = (a, b) if a in _OVERSTRIKE or a == "/" else (b, a)
    if mark == "/":
        return {"o": "ø", "O": "Ø"}.get(letter, letter)
    return unicodedata.normalize("NFC", letter + _OVERSTRIKE.get(mark, ""))


def quiz_table(name):
    """Rows of one quiz file, '\\'-continued lines joined, every field resolved."""
    with open(f"{QUIZ_DIR}/{name}", encoding="utf-8", errors="replace") as f:
        text = f.read()
    text = text.replace("\\\n", "")
    text = clean_text(re.sub(r"(.)\x08(.)", _overstrike, text))
    rows = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        rows.append([_resolve(x) for x in _split_fields(line)])
    return rows
