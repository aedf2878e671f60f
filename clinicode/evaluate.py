"""Evaluate a checkpoint on a prepared split (scores through `Predictor.score`, metrics per docs/domain.md section 7),
or compare two models on the same notes with a paired bootstrap."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from clinicode.codes.icd10 import PCS_NO_TITLE
from clinicode.config import COMPARE
from clinicode.constants import EVIDENCE, MANIFEST_FILE, TEXT
from clinicode.data.labels import LabelSet, PartlyCoded, coded_columns
from clinicode.data.prepared import read_split
from clinicode.errors import ClinicodeError, ConfigError, DataFormatError
from clinicode.files import check_output, read_json, write_json_atomic
from clinicode.metrics import (
    EVIDENCE_K,
    HEADLINE,
    MAP_DEPTH,
    REPORTED,
    all_metrics,
    map_figures,
    metrics_report,
    paired_bootstrap,
    spans_report,
)
from clinicode.predict import Predictor

EVALUATION_KIND = "evaluation"
NO_TRAIN_COUNTS = ("no training counts in this checkpoint (trained before clinicode kept them), so no rare/frequent "
                   "slice; retrain to get one")
COMPARISON_KIND = "comparison"
FAMILY_NAMES = {"diagnosis": "diagnoses", "procedure": "procedures"}  # `CodeSystem.kind` -> the MAP key's family
NO_SPANS = "this split has no evidence spans (an `evidence` field of {code, start, end} per coder's reference)"
NO_MODEL_SPANS = "a {kind} checkpoint shows no per-code spans to judge"


def _is_json_of_kind(kind: str, legacy_keys: set[str]):
    def recognise(path: Path) -> bool:
        try:
            data = read_json(path)
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and (data.get("kind") == kind or legacy_keys <= set(data))
    return recognise


is_evaluation_output = _is_json_of_kind(EVALUATION_KIND, {"split", "n_docs", "per_code", "threshold_0.5"})
is_comparison_output = _is_json_of_kind(COMPARISON_KIND, {"metrics_a", "metrics_b", "n_boot"})


def scored_split(pred: Predictor, data_dir: Path, split: str) -> tuple[pd.DataFrame, np.ndarray, dict[str, Any]]:
    """The notes of one split and their gold matrix over the CHECKPOINT's label set (the truth for scoring).

    Gold codes outside the checkpoint's codes cannot be scored; they are counted and returned in `report`. When
    the checkpoint was trained with --top-k, notes left with no label-set code are dropped, as training did.

    Returns:
        (notes [N rows], y [N, K] 0/1 float32, report {"n_gold_outside_labels", "n_codes_outside_labels",
        "codes_outside_labels" (most frequent first, at most 10), "n_docs_without_label_code_dropped"}).
    Raises:
        DataFormatError: the split holds no notes, or its gold codes share no code with the checkpoint.
    """
    df = read_split(Path(data_dir), split)
    labels: LabelSet = pred.labels
    outside = Counter(c for row in df["labels"] for c in row if c not in labels)
    n_gold = sum(len(row) for row in df["labels"])
    if n_gold and sum(outside.values()) == n_gold:
        raise DataFormatError(
            f"{data_dir}: the {split} split's {n_gold:,} gold codes share no code with the "
            f"checkpoint's {len(labels)} codes "
            f"(e.g. {', '.join(c for c, _ in outside.most_common(3))} against {', '.join(labels.codes[:3])}); "
            "evaluate on data coded with the checkpoint's code set."
        )
    dropped = 0
    if pred.checkpoint.train_config.top_k is not None:
        keep = np.array([any(c in labels for c in row) for row in df["labels"]], dtype=bool)
        dropped = int((~keep).sum())
        df = df[keep].reset_index(drop=True)
    if len(df) == 0:
        raise DataFormatError(f"{data_dir}: split {split!r} holds no notes to score; nothing to evaluate.")
    report = {
        "n_gold_outside_labels": int(sum(outside.values())),
        "n_codes_outside_labels": len(outside),
        "codes_outside_labels": [c for c, _ in outside.most_common(10)],
        "n_gold_codes": int(n_gold),
        "n_docs_without_label_code_dropped": dropped,
    }
    return df, labels.multi_hot(df["labels"]), report


def outside_warning(report: dict[str, Any], n_labels: int) -> str | None:
    """One line for stderr when gold codes fall outside the checkpoint's label set, else None."""
    n = report.get("n_gold_outside_labels", 0)
    if not n:
        return None
    share = n / max(report.get("n_gold_codes", n), 1)
    return (f"warning: {n:,} of {report['n_gold_codes']:,} gold codes ({share:.1%}; "
            f"{report['n_codes_outside_labels']:,} "
            f"distinct, e.g. {', '.join(report['codes_outside_labels'][:3])}) are not among the "
            f"checkpoint's {n_labels:,} "
            "codes and are not scored: the metrics cover the checkpoint's codes only (n_gold_outside_labels).")


