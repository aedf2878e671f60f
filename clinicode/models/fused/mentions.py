"""Each code's mentions in the training notes (coders' evidence spans), found again in new notes: they add to the code's
title match and lead its highlighted words (docs/accuracy-tuning.md, rounds 15 and 16). Words are compared as
`clinicode.matching` folds them, plurals off; negation is a switch of `Matching` that dev left off (round 16)."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from clinicode.errors import CheckpointError
from clinicode.files import write_json_atomic
from clinicode.matching import (
    DEFAULT,
    Matching,
    all_caps,
    caps_context,
    check_language,
    detect_language,
    fold,
    inflect,
    is_stopword_phrase,
    negated,
    stem,
)

MENTIONS_FILE = "mentions.json"
MENTION_FORMAT = "clinicode.mentions"
# what a mention adds to the code's title match (a cosine in [0, 1]): bc5cdr and ncbi dev chose 1.0 of 0.1, 0.3, 1.0
MENTION_WEIGHT = 1.0
MAX_WORDS = 8          # a longer evidence span is a passage, not a phrase a note repeats
ACRONYM = 5            # a mention all in capitals of words this short (SRC, CAN, ALL) matches only in capitals
ORDINARY = 1           # an acronym whose lower case stands this often in the training notes is an ordinary word
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) of each run of letters and digits (any script), a possessive's "s" left out ("Sjögren's
    syndrome" is "Sjögren syndrome", as the title suggestions read it)."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text) if m.group() not in ("s", "S")]


_PLURAL_ACRONYM = re.compile(r"[A-Z][A-Z0-9]+s")
_VALUE = re.compile(r"\s*[:=]?\s*[<>]?\s*\d")   # what follows a measurement's name: "TG 250", "CRP: 12", "K=3.1"


def _acronym_singular(word: str) -> str:
    """"LIDs" -> "LID": an acronym's plural is the acronym (lower-cased, "lids" would match the word "lid")."""
    return word[:-1] if _PLURAL_ACRONYM.fullmatch(word) else word


def _is_acronym(words: Sequence[str]) -> bool:
    return all(all_caps(w) and len(w) <= ACRONYM for w in words)


def _key(words: Sequence[str]) -> tuple[str, ...]:
    """A mention's phrase: its words lower-cased, unless it is an acronym (kept as written, "LIDs" as "LID")."""
    words = [_acronym_singular(w) for w in words]
    if _is_acronym(words):
        return tuple(words)
    return tuple(w.lower() for w in words)


