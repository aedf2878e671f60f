"""Pure functions behind the app's pages: predictions -> tables, note + spans -> escaped HTML, run cards -> text.

No Streamlit, no torch, no logging; every piece of note text that reaches HTML goes through `html.escape`."""

from __future__ import annotations

import html
import json
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from clinicode.serving import METRIC_LABELS, SUMMARY, code_matches, predicted_codes

ATTENTION_RGB = (255, 179, 0)   # amber: beta, one distribution shared by all codes
EVIDENCE_RGB = (46, 160, 67)    # green: one code's closest words (cosine with the code's vector)
MAX_UPLOAD_MB = 20
TERMINOLOGY = "terminology"     # a code's source when no training note carried it: scored from its title alone
FROM_TERMINOLOGY = " (from the terminology)"   # the mark after such a code where the app names it


# ------------------------------------------------------------------------------------------ code tables
def outcome(predicted: bool, gold: bool) -> str:
    """TP / FP / FN for one code of one note ("" for a true negative)."""
    if predicted and gold:
        return "TP"
    if predicted:
        return "FP"
    if gold:
        return "FN"
    return ""


def code_table(
    scores: Mapping[str, float],
    descriptions: Mapping[str, str],
    threshold: float,
    *,
    gold: Iterable[str] | None = None,
    top_k: int = 10,
    single_label: bool = False,
    predicted: Iterable[str] | None = None,
    terminology: Iterable[str] = (),
) -> pd.DataFrame:
    """The note's code table: its top-k codes, every predicted code and every gold code.

    Which codes are predicted is `clinicode.metrics.predicted_codes` (strictly above the threshold; for a single-label
    model, the top code; ties by label order), as in `Predictor.predict` and the metrics.

    Args:
        scores: code -> probability for (ideally) every code of the label set.
        descriptions: code -> description ("" when unknown).
        threshold: the decision threshold in [0, 1].
        gold: the note's gold codes when known (a test-split note); adds "gold" and "outcome" columns,
            and gold codes scored below the threshold appear as FN rows.
        top_k: codes always shown, highest probability first.
        single_label: the model gives one code per note (softmax scores).
        predicted: the predicted codes when `scores` holds only some codes (a search's hits); else from `scores`.
        terminology: the codes the model scores from a terminology's titles alone (`Predictor.terminology_codes`);
            when there are any, a "source" column says "terminology" for them.
    Returns:
        DataFrame sorted by probability (desc, then the order of `scores`) with columns code, description, probability,
        above_threshold, with gold, gold (bool) and outcome ("TP"/"FP"/"FN"/""), and with terminology codes, source.
    """
    gold_set = set(gold) if gold is not None else None
    terms = set(terminology)
    position = {c: i for i, c in enumerate(scores)}  # ties go by label order, as in `predicted_codes`
    order = lambda c: (-scores.get(c, 0.0), position.get(c, len(position)), c)  # noqa: E731
    chosen = set(predicted_codes(scores, threshold, single_label=single_label) if predicted is None else predicted)
    keep = set(sorted(scores, key=order)[: max(0, top_k)]) | (chosen & position.keys())
    if gold_set:
        keep |= gold_set
    rows = []
    for code in sorted(keep, key=order):
        p = float(scores.get(code, 0.0))
        row: dict[str, Any] = {
            "code": code,
            "description": descriptions.get(code, ""),
            "probability": p,
            "above_threshold": code in chosen,
        }
        if gold_set is not None:
            row["gold"] = code in gold_set
            row["outcome"] = outcome(code in chosen, code in gold_set)
        if terms:
            row["source"] = TERMINOLOGY if code in terms else ""
        rows.append(row)
    cols = (["code", "description", "probability", "above_threshold"]
            + (["gold", "outcome"] if gold_set is not None else []) + (["source"] if terms else []))
    return pd.DataFrame(rows, columns=cols)


