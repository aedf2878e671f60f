"""The fused model's training around LEAM's epoch loop (`FusedKind.fit`): tfidf-lr from train first (`fit_lr_part`),
the fusion on dev last (`fuse`), the parts without epochs refitted on train and dev (`refit_on_all`); test is never read
here."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from clinicode.models.fused.fusion import (
    Fusion,
    bands,
    fit_fusion,
    fit_terminology,
    logit,
    per_code_offsets,
    sigmoid,
)
from clinicode.models.fused.mentions import MentionLexicon
from clinicode.models.fused.model import FusedModel, phrase_lexicon, terminology_phrases, title_rows

# Per-code thresholds for rare codes (SCutfbr): off. Round 14 judged them on dev alone, fitted on one half of dev and
# scored on the other: they lowered micro-F1 and P@8 and left macro-F1 where it was (docs/accuracy-tuning.md).
PER_CODE_THRESHOLDS = False


def fit_lr_part(texts: Sequence[str], y: np.ndarray, *, single_label: bool, min_doc_freq: int,
                partly: Any = None) -> Any:
    """The bag-of-words part, fitted on the training notes (tfidf-lr with its defaults; words of at least
    MIN_DOC_FREQ notes, as the LEAM part's tokenizer keeps; PARTLY's codes on the notes read for them)."""
    from clinicode.models.tfidf_lr.baseline import fit_tfidf_lr

    return fit_tfidf_lr(texts, y, single_label=single_label, min_doc_freq=min_doc_freq, partly=partly)


def fuse(leam: Any, tokenizer: Any, lr: Any, *, mentions: MentionLexicon | None = None, dev_texts: Sequence[str],
         y_dev: np.ndarray, train_counts: np.ndarray, descriptions: Sequence[str], max_len: int, device: Any,
         batch_size: int, memory_mb: int, per_code: bool = PER_CODE_THRESHOLDS,
         terminology: Mapping[str, str] | None = None, unread: Sequence[int] = ()) -> tuple[FusedModel, np.ndarray]:
    """The fused model of a trained LEAM and a fitted tfidf-lr, its fusion learnt on dev, and its [N_dev, K] dev
    scores as its scorer gives them (`FusedScorer.score`): training tunes the threshold on them without scoring dev
    again (the parts' dev logits are the fusion's; with a terminology the bag-of-words parts read dev once more).

    Args:
        dev_texts, y_dev: the dev notes and their [N_dev, K] 0/1 gold (K + the terminology's codes, when given).
        train_counts: [K] training notes per code (the frequency bands).
        descriptions: [K] the codes' titles (the title match).
        mentions: the codes' training mentions (added to the title match; None: none).
        per_code: fold per-code thresholds of rare codes into the logits (single-label data: never).
        terminology: code -> title of codes outside the K, in y_dev's order after them (`train --terminology`): they
            join the model after its codes, scored from their titles alone (`join_terminology`).
        unread: the codes dev's notes were never read for (coders added them in review: `PartlyCoded`): dev's 0s say
            nothing of them, so they take their band's fusion without weighing in its fit.
    """
    from clinicode.metrics import tune_threshold
    from clinicode.models.fused.scorer import FusedScorer, bag_of_words

    k = len(train_counts)
    y_all = np.asarray(y_dev, dtype=bool)
    y_dev = y_all[:, :k]
    titles = title_rows(lr, descriptions)
    mentions = mentions if mentions is not None else MentionLexicon()
    start = FusedModel(leam, lr, a=np.ones(k), c=np.zeros(k), e=np.zeros(k), offset=np.zeros(k), w=np.ones(k),
                       fusion={}, titles=titles, mentions=mentions)
    scorer = FusedScorer(start, tokenizer, max_len=max_len, device=device, batch_size=batch_size,
                         memory_mb=memory_mb)
    z_leam, z_lr, z_title = scorer.logits(dev_texts)
    y = np.asarray(y_dev, dtype=bool)
    counts = np.asarray(train_counts)
    known = counts > 0   # codes only dev carries (`--fit-on train+dev`): no part has learnt them yet
    weigh = known.copy()
    weigh[list(unread)] = False
    fusion: Fusion = fit_fusion(y[:, weigh], z_leam[:, weigh], z_lr[:, weigh], counts[weigh],
                                z_title=z_title[:, weigh])
    a, c = fusion.coefficients(train_counts)
    e = fusion.title_coefficients(train_counts)
    bias = fusion.bias(train_counts)
    if not known.all():
        # the LEAM part never saw them coded: they take the rarest codes' numbers without LEAM, its part replaced
        # by what it adds on average to the rarest codes on dev, so the refitted parts meet the same threshold
        rare = known & (bands(counts, fusion.edges) == 0)
        typical = float((a[rare] * z_leam[:, rare].mean(axis=0)).mean()) if rare.any() else 0.0
        bias = np.where(known, bias, bias + typical)
        a = np.where(known, a, 0.0)
    z = a * z_leam + c * z_lr + e * z_title + bias
    offsets = np.zeros(k)
    t = None
    if per_code and leam.config.multilabel:
        t = tune_threshold(y, sigmoid(z))
        offsets = per_code_offsets(y, z, train_counts, t)
    w = np.asarray(fusion.weights, dtype=np.float64)[bands(train_counts, fusion.edges)]
    summary = {**fusion.to_json(), "per_code_thresholds": int(np.count_nonzero(offsets)),
               "per_code_rule": (f"codes with fewer than 10 training notes and at least 2 dev notes: own dev-tuned "
                                 f"threshold when its dev F1 reaches 0.3 (SCutfbr), under the global {t:.3f}")
               if t is not None else "none"}
    summary["mentions"] = len(mentions)
    summary["codes_outside_train"] = int((~known).sum())
    summary["language"] = mentions.language   # the notes' language: the mentions' stemmer and negation triggers
    model = FusedModel(leam, lr, a=a, c=c, e=e, offset=bias + offsets, w=w, fusion=summary, titles=titles,
                       mentions=mentions)
    if terminology:
        single = not leam.config.multilabel
        t = 0.0 if single else tune_threshold(y[:, known], sigmoid(z[:, known]))   # as `train` tunes it on dev
        model = join_terminology(model, terminology, dev_texts=dev_texts, y_dev=y_all, train_counts=counts,
                                 descriptions=descriptions, z=z, threshold=t)
        z_lr, z_title = bag_of_words(model.lr, model.titles, model.mentions, dev_texts, model.phrases,
                                     model.phrase_weight)   # [N_dev, K + T] title matches, the terminology's too
    return model, scorer.probabilities(model.fuse(z_leam, z_lr, z_title))


def join_terminology(model: FusedModel, terminology: Mapping[str, str], *, dev_texts: Sequence[str],
                     y_dev: np.ndarray, train_counts: np.ndarray, descriptions: Sequence[str], z: np.ndarray,
                     threshold: float) -> FusedModel:
    """MODEL with TERMINOLOGY's codes after its own, scored from their titles alone: the title match (the note's
    tf-idf cosine with the title, plus 1 where the title is said as a phrase: `terminology_phrases`) on a band of
    its own, fitted on dev's codes without a training note (`fusion.fit_terminology`). They have no LEAM or tfidf-lr
    row (a = c = 0), so 70,000 codes cost the title rows (sparse) and the scores, never the parts.

    Args:
        terminology: code -> title, in Y_DEV's order after MODEL's codes.
        y_dev: [N_dev, K + T] 0/1 dev gold over MODEL's codes and the terminology's.
        train_counts: [K] training notes of MODEL's codes (those with none that dev carries calibrate the band too).
        descriptions: [K] MODEL's codes' titles.
        z: [N_dev, K] MODEL's fused dev logits; threshold: the global threshold tuned on them.
    """
    from clinicode.models.fused.scorer import bag_of_words

    k = len(train_counts)
    term = tuple(terminology.items())
    codes = tuple(model.mentions.codes)
    if len(codes) != k:
        raise ValueError(f"the model's mentions name {len(codes)} codes, its fusion {k}: the terminology's codes "
                         "need the model's codes in order.")
    every = codes + tuple(c for c, _ in term)
    language = model.mentions.language
    titles = title_rows(model.lr, [*descriptions, *(t for _, t in term)])              # [K + T, V] sparse
    # dev's codes without a training note (`--fit-on train+dev`'s dev-only codes, or the terminology's own) are
    # scored by the band on dev as the terminology's will be: their title's cosine, and whether it is said
    zero = np.flatnonzero(np.asarray(train_counts) == 0)
    cols = np.concatenate([zero, np.arange(k, k + len(term))])
    phrases = terminology_phrases(term, every, language)
    said = phrase_lexicon({int(j): descriptions[j] for j in zero}, every, language)
    said = said.union(phrases) if len(said) else phrases
    plain = MentionLexicon(codes=every, language=language, matching=model.mentions.matching)  # negation, no mentions
    _, cosine = bag_of_words(model.lr, titles, plain, dev_texts)                      # [N_dev, K + T]
    y = np.asarray(y_dev, dtype=bool)
    known = np.asarray(train_counts) > 0
    pred = z[:, known] > logit(np.float64(threshold))
    gold = y[:, :k][:, known]
    band = fit_terminology(cosine[:, cols], said.match(dev_texts, len(every))[:, cols], y[:, cols], threshold,
                           tp=int((pred & gold).sum()), fp=int((pred & ~gold).sum()), fn=int((~pred & gold).sum()))
    n = len(term)
    pad = np.zeros(n)
    fusion = {**model.fusion, "terminology": {
        "codes": n, "scale": round(band["scale"], 6), "phrase": band["phrase"], "bias": round(band["bias"], 6),
        "rule": band["rule"],
        "dev_codes_without_training_notes": int(len(zero) + int((y[:, k:].sum(axis=0) > 0).sum())),
        "dev_positives": band["dev_positives"], "dev_predicted": band["dev_predicted"]}}
    return FusedModel(model.leam, model.lr, a=np.concatenate([model.a, pad]), c=np.concatenate([model.c, pad]),
                      e=np.concatenate([model.e, np.full(n, band["scale"])]),
                      offset=np.concatenate([model.offset, np.full(n, band["bias"])]),
                      w=np.concatenate([model.w, pad]), fusion=fusion, titles=titles,
                      mentions=MentionLexicon(model.mentions.phrases, every, language, model.mentions.matching,
                                              model.mentions.weights),
                      terminology=term, phrases=phrases, phrase_weight=band["phrase"])


def refit_on_all(model: FusedModel, texts: Sequence[str], y: np.ndarray, *, codes: Sequence[str],
                 descriptions: Sequence[str], evidence: Sequence[Any] | None, single_label: bool,
                 min_doc_freq: int, partly: Any = None) -> FusedModel:
    """MODEL with the parts that need no epochs (tfidf-lr, the title rows, the mentions) refitted on TEXTS (train and
    dev) once dev has chosen the fusion and the threshold (`train --fit-on train+dev`). Every code keeps the fusion
    numbers dev chose for it (its band by train's notes): on dev halves that kept or raised micro-F1 and MAP on every
    set, where moving codes into the bands of their new counts lost up to 0.03 micro-F1 (docs/accuracy-tuning.md,
    round 17). The LEAM part is the one the epochs trained on train.

    Args:
        texts, y: every labelled note outside test and its [N, K] gold.
        evidence: each note's coders' spans ({code, start, end}), or None: the mentions the model holds are kept.
        partly: codes known only on some of TEXTS (`clinicode.data.labels.PartlyCoded`), fitted on those alone.
    """
    # a terminology's codes (the last ones) have no tfidf-lr row: it learns the parts' codes alone
    lr = fit_lr_part(texts, np.asarray(y)[:, :model.n_parts], single_label=single_label, min_doc_freq=min_doc_freq,
                     partly=partly)
    mentions = model.mentions
    if evidence is not None:
        mentions = MentionLexicon.build(codes, texts, evidence, partly=partly).union(model.mentions)
    fusion = {**model.fusion, "fit_on": "train+dev", "mentions": len(mentions)}
    return FusedModel(model.leam, lr, a=model.a, c=model.c, e=model.e, offset=model.offset, w=model.w,
                      fusion=fusion, titles=title_rows(lr, descriptions), mentions=mentions,
                      terminology=model.terminology, phrases=model.phrases, phrase_weight=model.phrase_weight)

