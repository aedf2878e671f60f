"""Which note next: the rule `review next` and the app's Review page share (docs/review.md, "Which note next"): two
signals stored when a note is queued (`signals`), ranked and spread by a tf-idf diversity walk (`pick`), or
`order="arrival"`, the queue's order. No torch: numpy and scikit-learn."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from clinicode.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

ORDERS = ("teach", "arrival")
DEFAULT_ORDER = "teach"   # measured: benchmarks/bench_review_learning.py (BENCHMARKS.md, "review: which note next")
CANDIDATES = 500          # the best notes by the signals whose texts the diversity term compares
DIVERSE = 50              # places of a ranking the greedy diversity walk decides; the rest follow the signals
SEEN = 200                # the latest finished notes a proposed note is compared with (+0.3 s a call at 2,500 words)
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an and the of or in on to with by for due not other unspecified nos".split())


@dataclass(frozen=True)
class Weights:
    """The rule's weights: uncertainty and rarity add (each as a rank in [0, 1]); diversity subtracts its multiple of
    the highest cosine to the notes already picked."""

    uncertainty: float = 1.0
    rarity: float = 1.0
    diversity: float = 1.0


# `review next`'s rule: rarity and diversity (from the reviewed notes and this batch). On dev (bc5cdr, halves: one
# fits, the other scores; every code and top 50, 2 seeds) it taught the default model more than adding uncertainty at
# almost every budget (BENCHMARKS.md, "review: which note next"; docs/review.md)
TEACH = Weights(uncertainty=0.0, rarity=1.0, diversity=1.0)


def check_order(order: str) -> str:
    if order not in ORDERS:
        raise ConfigError(f"--order must be {' or '.join(ORDERS)}, got {order!r}.")
    return order


def title_words(title: str) -> frozenset[str]:
    """The words of a code's title a note must all hold for the title to point at the code (stop words dropped)."""
    return frozenset(w for w in _WORD.findall(title.lower()) if w not in _STOP and len(w) > 2)


def title_hits(texts: Sequence[str], titles: Sequence[str]) -> "np.ndarray":
    """[N, K] 1 where every word of code k's title occurs in note n (a code without title words never hits)."""
    import numpy as np

    words = [title_words(t) for t in titles]
    out = np.zeros((len(texts), len(titles)), dtype=np.float32)
    for i, text in enumerate(texts):
        have = set(_WORD.findall(text.lower()))
        for k, w in enumerate(words):
            if w and w <= have:
                out[i, k] = 1.0
    return out


def signals(probs: "np.ndarray", threshold: float, train_counts: Sequence[int] | None,
            hits: "np.ndarray | None" = None) -> tuple["np.ndarray", "np.ndarray"]:
    """(uncertainty [N], rarity [N]) of notes from their [N, K] scores.

    uncertainty: the model's expected wrong labels on the note, sum over codes of how close each score is to the
    checkpoint's threshold (1 at the threshold, 0 at 0 or 1). rarity: how strongly the note points at codes the
    checkpoint saw few training notes of, sum over codes of the code's evidence (its score over the threshold, capped
    at 1, or 1 when every word of the code's title is in the note: how an unseen code, which the model scores near 0,
    is found) weighted by 1 / (1 + training notes).

    train_counts: each code's training notes (the checkpoint's train_counts.json, label order); None (an older
    checkpoint) counts every code as seen once. hits: `title_hits` of the notes, or None.
    """
    import numpy as np

    p = np.asarray(probs, dtype=np.float64)
    t = min(max(float(threshold), 1e-6), 1 - 1e-6)
    close = np.where(p >= t, 1 - (p - t) / (1 - t), p / t)
    uncertainty = close.sum(axis=1)
    n = np.ones(p.shape[1]) if train_counts is None else np.asarray(train_counts, dtype=np.float64)
    evidence = np.minimum(p / t, 1.0)
    if hits is not None:
        evidence = np.maximum(evidence, hits)
    rarity = (evidence / (1.0 + n)).sum(axis=1)
    return uncertainty, rarity


# Two signals closer than this share of the signal's scale are one value: the model's scores differ in their last
# bits from one CPU to another (vector units, thread counts), and such noise must not decide which note comes first.
NOISE = 1e-5


def _settled(x: "np.ndarray") -> "np.ndarray":
    """X with every run of values closer than NOISE x scale to their neighbour (sorted) replaced by the run's least,
    so that ranks and comparisons made from it do not depend on floating-point noise."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        return x.copy()
    order = np.argsort(x, kind="stable")
    xs = x[order]
    tol = NOISE * max(float(np.abs(xs).max()), 1e-12)
    starts = np.concatenate(([True], np.diff(xs) > tol))
    out = np.empty_like(x)
    out[order] = xs[np.flatnonzero(starts)[np.cumsum(starts) - 1]]
    return out


def _ranks(x: "np.ndarray") -> "np.ndarray":
    """Ranks in [0, 1] (ties, and values within NOISE of each other, share their mean rank); a constant signal is all
    0, so it orders nothing."""
    import numpy as np
    from scipy.stats import rankdata

    x = _settled(x)
    if len(x) < 2 or np.ptp(x) == 0:
        return np.zeros(len(x))
    return (rankdata(x) - 1) / (len(x) - 1)


def _first_best(score: "np.ndarray") -> int:
    """The first index whose score is within NOISE of the best: a near tie goes to the earlier note."""
    import numpy as np

    best = float(score.max())
    return int(np.flatnonzero(score >= best - NOISE * max(abs(best), 1.0))[0])


def vectors(texts: Sequence[str]) -> Any:
    """L2-normalised tf-idf rows of the notes (their cosine is a dot product)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(sublinear_tf=True, min_df=1, token_pattern=r"(?u)\b[a-zA-Z][a-zA-Z0-9]+\b").fit_transform(
        list(texts))