def search_codes(
    scores: Mapping[str, float],
    descriptions: Mapping[str, str],
    query: str,
    threshold: float,
    *,
    gold: Iterable[str] | None = None,
    limit: int = 50,
    single_label: bool = False,
    terminology: Iterable[str] = (),
) -> tuple[pd.DataFrame, int]:
    """Codes matching a search over all of them, as `code_table` rows, highest probability first.

    A code matches when the query (case-insensitive) is a prefix of the code, or every word of the query occurs in the
    code's description ("heart fail" finds 428.0 Congestive heart failure). An empty query matches nothing.
    TERMINOLOGY: as `code_table`'s.

    Returns:
        (the first `limit` matches, the number of matches).
    """
    if not query.strip():
        return code_table({}, descriptions, threshold, top_k=0), 0
    hits = {c: scores.get(c, 0.0) for c, d in descriptions.items() if code_matches(query, c, d or "")}
    top = dict(sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))[:limit])
    chosen = predicted_codes(scores, threshold, single_label=single_label)  # over every code, not just the hits
    table = code_table(top, descriptions, threshold, top_k=len(top), predicted=chosen, terminology=terminology)
    if gold is not None:
        gold_set = set(gold)
        table["gold"] = table["code"].isin(gold_set)
        table["outcome"] = [outcome(bool(p), bool(g)) for p, g in zip(table["above_threshold"], table["gold"])]
    return table, len(hits)


# ------------------------------------------------------------------------------------------ many codes
FREQUENCY_BANDS = ((0, "never in training"), (1, "1-9"), (10, "10-49"), (50, "50-99"), (100, "100-499"), (500, "500+"))


def frequency_band(n: int) -> str:
    """The training-frequency band of a code seen in n training notes."""
    label = FREQUENCY_BANDS[0][1]
    for start, name in FREQUENCY_BANDS:
        if n >= start:
            label = name
    return label


def per_code_frame(per_code: Sequence[Mapping[str, Any]], descriptions: Mapping[str, str], *,
                   group: Callable[[str], str] | None = None) -> pd.DataFrame:
    """The checkpoint's per-code test rows with description, chapter (or tree) group and frequency band columns.

    GROUP is the checkpoint's `code_system.group` (without it, the ICD chapter told by each code's shape). The band
    uses the code's training notes (`train_count`) when the run recorded them, else its test notes (`support`);
    `band_source` says which.
    """
    from clinicode.serving import chapter

    group = group or chapter
    df = pd.DataFrame(list(per_code))
    if df.empty:
        return df
    df["auc"] = pd.to_numeric(df.get("auc"), errors="coerce")
    df["description"] = [descriptions.get(c, "") for c in df["code"]]
    df["chapter"] = [group(c) for c in df["code"]]
    source = "train_count" if "train_count" in df else "support"
    df["band"] = [frequency_band(int(n)) for n in df[source]]
    df.attrs["band_source"] = "training notes" if source == "train_count" else "test notes"
    return df