@dataclass
class MentionLexicon:
    """Phrase (lower-cased words; an acronym's as written) -> the indices of the codes it was a training mention of.

    A phrase made only of stop words, numbers and punctuation ("and", "of the") is dropped however the lexicon was
    made (built, or read from an older mentions.json). LANGUAGE ("en", "es") picks the plural rules (and the negation
    triggers); MATCHING the mechanisms (`clinicode.matching.Matching`)."""

    phrases: dict[tuple[str, ...], tuple[int, ...]] = field(default_factory=dict)
    codes: tuple[str, ...] = ()      # the model's codes, in its order (what the indices point at)
    language: str = "en"
    matching: Matching = DEFAULT
    longest: int = field(default=0, init=False)   # words in the longest phrase

    def __post_init__(self) -> None:
        check_language(self.language)
        self.phrases = {p: ks for p, ks in self.phrases.items() if p and not is_stopword_phrase(p)}
        self.longest = max((len(p) for p in self.phrases), default=0)
        # the matching keys: an acronym's words as written, the others' folded and made singular as the note's will be
        self._acronyms: dict[tuple[str, ...], set[int]] = {}
        self._index: dict[tuple[str, ...], set[int]] = {}
        for p, ks in self.phrases.items():
            if _is_acronym(p):
                self._acronyms.setdefault(p, set()).update(ks)
            else:
                key = tuple(self._norm(w) for w in p if w != "s")   # an older lexicon's possessive "s"
                if key:
                    self._index.setdefault(key, set()).update(ks)
        # every phrase's beginnings: a run of a note's words that begins none can be left at once
        self._prefixes = {p[:n] for p in self._index for n in range(1, len(p) + 1)}
        self._acronym_prefixes = {p[:n] for p in self._acronyms for n in range(1, len(p) + 1)}

    def _norm(self, word: str) -> str:
        w = fold(word) if self.matching.fold else word.lower()
        if self.matching.inflection in ("plural", "gender"):
            return inflect(w, self.language, gender=self.matching.inflection == "gender")
        return stem(w, self.language) if self.matching.inflection == "snowball" else w

    def __len__(self) -> int:
        return len(self.phrases)

    def in_language(self, language: str) -> MentionLexicon:
        """The same phrases, matched as LANGUAGE's words are."""
        return self if language == self.language else replace(self, language=language)

    def with_matching(self, matching: Matching) -> MentionLexicon:
        """The same phrases, matched with MATCHING's mechanisms (the benchmark's ablations)."""
        return replace(self, matching=matching)

    @classmethod
    def build(cls, codes: Sequence[str], texts: Sequence[str],
              evidence: Sequence[Iterable[Mapping[str, Any]] | None], *, language: str | None = None,
              matching: Matching = DEFAULT) -> MentionLexicon:
        """From each training note's evidence ({code, start, end}: text[start:end] justifies code); mentions of codes
        outside CODES, ones longer than MAX_WORDS words, ones without a word of two letters ("A", "2"), ones made only
        of stop words ("and"), ones spanned fewer than `matching.support` times for the code (one-word acronyms:
        `matching.acronym_support`), and acronyms of one word that the training notes also write in lower case ("CAN",
        "HIT": `matching.ordinary`) are left out.
        LANGUAGE: the notes' ("en", "es"); None: detected from TEXTS (`clinicode.matching.detect_language`)."""
        index = {c: k for k, c in enumerate(codes)}
        found: Counter[tuple[tuple[str, ...], int]] = Counter()
        for text, spans in zip(texts, evidence):
            for m in spans if isinstance(spans, (list, tuple)) else ():
                k = index.get(str(m.get("code"))) if isinstance(m, Mapping) else None
                start, end = (m.get("start"), m.get("end")) if k is not None else (None, None)
                if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(text)):
                    continue
                phrase = _key([w for w, _, _ in _words(text[start:end])])
                if 0 < len(phrase) <= MAX_WORDS and any(sum(c.isalpha() for c in w) >= 2 for w in phrase):
                    found[(phrase, k)] += 1
        ordinary: set[str] = set()
        if matching.ordinary:
            single = {p[0].lower() for p, _ in found if len(p) == 1 and _is_acronym(p)}
            seen = Counter(w for t in texts for w, _, _ in _words(t) if w in single)
            ordinary = {w for w, n in seen.items() if n >= ORDINARY}
        kept: dict[tuple[str, ...], set[int]] = {}
        for (phrase, k), n in found.items():
            if len(phrase) == 1 and _is_acronym(phrase):
                if n < matching.acronym_support or phrase[0].lower() in ordinary:
                    continue
            if n < matching.support:
                continue
            kept.setdefault(phrase, set()).add(k)
        lang = check_language(language) if language else detect_language(texts)
        return cls({p: tuple(sorted(ks)) for p, ks in kept.items()}, tuple(codes), lang, matching)

    def union(self, other: MentionLexicon) -> MentionLexicon:
        """Both lexicons' phrases (of the same codes), matched as this one's."""
        found = {p: set(ks) for p, ks in self.phrases.items()}
        for p, ks in other.phrases.items():
            found.setdefault(p, set()).update(ks)
        return MentionLexicon({p: tuple(sorted(ks)) for p, ks in found.items()}, self.codes, self.language,
                              self.matching)

    def _occurrences(self, text: str) -> list[tuple[int, int, int]]:
        """(code, start, end) of every occurrence of a phrase in TEXT, on word boundaries; linear in its words (a
        phrase has at most `longest` of them). An acronym matches only as written, and (`matching.caps`) only where
        the words around it are not capitalised too, and (`matching.values`) not when a number follows it ("TG 250");
        an occurrence a negation holds (`matching.negation`) is left."""
        if not self.phrases:
            return []
        words = _words(text)
        forms = {w: (self._norm(w), fold(w)) for w in {t[0] for t in words}}      # worked out once a word
        keys = [forms[w][0] for w, _, _ in words]
        written = [_acronym_singular(w) for w, _, _ in words]
        acro = [all_caps(w) and len(w) <= ACRONYM for w in written] if self._acronyms else [False] * len(words)
        if self._acronyms and self.matching.caps and any(acro):
            acro = [a and not c for a, c in zip(acro, caps_context(written))]
        if self._acronyms and self.matching.values:    # "TG 250": a measurement's name, not a finding
            acro = [a and not _VALUE.match(text, words[i][2]) for i, a in enumerate(acro)]
        held = (negated(text, [(forms[w][1], a, b) for w, a, b in words], self.language) if self.matching.negation
                else [False] * len(words))
        out = []
        for i in range(len(words)):
            if held[i]:
                continue
            for n in range(1, min(self.longest, len(words) - i) + 1):
                key = tuple(keys[i:i + n])
                if key not in self._prefixes:
                    break                 # no phrase goes on from here
                for k in sorted(self._index.get(key, ())):
                    out.append((k, words[i][1], words[i + n - 1][2]))
            for n in range(1, min(self.longest, len(words) - i) + 1):
                if not acro[i + n - 1]:
                    break
                as_written = tuple(written[i:i + n])
                if as_written not in self._acronym_prefixes:
                    break
                for k in sorted(self._acronyms.get(as_written, ())):
                    out.append((k, words[i][1], words[i + n - 1][2]))
        return out

    def match(self, texts: Sequence[str], n_codes: int) -> np.ndarray:
        """[N, n_codes] 1.0 where a mention of the code occurs in the note, else 0."""
        out = np.zeros((len(texts), n_codes), dtype=np.float32)
        for i, text in enumerate(texts):
            for k, _, _ in self._occurrences(text):
                out[i, k] = 1.0
        return out

    def spans(self, text: str, codes: Sequence[int]) -> list[list[tuple[int, int]]]:
        """For each of CODES, the character spans of its mentions in TEXT."""
        where: dict[int, list[tuple[int, int]]] = {}
        for k, a, b in self._occurrences(text):
            where.setdefault(k, []).append((a, b))
        return [where.get(k, []) for k in codes]

    def save(self, folder: Path) -> None:
        """MENTIONS_FILE in FOLDER (owner-only: the words come from the training notes); nothing when empty."""
        if not self.phrases:
            return
        by_code: dict[str, list[str]] = {}
        for phrase, ks in sorted(self.phrases.items()):
            for k in ks:
                by_code.setdefault(self.codes[k], []).append(" ".join(phrase))
        path = folder / MENTIONS_FILE
        write_json_atomic(path, {"format": MENTION_FORMAT, "format_version": 1, "phrases": by_code})
        os.chmod(path, 0o600)

    @classmethod
    def load(cls, folder: Path, codes: Sequence[str]) -> MentionLexicon:
        """The lexicon saved in FOLDER; empty when it has none (a model trained without evidence, or before it).

        Raises:
            CheckpointError: the file is not what `save` writes (`read_mentions`).
        """
        path = folder / MENTIONS_FILE
        if not path.is_file():
            return cls(codes=tuple(codes))
        index = {c: k for k, c in enumerate(codes)}
        found: dict[tuple[str, ...], set[int]] = {}
        for code, phrases in read_mentions(path, codes).items():
            for p in phrases:
                found.setdefault(p, set()).add(index[code])
        return cls({p: tuple(sorted(ks)) for p, ks in found.items()}, tuple(codes))


