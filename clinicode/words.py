"""Words of plain text as clinicode counts them (runs of letters or digits): a title's words and where a note has them.
Shared by the code titles (`predict --titles`) and the evidence metrics, which import no code system."""

from __future__ import annotations

import re

# A word: a run of letters or digits ("Drug-Induced" is two words), compared in lower case.
WORD = re.compile(r"[^\W_]+")
# Words of a title that say nothing of the code ("Abnormalities of the Heart" keeps abnormalities, heart).
STOPWORDS = frozenset("a an and as at by for from in into of on or other the to with without".split())


# Words a classification adds to a title and a note never says ("Chest pain, unspecified", ICD-9's "NEC" and "NOS"):
# optional, so the title is found by its other words. 30% of ICD-10-CM titles hold "unspecified".
OPTIONAL = re.compile(r"(?i:\bunspecified\b|\bnot elsewhere classified\b|\bnot otherwise specified\b)|\bNEC\b|\bNOS\b")


def title_words(title: str) -> frozenset[str]:
    """The words of a title that must occur in a note for the title to be found: lower case, stop words and the
    classification's optional words (`OPTIONAL`) dropped."""
    return frozenset(m.group().lower() for m in WORD.finditer(OPTIONAL.sub(" ", title))) - STOPWORDS


def word_runs(text: str, words: frozenset[str] | set[str]) -> list[tuple[int, int, int]]:
    """The note's words that are among `words`, neighbours joined: (n words, start, end) per run, in text order."""
    runs: list[tuple[int, int, int]] = []
    last = -2
    for i, m in enumerate(WORD.finditer(text)):
        if m.group().lower() not in words:
            continue
        if i == last + 1:
            n, start, _ = runs[-1]
            runs[-1] = (n + 1, start, m.end())
        else:
            runs.append((1, m.start(), m.end()))
        last = i
    return runs