def pick(uncertainty: "np.ndarray", rarity: "np.ndarray", k: int, *, texts: Sequence[str] | None = None,
         vecs: Any = None, weights: Weights = TEACH, seen: Any = None) -> list[int]:
    """The indices of the K notes to review next, in order (greedy; `Weights` gives the rule): ranked by the weighted
    sum of both signals' ranks, each next note losing `diversity` x its highest tf-idf cosine to the notes already
    reviewed (SEEN) or picked in this batch, so notes alike to what the coders have seen are not proposed again.

    vecs: the notes' L2-normalised rows (`vectors`), else made from TEXTS; neither: no diversity term.
    seen: the reviewed notes' rows in the same tf-idf space as VECS (None: only this batch counts).
    """
    import numpy as np

    n = len(uncertainty)
    k = min(int(k), n)
    if k <= 0:
        return []
    base = weights.uncertainty * _ranks(np.asarray(uncertainty)) + weights.rarity * _ranks(np.asarray(rarity))
    if vecs is None and texts is not None and weights.diversity:
        vecs = vectors(texts)
    closest = np.zeros(n)
    if vecs is not None and seen is not None and weights.diversity and seen.shape[0]:
        closest = np.asarray((vecs @ seen.T).max(axis=1).todense()).ravel()
    free = np.ones(n, dtype=bool)
    chosen: list[int] = []
    for _ in range(k):
        score = np.where(free, base - weights.diversity * closest, -np.inf)
        i = _first_best(score)
        chosen.append(i)
        free[i] = False
        if vecs is not None and weights.diversity:
            closest = np.maximum(closest, np.asarray((vecs @ vecs[i].T).todense()).ravel())
    return chosen


def order_notes(pool: Sequence[Mapping[str, Any]], k: int, *, order: str = DEFAULT_ORDER,
                weights: Weights = TEACH, text_of: Any = None, seen_texts: Sequence[str] = ()) -> list[str]:
    """The ids of the next K notes of POOL (dicts with id, uncertainty, rarity and, unless TEXT_OF is given, text; in
    arrival order). TEXT_OF(ids) -> texts reads the texts of the few notes the diversity term compares; SEEN_TEXTS:
    notes already reviewed, which a proposed note should not repeat.

    The greedy diversity walk runs over the DIVERSE best notes by the signals alone (CANDIDATES of them are compared);
    the rest follow by the signals, so ranking a queue of thousands costs one tf-idf fit over a few hundred notes.
    A note queued before its signals were stored (an older database) counts 0 on both: it comes after scored ones.
    """
    import numpy as np

    check_order(order)
    if order == "arrival" or not pool:
        return [p["id"] for p in pool[:max(k, 0)]]
    unc = np.array([p.get("uncertainty") or 0.0 for p in pool])
    rare = np.array([p.get("rarity") or 0.0 for p in pool])
    base = weights.uncertainty * _ranks(unc) + weights.rarity * _ranks(rare)
    by_base = [int(i) for i in np.argsort(-base, kind="stable")]
    head = by_base[:CANDIDATES]
    texts = text_of([pool[i]["id"] for i in head]) if text_of is not None else [pool[i]["text"] for i in head]
    vecs = seen = None
    if weights.diversity:
        rows = vectors([*texts, *seen_texts])     # one tf-idf space for the candidates and the reviewed notes
        vecs, seen = rows[:len(texts)], rows[len(texts):]
    chosen = [head[j] for j in pick(unc[head], rare[head], min(k, DIVERSE), vecs=vecs, seen=seen, weights=weights)]
    taken = set(chosen)
    chosen += [i for i in by_base if i not in taken][:max(k - len(chosen), 0)]
    return [pool[i]["id"] for i in chosen]


def next_notes(db: Any, k: int = 1, *, order: str = DEFAULT_ORDER, reviewer: str | None = None,
               now: float | None = None, weights: Weights = TEACH) -> list[str]:
    """The ids of the next K notes REVIEWER should open, by ORDER: open notes (not done) that no one else holds a
    claim on, leaving out double-coded notes REVIEWER is not assigned to or has finished. `review next` and the
    app's Review page both call this. Note text is read only for the few notes the diversity term compares."""
    import time

    check_order(order)
    now = time.time() if now is None else now
    rows = db.read("""
        SELECT n.id, n.claimed_by, n.claim_expires, s.uncertainty, s.rarity,
               (SELECT COUNT(*) FROM assignments a WHERE a.note = n.id) AS assigned,
               (SELECT COUNT(*) FROM assignments a WHERE a.note = n.id AND a.reviewer = ? AND a.finished_at IS NULL)
                 AS mine
        FROM notes n LEFT JOIN note_signals s ON s.note = n.id
        WHERE n.status != 'done' ORDER BY n.queued_at, n.rowid""", (reviewer or "",))
    pool = []
    for r in rows:
        if r["assigned"]:
            if not r["mine"]:
                continue
        elif r["claimed_by"] not in (None, reviewer) and (r["claim_expires"] or 0) > now:
            continue
        pool.append({"id": r["id"], "uncertainty": r["uncertainty"], "rarity": r["rarity"]})

    seen = [r[0] for r in db.read("SELECT text FROM notes WHERE status = 'done' ORDER BY rowid DESC LIMIT ?",
                                  (SEEN,))] if order != "arrival" and pool and weights.diversity else []
    return order_notes(pool, k, order=order, weights=weights, text_of=db.texts, seen_texts=seen)


__all__ = ["CANDIDATES", "DEFAULT_ORDER", "DIVERSE", "ORDERS", "SEEN", "TEACH", "Weights", "check_order", "next_notes",
           "order_notes", "pick", "signals", "title_hits", "title_words", "vectors"]