def group_summary(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per group of codes: how many, their mean F1 and mean AUC (codes with an AUC), and their test notes."""
    order = [name for _, name in FREQUENCY_BANDS] if by == "band" else None
    g = frame.groupby(by, sort=order is None).agg(codes=("code", "size"), mean_f1=("f1", "mean"),
                                                  mean_auc=("auc", "mean"), test_notes=("support", "sum")).reset_index()
    if order is not None:
        g = g.set_index(by).reindex([o for o in order if o in set(g[by])]).reset_index()
    return g


GROUP_ROW_PX = 26   # one bar row of a group chart
GROUP_LABEL_PX = 300


def group_bars(g: pd.DataFrame, by: str, order: Sequence[str]) -> Any:
    """Mean F1 and mean AUC of each group (a `group_summary` frame) as two bar charts side by side, one row per group.

    Rows have a fixed height (`GROUP_ROW_PX`), so the chart grows with the groups instead of squeezing them; group
    names sit left of the first chart (up to `GROUP_LABEL_PX` wide), the metric names above each chart.
    """
    import altair as alt

    tip = [alt.Tooltip(f"{by}:N", title="group"), alt.Tooltip("codes:Q", title="codes"),
           alt.Tooltip("test_notes:Q", title="test notes"), alt.Tooltip("mean_f1:Q", title="mean F1", format=".3f"),
           alt.Tooltip("mean_auc:Q", title="mean AUC", format=".3f")]
    base = alt.Chart(g).properties(width=260, height=alt.Step(GROUP_ROW_PX))
    f1 = base.mark_bar(color="#4c78a8").encode(
        y=alt.Y(f"{by}:N", sort=list(order), title=None, axis=alt.Axis(labelLimit=GROUP_LABEL_PX, labelFontSize=12)),
        x=alt.X("mean_f1:Q", title="mean F1", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(orient="top")),
        tooltip=tip)
    auc = base.mark_bar(color="#f58518").encode(
        y=alt.Y(f"{by}:N", sort=list(order), axis=None),
        x=alt.X("mean_auc:Q", title="mean AUC (codes with one)", scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(orient="top")),
        tooltip=tip)
    return alt.hconcat(f1, auc, spacing=16)


def rank_codes(frame: pd.DataFrame, *, best: bool, n: int = 15, min_support: int = 5) -> pd.DataFrame:
    """The n best (or worst) codes by F1, then AUC, among codes with at least `min_support` test notes."""
    sure = frame[frame["support"] >= min_support]
    return sure.sort_values(["f1", "auc", "code"], ascending=[not best, not best, True]).head(n)


def filter_codes(frame: pd.DataFrame, query: str) -> pd.DataFrame:
    """Rows whose code starts with the query or whose description (or chapter) holds every word of it."""
    words = query.lower().split()
    if not words:
        return frame
    q = query.strip().lower()
    text = (frame["description"].fillna("") + " " + frame["chapter"].fillna("")).str.lower()
    hit = frame["code"].str.lower().str.startswith(q) | text.map(lambda t: all(w in t for w in words))
    return frame[hit]


OUTCOME_COLOURS = {"TP": "rgba(46, 160, 67, 0.25)", "FP": "rgba(255, 152, 0, 0.28)", "FN": "rgba(229, 57, 53, 0.25)"}


def style_outcomes(table: pd.DataFrame) -> Any:
    """A pandas Styler colouring the outcome cells (TP green, FP orange, FN red); the table itself if no gold."""
    if "outcome" not in table.columns:
        return table
    return table.style.map(lambda v: f"background-color: {OUTCOME_COLOURS[v]}" if v in OUTCOME_COLOURS else "",
                           subset=["outcome"])


def outcome_counts(table: pd.DataFrame) -> dict[str, int]:
    """{"TP": n, "FP": n, "FN": n} from a `code_table` with gold."""
    if "outcome" not in table.columns:
        return {}
    vc = table["outcome"].value_counts()
    return {k: int(vc.get(k, 0)) for k in ("TP", "FP", "FN")}


# ------------------------------------------------------------------------------------------ highlighting
def _weight(span: Any) -> tuple[int, int, float]:
    if isinstance(span, Mapping):
        return int(span["start"]), int(span["end"]), float(span["weight"])
    if isinstance(span, (tuple, list)):
        return int(span[0]), int(span[1]), float(span[2])
    return int(span.start), int(span.end), float(span.weight)


def highlight_html(
    text: str,
    spans: Sequence[Any],
    *,
    rgb: tuple[int, int, int] = ATTENTION_RGB,
    css_class: str = "attn",
    min_alpha: float = 0.0,
    scale: str = "max",
    element_id: str = "note-hl",
) -> str:
    """The note as HTML with `<mark>` spans whose opacity follows their weight.

    Spans are [start, end) character offsets into `text` with a weight (objects with .start/.end/.weight,
    dicts or tuples). Overlapping spans are cut at every boundary and each piece takes the largest weight
    covering it; adjacent spans stay separate marks. Opacity = weight / max weight (scale="max") or
    (weight - min) / (max - min) over the spans (scale="range", for near-uniform weights such as beta);
    pieces below `min_alpha` are left unmarked. Every piece of `text` is `html.escape`d, marked or not.

    Args:
        text: the note.
        spans: highlight spans; out-of-range offsets are clipped, empty or non-positive-weight ones ignored.
        rgb: highlight colour.
        css_class: class of each `<mark>`.
        min_alpha: hide pieces fainter than this (e.g. 0.05 for the attention over every token).
        scale: "max" or "range" (see above).
        element_id: id of the wrapping `<div>`.
    Returns:
        One `<div>` string (white-space: pre-wrap, so line breaks show).
    """
    n = len(text)
    clean = []
    for sp in spans:
        a, b, w = _weight(sp)
        a, b = max(0, min(a, n)), max(0, min(b, n))
        if b > a and w > 0:
            clean.append((a, b, w))
    top = max((w for _, _, w in clean), default=0.0)
    low = min((w for _, _, w in clean), default=0.0) if scale == "range" else 0.0
    if scale not in ("max", "range"):
        raise ValueError(f"scale must be 'max' or 'range', got {scale!r}")
    cuts = sorted({0, n, *(a for a, _, _ in clean), *(b for _, b, _ in clean)})
    r, g, bl = rgb
    parts = []
    for lo, hi in zip(cuts, cuts[1:]):
        piece = html.escape(text[lo:hi], quote=True)
        w = max((sw for a, b, sw in clean if a <= lo and hi <= b), default=0.0)
        alpha = (w - low) / (top - low) if top > low else (1.0 if w > 0 else 0.0)
        if w > 0 and alpha >= min_alpha:
            a_str = f"{max(alpha, 0.08):.2f}"
            parts.append(
                f'<mark class="{css_class}" data-start="{lo}" data-end="{hi}" title="{w:.4f}" '
                f'style="background-color: rgba({r}, {g}, {bl}, {a_str}); color: inherit; padding: 0 '
                '1px; border-radius: 2px">'
                f"{piece}</mark>"
            )
        else:
            parts.append(piece)
    return (
        f'<div id="{element_id}" class="note-hl" style="white-space: pre-wrap; font-family: ui-monospace, monospace; '
        f'font-size: 0.85rem; line-height: 1.55; max-height: 32rem; overflow-y: auto; padding: 0.75rem; '
        f'border: 1px solid rgba(128,128,128,0.35); border-radius: 0.4rem">' + "".join(parts) + "</div>"
    )


# One colour per shown code (colour-blind-safe, Okabe-Ito order), reused in turn beyond eight codes; each code is
# also named beside its words, so the colour is never the only mark.
CODE_PALETTE = ((0, 114, 178), (213, 94, 0), (0, 158, 115), (204, 121, 167), (86, 180, 233), (230, 159, 0),
                (117, 112, 179), (153, 153, 153))


def codes_html(text: str, spans_by_code: Mapping[str, Sequence[Any]], *, suggested: Sequence[str] = (),
               element_id: str = "note-hl") -> str:
    """The note as HTML with each code's own evidence: its spans marked in that code's colour (CODE_PALETTE, in the
    order of SPANS_BY_CODE) and the code named right after its words (`<sup class="code-tag">`); a SUGGESTED code's
    name ends in "?" and its marks are dashed (a suggestion from the title, not a prediction).

    Spans are (start, end[, weight]) offsets, dicts or objects; where two codes' spans overlap, the earlier span
    keeps the words (a span is never split) and the later code is named beside them too. Every piece of `text` and
    every code is `html.escape`d.
    """
    n = len(text)
    marks = []
    for i, (code, spans) in enumerate(spans_by_code.items()):
        for sp in spans:
            a, b = (int(sp["start"]), int(sp["end"])) if isinstance(sp, Mapping) else \
                (int(sp[0]), int(sp[1])) if isinstance(sp, (tuple, list)) else (int(sp.start), int(sp.end))
            a, b = max(0, min(a, n)), max(0, min(b, n))
            if b > a:
                marks.append((a, b, i, code))
    marks.sort(key=lambda m: (m[0], m[2]))
    parts, pos, last = [], 0, (-1, -1)
    shown = set(suggested)

    def tag(code: str, i: int) -> str:
        r, g, bl = CODE_PALETTE[i % len(CODE_PALETTE)]
        c = html.escape(code, quote=True)
        return (f'<sup class="code-tag" data-code="{c}" style="color: rgb({r}, {g}, {bl}); font-weight: 600">'
                f'{c}{"?" if code in shown else ""}</sup>')

    for a, b, i, code in marks:
        if a < pos:  # overlaps the span drawn last: its words stay as drawn; this code is named beside them too
            if a < last[1] and b > last[0] and f'data-code="{html.escape(code, quote=True)}"' not in parts[-1]:
                parts[-1] += tag(code, i)
            continue
        r, g, bl = CODE_PALETTE[i % len(CODE_PALETTE)]
        c = html.escape(code, quote=True)
        sug = code in shown
        border = "dashed" if sug else "solid"
        parts.append(html.escape(text[pos:a], quote=True))
        parts.append(
            f'<mark class="code-ev{" suggested" if sug else ""}" data-code="{c}" data-start="{a}" data-end="{b}" '
            f'style="background-color: rgba({r}, {g}, {bl}, 0.22); border-bottom: 2px {border} rgb({r}, {g}, {bl}); '
            f'color: inherit; padding: 0 1px; border-radius: 2px">{html.escape(text[a:b], quote=True)}</mark>'
            + tag(code, i)
        )
        pos, last = b, (a, b)
    parts.append(html.escape(text[pos:], quote=True))
    return (
        f'<div id="{element_id}" class="note-hl" style="white-space: pre-wrap; font-family: ui-monospace, monospace; '
        f'font-size: 0.85rem; line-height: 1.7; max-height: 32rem; overflow-y: auto; padding: 0.75rem; '
        f'border: 1px solid rgba(128,128,128,0.35); border-radius: 0.4rem">' + "".join(parts) + "</div>"
    )


def suggestion_table(suggested: Sequence[Any]) -> pd.DataFrame:
    """The codes suggested from their titles (`Prediction.suggested`), best first: code, title, why."""
    return pd.DataFrame({"code": [x.code for x in suggested], "title": [x.title for x in suggested],
                         "why": [x.reason for x in suggested]}, columns=["code", "title", "why"])


def code_tags(html_str: str) -> list[tuple[str, str]]:
    """(code, words) of each code named in `codes_html` output, in note order: the words are those of the mark the
    code's name follows (a code whose span overlaps another's is named beside those words)."""
    import re

    out = []
    for words, tags in re.findall(r'<mark class="code-ev[^"]*"[^>]*>(.*?)</mark>((?:<sup class="code-tag"[^>]*>'
                                  r'[^<]*</sup>)+)', html_str, flags=re.S):
        out += [(html.unescape(c), html.unescape(words)) for c in re.findall(r'data-code="([^"]*)"', tags)]
    return out


def marked_texts(html_str: str) -> list[str]:
    """The unescaped text inside each `<mark>` of `highlight_html` output (for tests and checks)."""
    out, pos = [], 0
    while (i := html_str.find("<mark", pos)) != -1:
        j = html_str.index(">", i) + 1
        k = html_str.index("</mark>", j)
        out.append(html.unescape(html_str[j:k]))
        pos = k + len("</mark>")
    return out


# ------------------------------------------------------------------------------------------ exports
def prediction_record(
    pred: Any, *, threshold: float, run: str, note_id: str | None = None, gold: Sequence[str] | None = None,
    single_label: bool = False, descriptions: Mapping[str, str] | None = None, terminology: Iterable[str] = (),
) -> dict[str, Any]:
    """One note's JSON export (no note text): the output record of `clinicode predict` (`Prediction.to_dict()`) at the
    app's threshold (`Prediction.at`, the one predicted-codes rule), plus "run", "threshold", "n_tokens" and, when
    known, "gold".

    Args:
        pred: a `clinicode.predict.Prediction` made with top_k None (scores for every code); its `code_phrases`
            holds the evidence of (at least) the predicted codes.
        threshold: the threshold chosen in the app.
        run: the run (model) name.
        note_id: id of a test-split note, if any.
        gold: its gold codes, if known.
        single_label: the model's prediction is its top code.
        descriptions: code -> title (else the titles carried by `pred.predicted`).
        terminology: the codes scored from a terminology's titles alone (`Predictor.terminology_codes`): marked
            `source` "terminology" when predicted at THRESHOLD, as `clinicode predict` marks them.
    """
    at_threshold = pred.at(threshold, single_label=single_label, descriptions=descriptions,
                           terminology=frozenset(terminology))
    if note_id is not None:
        at_threshold.id = note_id
    rec: dict[str, Any] = {**at_threshold.to_dict(), "run": run, "threshold": float(threshold),
                           "n_tokens": at_threshold.n_tokens}
    if gold is not None:
        rec["gold"] = list(gold)
    return rec


def json_bytes(obj: Any) -> bytes:
    """Pretty UTF-8 JSON."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# ------------------------------------------------------------------------------------------ model card
