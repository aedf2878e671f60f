"""Span-and-code precision, recall and F1: a predicted code counts only when one of its shown spans holds a coder's
reference of it (CodiEsp-X's rule, 10 characters of slack; docs/metrics.md)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from clinicode.metrics.definitions import _f1

SPAN_SLACK = 10  # characters a shown span may reach past the reference on each side (CodiEsp-X's tolerance)


def _spans(spans: Any) -> np.ndarray:
    return np.asarray([(int(a), int(b)) for a, b in spans], dtype=np.int64).reshape(-1, 2)


def span_holds(shown: Any, gold: Any, *, slack: int = SPAN_SLACK) -> np.ndarray:
    """Which shown spans hold which gold references: the reference lies inside the span, and the span reaches at most
    `slack` characters past it on either side.

    Args:
        shown: (start, end) character spans, end exclusive, [m] of them.
        gold: (start, end) reference spans, [g] of them.
        slack: characters allowed before the reference's start and after its end, >= 0.
    Returns:
        [m, g] bool.
    """
    s, g = _spans(shown), _spans(gold)
    before = g[None, :, 0] - s[:, None, 0]                                    # [m, g] span's start to reference's
    after = s[:, None, 1] - g[None, :, 1]                                     # [m, g] reference's end to span's
    return (before >= 0) & (before <= slack) & (after >= 0) & (after <= slack)


def span_code_prf(shown: Sequence[Mapping[str, Sequence[tuple[int, int]] | None]],
                  mentions: Sequence[Sequence[Mapping[str, Any]]], *, slack: int = SPAN_SLACK) -> dict[str, Any]:
    """Micro precision, recall and F1 over (note, code) pairs, where a predicted code is right only when one of its
    shown spans holds (`span_holds`) one of the note's gold references of that code.

    As CodiEsp-X's evaluation counts them: a predicted pair is one predicted code of one note, however many spans it
    shows (one span on a reference is enough; a code shown with no span is never right); a gold pair is one code of
    one note with at least one reference, however many (finding one is enough). Precision = right / predicted pairs,
    recall = right / gold pairs; gold codes the model cannot predict stay in the recall's denominator.

    Args:
        shown: per note, each predicted code with its shown (start, end) spans (None or empty: no span).
        mentions: per note, its gold references {"code", "start", "end"} (text[start:end]), codes spelled as in
            `shown`.
        slack: as `span_holds`.
    Returns:
        {"precision", "recall", "f1", "n_predicted", "n_gold", "n_correct", "slack"}; the three rates are None when no
        note has a reference (the split carries no evidence: the metric is absent, not 0).
    Raises:
        ValueError: if shown and mentions differ in length, or slack < 0.
    """
    if len(shown) != len(mentions):
        raise ValueError(f"shown and mentions must have one entry per note, got {len(shown)} and {len(mentions)}.")
    if isinstance(slack, bool) or not isinstance(slack, (int, np.integer)) or slack < 0:
        raise ValueError(f"slack must be an integer >= 0 (characters), got {slack!r}.")
    n_pred = n_gold = right = 0
    for codes, refs in zip(shown, mentions):
        by_code: dict[str, list[tuple[int, int]]] = {}
        for m in refs:
            by_code.setdefault(str(m["code"]), []).append((int(m["start"]), int(m["end"])))
        n_gold += len(by_code)
        n_pred += len(codes)
        for code, spans in codes.items():
            if spans and code in by_code and span_holds(spans, by_code[code], slack=slack).any():
                right += 1
    out: dict[str, Any] = {"n_predicted": n_pred, "n_gold": n_gold, "n_correct": right, "slack": int(slack)}
    if n_gold == 0:
        return {"precision": None, "recall": None, "f1": None, **out}
    p = right / n_pred if n_pred else 0.0
    r = right / n_gold
    return {"precision": p, "recall": r, "f1": float(_f1(p, r)), **out}