def map_report(pred: Predictor, gold: Sequence[Sequence[str]], y: np.ndarray, s: np.ndarray, *,
               without: Sequence[str] = ()) -> dict[str, Any]:
    """MAP of a scored split as the shared tasks compute it (`clinicode.metrics.map_figures`): each note's codes ranked
    by score to depth 1000, its gold codes outside the checkpoint never retrieved, and per family (diagnoses and
    procedures) when the code system has both.

    Args:
        pred: the checkpoint (its codes and code system).
        gold: [N] each note's gold codes, all of them (those outside the checkpoint too).
        y: [N, K] the gold matrix over the checkpoint's codes.
        s: [N, K] scores.
        without: codes left out of ranking and gold alike (CANTEMIST also reported MAP without 8000/6).
    Returns:
        `map_figures`' keys ("map", "n_map_notes", "map_depth", "map_<family>", ...).
    """
    drop = set(without)
    codes = pred.labels.codes
    keep = [i for i, c in enumerate(codes) if c not in drop]
    notes = [set(row) - drop for row in gold]
    family: dict[str, str] = {}                          # code -> its family's name, asked once per distinct code
    for c in [*codes, *(c for row in notes for c in row)]:
        if c not in family:
            kind = pred.code_system.kind(c)
            family[c] = FAMILY_NAMES.get(kind, kind)
    families = [family[codes[i]] for i in keep]
    family_gold = {f: np.array([sum(family[c] == f for c in row) for row in notes])
                   for f in {family[c] for row in notes for c in row} | set(families)}
    return map_figures(y[:, keep], s[:, keep], n_gold=np.array([len(row) for row in notes]), families=families,
                       family_gold=family_gold, depth=MAP_DEPTH)


def _coded(folder: Path, labels: LabelSet) -> np.ndarray:
    """[K] True for the codes of LABELS that FOLDER's notes were coded for: all but those its manifest names as partly
    coded (`PartlyCoded`: coders added them in review, and the folder's dev and test were never read for them)."""
    path = folder / MANIFEST_FILE
    return coded_columns(PartlyCoded.of(read_json(path), labels, ()) if path.is_file() else None, len(labels))