def read_mentions(path: Path, codes: Sequence[str]) -> dict[str, list[tuple[str, ...]]]:
    """{code: its phrases, each as its words} from a mentions file, checked as `MentionLexicon.save` writes it: the
    format, codes of CODES only, and each phrase a string of at least one word (a blank one would break matching).

    Raises:
        CheckpointError: one line naming the file, the code and what is wrong (never the phrase: words of notes).
    """
    import json

    def refuse(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: {what}; expected {{\"format\": \"{MENTION_FORMAT}\", \"phrases\": {{code: "
                               "[non-blank phrases]}}; the file was edited or damaged, restore the checkpoint or "
                               "retrain.")

    try:
        held = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError):
        raise refuse("not readable JSON text") from None
    if not isinstance(held, dict) or held.get("format") != MENTION_FORMAT or not isinstance(held.get("phrases"),
                                                                                              dict):
        raise refuse("not a mentions file")
    known = set(codes)
    out: dict[str, list[tuple[str, ...]]] = {}
    for code, phrases in held["phrases"].items():
        shown = ascii(code)[:40]
        if code not in known:
            raise refuse(f"names codes this checkpoint does not have ({shown}: a file of another model)")
        if not isinstance(phrases, list):
            raise refuse(f"the phrases of code {shown} are not a list ({type(phrases).__name__})")
        for i, phrase in enumerate(phrases):
            if not isinstance(phrase, str):
                raise refuse(f"phrase {i + 1} of code {shown} is not a string ({type(phrase).__name__})")
            words = tuple(phrase.split())
            if not words:
                raise refuse(f"phrase {i + 1} of code {shown} is blank")
            out.setdefault(code, []).append(words)
    return out