def model_name(card: Mapping[str, Any]) -> str:
    """The model a card describes, as a person reads it: "LEAM + evidence" (clinicode's default: code evidence),
    "LEAM (paper)" (Wang et al.'s model exactly, `train --paper` or a run from before the default changed),
    "LEAM (variant)" (neither) or "tfidf-lr": the card's model kind names it (`ModelKind.display_name`)."""
    from clinicode.serving import MODEL_KINDS

    name = str(card.get("model", "?"))
    kind = MODEL_KINDS.get(name)
    return kind.display_name(card.get("model_config") or {}) if kind is not None else name


def model_caption(card: Mapping[str, Any]) -> str:
    """One sentence under the model's name saying which model this run is."""
    name, mc = model_name(card), card.get("model_config") or {}
    if name == "LEAM (paper)":
        return "The paper's model: LEAM exactly as Wang et al. (ACL 2018) describe it (`train --paper`)."
    parts = (["each code's score also counts its best phrase match anywhere in the note"] if mc.get("code_evidence")
             else []) + (["the phrase window's weights are kept non-negative"] if mc.get("window_nonneg") else [])
    if not parts:
        return ""
    default = " (clinicode's default; `train --paper` gives the paper's model)" if name == "LEAM + evidence" else ""
    return "Not the paper's LEAM: " + " and ".join(parts) + default + "; docs/training.md."