def evaluate(*, checkpoint: Path, data_dir: Path, split: str = "test", output: Path | None = None,
             device: str = "auto", predictor: Predictor | None = None, explain: int | None = None,
             map_without: Sequence[str] = ()) -> dict[str, Any]:
    """Metrics of a checkpoint on one split, at its tuned threshold and at 0.5, plus per-code rows, and the shared
    tasks' metrics: MAP (`map_report`) and, where the split carries evidence spans, the span-and-code figures.

    The checkpoint's label set decides what is scored: gold codes outside it are counted (`n_gold_outside_labels`,
    `codes_outside_labels`), never silently filtered by the data folder's own codes (see `scored_split`); MAP counts
    them as never retrieved, the span-and-code recall as missed.

    Args:
        checkpoint: run or checkpoint folder.
        data_dir: prepared dataset folder (or any coded-notes folder).
        split: train, dev or test.
        output: JSON file to write atomically.
        explain: spans per code for the evidence figures (default `EVIDENCE_K`, 5).
        map_without: codes left out of a second MAP ("map_without": CANTEMIST's MAP without 8000/6).
    Returns:
        the metrics dict (keys auc_macro, auc_micro, f1_macro, f1_macro_mean, f1_micro, prec_at_5, prec_at_8,
        threshold, n_docs, threshold_0.5, per_code, map, n_map_notes, ...), "evidence" (`evidence_report`'s figures)
        when the split carries gold mentions, and "span_code" (`clinicode.metrics.span_code_prf`'s figures at the
        tuned threshold; None, with "span_code_note", when the split has no evidence spans or the model shows none).
    """
    if output is not None:
        # a link: its target is written (the link stays)
        output = check_output(output, option="--output", command="evaluate", folder=False,
                              recognise=is_evaluation_output,
                              inputs={"--data": data_dir, "--checkpoint": _checkpoint_dir(checkpoint, predictor)})
    pred = predictor or Predictor.from_checkpoint(checkpoint, device=device)
    df, y, report = scored_split(pred, data_dir, split)
    labels = pred.labels
    s = pred.score(df["text"].tolist())
    t = pred.threshold
    one = pred.single_label
    counts = pred.checkpoint.train_counts
    read = _coded(Path(data_dir), labels)   # not the codes coders added in review: these notes never coded for them
    codes = [c for c, r in zip(labels.codes, read) if r]
    unread = [c for c, r in zip(labels.codes, read) if not r]
    y_all, s_all, y, s = y, s, y[:, read], s[:, read]
    result = {"kind": EVALUATION_KIND,
              **metrics_report(y, s, threshold=t, single_label=one, codes=codes,
                               train_counts=None if counts is None else [counts[c] for c in codes]),
              "split": split, **report, **({"codes_not_coded_in_split": unread} if unread else {})}
    if counts is None:  # a checkpoint from before training counts were kept
        result["slices"] = None
        result["slices_note"] = NO_TRAIN_COUNTS
    result.update(map_report(pred, df["labels"].tolist(), y_all, s_all, without=unread))
    if map_without:
        result["map_without"] = {"codes": sorted(set(map_without)),
                                 **map_report(pred, df["labels"].tolist(), y_all, s_all,
                                              without=[*map_without, *unread])}
    evidence = None
    if EVIDENCE in df.columns:
        evidence = _evidence_of_notes(pred, df, k=EVIDENCE_K if explain is None else explain, scores=s_all)
        if evidence is not None:
            result["evidence"] = evidence
    result["span_code"] = None if evidence is None else evidence.get("span_code")
    if result["span_code"] is None:  # absent, not 0
        result["span_code_note"] = NO_SPANS if evidence is None else NO_MODEL_SPANS.format(kind=pred.kind)
    fit_on = (getattr(pred.checkpoint.model, "fusion", None) or {}).get("fit_on", "train")
    if split != "test" and fit_on == "train+dev":
        result["in_sample_note"] = (f"the checkpoint's parts without epochs were refitted on train and dev "
                                    f"(--fit-on train+dev): its {split} figures are in-sample; judge it on test")
    if output is not None:
        write_json_atomic(Path(output), result)
    return result




def evidence_report(checkpoint: Path | None, data_dir: Path, split: str = "test", *, k: int = EVIDENCE_K,
                    device: str = "auto", predictor: Predictor | None = None) -> dict[str, Any] | None:
    """How well the spans that `predict --explain k` shows for each correctly predicted code point at its gold mentions.

    Over the (note, code) pairs whose code is gold, predicted at the checkpoint's threshold and has at least one gold
    mention in the split's `evidence` column: the model's spans for the code (`Prediction.code_phrases`), and two
    floors over the same pairs, random spans of the same lengths in words (seed 0) and the code's
    title words found in the note (`clinicode.metrics.title_spans`, titles from the checkpoint's labels.json).
    docs/metrics.md defines each figure (`clinicode.metrics.evidence_figures`).

    Args:
        checkpoint: run or checkpoint folder (ignored when `predictor` is given).
        data_dir: a coded-notes folder whose split carries `evidence` ({code, start, end} per gold mention).
        split: train, dev or test.
        k: spans shown per code (the explain count), >= 1.
        device: torch device for LEAM.
        predictor: an already loaded checkpoint.
    Returns:
        None when the split has no gold mention; else {"split", "k", "n_pairs", "n_correct",
        "n_correct_without_evidence", "model" (None for tfidf-lr, with "model_note"), "random", "title"}, where
        "model", "random" and "title" each hold {"hit_at_1", "hit_at_k", "token_precision", "token_recall",
        "token_f1", "words_per_code", "n_pairs", "k"}.
    Raises:
        ConfigError: k < 1.
        DataFormatError: the split cannot be read or shares no code with the checkpoint (see `scored_split`).
    """
    pred = predictor or Predictor.from_checkpoint(checkpoint, device=device)
    df, _, _ = scored_split(pred, data_dir, split)
    if EVIDENCE not in df.columns:
        return None
    out = _evidence_of_notes(pred, df, k=k)
    return None if out is None else {"split": split, **out}


