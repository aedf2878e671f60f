"""Scoring notes with a checkpoint: `Predictor.from_checkpoint(dir).predict(texts)` -> typed records.

The CLI, `evaluate` and the app all score through `Predictor.score`, so their numbers agree exactly.
Scoring runs the model's own forward (`LEAM.forward`) as `clinicode.memory.plan` decides within the memory budget:
with few codes, G comes from the word-code cosine table stored offline (the paper's "store G offline",
`LEAM.word_code_table`: one [V, K] matrix per loaded checkpoint, so a note's G is a row gather); with many codes, the
window runs on the word vectors and the codes are scored a block at a time.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from clinicode.batching import bucketed_batches, pad_batch
from clinicode.checkpoint import Checkpoint, load_checkpoint
from clinicode.codes.systems import CodeSystem
from clinicode.codes.titles import TitleIndex, TitleMatch
from clinicode.config import PREDICT, check_threshold
from clinicode.errors import ConfigError
from clinicode.kernels import EPS
from clinicode.memory import MemoryPlan, plan
from clinicode.metrics import EVIDENCE_K, evidence_figures, predicted_codes, predicted_indices
from clinicode.records import Record, Upload, read_records, text_error  # noqa: F401  (the app reads uploads through predict)
from clinicode.runtime import pick_device

log = logging.getLogger(__name__)
_PIPELINE_CHUNK = 256  # notes tokenised ahead while the model scores the previous chunk
# A code's evidence: the words whose cosine with the code vector is at least this share of the note's best for that
# code. Chosen on bc5cdr dev against gold mentions (docs/accuracy-tuning.md, round 12; docs/predict.md).
WORD_BAR = 0.8
TITLE_SUGGESTIONS = 10  # title suggestions per note at most (bc5cdr dev: 0.46 per note on average)


def _top(values: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n largest values, largest first (ties by position)."""
    if n >= len(values):
        return np.argsort(-values, kind="stable")
    kth = np.partition(values, len(values) - n)[len(values) - n]                  # the n-th largest value
    above = np.flatnonzero(values > kth)
    idx = np.concatenate([above, np.flatnonzero(values == kth)[: n - len(above)]])  # ties: earliest first
    return idx[np.lexsort((idx, -values[idx]))]                                   # == stable argsort[:n]


def _word_spans(offs: Sequence[tuple[int, int]], g: np.ndarray, n: int) -> list[Span]:
    """A code's evidence in one note: the words whose cosine with the code vector is at least `WORD_BAR` times the
    note's best (the best word alone when no cosine is positive), neighbouring words joined into one span; the spans
    ranked by their best word's cosine (the weight), ties by position; at most n.

    Args:
        offs: [L] each token's character span.
        g: [L] each token's cosine with the code vector (`Predictor._word_rows`).
        n: spans at most.
    """
    if not len(g) or n < 1:
        return []
    top = float(g.max())
    picked = np.flatnonzero(g >= WORD_BAR * top) if top > 0 else np.array([int(g.argmax())])
    runs: list[list[int]] = []
    for i in picked.tolist():
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    best = [float(g[r].max()) for r in runs]
    order = sorted(range(len(runs)), key=lambda x: (-best[x], runs[x][0]))[:n]
    return [Span(offs[runs[x][0]][0], offs[runs[x][-1]][1], best[x]) for x in order]


@contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op threads (None: leave as is)."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# evidence_quality of a checkpoint that shows no per-code spans
NO_PHRASES = "a tfidf-lr checkpoint shows no per-code spans; only the floors are measured"

@dataclass(frozen=True)
class Span:
    """A character span [start, end) of the original note with a weight."""

    start: int
    end: int
    weight: float


@dataclass(frozen=True)
class CodeScore:
    code: str
    description: str
    score: float


