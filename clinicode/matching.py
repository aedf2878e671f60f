"""Words as the mentions and the title suggestions compare them: case and accents folded, plural endings off (English,
Spanish), stop words, the notes' language, and negated findings (a NegEx-style trigger and its scope in the sentence).
Keys only: a note's character offsets are never changed here, and no note text leaves it."""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Sequence

from clinicode.errors import ConfigError

WORD = re.compile(r"[^\W_]+")
LANGUAGES = ("en", "es")

# Function words of each language (folded: lower case, no accents). A phrase made only of these, numbers and
# punctuation is never a mention (#51 item 6: a coder's span on "and" taught it to 9 codes). Short on purpose: a
# clinical word ("no", "sin" aside, which negate) must never be here.
STOPWORDS = {
    "en": frozenset("""a about above after again against all also am an and any are as at be because been before being
        below between both but by can could did do does doing down during each few for from further had has have having
        he her here hers him his how i if in into is it its itself just may me might more most must my no nor not of
        off on once only or other our out over own per same she should so some such than that the their them then there
        these they this those through to too under until up upon very via was we were what when where which while who
        whom why will with within without would you your""".split()),
    "es": frozenset("""a al algo algun alguna algunas alguno algunos ante antes aqui asi aun bajo bien cada como con
        contra cual cuales cuando de del desde donde dos durante e el ella ellas ellos en entre era eran es esa esas ese
        eso esos esta estaba estaban estado estan estas este esto estos fue fueron ha habia han hasta hay la las le les
        lo los mas me mi mientras muy nada ni nos o otra otras otro otros para pero poco por porque que quien se segun
        ser si sido siempre sin sobre solo su sus tambien tan tanto te tiene tienen todo todos tras tu u un una unas uno
        unos y ya""".split()),
}

# Negation triggers (folded words; NegEx, Chapman et al. 2001, and its Spanish adaptations, cut to what notes say).
# PRE negates the words after it, POST the words before it, up to the end of the sentence (.;:!? or a line break), a
# TERMINATION word ("but", "pero") or SCOPE words. PSEUDO looks like a trigger and negates nothing ("no change").
SCOPE = 6      # words a trigger reaches: "denies chest pain, fever or cough" needs 5
PRE = {
    "en": ["no", "not", "denies", "denied", "deny", "denying", "without", "negative for", "no evidence of",
           "no sign of", "no signs of", "free of", "absence of", "never had"],
    "es": ["no", "sin", "niega", "niegan", "negativo para", "negativa para", "negativos para", "negativas para",
           "sin signos de", "sin evidencia de", "ausencia de", "se descarta", "se descartan", "descarta", "descartan",
           "no se observa", "no se observan", "libre de", "libres de"],
}
POST = {"en": ["ruled out", "was ruled out", "were ruled out", "is ruled out", "unlikely", "was negative",
               "were negative", "absent"],
        "es": ["descartado", "descartada", "descartados", "descartadas", "negativo", "negativa", "negativos",
               "negativas", "ausente", "ausentes"]}
PSEUDO = {"en": ["no change", "no increase", "no further", "not only", "not necessarily", "no longer", "without change",
                 "not ruled out", "gram negative"],
          "es": ["no solo", "sin cambios", "no obstante"]}
TERMINATION = {"en": frozenset("but however although though except which who aside apart".split()),
               "es": frozenset("pero aunque excepto salvo sino".split())}
_SENTENCE = re.compile(r"[.;:!?\n]")


@dataclass(frozen=True)
class Matching:
    """Which mechanisms the matching applies (each measured on dev: docs/accuracy-tuning.md, round 16).

    Attributes:
        fold: compare words in lower case without accents ("Sjögren" is "sjogren").
        inflection: "plural": a plural is its singular ("tumores" is "tumor", "diseases" is "disease": `inflect`);
            "gender": and Spanish gender goes too ("malignas" is "maligno"); "snowball": words by their Snowball
            stem (`stem`; needs snowballstemmer); "none".
        negation: an occurrence inside a negation trigger's scope does not count ("denies chest pain").
        caps: a capitalised word is an acronym only where the words around it are not capitalised too.
        support: training spans a mention needs (a one-off span teaches nothing).
        acronym_support: training spans a one-word acronym mention needs.
        values: an acronym followed by a number ("TG 250", "CRP: 12") names a measurement, not a finding.
        ordinary: an acronym that is also a lower-case word of the training text is no mention on its own.
        weighted: a mention adds to a code in the share of its training spans that named that code, times the share
            of its occurrences in the training notes that coders marked at all ("tumor" marked for 8000/1 in 9 spans
            of 10 and written 30 times adds 0.9 x 10/30 to 8000/1), not 1 to every code it ever named.
        longest: where phrases overlap, only the longest counts ("metástasis de adenocarcinoma", not also
            "adenocarcinoma"), as a coder marks the whole mention.
    """

    fold: bool = True
    inflection: str = "plural"
    negation: bool = False
    caps: bool = True
    support: int = 1
    acronym_support: int = 1
    values: bool = True
    ordinary: bool = True
    weighted: bool = True
    longest: bool = True

    def __post_init__(self) -> None:
        if self.inflection not in INFLECTIONS:
            raise ValueError(f"Matching.inflection must be one of {', '.join(INFLECTIONS)}, got {self.inflection!r}.")