def _evidence_of_notes(pred: Predictor, df: pd.DataFrame, *, k: int,
                       scores: np.ndarray | None = None) -> dict[str, Any] | None:
    return evidence_of(pred, df[TEXT].tolist(), df["labels"].tolist(), df[EVIDENCE].tolist(), k=k, scores=scores)


def evidence_of(pred: Predictor, texts: Sequence[str], gold: Sequence[Sequence[str]],
                mentions: Sequence[Sequence[dict[str, Any]]], *, k: int = EVIDENCE_K,
                threshold: float | None = None, scores: np.ndarray | None = None) -> dict[str, Any] | None:
    """The evidence figures of PRED's spans on notes with gold mentions (`clinicode.metrics.spans_report`): the
    spans it shows for each code predicted at the threshold, the mentions' codes read in its spelling, the title floor
    from its titles (ICD-10-PCS's display placeholder is no title). What `evaluate` reports and `train` saves.

    Args:
        pred: the loaded checkpoint.
        texts: [n_notes] the notes.
        gold: per note, its gold codes.
        mentions: per note, its gold mentions ({code, start, end}).
        k: spans per code (the explain count), >= 1.
        threshold: the cut-off for "predicted" (default: the checkpoint's).
        scores: [n_notes, K] the notes' scores when the caller has them (`evaluate`'s metrics): not scored again.
    Returns:
        None when no note has a gold mention; else `spans_report`'s figures.
    Raises:
        ConfigError: k < 1.
    """
    if k < 1:
        raise ConfigError(f"evidence needs k >= 1 spans per code (the explain count), got {k}.")
    if not any(len(m) for m in mentions):
        return None  # nothing to judge: no scoring
    known = set(pred.codes)
    shown = pred.code_spans(texts, explain=k, threshold=threshold, scores=scores)
    return spans_report(texts, gold, mentions, shown,
                        titles=_floor_titles(pred), spell=lambda code: pred.code_system.canonical(code, known),
                        k=k, spanless=None if pred.model_kind.abilities.explain else pred.kind)


def _floor_titles(pred: Predictor) -> dict[str, str]:
    """PRED's codes -> their titles for the title floor: a display placeholder (ICD-10-PCS's) is no title."""
    return {c: "" if t == PCS_NO_TITLE else t for c, t in zip(pred.codes, pred.labels.descriptions)}


def _checkpoint_dir(checkpoint: Path | None, predictor: Predictor | None) -> Path | None:
    from clinicode.checkpoint import resolve_checkpoint_dir

    if predictor is not None:
        return predictor.checkpoint.path
    try:
        return resolve_checkpoint_dir(Path(checkpoint)) if checkpoint is not None else None
    except ClinicodeError:
        return None  # loading the predictor reports it properly


def format_table(m: dict[str, Any]) -> str:
    """A readable two-column table: tuned threshold vs 0.5."""
    half = m.get("threshold_0.5", {})
    lines = [f"{'metric':<16}{'t=' + format(m['threshold'], '.2f'):>10}{'t=0.50':>10}"]
    for k in REPORTED:
        if k in m:
            a, b = m[k], half.get(k, float("nan"))
            lines.append(f"{k:<16}{a:>10.4f}{b:>10.4f}")
    lines.append(f"{'n_docs':<16}{m['n_docs']:>10d}")
    sl = m.get("slices")
    if sl:
        below = sl["rare_below"]
        for name, title in (("rare", f"< {below} train"), ("frequent", f">= {below} train")):
            part = sl[name]
            auc, f1 = part.get("auc_macro"), part.get("f1_macro")
            lines.append(f"{name} codes ({title}): {part.get('n_codes', 0):,} codes, "
                         f"{part.get('n_present', 0):,} in this split, "
                         f"macro AUC {'n/a' if auc is None else format(auc, '.4f')}, macro F1 "
                         f"{'n/a' if f1 is None else format(f1, '.4f')}")
    elif m.get("slices_note"):
        lines.append(m["slices_note"])
    lines.extend(format_shared_tasks(m))
    if m.get("evidence"):
        lines.extend(format_evidence(m["evidence"]))
    return "\n".join(lines)


