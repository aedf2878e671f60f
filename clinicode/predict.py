"""Scoring notes with a checkpoint: `Predictor.from_checkpoint(dir).predict(texts)` -> typed records.

Every face scores through it; it asks the kind's scorer (scores, spans) and `codes.suggest`, and judges nothing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

import numpy as np
import torch

from clinicode.checkpoint import Checkpoint, load_checkpoint
from clinicode.codes.suggest import CheckpointSuggestions, Suggester, Suggestion
from clinicode.codes.systems import CodeSystem
from clinicode.config import PREDICT, check_threshold
from clinicode.errors import ConfigError
from clinicode.metrics import predicted_codes, predicted_indices
from clinicode.models.spans import WORD_BAR, Span, attention_spans, top
from clinicode.records import text_error
from clinicode.runtime import pick_device

TERMINOLOGY = "terminology"   # `CodeScore.source` of a code scored from a terminology's title, with no training note

# Span, WORD_BAR: models.spans'
__all__ = ["TERMINOLOGY", "WORD_BAR", "CodeScore", "Prediction", "Predictor", "Prepared", "Span"]


def _no_words(text: str) -> str:
    """Why a note gave no tokens, from what it holds (never its text)."""
    if not any(c.isalpha() for c in text):
        return "no words after tokenisation (no letters: only numbers, punctuation, symbols or emoji)"
    return "no words after tokenisation (none of its letters form a word the model reads)"


@dataclass(frozen=True)
class CodeScore:
    code: str
    description: str
    score: float
    source: str | None = None   # "terminology": a code no training note carried, scored from its title alone


@dataclass
class Prediction:
    """One note's result. `error` is set (and scores empty) when the note could not be scored.

    evidence: the highest-attention token spans (LEAM's beta, in [0, 1]), when explain > 0.
    code_phrases: for each predicted code, at most `explain` spans of its evidence words (weight at least `WORD_BAR`
        of the note's best; neighbouring words joined), best first, as the model kind's scorer shows them and on its
        scale (`code_spans`: LEAM's cosine with the code vector, in [-1, 1]; the default model's mixed evidence, at
        most 1, and 1.9-2.1 inside one of the code's training mentions).
    attention: every kept token's span with its beta weight (for highlighting), when explain > 0.
    predicted: the codes scoring above the threshold; one whose `source` is "terminology" had no training note
        (`train --terminology`): its score comes from its title in the note alone.
    suggested: when the predictor has candidates (its code system's titles, or a titles file), the codes outside the
        checkpoint's whose title stands in the note, best first (`clinicode.codes.suggest`): suggestions from the
        title, not predictions (their score is a rank, not a probability; never in `predicted` or `scores`).
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
    suggested: list[Suggestion] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON output record (see `clinicode predict`)."""
        if self.error is not None:
            return {"id": self.id, "error": self.error}
        out: dict[str, Any] = {
            "id": self.id,
            "predicted": [{"code": c.code, "description": c.description, "score": c.score,
                           **({"source": c.source} if c.source else {})} for c in self.predicted],
            "scores": self.scores,
            "truncated": self.truncated,
        }
        if self.evidence is not None:
            out["evidence"] = {
                "spans": [_span(s) for s in self.evidence],
                "codes": {c: [_span(s) for s in spans] for c, spans in (self.code_phrases or {}).items()},
            }
        if self.suggested is not None:
            out["suggested"] = [m.to_dict() for m in self.suggested]
        return out

    def at(self, threshold: float, *, single_label: bool = False, descriptions: Mapping[str, str] | None = None,
           terminology: Collection[str] = ()) -> Prediction:
        """The same prediction with `predicted` recomputed at THRESHOLD by the one rule (`metrics.predicted_codes`).

        Only codes in `scores` can be predicted: to move the threshold freely, predict with top_k=None (every code).
        `code_phrases` keeps the evidence of the codes still predicted (a newly predicted code has what it already had,
        if anything); everything else is unchanged. A record with an error is returned as a copy.

        Args:
            threshold: the new cut-off, in [0, 1].
            single_label: the model predicts its top code alone (whatever the threshold), as `Predictor.single_label`.
            descriptions: code -> title for codes not predicted before (else the titles `predicted` carries, or "").
            terminology: the codes scored from a terminology's titles alone (`Predictor.terminology_codes`), marked
                so (`source` "terminology") when predicted, as the codes `predicted` already marks are.
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
        marks = {**{c: TERMINOLOGY for c in codes if c in terminology}, **{c.code: c.source for c in self.predicted}}
        return replace(self, predicted=[CodeScore(c, titles.get(c, ""), float(self.scores[c]), marks.get(c))
                                        for c in codes],
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
    encs: list[Any] | None          # their encodings (a kind that tokenizes: LEAM)


class Predictor:
    """Scores notes with a loaded checkpoint. Thread-safe for concurrent `predict` calls (no mutation).

    Args:
        checkpoint: a loaded `Checkpoint`.
        device: torch device for a torch model (LEAM).
    """

    def __init__(self, checkpoint: Checkpoint, *, device: torch.device | str = "cpu",
                 batch_size: int = PREDICT.batch_size,
                 memory_mb: int = PREDICT.memory_mb, titles: Mapping[str, str] | None = None,
                 tree: Mapping[str, Sequence[str]] | None = None, suggest: bool = True) -> None:
        self.checkpoint = checkpoint
        self.labels = checkpoint.labels
        self.threshold = checkpoint.threshold
        self.kind = checkpoint.kind
        self.model_kind = checkpoint.model_kind  # what the model can do: ask it, not its name
        self.device = torch.device(device)
        self.batch_size = batch_size
        # codes the checkpoint was not trained on, suggested from their titles (`suggested`): TITLES when given (built
        # now, so a bad titles file fails first), else the titles its code system ships (built on first use)
        self._suggestions = CheckpointSuggestions(self.labels.codes, self.labels.descriptions, self.code_system,
                                                  titles=titles, tree=tree, enabled=suggest)
        self.scorer = self.model_kind.scorer(checkpoint, device=self.device, batch_size=batch_size,
                                             memory_mb=memory_mb)
        self.single_label: bool = self.scorer.single_label  # softmax scores: the top code is the prediction
        # the scorer's memory plan, or None for a model without one (LEAM's: `summary()` is predict's stderr line)
        self.plan: Any = self.scorer.plan
        # codes from index on that a kind scores from a terminology's titles alone (the fused model's
        # `train --terminology`), marked so in `predicted`; len(labels): none
        self._first_term = len(self.labels) - self.scorer.terminology_codes

    @classmethod
    def from_checkpoint(cls, path: Path | str, *, device: str = "auto", batch_size: int = PREDICT.batch_size,
                        memory_mb: int = PREDICT.memory_mb, titles: Mapping[str, str] | None = None,
                        tree: Mapping[str, Sequence[str]] | None = None, suggest: bool = True) -> "Predictor":
        """Load (and verify) a checkpoint folder or a run folder containing checkpoint/.

        Suggestions (`Prediction.suggested`; docs/predict.md): `titles` (code -> title) are the candidates, default
        the checkpoint's code system's own titles (ICD-10-CM's billable codes; ICD-9-CM and MeSH ship none, so
        give them); `tree` (code -> tree numbers, MeSH's) places them in the hierarchy; `suggest=False`: none.
        """
        dev = pick_device(device)
        return cls(load_checkpoint(Path(path), device=dev), device=dev, batch_size=batch_size, memory_mb=memory_mb,
                   titles=titles, tree=tree, suggest=suggest)

    @property
    def suggester(self) -> Suggester | None:
        """The candidates' suggester, or None when there are none (suggest=False, or a code system shipping no
        titles); the code system's own titles are read and indexed the first time it is asked for."""
        return self._suggestions.suggester

    @property
    def titles_left_out(self) -> tuple[str, ...]:
        """Codes of the given titles that are not of the checkpoint's code system (never suggested)."""
        return self._suggestions.left_out

    @property
    def codes(self) -> tuple[str, ...]:
        return self.labels.codes

    @property
    def terminology_codes(self) -> tuple[str, ...]:
        """The codes the model scores from a terminology's titles alone, with no training note (`train
        --terminology`; marked `source` "terminology" when predicted); () for most models."""
        return self.labels.codes[self._first_term:]

    @property
    def span_weight(self) -> str:
        """What a code's span weight is, in a coder's words (the kind's scorer says; "" for a kind that shows no
        spans)."""
        return self.scorer.span_weight if self.model_kind.abilities.explain else ""  # type: ignore[attr-defined]

    @property
    def code_system(self) -> CodeSystem:
        """The checkpoint's CodeSystem (recorded in its labels.json, or inferred once at load for older ones)."""
        return self.labels.code_system  # type: ignore[return-value]  (load_checkpoint always sets it)

    @property
    def max_len(self) -> int:
        return self.checkpoint.max_len

    # ---------------------------------------------------------------- scoring
    def _lacks(self, what: str) -> ConfigError:
        return ConfigError(f"{what} exist only for checkpoints whose model shows them (LEAM); this one is "
                           f"{self.kind}.")

    def score_ids(self, id_lists: Sequence[Sequence[int]]) -> np.ndarray:
        """[N, K] float32 probabilities for notes already encoded by this checkpoint's tokenizer (a kind that
        `abilities.score_ids`: LEAM).

        The same computation as `score`, without tokenising again: training scores dev with it every epoch.
        """
        if not self.model_kind.abilities.score_ids:
            raise ConfigError(f"score_ids needs a checkpoint that scores token ids (LEAM); {self.kind} scores texts "
                              "(use score).")
        return self.scorer.score_ids(id_lists)  # type: ignore[attr-defined]  (abilities.score_ids: the scorer has it)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """[N, K] float32 probabilities for notes, in input order (the number `evaluate` uses)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        return self.scorer.score(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """[N, P] attended note vectors z (a kind that `abilities.embed`: LEAM), for the label-embedding map."""
        if not self.model_kind.abilities.embed:
            raise self._lacks("note embeddings")
        return self.scorer.embed(list(texts))  # type: ignore[attr-defined]  (abilities.embed: the scorer has it)

    def label_embeddings(self) -> np.ndarray:
        """[K, P] the learned code vectors C (a kind that `abilities.embed`: LEAM)."""
        if not self.model_kind.abilities.embed:
            raise self._lacks("code embeddings")
        return self.scorer.label_embeddings()  # type: ignore[attr-defined]  (abilities.embed: the scorer has it)

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
        encs = self.scorer.encode(good_texts, offsets=explain > 0) if good else None  # None: the model reads text
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
        if encs is not None:
            attend = explain > 0 and self.model_kind.abilities.explain
            scores, extras = self.scorer.score_encoded(encs, attention=attend)
        else:
            scores = self.score(prepared.texts)
        codes, descs = self.labels.codes, self.labels.descriptions
        for j, i in enumerate(good):
            s = scores[j]
            keep = predicted_indices(s, t, single_label=self.single_label)                # the one rule
            predicted = [CodeScore(codes[k], descs[k], float(s[k]), TERMINOLOGY if k >= self._first_term else None)
                         for k in keep]
            best = {codes[k]: float(s[k]) for k in top(s, k_keep)} if k_keep else {}
            rec = Prediction(ids[i], predicted=predicted, scores=best)
            if encs is not None:
                rec.truncated, rec.n_tokens = encs[j].truncated, len(encs[j].ids)
                if len(encs[j].ids) == 0:
                    rec.error = f"note {ids[i]!r}: {_no_words(prepared.texts[j])}; nothing to code"
                    rec.predicted, rec.scores = [], {}
            if self.suggester is not None and rec.error is None:
                read = self._read_part(prepared.texts[j], encs[j] if encs is not None else None)
                rec.suggested = self._suggestions.suggest(read, s)
            if explain > 0 and extras is not None and extras[j] is not None and rec.error is None:
                beta, offs = extras[j], encs[j].offsets
                if attention:
                    rec.attention = attention_spans(offs, beta)
                rec.evidence = attention_spans(offs, beta, explain)
                spans = self.scorer.code_spans(encs[j], [int(k) for k in keep], explain,  # type: ignore[attr-defined]
                                               text=prepared.texts[j])                  # the kind's own scale
                rec.code_phrases = {c.code: found for c, found in zip(predicted, spans)}
            out[i] = rec
        return out  # type: ignore[return-value]

    def code_spans(self, texts: Sequence[str], *, explain: int, threshold: float | None = None,
                   scores: np.ndarray | None = None) -> list[dict[str, list[tuple[int, int]] | None]]:
        """Each note's predicted codes (at the threshold) with the spans `predict(..., explain=explain)` shows for
        them, best first (None for a kind that shows none, tfidf-lr): what the evidence figures and the span-and-code F1
        judge (`clinicode.metrics.spans_report`).

        Args:
            texts: [n_notes] the notes.
            explain: spans per code.
            threshold: the cut-off for "predicted" (default: the checkpoint's).
            scores: [n_notes, K] the notes' scores when the caller has them (`score`'s): the notes are not scored
                again, only encoded for their spans (a code's spans come from the weights, not from the scoring).
        """
        spans = self.model_kind.abilities.explain
        if scores is not None:
            return self._spans_of(texts, scores, explain=explain if spans else 0, threshold=threshold)
        records = self.predict(texts, explain=explain if spans else 0, top_k=0, threshold=threshold, attention=False)
        out: list[dict[str, list[tuple[int, int]] | None]] = []
        for rec in records:
            phrases = rec.code_phrases or {}
            out.append({c.code: ([(s.start, s.end) for s in phrases.get(c.code, [])] if spans else None)
                        for c in rec.predicted})
        return out

    def _spans_of(self, texts: Sequence[str], scores: np.ndarray, *, explain: int,
                  threshold: float | None) -> list[dict[str, list[tuple[int, int]] | None]]:
        """`code_spans` of notes already scored (SCORES: [n_notes, K]), as `predict` gives them: a note it refuses
        or that holds no word the model reads has no predicted code; EXPLAIN 0 (a kind that shows no spans): None."""
        t = self.threshold if threshold is None else check_threshold(float(threshold))
        prepared = self.prepare(texts, explain=explain)
        if len(scores) != len(prepared.ids):
            raise ConfigError(f"code_spans: {len(prepared.ids)} notes but {len(scores)} rows of scores; give one row "
                              "a note.")
        codes = self.labels.codes
        out: list[dict[str, list[tuple[int, int]] | None]] = [{} for _ in prepared.ids]
        for j, i in enumerate(prepared.good):
            enc = prepared.encs[j] if prepared.encs is not None else None
            if enc is not None and len(enc.ids) == 0:
                continue   # nothing to code (`predict`'s error)
            keep = [int(k) for k in predicted_indices(scores[i], t, single_label=self.single_label)]
            if not explain:
                out[i] = {codes[k]: None for k in keep}
                continue
            found = self.scorer.code_spans(enc, keep, explain, text=prepared.texts[j])  # type: ignore[attr-defined]
            out[i] = {codes[k]: [(sp.start, sp.end) for sp in f] for k, f in zip(keep, found)}
        return out

    def _read_part(self, text: str, enc: Any) -> str:
        """The part of TEXT the model reads (its suggestions come from nothing past the cut): the whole note, or up to
        the end of its last kept token when it was truncated (ENC: its encoding; None: a model that reads the text)."""
        if enc is None or not enc.truncated:
            return text
        offsets = enc.offsets or self.scorer.encode([text], offsets=True)[0].offsets  # type: ignore[attr-defined]
        return text[:offsets[-1][1]] if len(offsets) else text

    def explain_codes(self, text: str, codes: Sequence[str], n: int = 5) -> dict[str, list[Span]]:
        """Each given code's evidence spans in one note, at most n (as `predict(..., explain=n)` gives for predicted
        codes).

        For showing the evidence of any code on demand, without computing it for thousands up front (a kind that
        `abilities.explain`: LEAM).
        """
        if not self.model_kind.abilities.explain:
            raise ConfigError(f"phrase evidence exists only for checkpoints whose model shows it (LEAM); this one is "
                              f"{self.kind}.")
        enc = self.scorer.encode([text], offsets=True)[0]
        if not enc.ids or not codes:
            return {c: [] for c in codes}
        spans = self.scorer.code_spans(enc, [self.labels.index(c) for c in codes], n,  # type: ignore[attr-defined]
                                       text=text)
        return dict(zip(codes, spans))

    def card(self) -> dict[str, Any]:
        """Model card: manifest, configs and metrics (for the app)."""
        ck = self.checkpoint
        return {
            "path": str(ck.path),
            "model": ck.kind,
            "manifest": ck.manifest,
            "train_config": asdict(ck.train_config),
            **self.model_kind.card(ck.model),  # "model_config"
            "threshold": ck.threshold,
            "metrics_dev": ck.metrics_dev,
            "metrics_test": ck.metrics_test,
            "n_labels": len(self.labels),
        }
