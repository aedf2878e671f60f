"""A loaded fused model: its two parts, the codes' titles and mentions, and the per-code numbers that fuse them; a
terminology's codes (`train --terminology`) follow the parts' codes, scored from their titles alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from clinicode.models.fused.mentions import MentionLexicon


@dataclass
class FusedModel:
    """A loaded fused model: the LEAM, the TfidfLR, the codes' titles as tf-idf rows and the per-code fusion vectors
    ([K] float64 each)."""

    leam: Any
    lr: Any
    a: np.ndarray
    c: np.ndarray
    e: np.ndarray
    offset: np.ndarray
    w: np.ndarray
    fusion: dict[str, Any]       # the fitted summary: temperatures, band weights, edges, rule, offsets used
    titles: Any = None           # [K, V] sparse: each code's title in tfidf-lr's features (`title_rows`)
    mentions: MentionLexicon = field(default_factory=MentionLexicon)   # the training notes' evidence spans per code
    # (code, title) of the codes of a terminology that no note of the label set carries (`train --terminology`): the
    # last len(terminology) of the K codes, with no LEAM or tfidf-lr row (a = c = 0), scored from their titles alone
    terminology: tuple[tuple[str, str], ...] = ()
    phrases: MentionLexicon = field(default_factory=MentionLexicon)    # those titles' phrases (`terminology_phrases`)
    phrase_weight: float = 1.0   # what a title said in a note adds to its title match (fitted on dev with the band)
    options: Any = None          # the options it was trained with (`FusedOptions`); None: not known (a bare model)

    @property
    def config(self) -> Any:
        return self.leam.config

    @property
    def n_parts(self) -> int:
        """The codes the parts (LEAM, tfidf-lr) score: every code but the terminology's."""
        return len(self.a) - len(self.terminology)

    def fuse(self, z_leam: np.ndarray, z_lr: np.ndarray, z_title: np.ndarray) -> np.ndarray:
        """[N, K] fused logits from the parts' [N, n_parts] logits and the [N, K] title matches (a terminology's codes
        take the title match alone)."""
        z = self.e * z_title.astype(np.float64) + self.offset
        k = z_leam.shape[1]
        z[:, :k] += self.a[:k] * z_leam.astype(np.float64) + self.c[:k] * z_lr.astype(np.float64)
        return z


def terminology_phrases(terminology: Sequence[tuple[str, str]], codes: Sequence[str], language: str) -> MentionLexicon:
    """A lexicon of the terminology's titles as phrases (`clinicode.codes.terminology.title_phrases`) of CODES (every
    code, the terminology's last), matched as the training mentions are in LANGUAGE: a title said in a note adds
    `FusedModel.phrase_weight` to its code's title match, as a training mention adds `MENTION_WEIGHT`. Built from
    labels.json when a checkpoint loads (ICD-10-CM's 74,736 titles: 136,509 phrases, ~6 s and ~250 MB)."""
    first = len(codes) - len(terminology)
    return phrase_lexicon({first + j: title for j, (_, title) in enumerate(terminology)}, codes, language)


def phrase_lexicon(titles: Mapping[int, str], codes: Sequence[str], language: str) -> MentionLexicon:
    """A lexicon of TITLES (code index -> title) as phrases of CODES (`clinicode.codes.terminology.title_phrases`)."""
    from clinicode.codes.terminology import title_phrases

    found: dict[tuple[str, ...], set[int]] = {}
    for k, title in titles.items():
        for phrase in title_phrases(title or ""):
            found.setdefault(tuple(w.lower() for w in phrase), set()).add(k)
    return MentionLexicon({p: tuple(sorted(ks)) for p, ks in found.items()}, tuple(codes), language)


def title_rows(lr: Any, descriptions: Sequence[str]) -> Any:
    """[K, V] sparse: each code's title (its description; none: an empty row) as tfidf-lr's tf-idf features, so a
    note's title match is the cosine of its tf-idf row with the title's."""
    return lr.transform([d or "" for d in descriptions]).astype(np.float32)