INFLECTIONS = ("none", "plural", "gender", "snowball")
# The mentions and the title match (what the default model's scores read): dev kept folding, plurals, capitalised
# notes and ordinary words; it dropped Snowball stems, Spanish gender, a support of 2 spans and negation (round 16:
# each cost micro-F1 on bc5cdr, ncbi or cantemist, whose gold codes count negated mentions too: 8.5% of cantemist's
# dev spans lie in a negation's scope).
DEFAULT = Matching()
# The title suggestions (a coder reads each): negated findings are never suggested (#51 item 17).
SUGGESTING = Matching(negation=True)
# before round 16
LEGACY = Matching(fold=False, inflection="none", negation=False, caps=False, support=1, acronym_support=1,
                  ordinary=False, values=False, weighted=False, longest=False)


@functools.lru_cache(maxsize=1 << 18)  # notes share a small vocabulary: each word is worked out once
def fold(word: str) -> str:
    """WORD in lower case without accents or other marks ("Sézary" -> "sezary", "Behçet" -> "behcet")."""
    w = word.lower()
    if w.isascii():
        return w
    return "".join(c for c in unicodedata.normalize("NFKD", w) if not unicodedata.combining(c))


@functools.lru_cache(maxsize=4)
def _stemmer(language: str):
    try:
        import snowballstemmer
    except ImportError:
        raise ConfigError("Matching(inflection='snowball') needs snowballstemmer (extra dev): pip install "
                          "'clinicode[dev]', or use inflection 'plural' (the default).") from None

    return snowballstemmer.stemmer({"en": "english", "es": "spanish"}[language])


@functools.lru_cache(maxsize=1 << 18)
def stem(word: str, language: str) -> str:
    """The Snowball stem of a folded WORD in LANGUAGE ("en", "es"): "diseases" and "disease" -> "diseas", "malignas"
    and "maligno" -> "malign"; words of fewer than 4 letters, words with digits and inflammations ("-itis", plural
    "-itides": Snowball makes "hepatitis" the stem of "hepatic") are kept as they are."""
    if word.endswith("itides"):
        word = word[:-6] + "itis"
    if len(word) < 4 or not word.isalpha() or word.endswith("itis"):
        return word
    return _stemmer(language).stemWord(word)


def inflect(word: str, language: str, *, gender: bool = False) -> str:
    """A folded WORD without its plural ending (English, Spanish): "diseases" -> "disease", "injuries" -> "injury",
    "metastases" -> "metastasis" ("-ss", "-us", "-is" kept: "abscess", "hepatitis"); "tumores" -> "tumor", "lesiones"
    -> "lesion", "malignas" -> "maligna", "infiltrantes" and "infiltrante" -> "infiltrant" ("metastasis" kept).
    GENDER: Spanish "-a" and "-o" off too ("maligna", "maligno" -> "malign"): it cost cantemist dev micro-F1 (round 16),
    so the default keeps gender."""
    if language == "en":
        return _plural_en(word)
    w = _plural_es(word)
    return w[:-1] if gender and len(w) > 3 and w[-1] in "ao" else w


@functools.lru_cache(maxsize=1 << 18)
def _plural_en(w: str) -> str:
    if len(w) > 4 and w.endswith("ses"):
        return w[:-3] + "sis"
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


@functools.lru_cache(maxsize=1 << 18)
def _plural_es(w: str) -> str:
    if not w.isalpha():
        return w
    if len(w) > 4 and w.endswith("es") and w[-3] not in "aeiou":
        w = w[:-2]                                  # tumores, lesiones, ductales; infiltrantes
    elif len(w) > 3 and w.endswith("s") and w[-2] in "aeo":
        w = w[:-1]                                  # malignas, ganglios
    if len(w) > 4 and w.endswith("e") and w[-2] not in "aeiou":
        w = w[:-1]                                  # infiltrante (as "infiltrantes" lost "es"), grande, mieloide
    return w


def check_language(language: str) -> str:
    """LANGUAGE if it is one the matching knows; ValueError naming the known ones otherwise."""
    if language not in LANGUAGES:
        raise ValueError(f"language {language!r} is not one the matching knows; expected one of "
                         f"{', '.join(LANGUAGES)}.")
    return language


def detect_language(texts: Iterable[str], *, notes: int = 200, chars: int = 4000) -> str:
    """The notes' language, "es" or "en": whichever's stop words are more of the words of the first NOTES notes (their
    first CHARS characters); "en" when there are none. Spanish and English share few of them ("a", "no")."""
    en = es = 0
    for i, text in enumerate(texts):
        if i >= notes:
            break
        for m in WORD.finditer(text[:chars]):
            w = fold(m.group())
            en += w in STOPWORDS["en"]
            es += w in STOPWORDS["es"]
    return "es" if es > en else "en"


