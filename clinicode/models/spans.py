"""Evidence spans: the character spans a scorer shows for a note (`Span`) and the one rule that turns per-token
weights into a code's spans (`word_spans`). Each scorer documents what its weights mean and their range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

# A code's evidence: the words whose weight is at least this share of the note's best for that code. Chosen on bc5cdr
# dev against gold mentions (docs/accuracy-tuning.md, round 12; docs/predict.md). The bar is relative: it holds on any
# positive scale, so a scorer may put some tokens (the fused model's training mentions) on a band above the rest.
WORD_BAR = 0.8


@dataclass(frozen=True)
class Span:
    """A character span [start, end) of the original note with a weight (its scale is the scorer's: see
    `LEAMScorer.code_spans`, `FusedScorer.code_spans`; attention spans carry LEAM's beta, in [0, 1])."""

    start: int
    end: int
    weight: float


def top(values: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n largest values, largest first (ties by position)."""
    if n >= len(values):
        return np.argsort(-values, kind="stable")
    kth = np.partition(values, len(values) - n)[len(values) - n]                  # the n-th largest value
    above = np.flatnonzero(values > kth)
    idx = np.concatenate([above, np.flatnonzero(values == kth)[: n - len(above)]])  # ties: earliest first
    return idx[np.lexsort((idx, -values[idx]))]                                   # == stable argsort[:n]


def attention_spans(offsets: Sequence[tuple[int, int]], beta: np.ndarray, n: int | None = None) -> list[Span]:
    """Token spans weighted by the note's attention BETA ([L], in [0, 1], summing to 1 over the kept tokens): every
    token in note order (n None: for highlighting), or the n highest, best first (ties by position)."""
    if n is None:
        return [Span(a, b, float(w)) for (a, b), w in zip(offsets, beta)]
    return [Span(offsets[p][0], offsets[p][1], float(beta[p])) for p in top(beta, n)]


def word_spans(offsets: Sequence[tuple[int, int]], g: np.ndarray, n: int) -> list[Span]:
    """A code's evidence in one note: the words whose weight is at least `WORD_BAR` times the note's best (the best
    word alone when no weight is positive), neighbouring words joined into one span; the spans ranked by their best
    word's weight (the span's weight), ties by position; at most n.

    Args:
        offsets: [L] each token's character span.
        g: [L] each token's weight for the code (on the scorer's scale: `word_rows`).
        n: spans at most.
    """
    if not len(g) or n < 1:
        return []
    best_weight = float(g.max())
    picked = np.flatnonzero(g >= WORD_BAR * best_weight) if best_weight > 0 else np.array([int(g.argmax())])
    runs: list[list[int]] = []
    for i in picked.tolist():
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    best = [float(g[r].max()) for r in runs]
    order = sorted(range(len(runs)), key=lambda x: (-best[x], runs[x][0]))[:n]
    return [Span(offsets[runs[x][0]][0], offsets[runs[x][-1]][1], best[x]) for x in order]
