"""Evidence quality: how well the spans shown for a code point at the note's gold mentions of it, beside a random
and a title-word floor (docs/metrics.md)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from clinicode.metrics.definitions import _f1
from clinicode.metrics.span_code import span_code_prf
from clinicode.words import WORD, title_words, word_runs

# A word of the metric: a run of letters or digits (`clinicode.words.WORD`), not the model's tokenizer's, so that
# models with different tokenizers (and the floors) are measured in the same units.
EVIDENCE_K = 5     # spans per code: `predict --explain 5`, the count docs/predict.md and the app use
EVIDENCE_SEED = 0  # of the random floor's placement
# a report's "model_note" for a model kind that shows no per-code spans (tfidf-lr)
NO_PHRASES = "a {kind} checkpoint shows no per-code spans; only the floors are measured"


def word_spans(text: str) -> np.ndarray:
    """The words of a note as character spans: [n_words, 2] int64 (start, end), in text order.

    A word is a maximal run of letters or digits (`[^\\W_]+`): "Drug-induced QT-prolongation" is 4 words.
    """
    spans = [m.span() for m in WORD.finditer(text)]
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def _as_spans(spans: Any) -> np.ndarray:
    return np.asarray([(int(a), int(b)) for a, b in spans], dtype=np.int64).reshape(-1, 2)


def words_covered(words: np.ndarray, spans: Any) -> np.ndarray:
    """Which words overlap at least one of the spans (a word half inside a span counts: it is shown or mentioned).

    Args:
        words: [n_words, 2] `word_spans` of the note.
        spans: (start, end) character spans, end exclusive.
    Returns:
        [n_words] bool.
    """
    s = _as_spans(spans)
    if not len(s) or not len(words):
        return np.zeros(len(words), dtype=bool)
    return ((words[:, None, 0] < s[None, :, 1]) & (words[:, None, 1] > s[None, :, 0])).any(axis=1)


def _overlaps_any(span: tuple[int, int], gold: np.ndarray) -> bool:
    return bool(((gold[:, 0] < span[1]) & (gold[:, 1] > span[0])).any()) if len(gold) else False


def evidence_quality(shown: Sequence[Sequence[tuple[int, int]]], gold: Sequence[Sequence[tuple[int, int]]],
                     words: Sequence[np.ndarray], *, k: int) -> dict[str, Any]:
    """Evidence quality over (note, code) pairs: do the spans shown for a code point at the note's gold mentions of it?

    Each pair is one correctly predicted code of one note (the caller picks them). Its shown spans are ranked, best
    first; only the first k count. Per pair: hit@1 is 1 when the first span overlaps a gold mention (by at least one
    character), hit@k when any of the k does. Token precision and recall are micro over pairs, in words
    (`word_spans`): S = the words overlapping a shown span, G = the words overlapping a gold mention;
    precision = sum |S & G| / sum |S|, recall = sum |S & G| / sum |G|, F1 their harmonic mean (0 when both are 0).

    Args:
        shown: per pair, its shown (start, end) spans, best first (may be empty: a miss, no words shown).
        gold: per pair, the gold mention spans of that code in that note (at least one).
        words: per pair, the note's [n_words, 2] `word_spans` (pairs of one note may share one array).
        k: spans counted per pair (the explain count), >= 1.
    Returns:
        {"n_pairs", "k", "hit_at_1", "hit_at_k", "token_precision", "token_recall", "token_f1", "words_per_code"
        (mean |S|)}; the rates are None when there is no pair.
    Raises:
        ValueError: if the three lists differ in length, k < 1, or a pair has no gold mention.
    """
    if not len(shown) == len(gold) == len(words):
        raise ValueError(f"shown, gold and words must have one entry per pair, got {len(shown)}, {len(gold)} and "
                         f"{len(words)}.")
    if k < 1:
        raise ValueError(f"k must be >= 1 (spans counted per code), got {k}.")
    n = len(shown)
    out: dict[str, Any] = {"n_pairs": n, "k": int(k)}
    if n == 0:
        return {**out, **dict.fromkeys(("hit_at_1", "hit_at_k", "token_precision", "token_recall", "token_f1",
                                        "words_per_code"))}
    hit1 = hitk = inter = n_shown = n_gold = 0
    for i, (spans, mentions, w) in enumerate(zip(shown, gold, words)):
        g = _as_spans(mentions)
        if not len(g):
            raise ValueError(f"pair {i} has no gold mention; pass only codes with gold evidence in the note.")
        top = [(int(a), int(b)) for a, b in list(spans)[:k]]
        hits = [_overlaps_any(s, g) for s in top]
        hit1 += bool(hits[:1] and hits[0])
        hitk += any(hits)
        s_words, g_words = words_covered(w, top), words_covered(w, g)
        inter += int((s_words & g_words).sum())
        n_shown += int(s_words.sum())
        n_gold += int(g_words.sum())
    p = inter / n_shown if n_shown else 0.0
    r = inter / n_gold if n_gold else 0.0
    return {**out, "hit_at_1": hit1 / n, "hit_at_k": hitk / n, "token_precision": p, "token_recall": r,
            "token_f1": float(_f1(p, r)), "words_per_code": n_shown / n}


def random_spans(shown: Sequence[Sequence[tuple[int, int]]], words: Sequence[np.ndarray], *,
                 seed: int = 0) -> list[list[tuple[int, int]]]:
    """The random floor: each shown span replaced by a run of as many words, placed uniformly at random in the note.

    Args:
        shown: per pair, its shown spans.
        words: per pair, the note's [n_words, 2] `word_spans`.
        seed: of the placement (fixed, so the floor is reproducible).
    Returns:
        per pair, one random (start, end) span per shown span (a span covering no word counts as one word).
    """
    rng = np.random.default_rng(seed)
    out = []
    for spans, w in zip(shown, words):
        pair = []
        for span in spans:
            if not len(w):
                break
            m = min(max(1, int(words_covered(w, [span]).sum())), len(w))
            first = int(rng.integers(0, len(w) - m + 1))
            pair.append((int(w[first, 0]), int(w[first + m - 1, 1])))
        out.append(pair)
    return out


def title_spans(title: str, text: str) -> list[tuple[int, int]]:
    """The title floor: the note's words that are words of the code's title, as spans, best first.

    Words match case-insensitively and exactly (`word_spans` words; `clinicode.words.STOPWORDS` never match, as
    in `predict --titles`). Matched words next to each other (consecutive words of the note) form one span; spans with
    more matched words come first, then the earlier.

    Args:
        title: the code's title (e.g. its description in labels.json).
        text: the note.
    Returns:
        (start, end) spans, best first; [] when no title word occurs.
    """
    runs = sorted(word_runs(text, title_words(title)), key=lambda x: (-x[0], x[1]))
    return [(a, b) for _, a, b in runs]


def evidence_figures(texts: Sequence[str], mentions: Sequence[Sequence[Mapping[str, Any]]],
                     correct: Sequence[Mapping[str, Sequence[tuple[int, int]] | None]], titles: Mapping[str, str], *,
                     k: int = EVIDENCE_K, seed: int = EVIDENCE_SEED) -> dict[str, Any]:
    """The evidence report of a scored split: the model's spans and both floors over the same (note, code) pairs.

    A pair is a correctly predicted code of a note with at least one gold mention of it in that note.

    Args:
        texts: [n_notes] the notes.
        mentions: per note, its gold mentions {"code", "start", "end"} (text[start:end]).
        correct: per note, its correctly predicted codes (gold, and predicted at the threshold), each with the spans
            shown for it, best first; None instead of spans when the model shows none (tfidf-lr).
        titles: code -> title, for the title floor ("" or absent: no title, no title spans; the caller blanks a
            display placeholder such as ICD-10-PCS's "no title", as `spans_report`'s callers do).
        k: spans counted per code.
        seed: of the random floor.
    Returns:
        {"k", "n_pairs", "n_correct", "n_correct_without_evidence", "model" (None when no spans were given),
        "random" (the model's span lengths; the title spans' when there are none), "title"}, each of the three an
        `evidence_quality` dict.
    """
    shown, gold, words, by_title = [], [], [], []
    n_correct, has_spans = 0, True
    for text, notes_mentions, right in zip(texts, mentions, correct, strict=True):
        by_code: dict[str, list[tuple[int, int]]] = {}
        for m in notes_mentions:
            by_code.setdefault(str(m["code"]), []).append((int(m["start"]), int(m["end"])))
        n_correct += len(right)
        w = word_spans(text) if any(c in by_code for c in right) else None
        for code, spans in right.items():
            if code not in by_code:
                continue
            has_spans = has_spans and spans is not None
            shown.append(list(spans or []))
            gold.append(by_code[code])
            words.append(w)
            by_title.append(title_spans(titles.get(code, ""), text))
    model = evidence_quality(shown, gold, words, k=k) if has_spans else None
    lengths = shown if has_spans else by_title
    return {"k": int(k), "n_pairs": len(shown), "n_correct": n_correct,
            "n_correct_without_evidence": n_correct - len(shown), "model": model,
            "random": evidence_quality(random_spans(lengths, words, seed=seed), gold, words, k=k),
            "title": evidence_quality(by_title, gold, words, k=k)}


def spans_report(texts: Sequence[str], gold: Sequence[Sequence[str]],
                    mentions: Sequence[Sequence[Mapping[str, Any]]],
                    shown: Sequence[Mapping[str, Sequence[tuple[int, int]] | None]], *, titles: Mapping[str, str],
                    spell: Callable[[str], str | None] | None = None, k: int = EVIDENCE_K,
                    spanless: str | None = None) -> dict[str, Any] | None:
    """How well the spans shown for each correctly predicted code point at its gold mentions, beside the random and
    title-word floors (`evidence_figures`), and the span-and-code figures of every predicted code (`span_code_prf`):
    what `evaluate` reports and `train` saves, from a model's predictions restated as spans.

    Args:
        texts: [n_notes] the notes.
        gold: per note, its gold codes.
        mentions: per note, its gold mentions ({code, start, end}), codes as the data writes them.
        shown: per note, each code predicted at the threshold with its spans, best first (None instead of spans for a
            model that shows none): `Predictor.code_spans`.
        titles: every code the model scores -> its title, for the title floor ("" for none: the caller blanks a
            display placeholder such as ICD-10-PCS's "no title").
        spell: a mention's code in the model's spelling, or None when it is none (`CodeSystem.canonical`: '4280' is
            428.0); None: as written. A code so spelt that is no key of TITLES counts in "n_mentions_outside".
        k: spans counted per code (the explain count), >= 1.
        spanless: the name of a model kind that shows no per-code spans: no span-and-code figures ("span_code" None)
            and a "model_note" saying so.
    Returns:
        None when no note has a gold mention; else `evidence_figures`'s dict with "n_mentions_outside" (mentions of
        codes that are no code of the model), "outside_codes" (the 5 most frequent), "span_code" and, for a spanless
        model, "model_note".
    Raises:
        ValueError: k < 1.
    """
    if k < 1:
        raise ValueError(f"evidence needs k >= 1 spans per code (the explain count), got {k}.")
    if not any(len(m) for m in mentions):
        return None
    spelt: dict[str, str] = {}
    outside: Counter[str] = Counter()
    for note in mentions:
        for m in note:
            code = str(m["code"])
            if code not in spelt:
                spelt[code] = (spell(code) if spell is not None else None) or code.strip()
            if spelt[code] not in titles:
                outside[code] += 1
    mentions = [[{**m, "code": spelt[str(m["code"])]} for m in note] for note in mentions]
    correct = []  # each note's predicted codes (with their spans) that are gold codes of the note
    for note, codes in zip(shown, gold, strict=True):
        wanted = set(codes)
        correct.append({c: v for c, v in note.items() if c in wanted})
    out = evidence_figures(texts, mentions, correct, titles, k=k)
    out["n_mentions_outside"] = sum(outside.values())
    out["outside_codes"] = [c for c, _ in outside.most_common(5)]
    out["span_code"] = None if spanless else span_code_prf(shown, mentions)
    if spanless:
        out["model_note"] = NO_PHRASES.format(kind=spanless)
    return out
