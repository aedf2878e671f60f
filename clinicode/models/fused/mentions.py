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
SEEN_CHARS = 8_000_000  # characters of notes whose occurrences a lexicon remembers while the process runs
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
    # phrase -> {code index: what an occurrence adds to the code} (`Matching.weighted`); None, or a phrase or code
    # missing: 1.0 (an older lexicon's, or one built unweighted)
    weights: dict[tuple[str, ...], dict[int, float]] | None = None
    longest: int = field(default=0, init=False)   # words in the longest phrase

    def __post_init__(self) -> None:
        check_language(self.language)
        self.phrases = {p: ks for p, ks in self.phrases.items() if p and not is_stopword_phrase(p)}
        self.longest = max((len(p) for p in self.phrases), default=0)
        # the matching keys: an acronym's words as written, the others' folded and made singular as the note's will be
        self._acronyms: dict[tuple[str, ...], set[int]] = {}
        self._index: dict[tuple[str, ...], set[int]] = {}
        self._weight: dict[tuple[tuple[str, ...], int], float] = {}   # (matching key, code) -> weight
        for p, ks in self.phrases.items():
            key = self._match_key(p)
            if not key:
                continue
            (self._acronyms if _is_acronym(p) else self._index).setdefault(key, set()).update(ks)
            held = (self.weights or {}).get(p, {})
            for k in ks:   # phrases written alike (a plural, an accent) share a key: the larger weight
                self._weight[(key, k)] = max(self._weight.get((key, k), 0.0), float(held.get(k, 1.0)))
        # every phrase's beginnings: a run of a note's words that begins none can be left at once
        self._prefixes = {p[:n] for p in self._index for n in range(1, len(p) + 1)}
        self._acronym_prefixes = {p[:n] for p in self._acronyms for n in range(1, len(p) + 1)}
        # the occurrences of the notes matched last (`_found`), in this process only: a note is scored, fused on dev,
        # thresholded and explained, and each asked for its mentions again
        self._seen: dict[str, tuple[tuple[int, int, int, tuple[str, ...]], ...]] = {}
        self._seen_chars = 0

    def _match_key(self, phrase: tuple[str, ...]) -> tuple[str, ...]:
        """What PHRASE is matched as: an acronym's words as written, the others' folded and made singular as a note's
        words will be (an older lexicon's possessive "s" left out)."""
        return phrase if _is_acronym(phrase) else tuple(self._norm(w) for w in phrase if w != "s")

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
              matching: Matching = DEFAULT, partly: Any = None) -> MentionLexicon:
        """From each training note's evidence ({code, start, end}: text[start:end] justifies code); mentions of codes
        outside CODES, ones longer than MAX_WORDS words, ones without a word of two letters ("A", "2"), ones made only
        of stop words ("and"), ones spanned fewer than `matching.support` times for the code (one-word acronyms:
        `matching.acronym_support`), and acronyms of one word that the training notes also write in lower case ("CAN",
        "HIT": `matching.ordinary`) are left out.
        LANGUAGE: the notes' ("en", "es"); None: detected from TEXTS (`clinicode.matching.detect_language`).
        PARTLY: codes known only on some notes (`clinicode.data.labels.PartlyCoded`): their phrases' weights count
        occurrences in those notes alone (the others were never read for them)."""
        index = {c: k for k, c in enumerate(codes)}
        found: Counter[tuple[tuple[str, ...], int]] = Counter()
        found_read: Counter[tuple[tuple[str, ...], int]] = Counter()   # the spans in notes read for PARTLY's codes
        for i, (text, spans) in enumerate(zip(texts, evidence)):
            for m in spans if isinstance(spans, (list, tuple)) else ():
                k = index.get(str(m.get("code"))) if isinstance(m, Mapping) else None
                start, end = (m.get("start"), m.get("end")) if k is not None else (None, None)
                if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(text)):
                    continue
                phrase = _key([w for w, _, _ in _words(text[start:end])])
                if 0 < len(phrase) <= MAX_WORDS and any(sum(c.isalpha() for c in w) >= 2 for w in phrase):
                    found[(phrase, k)] += 1
                    if partly is not None and partly.known[i]:
                        found_read[(phrase, k)] += 1
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
        lexicon = cls({p: tuple(sorted(ks)) for p, ks in kept.items()}, tuple(codes), lang, matching)
        if not matching.weighted:
            return lexicon
        read = None if partly is None else (set(int(k) for k in partly.columns), found_read,
                                            [t for t, r in zip(texts, partly.known) if r])
        return lexicon._weighed(found, texts, read=read)

    def _weighed(self, found: Mapping[tuple[tuple[str, ...], int], int], texts: Sequence[str], *,
                 read: tuple[set[int], Mapping[tuple[tuple[str, ...], int], int], Sequence[str]] | None = None,
                 ) -> MentionLexicon:
        """This lexicon with `Matching.weighted`'s weights, from FOUND (training spans per (phrase, code)) and the
        phrases' occurrences in the training notes TEXTS: a phrase's share of spans naming the code, times the share
        of its occurrences coders marked (at most 1). READ: (codes known only on some notes, the spans and the texts
        of those notes): the second share of those codes' phrases counts those notes alone."""
        key_of = {p: self._match_key(p) for p in self.phrases}
        spans, marked, seen = self._tallies(found, texts, key_of)
        cols, marked_read, seen_read = set(), marked, seen
        if read is not None:
            cols, (_, marked_read, seen_read) = read[0], self._tallies(read[1], read[2], key_of)

        def coded(key: tuple[str, ...], k: int) -> float:   # the share of the phrase's occurrences coders marked
            m, s = (marked_read, seen_read) if k in cols and marked_read[key] else (marked, seen)
            return min(1.0, m[key] / max(s[key], 1))

        weights = {p: {k: spans[(key_of[p], k)] / marked[key_of[p]] * coded(key_of[p], k) for k in ks}
                   for p, ks in self.phrases.items() if marked[key_of[p]]}
        return replace(self, weights=weights)

    def _tallies(self, found: Mapping[tuple[tuple[str, ...], int], int], texts: Sequence[str],
                 key_of: Mapping[tuple[str, ...], tuple[str, ...]]) -> tuple[Counter, Counter, Counter]:
        """(spans per (match key, code), spans per match key, notes' occurrences per match key) of FOUND in TEXTS."""
        spans: Counter[tuple[tuple[str, ...], int]] = Counter()
        for (p, k), n in found.items():
            if p in key_of:
                spans[(key_of[p], k)] += n
        marked: Counter[tuple[str, ...]] = Counter()
        for (key, _), n in spans.items():
            marked[key] += n
        seen: Counter[tuple[str, ...]] = Counter()
        for text in texts:
            seen.update(key for _, _, key in {(a, b, key) for _, a, b, key in self._found(text)})
        return spans, marked, seen

    def union(self, other: MentionLexicon) -> MentionLexicon:
        """Both lexicons' phrases (of the same codes), matched as this one's."""
        found = {p: set(ks) for p, ks in self.phrases.items()}
        for p, ks in other.phrases.items():
            found.setdefault(p, set()).update(ks)
        weights = None
        if self.weights is not None or other.weights is not None:   # each phrase's own; this lexicon's first
            weights = {p: {k: 1.0 for k in ks} for p, ks in found.items()}
            for lex in (other, self):
                for p, ks in lex.phrases.items():
                    weights[p].update({k: (lex.weights or {}).get(p, {}).get(k, 1.0) for k in ks})
        return MentionLexicon({p: tuple(sorted(ks)) for p, ks in found.items()}, self.codes, self.language,
                              self.matching, weights)

    def _occurrences(self, text: str) -> list[tuple[int, int, int]]:
        """(code, start, end) of every occurrence of a phrase in TEXT (`_found`)."""
        return [(k, a, b) for k, a, b, _ in self._found(text)]

    def _found(self, text: str) -> tuple[tuple[int, int, int, tuple[str, ...]], ...]:
        """`_scan`'s occurrences in TEXT, remembered for the notes of the last SEEN_CHARS characters matched."""
        hit = self._seen.get(text)
        if hit is not None:
            return hit
        found = tuple(self._scan(text))
        if self._seen_chars + len(text) > SEEN_CHARS:
            self._seen, self._seen_chars = {}, 0
        self._seen[text] = found
        self._seen_chars += len(text)
        return found

    def _scan(self, text: str) -> list[tuple[int, int, int, tuple[str, ...]]]:
        """(code, start, end, matching key) of every occurrence of a phrase in TEXT, on word boundaries; linear in its
        words (a phrase has at most `longest` of them). An acronym matches only as written, and (`matching.caps`)
        only where the words around it are not capitalised too, and (`matching.values`) not when a number follows it
        ("TG 250"); an occurrence a negation holds (`matching.negation`) is left."""
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
                    out.append((k, words[i][1], words[i + n - 1][2], key))
            for n in range(1, min(self.longest, len(words) - i) + 1):
                if not acro[i + n - 1]:
                    break
                as_written = tuple(written[i:i + n])
                if as_written not in self._acronym_prefixes:
                    break
                for k in sorted(self._acronyms.get(as_written, ())):
                    out.append((k, words[i][1], words[i + n - 1][2], as_written))
        return out

    def match(self, texts: Sequence[str], n_codes: int) -> np.ndarray:
        """[N, n_codes] where a mention of the code occurs in the note, its weight (`Matching.weighted`; the best of
        its occurrences; 1.0 unweighted), else 0; with `Matching.longest`, only the longest of overlapping phrases
        counts."""
        out = np.zeros((len(texts), n_codes), dtype=np.float32)
        for i, text in enumerate(texts):
            found = self._found(text)
            if self.matching.longest:
                found = _longest(found)
            for k, _, _, key in found:
                out[i, k] = max(out[i, k], self._weight.get((key, k), 1.0))
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
        weights: dict[str, list[float]] = {}
        for phrase, ks in sorted(self.phrases.items()):
            for k in ks:
                by_code.setdefault(self.codes[k], []).append(" ".join(phrase))
                weights.setdefault(self.codes[k], []).append(
                    round(float((self.weights or {}).get(phrase, {}).get(k, 1.0)), 6))
        path = folder / MENTIONS_FILE
        held: dict[str, Any] = {"format": MENTION_FORMAT, "format_version": 1, "phrases": by_code}
        if self.weights is not None:   # format 2: each phrase's weight for its code, in the phrases' order
            held.update(format_version=2, weights=weights)
        write_json_atomic(path, held)
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
        held, held_weights = read_mentions(path, codes)
        weights: dict[tuple[str, ...], dict[int, float]] | None = None if held_weights is None else {}
        for code, phrases in held.items():
            for i, p in enumerate(phrases):
                found.setdefault(p, set()).add(index[code])
                if weights is not None and held_weights is not None:
                    weights.setdefault(p, {})[index[code]] = held_weights[code][i]
        # an older file (format 1) is matched as it was made: every phrase 1.0, overlapping phrases all counted
        matching = DEFAULT if weights is not None else replace(DEFAULT, weighted=False, longest=False)
        return cls({p: tuple(sorted(ks)) for p, ks in found.items()}, tuple(codes), matching=matching,
                   weights=weights)


