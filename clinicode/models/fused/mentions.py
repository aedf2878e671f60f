"""Each code's mentions in the training notes (coders' evidence spans), found again verbatim in new notes: they add
to the code's title match and lead its highlighted words (docs/accuracy-tuning.md, round 15)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from clinicode.errors import CheckpointError
from clinicode.files import write_json_atomic

MENTIONS_FILE = "mentions.json"
MENTION_FORMAT = "clinicode.mentions"
# what a mention adds to the code's title match (a cosine in [0, 1]): bc5cdr and ncbi dev chose 1.0 of 0.1, 0.3, 1.0
MENTION_WEIGHT = 1.0
MAX_WORDS = 8          # a longer evidence span is a passage, not a phrase a note repeats
ACRONYM = 5            # a mention all in capitals of words this short (SRC, CAN, ALL) matches only in capitals
_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end) of each run of letters and digits (any script)."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def _key(words: Sequence[str]) -> tuple[str, ...]:
    """A mention's phrase: its words lower-cased, unless it is an acronym (kept as written)."""
    if all(w.isupper() and len(w) <= ACRONYM for w in words):
        return tuple(words)
    return tuple(w.lower() for w in words)


@dataclass
class MentionLexicon:
    """Phrase (lower-cased words; an acronym's as written) -> the indices of the codes it was a training mention of."""

    phrases: dict[tuple[str, ...], tuple[int, ...]] = field(default_factory=dict)
    codes: tuple[str, ...] = ()      # the model's codes, in its order (what the indices point at)
    longest: int = field(default=0, init=False)   # words in the longest phrase

    def __post_init__(self) -> None:
        self.longest = max((len(p) for p in self.phrases), default=0)
        self._starts = {p[0] for p in self.phrases}     # a note's word can begin a mention only if it is one of these
        # every phrase's beginnings: a run of a note's words that begins none can be left at once
        self._prefixes = {p[:n] for p in self.phrases for n in range(1, len(p) + 1)}

    def __len__(self) -> int:
        return len(self.phrases)

    @classmethod
    def build(cls, codes: Sequence[str], texts: Sequence[str],
              evidence: Sequence[Iterable[Mapping[str, Any]] | None]) -> MentionLexicon:
        """From each training note's evidence ({code, start, end}: text[start:end] justifies code); mentions of codes
        outside CODES, ones longer than MAX_WORDS words and ones without a word of two letters ("A", "2") are left
        out."""
        index = {c: k for k, c in enumerate(codes)}
        found: dict[tuple[str, ...], set[int]] = {}
        for text, spans in zip(texts, evidence):
            for m in spans if isinstance(spans, (list, tuple)) else ():
                k = index.get(str(m.get("code"))) if isinstance(m, Mapping) else None
                start, end = (m.get("start"), m.get("end")) if k is not None else (None, None)
                if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(text)):
                    continue
                phrase = _key([w for w, _, _ in _words(text[start:end])])
                if 0 < len(phrase) <= MAX_WORDS and any(sum(c.isalpha() for c in w) >= 2 for w in phrase):
                    found.setdefault(phrase, set()).add(k)
        return cls({p: tuple(sorted(ks)) for p, ks in found.items()}, tuple(codes))

    def union(self, other: MentionLexicon) -> MentionLexicon:
        """Both lexicons' phrases (of the same codes)."""
        found = {p: set(ks) for p, ks in self.phrases.items()}
        for p, ks in other.phrases.items():
            found.setdefault(p, set()).update(ks)
        return MentionLexicon({p: tuple(sorted(ks)) for p, ks in found.items()}, self.codes)

    def _occurrences(self, text: str) -> list[tuple[int, int, int]]:
        """(code, start, end) of every occurrence of a phrase in TEXT, on word boundaries."""
        if not self.phrases:
            return []
        words = _words(text)
        lower = [w.lower() for w, _, _ in words]
        out = []
        for i in range(len(words)):
            if lower[i] not in self._starts and words[i][0] not in self._starts:
                continue
            for n in range(1, min(self.longest, len(words) - i) + 1):
                key = tuple(lower[i:i + n])
                as_written = tuple(w for w, _, _ in words[i:i + n])
                if key not in self._prefixes and as_written not in self._prefixes:
                    break                 # no phrase goes on from here
                codes = set(self.phrases.get(key, ()))
                if as_written != key:     # an acronym matches only as written
                    codes.update(self.phrases.get(as_written, ()))
                for k in sorted(codes):
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
