"""Codes suggested from their titles: those whose every title word (`clinicode.words`) occurs in a note, and where.
Plain text matching (no model, no training data): what `predict --titles` adds for codes a checkpoint was never trained
on."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from clinicode.words import WORD, title_words, word_runs


@dataclass(frozen=True)
class TitleMatch:
    """A code suggested from its title: every word of the title occurs in the note.

    Attributes:
        code: the code.
        title: its title.
        specificity: the sum of its words' inverse frequency among all the titles (a longer, rarer title is more
            specific); for ranking only, not a probability.
        spans: where the title's words occur in the note, (start, end) character offsets, neighbours joined.
    """

    code: str
    title: str
    specificity: float
    spans: tuple[tuple[int, int], ...]


class TitleIndex:
    """Codes and their titles, for finding the codes whose every title word occurs in a note.

    Args:
        titles: code -> title (e.g. a descriptions file); titles without a word (after stop words) are left out.
        exclude: codes never suggested (a checkpoint's own codes: the model predicts those).
    """

    def __init__(self, titles: Mapping[str, str], *, exclude: Iterable[str] = ()) -> None:
        skip = set(exclude)
        self.titles = {c: t for c, t in titles.items() if c not in skip and title_words(t)}
        self._words = {c: title_words(t) for c, t in self.titles.items()}
        df = Counter(w for ws in self._words.values() for w in ws)
        n = len(self._words)
        idf = {w: math.log((n + 1) / (k + 1)) + 1.0 for w, k in df.items()}
        self._specificity = {c: sum(idf[w] for w in ws) for c, ws in self._words.items()}
        self._by_word: dict[str, list[str]] = {}                     # word -> codes, for the rarest word of each title
        for c, ws in self._words.items():
            self._by_word.setdefault(min(ws, key=lambda w: (df[w], w)), []).append(c)
        digest = hashlib.sha256()
        for c in sorted(self.titles):
            digest.update(f"{c}\t{self.titles[c]}\n".encode("utf-8"))
        self.fingerprint = digest.hexdigest()

    def __len__(self) -> int:
        return len(self.titles)

    def match(self, text: str, *, limit: int = 10) -> list[TitleMatch]:
        """The codes whose every title word occurs in the note, the most specific first (ties by code); at most limit.

        Args:
            text: the note.
            limit: matches at most.
        """
        present = {m.group().lower() for m in WORD.finditer(text)}
        found = [c for w in present for c in self._by_word.get(w, ()) if self._words[c] <= present]
        found.sort(key=lambda c: (-self._specificity[c], c))
        return [TitleMatch(c, self.titles[c], self._specificity[c],
                           tuple((a, b) for _, a, b in word_runs(text, self._words[c])))
                for c in found[:limit]]