def flat_items(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Nested dict -> sorted (dotted key, value as text) pairs for a two-column settings table."""
    out: list[tuple[str, str]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.extend(flat_items(v, key + "."))
        elif isinstance(v, (list, tuple)) and len(v) > 8:
            out.append((key, f"[{len(v)} items]"))
        else:
            out.append((key, json.dumps(v) if not isinstance(v, str) else v))
    return out


HEADLINE = [(k, METRIC_LABELS[k]) for k in SUMMARY]  # (key, label) of the metric cards: clinicode.metrics' one list


def headline_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float | None]:
    """The six headline numbers (label -> value or None) from a metrics dict."""
    m = metrics or {}
    out: dict[str, float | None] = {}
    for key, label in HEADLINE:
        v = m.get(key)
        out[label] = None if v is None or (isinstance(v, float) and v != v) else float(v)
    return out


# ------------------------------------------------------------------------------------------ seeds and rare codes
SEED_METRICS = (("f1_micro", "Micro F1"), ("auc_macro", "Macro AUC"), ("f1_macro", "Macro F1"), ("prec_at_5", "P@5"),
                ("rare.auc_macro", "Rare codes: macro AUC"), ("rare.f1_macro", "Rare codes: macro F1"))


def _metric(m: Mapping[str, Any], key: str) -> float | None:
    if key.startswith("rare."):
        v = ((m.get("slices") or {}).get("rare") or {}).get(key[5:])
    else:
        v = m.get(key)
    return None if v is None or (isinstance(v, float) and v != v) else float(v)


def seed_spread(metrics: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per metric over runs that differ only in their seed: mean, sd (n-1), worst, best and the worst's gap to the mean.

    `metrics`: each run's test metrics (metrics_test.json). A metric no run has is left out.
    """
    rows = []
    for key, label in SEED_METRICS:
        vals = [v for v in (_metric(m, key) for m in metrics) if v is not None]
        if not vals:
            continue
        s = pd.Series(vals)
        rows.append({"metric": label, "runs": len(vals), "mean": s.mean(),
                     "sd": s.std(ddof=1) if len(vals) > 1 else None,
                     "worst": s.min(), "best": s.max(), "worst below mean": s.mean() - s.min()})
    return pd.DataFrame(rows, columns=["metric", "runs", "mean", "sd", "worst", "best", "worst below mean"])


def slice_table(metrics: Mapping[str, Any]) -> pd.DataFrame | None:
    """The rare/frequent slice of one run's test metrics as a table, or None when the run did not record it."""
    sl = metrics.get("slices")
    if not sl:
        return None
    below = sl.get("rare_below", 20)
    rows = []
    for name, title in (("rare", f"rare (< {below} training notes)"), ("frequent", f"frequent (>= {below})")):
        part = sl.get(name) or {}
        rows.append({"codes": title, "in the label set": part.get("n_codes"), "present in test": part.get("n_present"),
                     "macro AUC": part.get("auc_macro"), "macro F1": part.get("f1_macro")})
    return pd.DataFrame(rows)


EVIDENCE_ROWS = (("model", "this model's highlights"), ("title", "title words found in the note"),
                 ("random", "random words, same lengths"))


def evidence_table(evidence: Mapping[str, Any] | None) -> pd.DataFrame | None:
    """A run's evidence quality (`evidence` of its test metrics, docs/metrics.md) as a table: the model's highlights,
    then the two floors; None when the run's test notes carried no gold mentions."""
    if not evidence or not evidence.get("n_pairs"):
        return None
    k = evidence.get("k", 5)
    rows = []
    for key, title in EVIDENCE_ROWS:
        q = evidence.get(key)
        if not q:
            continue
        rows.append({"spans": title, "hit@1": q["hit_at_1"], f"hit@{k}": q["hit_at_k"],
                     "word precision": q["token_precision"], "word recall": q["token_recall"],
                     "word F1": q["token_f1"], "words per code": q["words_per_code"]})
    return pd.DataFrame(rows)