@dataclass
class Prediction:
    """One note's result. `error` is set (and scores empty) when the note could not be scored.

    evidence: the highest-attention token spans (beta), when explain > 0.
    code_phrases: for each predicted code, at most `explain` spans of the words closest to the code vector (cosine at
        least `WORD_BAR` of the note's best; neighbouring words joined), best first, weighted by that cosine.
    attention: every kept token's span with its beta weight (for highlighting), when explain > 0.
    title_suggestions: when the predictor was given titles, the codes outside the checkpoint's whose every title word
        occurs in the note, most specific first: suggestions from the title, not predictions (no model score, no
        threshold).
    """

    id: str | None
    predicted: list[CodeScore] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    truncated: bool = False
    n_tokens: int = 0
    evidence: list[Span] | None = None
    code_phrases: dict[str, list[Span]] | None = None
    attention: list[Span] | None = None
    error: str | None = None
    title_suggestions: list[TitleMatch] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON output record (see `clinicode predict`)."""
        if self.error is not None:
            return {"id": self.id, "error": self.error}
        out: dict[str, Any] = {
            "id": self.id,
            "predicted": [{"code": c.code, "description": c.description, "score": c.score} for c in self.predicted],
            "scores": self.scores,
            "truncated": self.truncated,
        }
        if self.evidence is not None:
            out["evidence"] = {
                "spans": [_span(s) for s in self.evidence],
                "codes": {c: [_span(s) for s in spans] for c, spans in (self.code_phrases or {}).items()},
            }
        if self.title_suggestions is not None:
            out["title_suggestions"] = [{"code": m.code, "title": m.title, "specificity": m.specificity,
                                         "spans": [{"start": a, "end": b} for a, b in m.spans]}
                                        for m in self.title_suggestions]
        return out

    def at(self, threshold: float, *, single_label: bool = False,
           descriptions: Mapping[str, str] | None = None) -> Prediction:
        """The same prediction with `predicted` recomputed at THRESHOLD by the one rule (`metrics.predicted_codes`).

        Only codes in `scores` can be predicted: to move the threshold freely, predict with top_k=None (every code).
        `code_phrases` keeps the evidence of the codes still predicted (a newly predicted code has what it already had,
        if anything); everything else is unchanged. A record with an error is returned as a copy.

        Args:
            threshold: the new cut-off, in [0, 1].
            single_label: the model predicts its top code alone (whatever the threshold), as `Predictor.single_label`.
            descriptions: code -> title for codes not predicted before (else the titles `predicted` carries, or "").
        Returns:
            A new Prediction; this one is not changed.
        Raises:
            ConfigError: a threshold outside [0, 1] (the rule of `clinicode.config.check_threshold`).
        """
        t = check_threshold(float(threshold))
        if self.error is not None:
            return replace(self)
        titles = {**{c.code: c.description for c in self.predicted}, **(descriptions or {})}
        codes = predicted_codes(self.scores, t, single_label=single_label)
        phrases = None if self.code_phrases is None else {c: self.code_phrases[c] for c in codes
                                                           if c in self.code_phrases}
        return replace(self, predicted=[CodeScore(c, titles.get(c, ""), float(self.scores[c])) for c in codes],
                       scores=dict(self.scores), code_phrases=phrases)


def _span(s: Span) -> dict[str, Any]:
    return {"start": s.start, "end": s.end, "weight": s.weight}


@dataclass
class Prepared:
    """Notes checked and tokenised by `Predictor.prepare`, waiting for `Predictor.finish`."""

    ids: list[str]
    errors: dict[int, str]          # position -> the record's error
    good: list[int]                 # positions of the notes to score
    texts: list[str]                # their texts
    encs: list[Any] | None          # their encodings (LEAM)


class Predictor:
    """Scores notes with a loaded checkpoint. Thread-safe for concurrent `predict` calls (no mutation).

    Args:
        checkpoint: a loaded `Checkpoint`.
        device: torch device for LEAM.
    """

    def __init__(self, checkpoint: Checkpoint, *, device: torch.device | str = "cpu",
                 batch_size: int = PREDICT.batch_size,
                 memory_mb: int = PREDICT.memory_mb, titles: Mapping[str, str] | None = None) -> None:
        self.checkpoint = checkpoint
        self.labels = checkpoint.labels
        self.threshold = checkpoint.threshold
        self.kind = checkpoint.kind
        self.single_label = checkpoint.single_label  # softmax scores: the top code is the prediction
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.plan: MemoryPlan | None = None
        self._table: torch.Tensor | None = None
        # codes the checkpoint was not trained on, suggested from their titles (`title_suggestions`), when given
        self.title_index = TitleIndex(titles, exclude=self.labels.codes) if titles else None
        if self.kind == "leam":
            model = checkpoint.model
            self.plan = plan(model.config, batch_size=batch_size, max_len=checkpoint.max_len, budget_mb=memory_mb,
                             device=self.device.type, training=False, fast=model.fast)
            if self.plan.use_table:
                self._table = model.word_code_table()                                     # [V, K] G, stored offline

    @classmethod
    def from_checkpoint(cls, path: Path | str, *, device: str = "auto", batch_size: int = PREDICT.batch_size,
                        memory_mb: int = PREDICT.memory_mb, titles: Mapping[str, str] | None = None) -> "Predictor":
        """Load (and verify) a checkpoint folder or a run folder containing checkpoint/.

        `titles` (code -> title): codes outside the checkpoint's, suggested from their titles in every record
        (`Prediction.title_suggestions`; docs/predict.md).
        """
        dev = pick_device(device)
        return cls(load_checkpoint(Path(path), device=dev), device=dev, batch_size=batch_size, memory_mb=memory_mb,
                   titles=titles)

    @property
    def codes(self) -> tuple[str, ...]:
        return self.labels.codes

    @property
    def code_system(self) -> CodeSystem:
        """The checkpoint's CodeSystem (recorded in its labels.json, or inferred once at load for older ones)."""
        return self.labels.code_system  # type: ignore[return-value]  (load_checkpoint always sets it)

    @property
    def max_len(self) -> int:
        return self.checkpoint.max_len

    # ---------------------------------------------------------------- scoring
    def _run(self, texts: Sequence[str], *, offsets: bool, attention: bool, want_doc: bool = False):
        """Scores plus optional per-note attention; notes keep their input order.

        Tokenisation (Rust, all cores, GIL released) of the next chunk overlaps the model on the current one,
        and on CPU the model runs on one thread: its ops are small and cache-resident, and two threads
        synchronising on every op were several times slower on a 2-core machine.
        """
        K = len(self.labels)
        n = len(texts)
        scores = np.zeros((n, K), dtype=np.float32)
        extras: list[Any] = [None] * n
        docs = np.zeros((n, self.checkpoint.model.config.embed_dim), dtype=np.float32) if want_doc else None
        tok = self.checkpoint.tokenizer
        starts = list(range(0, n, _PIPELINE_CHUNK))
        encs: list[Any] = []
        with ThreadPoolExecutor(max_workers=1) as pool, _torch_threads(1 if self.device.type == "cpu" else None), \
                torch.inference_mode():
            pending = pool.submit(tok.encode, texts[0:_PIPELINE_CHUNK], offsets=offsets)
            for c, start in enumerate(starts):
                chunk = pending.result()
                if c + 1 < len(starts):
                    nxt = starts[c + 1]
                    pending = pool.submit(tok.encode, texts[nxt:nxt + _PIPELINE_CHUNK], offsets=offsets)
                encs.extend(chunk)
                self._forward([e.ids for e in chunk], start, scores, docs=docs, extras=extras if attention else None)
        return scores, encs, extras, docs

    def _forward(self, id_lists: Sequence[Sequence[int]], start: int, scores: np.ndarray, *,
                 docs: np.ndarray | None = None, extras: list[Any] | None = None) -> None:
        """The model's forward (as the memory plan says) over length-bucketed batches of encoded notes; fills rows
        start.. of `scores` (and `docs`, and each note's beta in `extras`)."""
        model = self.checkpoint.model
        lengths = [len(x) for x in id_lists]
        for batch in bucketed_batches(lengths, self.batch_size, rng=None):
            ids, mask = pad_batch([id_lists[i] for i in batch])
            out = model(ids.to(self.device), mask.to(self.device),
                        return_attention=extras is not None or docs is not None,
                        table=self._table, block=self.plan.block, order=self.plan.order)
            rows = batch + start
            scores[rows] = model.probabilities(out.logits).float().cpu().numpy()
            if docs is not None:
                docs[rows] = out.doc.float().cpu().numpy()
            if extras is not None:
                beta_np = out.beta.float().cpu().numpy()
                for j, i in enumerate(batch):
                    extras[start + i] = beta_np[j, :lengths[i]]

    def score_ids(self, id_lists: Sequence[Sequence[int]]) -> np.ndarray:
        """[N, K] float32 probabilities for notes already encoded by this checkpoint's tokenizer (LEAM only).

        The same computation as `score`, without tokenising again: training scores dev with it every epoch.
        """
        if self.kind != "leam":
            raise ConfigError("score_ids needs a LEAM checkpoint; tfidf-lr scores texts (use score).")
        scores = np.zeros((len(id_lists), len(self.labels)), dtype=np.float32)
        with _torch_threads(1 if self.device.type == "cpu" else None), torch.inference_mode():
            self._forward(id_lists, 0, scores)
        return scores

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """[N, K] float32 probabilities for notes, in input order (the number `evaluate` uses)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        if self.kind == "tfidf-lr":
            return self.checkpoint.model.predict_proba(texts).astype(np.float32)
        return self._run(texts, offsets=False, attention=False)[0]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """[N, P] attended note vectors z (LEAM only), for the label-embedding map."""
        if self.kind != "leam":
            raise ConfigError("note embeddings exist only for LEAM checkpoints; this one is tfidf-lr.")
        return self._run(list(texts), offsets=False, attention=False, want_doc=True)[3]

    def label_embeddings(self) -> np.ndarray:
        """[K, P] the learned code vectors C (LEAM only)."""
        if self.kind != "leam":
            raise ConfigError("code embeddings exist only for LEAM checkpoints; this one is tfidf-lr.")
        return self.checkpoint.model.label_emb.detach().float().cpu().numpy()

    def predict(
        self,
        texts: Sequence[str],
        *,
        ids: Sequence[str] | None = None,
        top_k: int | None = PREDICT.top_k,
        threshold: float | None = None,
        explain: int = PREDICT.explain,
        attention: bool = True,
    ) -> list[Prediction]:
        """Codes, scores and (optionally) evidence for each note.

        Args:
            texts: raw notes; a non-string or blank note gets a record with `error` instead of scores.
            ids: one id per note (default: the position as a string).
            top_k: how many codes go into `scores` (None: all codes).
            threshold: codes scoring strictly above it are `predicted` (default: the checkpoint's tuned one); a
                single-label model predicts its top code, whatever the threshold.
            explain: N > 0 adds the N highest-attention spans and, per predicted code, at most N evidence spans.
            attention: with explain > 0, also fill `attention` (every token's span and beta, for highlighting);
                batch scoring turns it off, since its output records do not include it.
        Returns:
            one Prediction per note, in input order.
        """
        return self.finish(self.prepare(texts, ids=ids, explain=explain), top_k=top_k, threshold=threshold,
                           explain=explain, attention=attention)

    def prepare(self, texts: Sequence[str], *, ids: Sequence[str] | None = None,
                explain: int = PREDICT.explain) -> "Prepared":
        """The first half of `predict`: check every note and tokenise the good ones (no model; thread-safe).

        Batch scoring runs it on the next chunk of notes while `finish` scores the current one.
        """
        texts = list(texts)
        ids = [str(i) for i in range(len(texts))] if ids is None else [str(i) for i in ids]
        if len(ids) != len(texts):
            raise ConfigError(f"predict: {len(texts)} notes but {len(ids)} ids; give one id per note.")
        errors: dict[int, str] = {}
        good = []
        for i, text in enumerate(texts):
            err = text_error(ids[i], text)
            if err:
                errors[i] = err
            else:
                good.append(i)
        good_texts = [texts[i] for i in good]
        encs = self.checkpoint.tokenizer.encode(good_texts,
                                                offsets=explain > 0) if self.kind == "leam" and good else None
        return Prepared(ids, errors, good, good_texts, encs)

    def finish(self, prepared: "Prepared", *, top_k: int | None = PREDICT.top_k, threshold: float | None = None,
               explain: int = PREDICT.explain, attention: bool = True) -> list[Prediction]:
        """The second half of `predict`: score the prepared notes and build their records (see `predict`)."""
        t = self.threshold if threshold is None else check_threshold(float(threshold))
        K = len(self.labels)
        k_keep = K if top_k is None else max(0, min(int(top_k), K))
        ids, good, encs = prepared.ids, prepared.good, prepared.encs
        out: list[Prediction | None] = [None] * len(ids)
        for i, err in prepared.errors.items():
            out[i] = Prediction(ids[i], error=err)
        if not good:
            return out  # type: ignore[return-value]
        extras: list[Any] | None = None
        if self.kind == "leam":
            scores = np.zeros((len(good), K), dtype=np.float32)
            extras = [None] * len(good) if explain > 0 else None
            with _torch_threads(1 if self.device.type == "cpu" else None), torch.inference_mode():
                self._forward([e.ids for e in encs], 0, scores, extras=extras)
        else:
            scores = self.score(prepared.texts)
        codes, descs = self.labels.codes, self.labels.descriptions
        for j, i in enumerate(good):
            s = scores[j]
            keep = predicted_indices(s, t, single_label=self.single_label)                # the one rule
            predicted = [CodeScore(codes[k], descs[k], float(s[k])) for k in keep]
            top = {codes[k]: float(s[k]) for k in _top(s, k_keep)} if k_keep else {}
            rec = Prediction(ids[i], predicted=predicted, scores=top)
            if encs is not None:
                rec.truncated, rec.n_tokens = encs[j].truncated, len(encs[j].ids)
                if len(encs[j].ids) == 0:
                    rec.error = (f"note {ids[i]!r}: no words after tokenisation (numbers and punctuation only); "
                                 "nothing to code")
                    rec.predicted, rec.scores = [], {}
            if self.title_index is not None and rec.error is None:
                rec.title_suggestions = self.title_index.match(prepared.texts[j], limit=TITLE_SUGGESTIONS)
            if explain > 0 and extras is not None and extras[j] is not None and rec.error is None:
                beta = extras[j]
                offs = encs[j].offsets
                if attention:
                    rec.attention = [Span(a, b, float(w)) for (a, b), w in zip(offs, beta)]
                rec.evidence = [Span(offs[p][0], offs[p][1], float(beta[p])) for p in _top(beta, explain)]
                ks = [self.labels.index(c.code) for c in predicted]
                g = self._word_rows(np.asarray(encs[j].ids), ks)                           # [n, L]
                rec.code_phrases = {c.code: _word_spans(offs, row, explain) for c, row in zip(predicted, g)}
            out[i] = rec
        return out  # type: ignore[return-value]

    def correct_code_spans(self, texts: Sequence[str], gold: Sequence[Sequence[str]], *, explain: int,
                           threshold: float | None = None) -> list[dict[str, list[tuple[int, int]] | None]]:
        """Each note's correctly predicted codes (gold, and predicted at the threshold) with the spans
        `predict(..., explain=explain)` shows for them, best first (None for tfidf-lr, which shows none): what
        `clinicode.metrics.evidence_figures` judges against gold mentions.

        Args:
            texts: [n_notes] the notes.
            gold: per note, its gold codes.
            explain: spans per code.
            threshold: the cut-off for "predicted" (default: the checkpoint's).
        """
        leam = self.kind == "leam"
        records = self.predict(texts, explain=explain if leam else 0, top_k=0, threshold=threshold, attention=False)
        out: list[dict[str, list[tuple[int, int]] | None]] = []
        for rec, codes in zip(records, gold, strict=True):
            wanted, phrases = set(codes), rec.code_phrases or {}
            out.append({c.code: ([(s.start, s.end) for s in phrases.get(c.code, [])] if leam else None)
                        for c in rec.predicted if c.code in wanted})
        return out

    def evidence_quality(self, texts: Sequence[str], gold: Sequence[Sequence[str]],
                         mentions: Sequence[Sequence[Mapping[str, Any]]], *, k: int = EVIDENCE_K,
                         threshold: float | None = None) -> dict[str, Any] | None:
        """How well the spans shown for each correctly predicted code point at its gold mentions, beside the random
        and title-word floors (`clinicode.metrics.evidence_figures`): what `evaluate` reports and `train` saves.

        Args:
            texts: [n_notes] the notes.
            gold: per note, its gold codes.
            mentions: per note, its gold mentions ({code, start, end}).
            k: spans per code (the explain count), >= 1.
            threshold: the cut-off for "predicted" (default: the checkpoint's).
        Returns:
            None when no note has a gold mention; else the figures, with a "model_note" for tfidf-lr (no spans).
        Raises:
            ConfigError: k < 1.
        """
        if k < 1:
            raise ConfigError(f"evidence needs k >= 1 spans per code (the explain count), got {k}.")
        if not any(len(m) for m in mentions):
            return None
        correct = self.correct_code_spans(texts, gold, explain=k, threshold=threshold)
        out = evidence_figures(texts, mentions, correct, dict(zip(self.labels.codes, self.labels.descriptions)), k=k)
        if self.kind != "leam":
            out["model_note"] = NO_PHRASES
        return out

    def explain_codes(self, text: str, codes: Sequence[str], n: int = 5) -> dict[str, list[Span]]:
        """Each given code's evidence spans in one note, at most n (as `predict(..., explain=n)` gives for predicted
        codes).

        For showing the evidence of any code on demand, without computing it for thousands up front (LEAM only).
        """
        if self.kind != "leam":
            raise ConfigError("phrase evidence exists only for LEAM checkpoints; this one is tfidf-lr.")
        enc = self.checkpoint.tokenizer.encode([text], offsets=True)[0]
        if not enc.ids or not codes:
            return {c: [] for c in codes}
        g = self._word_rows(np.asarray(enc.ids), [self.labels.index(c) for c in codes])
        return {c: _word_spans(enc.offsets, row, n) for c, row in zip(codes, g)}

    def _word_rows(self, tok_ids: np.ndarray, codes: list[int]) -> np.ndarray:
        """G[k, l] = cos(v_l, c_k) of one note's tokens for the given codes (LEAM's first step, docs/domain.md
        section 8): [len(codes), L] float32, from the checkpoint's word and code vectors alone."""
        model = self.checkpoint.model
        with _torch_threads(1 if self.device.type == "cpu" else None), torch.inference_mode():
            ids = torch.as_tensor(tok_ids, dtype=torch.long, device=self.device)
            V = model.word_emb.weight[ids]                                                # [L, P]
            C = model.label_emb[torch.as_tensor(codes, dtype=torch.long, device=self.device)]  # [n, P]
            Vn = V / (V.norm(dim=-1, keepdim=True) + EPS)
            Cn = C / (C.norm(dim=-1, keepdim=True) + EPS)
            return (Cn @ Vn.T).float().cpu().numpy()                                      # [n, L]

    def card(self) -> dict[str, Any]:
        """Model card: manifest, configs and metrics (for the app)."""
        ck = self.checkpoint
        return {
            "path": str(ck.path),
            "model": ck.kind,
            "manifest": ck.manifest,
            "train_config": asdict(ck.train_config),
            "model_config": asdict(ck.model.config) if ck.kind == "leam" else {},
            "threshold": ck.threshold,
            "metrics_dev": ck.metrics_dev,
            "metrics_test": ck.metrics_test,
            "n_labels": len(self.labels),
        }