def is_stopword_phrase(words: Sequence[str], language: str | None = None) -> bool:
    """True when WORDS (a phrase's words) are only stop words (of LANGUAGE; None: of any) or numbers."""
    stops = STOPWORDS[language] if language else STOPWORDS["en"] | STOPWORDS["es"]
    return all(fold(w) in stops or not any(c.isalpha() for c in w) for w in words)


@functools.lru_cache(maxsize=4)
def _triggers(language: str) -> tuple[dict[tuple[str, ...], int], int]:
    """(folded trigger words -> +1 pre, -1 post, 0 pseudo; the longest trigger's words)."""
    out: dict[tuple[str, ...], int] = {}
    for table, kind in ((PRE, 1), (POST, -1), (PSEUDO, 0)):   # later tables win: a pseudo-trigger is no trigger
        out.update({tuple(t.split()): kind for t in table[language]})
    return out, max(len(t) for t in out)


def negated(text: str, words: Sequence[tuple[str, int, int]], language: str) -> list[bool]:
    """For each of the note's words ((folded word, start, end), in order, as WORD finds them), whether a negation
    trigger's scope holds it. One pass, linear in the words.

    Args:
        text: the note (only the characters between words are read: sentence ends).
        words: its words, folded, with their character offsets.
        language: the triggers' language ("en", "es").
    Returns:
        one flag a word; a trigger's own words are not flagged.
    """
    triggers, longest = _triggers(check_language(language))
    first = {t[0] for t in triggers}
    stop = TERMINATION[language]
    n = len(words)
    folded = [w for w, _, _ in words]
    # sentence[i]: the sentence index of word i (a .;:!? or line break between two words starts a new one)
    ends = [m.start() for m in _SENTENCE.finditer(text)]
    sentence = [0] * n
    e = 0
    for i in range(n):
        while e < len(ends) and ends[e] < words[i][1]:
            e += 1
        sentence[i] = e
    out = [False] * n
    i = 0
    while i < n:
        hit = None
        if folded[i] not in first:
            i += 1
            continue
        for k in range(min(longest, n - i), 0, -1):   # the longest trigger starting here wins ("no evidence of")
            seq = tuple(folded[i:i + k])
            if seq in triggers and sentence[i + k - 1] == sentence[i]:
                hit = (k, triggers[seq])
                break
        if hit is None:
            i += 1
            continue
        k, kind = hit
        if kind == 1:      # forward, to the sentence's end, a termination word or SCOPE words
            j = i + k
            while j < n and j < i + k + SCOPE and sentence[j] == sentence[i] and words[j][0] not in stop:
                out[j] = True
                j += 1
        elif kind == -1:   # backward, likewise
            j = i - 1
            while j >= 0 and j > i - 1 - SCOPE and sentence[j] == sentence[i] and words[j][0] not in stop:
                out[j] = True
                j -= 1
        i += k
    return out


def all_caps(word: str) -> bool:
    """WORD has letters and every letter is a capital ("CAN", "HIV1")."""
    return word.isupper()


def caps_context(words: Sequence[str], *, reach: int = 4) -> list[bool]:
    """For each word (as written), whether the note is typed in capitals around it: most of its neighbours (REACH each
    side, the word itself left out) that tell (stop words and words of more than 5 letters: "THE", "PATIENT"; an
    acronym beside it, "CBC", "TSH", tells nothing) are capitalised. In "THE PATIENT CAN WALK" "CAN" is a word, not an
    acronym. Linear: running counts over the window."""
    n = len(words)
    stops = STOPWORDS["en"] | STOPWORDS["es"]
    tells = [len(w) > 5 or fold(w) in stops for w in words]
    caps = [int(t and all_caps(w)) for w, t in zip(words, tells)]
    told = [int(t) for t in tells]
    pc = [0] * (n + 1)
    pt = [0] * (n + 1)
    for i in range(n):
        pc[i + 1] = pc[i] + caps[i]
        pt[i + 1] = pt[i] + told[i]
    out = []
    for i in range(n):
        a, b = max(0, i - reach), min(n, i + reach + 1)
        c, t = pc[b] - pc[a] - caps[i], pt[b] - pt[a] - told[i]
        out.append(t > 0 and 2 * c > t)
    return out


def blank_negated(text: str, language: str) -> str:
    """TEXT with each word a negation holds replaced by spaces (the same length, so offsets stay right): what the title
    match reads, so "no evidence of pneumonia" does not match "Pneumonia". TEXT itself when nothing is negated."""
    words = [(fold(m.group()), m.start(), m.end()) for m in WORD.finditer(text)]
    held = negated(text, words, language)
    if not any(held):
        return text
    out = list(text)
    for (_, a, b), h in zip(words, held):
        if h:
            out[a:b] = " " * (b - a)
    return "".join(out)