def format_shared_tasks(m: dict[str, Any]) -> list[str]:
    """The shared tasks' metrics as table lines: MAP (all codes, per family, without some codes) and span-and-code."""
    if "map" not in m:
        return []
    def value(v: float | None) -> str:
        return f"{'n/a':>10}" if v is None else f"{v:>10.4f}"

    lines = [f"{'MAP':<16}{value(m['map'])}   each note's codes ranked to depth {m['map_depth']:,}, over "
             f"{m['n_map_notes']:,} notes with a gold code; gold codes outside the checkpoint are never retrieved"]
    for key in sorted(k for k in m if k.startswith("map_") and f"n_map_notes_{k[4:]}" in m):
        lines.append(f"{'MAP ' + key[4:]:<16}{value(m[key])}   over {m[f'n_map_notes_{key[4:]}']:,} notes")
    w = m.get("map_without")
    if w:
        lines.append(f"{'MAP without':<16}{value(w['map'])}   without {', '.join(w['codes'])}, over "
                     f"{w['n_map_notes']:,} notes")
    sc = m.get("span_code")
    if sc is None or sc.get("f1") is None:
        lines.append(f"{'span-and-code F1':<16}{'n/a':>10}   {m.get('span_code_note', NO_SPANS)}")
    else:
        lines.append(f"{'span-and-code F1':<16}{sc['f1']:>10.4f}   P {sc['precision']:.4f}, R {sc['recall']:.4f}: "
                     f"{sc['n_correct']:,} of {sc['n_predicted']:,} predicted and {sc['n_gold']:,} gold (note, code) "
                     f"pairs with a shown span holding a reference ({sc['slack']} characters of slack)")
    return lines


def format_evidence(ev: dict[str, Any]) -> list[str]:
    """The evidence figures as table lines: the model's spans, then the two floors."""
    k = ev["k"]
    lines = [f"evidence over {ev['n_pairs']:,} correctly predicted codes with a gold mention "
             f"({ev['n_correct_without_evidence']:,} more had none), {k} spans per code:",
             f"{'spans':<16}{'hit@1':>8}{f'hit@{k}':>8}{'tok P':>8}{'tok R':>8}{'tok F1':>8}{'words':>8}"]
    outside = ev.get("n_mentions_outside", 0)
    if outside:
        shown = ", ".join(ev.get("outside_codes", []))
        lines.append(f"{outside:,} gold mentions name a code the model has no label for (e.g. {shown}); they count in "
                     "no figure: spell them as the labels do, or they are codes outside the label set")
    for name, label in (("model", "model"), ("title", "title words"), ("random", "random")):
        q = ev.get(name)
        if q is None:
            lines.append(f"{label:<16}{ev.get('model_note', 'n/a')}")
        elif q["n_pairs"]:
            rates = "".join(f"{q[key]:>8.3f}" for key in ("hit_at_1", "hit_at_k", "token_precision", "token_recall",
                                                          "token_f1"))
            lines.append(f"{label:<16}{rates}{q['words_per_code']:>8.1f}")
    return lines


