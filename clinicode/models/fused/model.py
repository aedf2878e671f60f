"""A loaded fused model: its two parts, the codes' titles and mentions, and the per-code numbers that fuse them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

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

    @property
    def config(self) -> Any:
        return self.leam.config

    def fuse(self, z_leam: np.ndarray, z_lr: np.ndarray, z_title: np.ndarray) -> np.ndarray:
        """[N, K] fused logits from the parts' [N, K] logits and title matches."""
        return (self.a * z_leam.astype(np.float64) + self.c * z_lr.astype(np.float64)
                + self.e * z_title.astype(np.float64) + self.offset)


def title_rows(lr: Any, descriptions: Sequence[str]) -> Any:
    """[K, V] sparse: each code's title (its description; none: an empty row) as tfidf-lr's tf-idf features, so a
    note's title match is the cosine of its tf-idf row with the title's."""
    return lr.transform([d or "" for d in descriptions]).astype(np.float32)