def read_mentions(path: Path, codes: Sequence[str]) -> tuple[dict[str, list[tuple[str, ...]]],
                                                              dict[str, list[float]] | None]:
    """({code: its phrases, each as its words}, {code: its phrases' weights, in that order} or None for format 1)
    from a mentions file, checked as `MentionLexicon.save` writes it: the format, codes of CODES only, each phrase a
    string of at least one word (a blank one would break matching), and each weight a number in [0, 1].

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
    return out, _weights(path, held)


def _weights(path: Path, held: dict[str, Any]) -> dict[str, list[float]] | None:
    """The weights of HELD, a mentions file already checked by `read_mentions`; None for format 1."""
    import math

    if held.get("format_version", 1) == 1 and "weights" not in held:
        return None
    weights, phrases = held.get("weights"), held["phrases"]
    bad = CheckpointError(f"{path}: the phrases' weights do not match its phrases (one number in [0, 1] for each); "
                          "the file was edited or damaged, restore the checkpoint or retrain.")
    if not isinstance(weights, dict) or set(weights) != set(phrases):
        raise bad
    for code, ws in weights.items():
        if not (isinstance(ws, list) and len(ws) == len(phrases[code]) and all(
                isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and 0.0 <= w <= 1.0
                for w in ws)):
            raise bad
    return {code: [float(w) for w in ws] for code, ws in weights.items()}


def _longest(found: Sequence[tuple[int, int, int, tuple[str, ...]]]) -> list[tuple[int, int, int, tuple[str, ...]]]:
    """FOUND without the occurrences whose span lies inside a longer matched one ("adenocarcinoma" inside
    "metástasis de adenocarcinoma"): one pass over the spans by start, longest first."""
    spans = sorted({(a, b) for _, a, b, _ in found}, key=lambda s: (s[0], -s[1]))
    inside, reach = set(), -1
    for a, b in spans:
        if b <= reach:
            inside.add((a, b))
        reach = max(reach, b)
    return [f for f in found if (f[1], f[2]) not in inside]