def compare(*, runs_a: Sequence[Path], runs_b: Sequence[Path], data_dir: Path, split: str = "test",
            n_boot: int = COMPARE.n_boot,
            seed: int = COMPARE.seed, output: Path | None = None, device: str = "auto") -> dict[str, Any]:
    """Is model A better than, as good as, or worse than model B on this split? A paired bootstrap over notes.

    Each side is one run or several (e.g. seeds of one configuration, averaged). Every run is scored at its own
    tuned threshold; see `clinicode.metrics.paired_bootstrap` for the interval.

    Args:
        runs_a, runs_b: run or checkpoint folders; scored over the union of their codes (a code a run lacks it never
            predicts: the default model learns the codes only dev carries, tfidf-lr does not).
        data_dir: prepared dataset folder, loaded as the first run of A was trained (its --top-k).
        split: train, dev or test.
        n_boot: bootstrap resamples.
        seed: seed of the resampling.
        output: JSON file to write atomically.
    Returns:
        {"split", "n_docs", "n_boot", "a": [...], "b": [...], "metrics_a", "metrics_b" (means over runs),
        "f1_micro": {diff, lo, hi, p_a_below_b}, "auc_macro": {...}}.
    Raises:
        ConfigError: if a side is empty or the runs chose their codes otherwise (another --top-k).
        DataFormatError: if the split holds no notes.
    """
    if not runs_a or not runs_b:
        raise ConfigError("compare needs at least one run on each side (--a RUN and --b RUN).")
    if n_boot < 1:
        raise ConfigError(f"--n-boot must be >= 1, got {n_boot}.")
    if output is not None:
        inputs = {"--data": data_dir, **{f"--a {r}": _checkpoint_dir(r, None) for r in runs_a},
                  **{f"--b {r}": _checkpoint_dir(r, None) for r in runs_b}}
        output = check_output(output, option="--output", command="compare", folder=False,
                              recognise=is_comparison_output, inputs=inputs)
    preds = [[Predictor.from_checkpoint(r, device=device) for r in runs] for runs in (runs_a, runs_b)]
    first = preds[0][0]
    # one set of columns for every run: the union of their codes (the default model learns the codes only dev
    # carries, tfidf-lr does not); a code a run lacks it never predicts, as MAP counts such a code never retrieved
    codes = sorted(set().union(*(p.codes for side in preds for p in side)))
    for side, runs in zip(preds, (runs_a, runs_b)):
        for p, r in zip(side, runs):   # a label set chosen otherwise (--top-k) is another question, not a lack
            if p.checkpoint.train_config.top_k != first.checkpoint.train_config.top_k:
                raise ConfigError(f"{r}: its label set ({len(p.codes)} codes, --top-k "
                                  f"{p.checkpoint.train_config.top_k}) differs from {runs_a[0]}'s ({len(first.codes)} "
                                  f"codes, --top-k {first.checkpoint.train_config.top_k}); compare runs trained on "
                                  "the same labels.")
    df, _, report = scored_split(first, data_dir, split)
    texts = df["text"].tolist()
    index = {c: k for k, c in enumerate(codes)}
    y = LabelSet.from_codes(codes).multi_hot(df["labels"])

    def on_codes(p: Predictor) -> np.ndarray:  # this run's scores in `codes` order, 0 for a code it lacks
        out = np.zeros((len(texts), len(codes)), dtype=np.float32)
        out[:, [index[c] for c in p.codes]] = p.score(texts)
        return out

    sides = [[(on_codes(p), None if p.single_label else p.threshold) for p in side] for side in preds]
    lacking = {str(r): len(codes) - len(p.codes) for side, runs in zip(preds, (runs_a, runs_b))
               for p, r in zip(side, runs) if len(p.codes) < len(codes)}
    boot = paired_bootstrap(y, sides[0], sides[1], n_boot=n_boot, seed=seed)
    def mean_metrics(runs: list[tuple[np.ndarray, float]]) -> dict[str, float]:
        ms = [all_metrics(y, s, threshold=0.0 if t is None else t, single_label=t is None) for s, t in runs]
        return {k: float(np.mean([m[k] for m in ms])) for k in HEADLINE if k in ms[0]}

    result = {"kind": COMPARISON_KIND, "split": split, "n_docs": int(len(df)), "n_boot": n_boot, "codes": codes,
              **report,
              "a": [str(r) for r in runs_a], "b": [str(r) for r in runs_b], "codes_lacking": lacking,
              "metrics_a": mean_metrics(sides[0]), "metrics_b": mean_metrics(sides[1]), **boot}
    if output is not None:
        write_json_atomic(Path(output), result)
    return result


def format_comparison(c: dict[str, Any]) -> str:
    """Means of both sides, A − B, the bootstrap interval and how often A came out below B."""
    lines = [f"{'metric':<12}{'A':>9}{'B':>9}{'A - B':>10}   {'95% interval':<20}{'A below B':>10}"]
    for k in ("f1_micro", "auc_macro"):
        b = c[k]
        lines.append(f"{k:<12}{c['metrics_a'][k]:>9.4f}{c['metrics_b'][k]:>9.4f}{b['diff']:>+10.4f}   "
                     f"[{b['lo']:+.4f}, {b['hi']:+.4f}]  {100 * b['p_a_below_b']:>8.1f}%")
    lines.append(f"{c['n_docs']:,} {c['split']} notes, {c['n_boot']:,} paired resamples; A = {len(c['a'])} run(s), "
                 f"B = {len(c['b'])} run(s).")
    if c.get("codes_lacking"):
        lacking = "; ".join(f"{r} lacks {n:,}" for r, n in c["codes_lacking"].items())
        lines.append(f"the runs' label sets differ: scored over their {len(c['codes']):,} codes together, a code a run "
                     f"lacks never predicted by it ({lacking}).")
    return "\n".join(lines)
